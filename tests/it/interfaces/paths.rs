//! D14: the fast path gives the reference path's answers byte for byte over the conformance
//! corpus (every interface's fixtures, each field null, of the wrong type or missing, unknown
//! fields, mixed batches, broken envelopes) and over the fixtures written the ways clients
//! write them (pretty-printed, every non-ASCII character escaped, many records a request). The
//! property tests run their generated requests through both paths too
//! (tests/hostile/fuzz/paths.rs).

use crate::common::envelope;
use crate::common::paths;
use crate::interfaces::offline::corpus;
use crate::interfaces::support::*;

use ap_intake::intake::Checker;
use ap_intake::interfaces::{INTERFACES, Interface};
use ap_intake::validate::Validator;
use serde_json::{Value, json};

/// Whether the fast path took `body`, after checking that every path answers alike.
fn compare(checker: &Checker, iface: &Interface, name: &str, body: &[u8]) -> bool {
    paths::compare(checker, iface, body).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Every non-ASCII character of a JSON text as a `\u` escape (surrogate pairs beyond the BMP).
fn escape_non_ascii(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{u:04x}"));
            }
        }
    }
    out
}

/// `n` copies of `record` with distinct keys, as a busy client sends them.
fn many(iface: &Interface, record: &Value, n: usize) -> Vec<Value> {
    let field = iface
        .key
        .iter()
        .rev()
        .find_map(|k| match k {
            ap_intake::interfaces::KeyPart::Field(f) if *f != "organization" => Some(*f),
            _ => None,
        })
        .unwrap();
    (0..n)
        .map(|i| {
            let mut r = record.clone();
            r[field] = match &record[field] {
                Value::Number(_) => json!(1000 + i),
                _ => json!(format!("K-{i}")),
            };
            r
        })
        .collect()
}

#[test]
fn the_fast_path_answers_the_conformance_corpus_as_the_reference_path_does_d14() {
    let types = ap_intake::config::DEFAULT_ACCOUNTING_TYPES
        .map(String::from)
        .to_vec();
    let checker = Checker::new(Validator::load(None).unwrap(), types, 10_000);
    let (mut compared, mut fast) = (0, 0);
    for iface in &INTERFACES {
        let (min, full) = (minimal(iface), full(iface));
        // Written as clients write them: each must be taken by the fast path.
        let pretty = serde_json::to_string_pretty(&envelope(std::slice::from_ref(&full))).unwrap();
        let written = [
            ("minimal", envelope(std::slice::from_ref(&min)).to_string()),
            ("full", envelope(std::slice::from_ref(&full)).to_string()),
            ("pretty", pretty.clone()),
            ("escaped", escape_non_ascii(&pretty)),
            (
                "100 records",
                envelope(&many(iface, &full, 100)).to_string(),
            ),
        ];
        for (name, body) in &written {
            compared += 1;
            assert!(
                compare(&checker, iface, name, body.as_bytes()),
                "{} {name}: the fast path did not take it",
                iface.path
            );
            fast += 1;
        }
        for case in corpus(iface) {
            compared += 1;
            fast += usize::from(compare(&checker, iface, &case.name, &case.body));
        }
    }
    eprintln!("paths: {compared} bodies compared, {fast} taken by the fast path");
}
