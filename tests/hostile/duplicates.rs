//! Duplicate keys (D24): refused, never silently last-wins. Inside a record they are record
//! errors with the path of the second occurrence; in the envelope a structure failure.

use super::common::*;
use serde_json::Value;

const GL: &str = "/general-ledger-codes/v1";
const MESSAGE: &str = "duplicate key [code] is not permitted";

/// A GL code record's JSON text with `extra` members appended (they may repeat a key).
fn gl_record(code: &str, extra: &str) -> String {
    format!(r#"{{"code":"{code}","type":"DEDUCTABLE","description_en":"Office"{extra}}}"#)
}

fn body_of(records: &[String]) -> String {
    format!(
        r#"{{"objects":{{"object":{{"record":[{}]}}}}}}"#,
        records.join(",")
    )
}

fn assert_structure_failure(r: &Reply, message: &str, path: &str) {
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.counts(), (0, 0, 0), "{}", r.text);
    assert_eq!(r.errors(), vec![(0, path.to_string(), message.to_string())]);
    let b = r.json();
    assert_eq!(b["message"], message);
    assert!(b["expected_format"].is_string(), "{}", r.text);
}

#[test]
fn a_key_repeated_in_a_record_is_a_record_error_and_nothing_is_queued() {
    let app = TestApp::start();
    let r = app.post(GL, &body_of(&[gl_record("D1", r#","code":"D2""#)]));
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.counts(), (1, 0, 1));
    assert_eq!(r.errors(), vec![(0, "/code".into(), MESSAGE.into())]);
    assert_eq!(r.json()["message"], "1 of 1 records failed validation");
    assert!(app.item("gl-code:main/D1").is_none());
    assert!(app.item("gl-code:main/D2").is_none());
}

#[test]
fn in_a_mixed_batch_only_the_record_with_the_duplicate_fails() {
    let app = TestApp::start();
    let records = [
        gl_record("M1", ""),
        gl_record("M2", r#","type":"VAT""#),
        gl_record("M3", ""),
    ];
    let r = app.post(GL, &body_of(&records));
    assert_eq!(r.status, 207, "{}", r.text);
    assert_eq!(r.counts(), (3, 2, 1));
    assert_eq!(
        r.errors(),
        vec![(
            1,
            "/type".into(),
            "duplicate key [type] is not permitted".into()
        )]
    );
    assert!(app.item("gl-code:main/M1").is_some());
    assert!(app.item("gl-code:main/M2").is_none());
    assert!(app.item("gl-code:main/M3").is_some());
}

/// The path names where the repeated key is, however deep, in document order with the
/// record's other violations (D2).
#[test]
fn a_duplicate_inside_rows_is_reported_at_its_path_in_document_order() {
    let app = TestApp::start();
    let mut po: Value = fixture("purchase-orders-v1", "minimal");
    po["rows"][0]["uom"] = Value::from(7); // a type error after the duplicate
    let text = po
        .to_string()
        .replacen(r#""line_number":"#, r#""line_number":1,"line_number":"#, 1);
    assert!(text.contains(r#""line_number":1,"line_number":"#), "{text}");
    let r = app.post("/purchase-orders/v1", &body_of(&[text]));
    assert_eq!(r.status, 400, "{}", r.text);
    let errors = r.errors();
    assert_eq!(errors.len(), 2, "{}", r.text);
    assert_eq!(
        errors[0],
        (
            0,
            "/rows/0/line_number".into(),
            "duplicate key [line_number] is not permitted".into()
        )
    );
    assert_eq!(errors[1].1, "/rows/0/uom");
}

#[test]
fn keys_are_compared_after_unescaping() {
    let app = TestApp::start();
    let r = app.post(GL, &body_of(&[gl_record("E1", r#","c\u006fde":"E2""#)]));
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.errors(), vec![(0, "/code".into(), MESSAGE.into())]);
}

/// D24: a repeated `object` used to keep only the last one, silently dropping the records of
/// the first.
#[test]
fn a_key_repeated_in_the_envelope_is_a_structure_failure() {
    let app = TestApp::start();
    let rec = gl_record("V1", "");
    let cases = [
        (
            format!(
                r#"{{"objects":{{"object":{{"record":[{rec}]}},"object":{{"record":[{rec}]}}}}}}"#
            ),
            "duplicate key [object] is not permitted",
            "/objects/object",
        ),
        (
            format!(r#"{{"objects":{{"object":{{"record":[{rec}],"record":[{rec}]}}}}}}"#),
            "duplicate key [record] is not permitted",
            "/objects/object/record",
        ),
        (
            format!(r#"{{"objects":{{}},"objects":{{"object":{{"record":[{rec}]}}}}}}"#),
            "duplicate key [objects] is not permitted",
            "/objects",
        ),
    ];
    for (body, message, path) in cases {
        assert_structure_failure(&app.post(GL, &body), message, path);
    }
    assert!(app.item("gl-code:main/V1").is_none());
}

/// Payment confirmations are all-or-nothing (D3): a duplicate in one fails them all.
#[test]
fn a_duplicate_fails_an_all_or_nothing_request() {
    let app = TestApp::start();
    let ok = fixture("payment-confirmation", "minimal").to_string();
    let dup = ok.replacen('{', r#"{"payment_date":"2024-01-01","#, 1);
    let r = app.post("/payment-confirmation/v1", &body_of(&[ok, dup]));
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.counts(), (0, 0, 0));
    assert_eq!(
        r.errors(),
        vec![(
            1,
            "/payment_date".into(),
            "duplicate key [payment_date] is not permitted".into()
        )]
    );
}

/// D2's cap holds for duplicates too: 1,000 entries, then one saying how many were left out,
/// counted exactly even past the duplicates whose paths are kept.
#[test]
fn thousands_of_duplicates_are_capped_and_counted() {
    let app = TestApp::start();
    let extra: String = (0..2500).map(|_| r#","code":"X""#).collect();
    let r = app.post(
        GL,
        &body_of(&[gl_record("C1", &extra), gl_record("C2", r#","code":"Y""#)]),
    );
    assert_eq!(r.status, 400, "{}", &r.text[..200]);
    assert_eq!(r.counts(), (2, 0, 2));
    let errors = r.errors();
    assert_eq!(errors.len(), 1001);
    assert!(
        errors[..1000]
            .iter()
            .all(|e| e == &(0, "/code".to_string(), MESSAGE.to_string()))
    );
    assert_eq!(
        errors[1000],
        (0, String::new(), "1501 more error(s) not shown".into())
    );
}
