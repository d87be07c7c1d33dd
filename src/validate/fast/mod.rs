//! The fast path for requests whose every record is valid, the common case of an ERP client
//! in production. The body is read once into a tree that borrows its strings ([`parse`]), the
//! envelope is taken apart, and each record is judged by a [`Plan`] compiled from the same
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

pub use parse::{Node, parse};
pub use plan::Plan;

/// The records of a body with the common envelope `{"objects":{"object":{"record":[...]}}}`,
/// when each envelope object has that one member and there are 1 to `max_records` records;
/// `None` for anything else (the reference path answers it).
pub fn records(body: &[u8], max_records: usize) -> Option<Vec<Node<'_>>> {
    let mut node = parse(body)?;
    for name in ["objects", "object", "record"] {
        let Node::Object(o) = node else {
            return None;
        };
        let [(key, inner)] = <[_; 1]>::try_from(o.into_members()).ok()?;
        if key != name {
            return None;
        }
        node = inner;
    }
    match node {
        Node::Array(records) if !records.is_empty() && records.len() <= max_records => {
            Some(records)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_envelope_is_taken_apart_only_in_its_plain_form() {
        let ok = br#" {"objects" : {"object": {"record": [{"a": 1}, {"b": "x"}]}}} "#;
        assert_eq!(records(ok, 2).map(|r| r.len()), Some(2));
        assert!(records(ok, 1).is_none(), "more than max_records");
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
