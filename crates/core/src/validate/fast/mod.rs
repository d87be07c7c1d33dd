//! The fast path for requests whose every record is valid, the common case of an ERP client
//! in production. The body is read once, a record at a time, into a tree that borrows its
//! strings ([`parse`]), and each record is judged by a [`Plan`] compiled from the same
//! JSON Schema boon compiles (D14), by the same number rules and the same XML-unsafe
//! character check the reference path runs ([`crate::tree`] lets that code read either
//! tree). The key and the XML are then made by the same code too.
//!
//! The fast path answers only "all valid"; at the first doubt (a record that breaks a rule,
//! a duplicate key, an exponent, an escaped key, deep nesting, an unusual envelope) it gives
//! up and the request is checked by the reference path (serde_json, boon, the message code),
//! which words every refusal. So every error answer is the reference path's by construction,
//! and tests run the conformance fixtures and the property tests through both paths to show
//! that accepted requests get byte-identical answers and XML.

pub mod parse;
mod plan;

pub use parse::{Node, Parser, parse};
pub use plan::Plan;

/// Reads the records of a body with the common envelope
/// `{"objects":{"object":{"record":[...]}}}` one at a time, handing each to `each` with its
/// index, as long as each envelope object has that one member, there are 1 to `max_records`
/// records and `each` returns `true`. The count of records, or `None` for anything else (the
/// reference path answers it). One record's tree is held at a time, and a body is read only
/// as far as its first record the fast path cannot take.
pub fn each_record<'a>(
    body: &'a [u8],
    max_records: usize,
    mut each: impl FnMut(usize, &Node<'a>) -> bool,
) -> Option<usize> {
    let mut r = Parser::new(body)?;
    for name in ["objects", "object", "record"] {
        r.ws();
        r.take(b'{')?;
        r.ws();
        if r.key()? != name {
            return None;
        }
        r.ws();
        r.take(b':')?;
    }
    r.ws();
    r.take(b'[')?;
    let mut n = 0;
    loop {
        r.ws();
        // Root, objects, object and the record array: a record is 5 levels deep.
        let record = r.value(4)?;
        if n == max_records || !each(n, &record) {
            return None;
        }
        n += 1;
        r.ws();
        if r.take(b',').is_none() {
            r.take(b']')?;
            break;
        }
    }
    for _ in 0..3 {
        r.ws();
        r.take(b'}')?;
    }
    r.ws();
    r.at_end().then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(body: &[u8], max: usize) -> Option<Vec<Node<'_>>> {
        let mut all = Vec::new();
        each_record(body, max, |i, r| {
            assert_eq!(i, all.len());
            all.push(r.clone());
            true
        })?;
        Some(all)
    }

    #[test]
    fn the_envelope_is_taken_apart_only_in_its_plain_form() {
        let ok = br#" {"objects" : {"object": {"record": [{"a": 1}, {"b": "x"}]}}} "#;
        assert_eq!(records(ok, 2).map(|r| r.len()), Some(2));
        assert!(records(ok, 1).is_none(), "more than max_records");
        assert!(
            each_record(ok, 2, |i, _| i == 0).is_none(),
            "a record refused"
        );
        for body in [
            &br#"{"objects":{"object":{"record":[]}}}"#[..],
            br#"{"objects":{"object":{"record":{}}}}"#,
            br#"{"objects":{"object":{"record":[{}],"extra":1}}}"#,
            br#"{"objects":{"object":{"record":[{}]},"object":{"record":[{}]}}}"#,
            br#"{"objects":{"objekt":{"record":[{}]}}}"#,
            br#"{"record":[{}]}"#,
            br#"[{"objects":{"object":{"record":[{}]}}}]"#,
        ] {
            assert!(
                records(body, 10).is_none(),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }
}
