//! Numbers (D23): every rule and message, per field kind (integer, money, quantity) on several
//! interfaces, exponent bombs and 10,000-digit mantissas answered with the right 400, the
//! canonical XML of accepted numbers valid against the shipped XSD, and no number ever
//! expanded in memory.

use super::common::*;
use super::meter;
use ap_intake::interfaces::Interface;
use serde_json::Value;

/// Where a number of each kind sits, on three interfaces each.
const INTEGER: &[(&str, &str)] = &[
    ("/goods-received/v1", "/rows/0/line_number"),
    ("/goods_received/v2", "/rows/0/po_line_number"),
    ("/purchase-orders/v2", "/rows/0/coding/0/posting_line"),
];
const MONEY: &[(&str, &str)] = &[
    ("/purchase-orders/v1", "/rows/0/unit_price"),
    ("/goods_received/v2", "/amount_1"),
    ("/purchase-orders/v2", "/po_net_total"),
];
const QUANTITY: &[(&str, &str)] = &[
    ("/goods-received/v1", "/rows/0/quantity_received"),
    ("/purchase-orders/v1", "/rows/0/quantity"),
    ("/purchase-orders/v2", "/rows/0/coding/0/quantity"),
];

const OUT_OF_RANGE: &str = "is out of range (maximum allowed: 9223372036854775807)";
const NOT_INTEGER: &str =
    r#"instance type (number) does not match any allowed primitive type (allowed: ["integer"])"#;

/// The full fixture of `path`'s interface with `text` (a JSON number) at `at`.
fn record_with(iface: &Interface, at: &str, text: &str) -> Value {
    let mut record = fixture(stem(iface), "full");
    let number: Value = serde_json::from_str(text).unwrap();
    *record
        .pointer_mut(at)
        .unwrap_or_else(|| panic!("{at} in {}", iface.path)) = number;
    record
}

/// The request body of one such record, the number in it exactly as `text` writes it
/// (serializing a parsed number would rewrite its exponent).
fn body_with(iface: &Interface, at: &str, text: &str) -> String {
    const MARK: &str = "@@number@@";
    let mut record = fixture(stem(iface), "full");
    *record.pointer_mut(at).unwrap() = Value::String(MARK.into());
    envelope(&[record])
        .to_string()
        .replace(&format!("\"{MARK}\""), text)
}

/// The queue key of a fixture record (D15).
fn key_of(iface: &Interface, record: &Value) -> String {
    let org = record["organization"].as_str().unwrap_or("main");
    let id = ["po_number", "grn_number", "code", "softco_case_id"]
        .iter()
        .find_map(|f| record[f].as_str())
        .unwrap();
    format!("{}:{org}/{id}", iface.key_space)
}

/// POSTs one record with `text` at `at` and expects it refused with exactly `message` there.
fn expect_refused(app: &TestApp, path: &str, at: &str, text: &str, message: &str) {
    let iface = iface(path);
    let r = app.post(&post_path(iface), &body_with(iface, at, text));
    let case = format!("{path} {at} = {}", &text[..text.len().min(40)]);
    assert_eq!(r.status, 400, "{case}: {}", r.text);
    assert_eq!(r.counts(), (1, 0, 1), "{case}");
    assert_eq!(
        r.errors(),
        vec![(0, at.to_string(), message.to_string())],
        "{case}"
    );
}

/// POSTs one record with `text` at `at`, expects 202, and returns the element text written.
fn expect_written(app: &TestApp, path: &str, at: &str, text: &str) -> String {
    let iface = iface(path);
    let record = record_with(iface, at, text);
    let r = app.post_records(&post_path(iface), std::slice::from_ref(&record));
    assert_eq!(r.status, 202, "{path} {at} = {text}: {}", r.text);
    let item = app.item(&key_of(iface, &record)).unwrap();
    let doc = ap_intake::xml::document(iface, [item.xml.as_bytes()]);
    assert_valid_xml(&doc, &iface.schema.replace(".json", ".xsd"));
    // Follow the path's names through the XML: the changed value is in the first row (and
    // the first coding row) of the fixture.
    let mut start = 0;
    for name in at
        .split('/')
        .filter(|s| !s.is_empty() && s.parse::<usize>().is_err())
    {
        let open = format!("<{name}>");
        start += item.xml[start..].find(&open).unwrap() + open.len();
    }
    let end = start + item.xml[start..].find('<').unwrap();
    item.xml[start..end].to_string()
}

fn mantissa_of_10000_digits_equal_to_one() -> String {
    format!("1{}e-9999", "0".repeat(9999))
}

#[test]
fn integer_fields_hold_whole_numbers_up_to_i64_max_written_canonically() {
    let app = TestApp::start();
    let one = mantissa_of_10000_digits_equal_to_one();
    for &(path, at) in INTEGER {
        for (sent, written) in [
            ("7", "7"),
            ("1.0", "1"),
            ("1e2", "100"),
            ("2.50e1", "25"),
            ("0e10000000000000", "0"),
            ("9223372036854775807", "9223372036854775807"),
            (one.as_str(), "1"),
        ] {
            assert_eq!(
                expect_written(&app, path, at, sent),
                written,
                "{path} {at} {sent}"
            );
        }
        for sent in [
            "1.0000000000000000001",
            "1.5",
            "0.000000000000000000001",
            "1e-1",
        ] {
            expect_refused(&app, path, at, sent, NOT_INTEGER);
        }
        // D23 addendum: the number as the client wrote it.
        for sent in [
            "9223372036854775808",
            "1e99999999999",
            "1E+9223372036854775807",
            "-1e19",
        ] {
            expect_refused(
                &app,
                path,
                at,
                sent,
                &format!("number {sent} {OUT_OF_RANGE}"),
            );
        }
    }
}

#[test]
fn money_and_quantities_have_18_integer_digits_and_their_places_written_plain() {
    let app = TestApp::start();
    let one = mantissa_of_10000_digits_equal_to_one();
    for (fields, places) in [(MONEY, 2), (QUANTITY, 6)] {
        for &(path, at) in fields {
            let written = |s| expect_written(&app, path, at, s);
            assert_eq!(written("1000e-3"), "1", "{at}: places counted on the value");
            assert_eq!(written("1.5e1"), "15");
            assert_eq!(written("25e-1"), "2.5");
            assert_eq!(written("19.99"), "19.99", "as received");
            assert_eq!(written("0e-10000000000000"), "0");
            assert_eq!(written(&one), "1");
            assert_eq!(written("123456789012345678.5"), "123456789012345678.5");
            if places == 2 {
                assert_eq!(
                    written("1.500"),
                    "1.50",
                    "{at}: zeros beyond 2 places dropped"
                );
            } else {
                assert_eq!(written("1.50000000"), "1.500000", "{at}");
            }
            let digits = |v: &str| format!("number {v} has more than 18 integer digits");
            let places_msg = |v: &str| format!("number {v} has more than {places} decimal places");
            expect_refused(&app, path, at, "1e99999999999", &digits("1e99999999999"));
            expect_refused(&app, path, at, "1e400", &digits("1e400"));
            expect_refused(
                &app,
                path,
                at,
                "1234567890123456789",
                &digits("1234567890123456789"),
            );
            expect_refused(
                &app,
                path,
                at,
                "-1e-99999999999",
                &places_msg("-1e-99999999999"),
            );
            let tiny = format!("0.{}1", "0".repeat(9998));
            let shown: String = tiny.chars().take(100).collect();
            expect_refused(&app, path, at, &tiny, &places_msg(&shown));
        }
    }
}

/// D23: both rules broken by one number are both reported (D2), integer digits first.
#[test]
fn a_number_breaking_both_decimal_rules_gets_both_messages() {
    let app = TestApp::start();
    let (path, at) = MONEY[0];
    let iface = iface(path);
    let r = app.post_records(
        &post_path(iface),
        &[record_with(iface, at, "1234567890123456789.123")],
    );
    assert_eq!(r.status, 400, "{}", r.text);
    let v = "1234567890123456789.123";
    assert_eq!(
        r.errors(),
        vec![
            (
                0,
                at.into(),
                format!("number {v} has more than 18 integer digits")
            ),
            (
                0,
                at.into(),
                format!("number {v} has more than 2 decimal places")
            ),
        ]
    );
}

/// D23: a number's cost in memory is bounded by its length, whatever its exponent: checking and
/// writing a purchase order full of exponent bombs allocates no more than one with ordinary
/// numbers, give or take the messages.
#[test]
fn exponents_are_never_expanded_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let (intake, writer) = super::budgets::intake(dir.path());
    let iface = iface("/purchase-orders/v2");
    let body = |a: &str, b: &str, c: &str| {
        let mut r = fixture("purchase-orders-v2", "full");
        *r.pointer_mut("/rows/0/line_number").unwrap() = serde_json::from_str(a).unwrap();
        *r.pointer_mut("/rows/0/unit_price").unwrap() = serde_json::from_str(b).unwrap();
        *r.pointer_mut("/rows/0/coding/0/posting_line").unwrap() = serde_json::from_str(c).unwrap();
        envelope(&[r]).to_string()
    };
    let plain = body("1", "2.5", "1");
    let bombs = body(
        "0e10000000000000",
        "1e99999999999",
        "1E+9223372036854775807",
    );
    let (_, ordinary) = meter::peak_during(|| {
        intake
            .checker()
            .check_records(iface, None, plain.as_bytes())
    });
    // The reference path's form of the schema is compiled on the first refusal of an
    // interface, once; that one-off cost is not the numbers'.
    let _ = intake
        .checker()
        .check_records(iface, None, bombs.as_bytes());
    let (result, peak) = meter::peak_during(|| {
        intake
            .checker()
            .check_records(iface, None, bombs.as_bytes())
    });
    let (outcome, _) = result.unwrap();
    assert_eq!(outcome.failed, 1, "{:?}", outcome.errors);
    assert!(
        peak < ordinary + 64 * 1024,
        "checking the bombs took {peak} bytes, the ordinary record {ordinary}"
    );
    writer.stop();
}

/// D23 addendum: `<v>` is the number exactly as the client wrote it, whatever the notation of
/// its exponent (serde_json's text of all four of `1e400 1E400 1e+400 1E+400` is `1e+400`),
/// in any record of a batch, sent as raw bytes over a socket.
#[test]
fn number_messages_show_the_number_exactly_as_written_d23() {
    let app = TestApp::start();
    let (path, at) = MONEY[2];
    let iface = iface(path);
    let digits = |v: &str| format!("number {v} has more than 18 integer digits");
    let places = |v: &str| format!("number {v} has more than 2 decimal places");
    let cases = [
        ("1e400", digits("1e400")),
        ("1E400", digits("1E400")),
        ("1e+400", digits("1e+400")),
        ("1E+400", digits("1E+400")),
        ("-12.5E0400", digits("-12.5E0400")),
        ("1e-3", places("1e-3")),
        ("1.234E-1", places("1.234E-1")),
    ];
    for (sent, message) in cases {
        // The number is in the second record; the first is valid.
        let one = body_with(iface, at, sent);
        let record = one
            .strip_prefix(r#"{"objects":{"object":{"record":["#)
            .and_then(|r| r.strip_suffix("]}}}"))
            .unwrap();
        let valid = fixture(stem(iface), "full").to_string();
        let body = format!(r#"{{"objects":{{"object":{{"record":[{valid}, {record}]}}}}}}"#);
        assert!(body.contains(sent), "{body}");
        let raw = format!(
            "POST {} HTTP/1.1\r\nHost: x\r\nx-api-key: {KEY}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            post_path(iface),
            body.len()
        );
        let r = app.raw(raw.as_bytes());
        assert_eq!(r.status, 207, "{sent}: {}", r.text);
        assert_eq!(r.errors(), vec![(1, at.to_string(), message)], "{sent}");
    }
}
