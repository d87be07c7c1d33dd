//! Every interface over real HTTP: fixtures accepted and turned into schema-valid XML, and each
//! validation rule of the schemas (required, unknown, types, null, enums, dates, decimals,
//! maximum lengths) answered with the exact texts of decisions.md ("Validation messages", D1-D3,
//! D6-D9, D13).
//!
//! The cases are derived from the shipped JSON Schemas, so a field added to a schema is tested
//! without touching this file. One service per test function; the interfaces are looped inside.

mod common;
use common::*;

use ap_intake::interfaces::{INTERFACES, Interface, Mode};
use ap_intake::queue::Item;
use serde_json::{Map, Value, json};
use std::collections::HashMap;

// ---------------------------------------------------------------------------------------------
// Walking a schema
// ---------------------------------------------------------------------------------------------

/// One object level of a record: the top level, `rows[0]`, `rows[0].coding[0]`, a vendor's
/// `bank_accounts[0]`.
struct Scope {
    /// JSON Pointer of the object inside the record (`""` for the record itself).
    at: String,
    /// The object schema's `properties`.
    props: Map<String, Value>,
    /// The object schema's `required`.
    required: Vec<String>,
}

impl Scope {
    /// The pointer of one of its fields.
    fn field(&self, name: &str) -> String {
        format!("{}/{name}", self.at)
    }
}

/// The object levels of `schema`, each located at the first element of its array in `record`
/// (the full fixture, which has every array filled).
fn scopes(iface: &Interface, record: &Value) -> Vec<Scope> {
    let mut out = Vec::new();
    walk(iface, &schema(iface), record, String::new(), &mut out);
    out
}

fn walk(iface: &Interface, node: &Value, record: &Value, at: String, out: &mut Vec<Scope>) {
    let props = node["properties"]
        .as_object()
        .unwrap_or_else(|| panic!("{}: object schema at {at:?} without properties", iface.path))
        .clone();
    let required = node["required"]
        .as_array()
        .map(|r| r.iter().map(|v| v.as_str().unwrap().to_string()).collect())
        .unwrap_or_default();
    let nested: Vec<(String, Value)> = props
        .iter()
        .filter(|(_, p)| p["type"] == "array" && p["items"]["type"] == "object")
        .map(|(name, p)| (name.clone(), p["items"].clone()))
        .collect();
    out.push(Scope {
        at: at.clone(),
        props,
        required,
    });
    for (name, items) in nested {
        let first = format!("{at}/{name}/0");
        assert!(
            record.pointer(&first).is_some_and(Value::is_object),
            "{}: the full fixture has no object at {first}",
            iface.path
        );
        walk(iface, &items, record, first, out);
    }
}

/// `(pointer, property schema)` of every property of every scope.
fn all_props(iface: &Interface, record: &Value) -> Vec<(String, Value)> {
    scopes(iface, record)
        .iter()
        .flat_map(|s| {
            s.props
                .iter()
                .map(|(name, p)| (s.field(name), p.clone()))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The last segment of a pointer (the field name).
fn name_of(pointer: &str) -> &str {
    pointer.rsplit_once('/').unwrap().1
}

// ---------------------------------------------------------------------------------------------
// Editing records
// ---------------------------------------------------------------------------------------------

fn full(iface: &Interface) -> Value {
    fixture(stem(iface), "full")
}

fn minimal(iface: &Interface) -> Value {
    fixture(stem(iface), "minimal")
}

/// `record` with the field at `pointer` set to `value` (added at the end when absent).
fn with(record: &Value, pointer: &str, value: Value) -> Value {
    let mut r = record.clone();
    let (parent, name) = pointer.rsplit_once('/').unwrap();
    r.pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .unwrap_or_else(|| panic!("no object at {parent:?}"))
        .insert(name.to_string(), value);
    r
}

/// `record` without the field at `pointer`.
fn without(record: &Value, pointer: &str) -> Value {
    let mut r = record.clone();
    let (parent, name) = pointer.rsplit_once('/').unwrap();
    let removed = r
        .pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .unwrap_or_else(|| panic!("no object at {parent:?}"))
        .shift_remove(name);
    assert!(removed.is_some(), "the record has no {pointer} to remove");
    r
}

/// A JSON number exactly as written (serde_json's arbitrary_precision keeps the text).
fn num(text: &str) -> Value {
    let v: Value = serde_json::from_str(text).unwrap();
    assert_eq!(v.to_string(), text, "the number must keep its text");
    v
}

// ---------------------------------------------------------------------------------------------
// Expected texts (decisions.md, "Validation messages")
// ---------------------------------------------------------------------------------------------

fn required_msg(field: &str) -> String {
    format!("required key [{field}] not found")
}

fn extraneous_msg(field: &str) -> String {
    format!("extraneous key [{field}] is not permitted")
}

fn enum_msg(value: &str, possible: &Value) -> String {
    format!(
        "instance value (\"{value}\") not found in enum (possible values: {})",
        serde_json::to_string(possible).unwrap()
    )
}

fn type_msg(found: &str, allowed: &str) -> String {
    format!(
        "instance type ({found}) does not match any allowed primitive type (allowed: [\"{allowed}\"])"
    )
}

fn date_pattern_msg(value: &str) -> String {
    format!(r#"string "{value}" does not match pattern "^\d{{4}}-\d{{2}}-\d{{2}}$""#)
}

fn calendar_msg(value: &str) -> String {
    format!(r#"string "{value}" is not a valid calendar date"#)
}

fn places_msg(value: &str, places: u32) -> String {
    format!("number {value} has more than {places} decimal places")
}

const EMPTY_MSG: &str = r#"string "" is too short (length: 0, required minimum: 1)"#;
const DESCRIPTION_EN_EMPTY_MSG: &str = "description_en is required.";
const ARRAY_EMPTY_MSG: &str =
    "array is too short: must have at least 1 elements but instance has 0 elements";
const PAYMENT_REFUSED_MSG: &str = "No items could be processed as the structure was invalid.";

fn e(path: impl Into<String>, error: impl Into<String>) -> (String, String) {
    (path.into(), error.into())
}

// ---------------------------------------------------------------------------------------------
// Posting and checking
// ---------------------------------------------------------------------------------------------

/// Key and version of every queued item.
fn snapshot(app: &TestApp) -> HashMap<Vec<u8>, u64> {
    app.store()
        .items()
        .unwrap()
        .into_iter()
        .map(|(k, i)| (k.as_bytes().to_vec(), i.version))
        .collect()
}

/// The items written since `before` was taken.
fn written_since(app: &TestApp, before: &HashMap<Vec<u8>, u64>) -> Vec<Item> {
    app.store()
        .items()
        .unwrap()
        .into_iter()
        .filter(|(k, i)| before.get(k.as_bytes()) != Some(&i.version))
        .map(|(_, i)| i)
        .collect()
}

/// POSTs one record, asserts the 202 body, returns the one item it queued.
fn expect_accepted(app: &TestApp, iface: &Interface, record: &Value, case: &str) -> Item {
    let what = format!("{} {case}", iface.path);
    let before = snapshot(app);
    let r = app.post_records(&post_path(iface), std::slice::from_ref(record));
    assert_eq!(r.status, 202, "{what}: {}", r.text);
    let body = r.json();
    assert_eq!(body["status"], "SUCCESS", "{what}: {}", r.text);
    assert_eq!(body["total"], 1, "{what}: {}", r.text);
    assert_eq!(body["succeeded"], 1, "{what}: {}", r.text);
    assert_eq!(body["failed"], 0, "{what}: {}", r.text);
    assert_eq!(body["errors"], json!([]), "{what}: {}", r.text);
    assert_eq!(body["message"], "1 record(s) queued", "{what}: {}", r.text);
    assert!(
        body["request_id"].as_str().is_some_and(|s| !s.is_empty()),
        "{what}: request_id missing: {}",
        r.text
    );
    let mut items = written_since(app, &before);
    assert_eq!(items.len(), 1, "{what}: one item must be queued: {items:?}");
    let item = items.pop().unwrap();
    assert_eq!(item.interface, iface.id, "{what}: {item:?}");
    item
}

/// The interface's XML document around `items`, checked against its XSD with xmllint.
fn expect_valid_xml(iface: &Interface, items: &[&Item], case: &str) -> String {
    let doc = ap_intake::xml::document(iface, items.iter().map(|i| i.xml.as_bytes()));
    let xsd = format!("{}.xsd", stem(iface));
    if let Err(panic) = std::panic::catch_unwind(|| assert_valid_xml(&doc, &xsd)) {
        let why = panic
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_else(|| "xmllint failed".to_string());
        panic!("{} {case}: {why}", iface.path);
    }
    String::from_utf8(doc).unwrap()
}

/// POSTs one record, asserts the 400 answer (the all-or-nothing shape for payment
/// confirmations, D3) and that nothing was queued; returns its error entries.
fn refused_errors(
    app: &TestApp,
    iface: &Interface,
    record: &Value,
    case: &str,
) -> Vec<(u64, String, String)> {
    let what = format!("{} {case}", iface.path);
    let before = snapshot(app);
    let r = app.post_records(&post_path(iface), std::slice::from_ref(record));
    assert_eq!(r.status, 400, "{what}: {}", r.text);
    let body = r.json();
    assert_eq!(body["status"], "FAILED", "{what}: {}", r.text);
    let (total, failed, message) = match iface.mode {
        Mode::AllOrNothing => (0, 0, PAYMENT_REFUSED_MSG),
        Mode::PerRecord => (1, 1, "1 of 1 records failed validation"),
    };
    assert_eq!(body["total"], total, "{what}: {}", r.text);
    assert_eq!(body["succeeded"], 0, "{what}: {}", r.text);
    assert_eq!(body["failed"], failed, "{what}: {}", r.text);
    assert_eq!(body["message"], message, "{what}: {}", r.text);
    assert_eq!(snapshot(app), before, "{what}: nothing may be queued");
    r.errors()
}

/// [`refused_errors`] with exactly `expected` as `(path, error)` entries at index 0, in this
/// order.
fn expect_refused(
    app: &TestApp,
    iface: &Interface,
    record: &Value,
    expected: &[(String, String)],
    case: &str,
) {
    let want: Vec<(u64, String, String)> = expected
        .iter()
        .map(|(p, m)| (0, p.clone(), m.clone()))
        .collect();
    let got = refused_errors(app, iface, record, case);
    assert_eq!(got, want, "{} {case}", iface.path);
}

/// Like [`expect_refused`] with one entry.
fn expect_one_error(
    app: &TestApp,
    iface: &Interface,
    record: &Value,
    path: &str,
    error: &str,
    case: &str,
) {
    expect_refused(app, iface, record, &[e(path, error)], case);
}

/// The text of the first `<name>` element of `xml`, as written (still escaped).
fn element_text<'x>(xml: &'x str, name: &str) -> Option<&'x str> {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    let start = xml.find(&open)? + open.len();
    let len = xml[start..].find(&close)?;
    Some(&xml[start..start + len])
}

fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

// ---------------------------------------------------------------------------------------------
// 1. Accepted records and their XML
// ---------------------------------------------------------------------------------------------

#[test]
fn minimal_and_full_fixtures_are_queued_as_schema_valid_xml() {
    let app = TestApp::start();
    for iface in &INTERFACES {
        let min = expect_accepted(&app, iface, &minimal(iface), "minimal fixture");
        expect_valid_xml(iface, &[&min], "minimal fixture");
        let fu = expect_accepted(&app, iface, &full(iface), "full fixture");
        expect_valid_xml(iface, &[&fu], "full fixture");
        for item in [&min, &fu] {
            assert!(
                item.xml.starts_with(&format!("<{}>", iface.xml_record))
                    && item.xml.ends_with(&format!("</{}>", iface.xml_record)),
                "{}: the queued XML must be one <{}> element: {}",
                iface.path,
                iface.xml_record,
                item.xml
            );
        }
        let doc = expect_valid_xml(iface, &[&min, &fu], "minimal and full in one document");
        assert!(
            doc.contains(&format!("<{}>", iface.xml_root)),
            "{}: root element <{}> missing: {doc}",
            iface.path,
            iface.xml_root
        );
    }
}

#[test]
fn defaults_and_fallbacks_of_the_schema_are_written_for_minimal_records() {
    let app = TestApp::start();
    for iface in &INTERFACES {
        let record = minimal(iface);
        let item = expect_accepted(&app, iface, &record, "minimal fixture");
        for (name, prop) in schema(iface)["properties"].as_object().unwrap() {
            if record.get(name).is_some() {
                continue;
            }
            let want = if let Some(default) = prop["default"].as_str() {
                default.to_string()
            } else if let Some(from) = prop["x-fallback"].as_str() {
                record[from].as_str().unwrap().to_string()
            } else {
                continue;
            };
            assert_eq!(
                element_text(&item.xml, name),
                Some(want.as_str()),
                "{}: absent {name} must be written as {want:?}: {}",
                iface.path,
                item.xml
            );
        }
    }

    // Written out for GL codes (D9).
    let gl = iface("/general-ledger-codes/v1");
    let xml = expect_accepted(&app, gl, &minimal(gl), "minimal fixture").xml;
    for (name, want) in [
        ("organization", "main"),
        ("catalog_product", "NO"),
        ("product_group", "DEFAULT"),
        ("start_date", "2001-01-01"),
        ("end_date", "2999-12-31"),
        ("description_en", "Office supplies"),
        ("description_fi_FI", "Office supplies"),
        ("description_en_US", "Office supplies"),
        ("description_sv_SE", "Office supplies"),
    ] {
        assert_eq!(
            element_text(&xml, name),
            Some(want),
            "{}: <{name}> of the minimal record: {xml}",
            gl.path
        );
    }
    assert!(
        xml.starts_with("<gl_code><organization>main</organization><code>4000</code>"),
        "{}: fields in schema order, organization first: {xml}",
        gl.path
    );

    // D9: product_group defaults when blank, also when catalog_product is YES.
    let blank = with(
        &with(&minimal(gl), "/catalog_product", json!("YES")),
        "/product_group",
        json!(""),
    );
    let xml = expect_accepted(&app, gl, &blank, "blank product_group").xml;
    assert_eq!(
        element_text(&xml, "product_group"),
        Some("DEFAULT"),
        "{}: {xml}",
        gl.path
    );
    assert_eq!(
        element_text(&xml, "catalog_product"),
        Some("YES"),
        "{}: {xml}",
        gl.path
    );

    // Accounting objects carry the request's accountingType first.
    let ao = iface("/accounting-objects/v1");
    let xml = expect_accepted(&app, ao, &minimal(ao), "minimal fixture").xml;
    assert!(
        xml.starts_with("<accounting_object><accountingType>PROJECT</accountingType>"),
        "{}: {xml}",
        ao.path
    );
}

#[test]
fn xml_escapes_ampersand_and_angle_brackets() {
    let app = TestApp::start();
    let mut seen = 0;
    for iface in &INTERFACES {
        let record = full(iface);
        let item = expect_accepted(&app, iface, &record, "full fixture");
        expect_valid_xml(iface, &[&item], "full fixture");
        for (name, value) in record.as_object().unwrap() {
            let Some(text) = value.as_str() else { continue };
            if !text.contains(['&', '<']) {
                continue;
            }
            seen += 1;
            let written = element_text(&item.xml, name)
                .unwrap_or_else(|| panic!("{}: no <{name}> in {}", iface.path, item.xml));
            assert!(
                !written.contains('<'),
                "{}: '<' of {name} must be escaped: {written}",
                iface.path
            );
            assert!(
                written.contains("&amp;") || !text.contains('&'),
                "{}: '&' of {name} must be escaped: {written}",
                iface.path
            );
            assert_eq!(unescape(written), text, "{}: {name}", iface.path);
        }
    }
    assert!(seen >= 5, "the full fixtures must hold values with & and <");

    // Written out for one GL code.
    let gl = iface("/general-ledger-codes/v1");
    let xml = expect_accepted(&app, gl, &full(gl), "full fixture").xml;
    let text = element_text(&xml, "description_en").unwrap();
    assert!(
        text.starts_with("Input VAT &lt;24%") && text.ends_with(" &amp; more"),
        "{}: description_en written as {text}",
        gl.path
    );
}

// ---------------------------------------------------------------------------------------------
// 2-4. Required, unknown, wrong types, null
// ---------------------------------------------------------------------------------------------

#[test]
fn every_required_field_missing_is_named_with_its_path() {
    let app = TestApp::start();
    for iface in &INTERFACES {
        let record = full(iface);
        let mut cases = 0;
        for scope in scopes(iface, &record) {
            for name in &scope.required {
                let path = scope.field(name);
                expect_one_error(
                    &app,
                    iface,
                    &without(&record, &path),
                    &path,
                    &required_msg(name),
                    &format!("without {path}"),
                );
                cases += 1;
            }
        }
        assert!(cases > 0, "{}: the schema requires nothing?", iface.path);
    }
}

#[test]
fn every_required_string_given_empty_is_too_short() {
    let app = TestApp::start();
    for iface in &INTERFACES {
        let record = full(iface);
        for (path, prop) in all_props(iface, &record) {
            if prop["minLength"] != 1 {
                continue;
            }
            let want = if name_of(&path) == "description_en" {
                DESCRIPTION_EN_EMPTY_MSG
            } else {
                EMPTY_MSG
            };
            expect_one_error(
                &app,
                iface,
                &with(&record, &path, json!("")),
                &path,
                want,
                &format!("{path} = \"\""),
            );
        }
    }
}

#[test]
fn unknown_fields_are_named_at_top_level_and_in_rows() {
    let app = TestApp::start();
    for iface in &INTERFACES {
        let record = full(iface);
        for scope in scopes(iface, &record) {
            let path = scope.field("x_unknown");
            expect_one_error(
                &app,
                iface,
                &with(&record, &path, json!("surprise")),
                &path,
                &extraneous_msg("x_unknown"),
                &format!("with {path}"),
            );
        }
    }
}

/// A value of another JSON type than `ty`, and the type name it is reported as.
fn wrong_value_for(ty: &str) -> (Value, &'static str) {
    match ty {
        "string" => (json!(5), "integer"),
        "number" | "integer" => (json!("12"), "string"),
        "array" => (json!({}), "object"),
        "object" => (json!([]), "array"),
        "boolean" => (json!("true"), "string"),
        other => panic!("unexpected schema type {other}"),
    }
}

#[test]
fn every_property_of_the_wrong_type_names_found_and_allowed_types() {
    let app = TestApp::start();
    for iface in &INTERFACES {
        let record = full(iface);
        for (path, prop) in all_props(iface, &record) {
            let ty = prop["type"]
                .as_str()
                .unwrap_or_else(|| panic!("{}: {path} has no single type", iface.path));
            let (value, found) = wrong_value_for(ty);
            expect_one_error(
                &app,
                iface,
                &with(&record, &path, value.clone()),
                &path,
                &type_msg(found, ty),
                &format!("{path} = {value}"),
            );
        }
    }
}

#[test]
fn null_is_refused_for_every_property() {
    let app = TestApp::start();
    for iface in &INTERFACES {
        let record = full(iface);
        for (path, prop) in all_props(iface, &record) {
            let ty = prop["type"].as_str().unwrap();
            expect_one_error(
                &app,
                iface,
                &with(&record, &path, Value::Null),
                &path,
                &type_msg("null", ty),
                &format!("{path} = null"),
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 5-8. Enums, dates, decimals, lengths
// ---------------------------------------------------------------------------------------------

#[test]
fn every_enum_property_lists_its_possible_values() {
    let app = TestApp::start();
    let mut enums = 0;
    for iface in &INTERFACES {
        let record = full(iface);
        for (path, prop) in all_props(iface, &record) {
            let Some(possible) = prop.get("enum") else {
                continue;
            };
            enums += 1;
            expect_one_error(
                &app,
                iface,
                &with(&record, &path, json!("BOGUS")),
                &path,
                &enum_msg("BOGUS", possible),
                &format!("{path} = \"BOGUS\""),
            );
            // Every listed value is accepted.
            for ok in possible.as_array().unwrap() {
                expect_accepted(
                    &app,
                    iface,
                    &with(&record, &path, ok.clone()),
                    &format!("{path} = {ok}"),
                );
            }
        }
    }
    assert!(enums >= 20, "only {enums} enum properties found");
}

#[test]
fn every_date_property_checks_pattern_and_calendar() {
    let app = TestApp::start();
    for iface in &INTERFACES {
        let record = full(iface);
        let mut dates = 0;
        for (path, prop) in all_props(iface, &record) {
            if prop["format"] != "date" {
                continue;
            }
            dates += 1;
            for bad in ["2024/01/01", "24-01-01", "2024-1-01", ""] {
                expect_one_error(
                    &app,
                    iface,
                    &with(&record, &path, json!(bad)),
                    &path,
                    &date_pattern_msg(bad),
                    &format!("{path} = {bad:?}"),
                );
            }
            for bad in [
                "2023-02-29",
                "2024-02-30",
                "2024-13-01",
                "2024-04-31",
                "1900-02-29",
            ] {
                expect_one_error(
                    &app,
                    iface,
                    &with(&record, &path, json!(bad)),
                    &path,
                    &calendar_msg(bad),
                    &format!("{path} = {bad:?}"),
                );
            }
            let item = expect_accepted(
                &app,
                iface,
                &with(&record, &path, json!("2024-02-29")),
                &format!("{path} = 2024-02-29"),
            );
            expect_valid_xml(iface, &[&item], &format!("{path} = 2024-02-29"));
        }
        assert!(dates > 0, "{}: no date property found", iface.path);
    }
}

/// The coding row whose distribution_percentage [`with_decimal`] adjusts.
const SIBLING_PCT: &str = "/rows/0/coding/1/distribution_percentage";

/// `record` with `value` at `path`; a coding row's distribution_percentage has its sibling
/// ([`SIBLING_PCT`]) set to the complement, so that the line still sums to exactly 100 and the
/// coding-sum rule stays out of the way (the full fixture's first line is split
/// 33.33 / 33.33 / 33.34).
fn with_decimal(record: &Value, path: &str, value: &str) -> Value {
    let r = with(record, path, num(value));
    if name_of(path) != "distribution_percentage" {
        return r;
    }
    assert_eq!(path, "/rows/0/coding/0/distribution_percentage");
    let split: Vec<String> = (0..3)
        .map(|i| record["rows"][0]["coding"][i]["distribution_percentage"].to_string())
        .collect();
    assert_eq!(split, ["33.33", "33.33", "33.34"], "fixture changed");
    let sibling = match value {
        "1.1234567" => "65.5365433",
        "2.123456" => "64.536544",
        "19.99" => "46.67",
        "0.07" => "66.59",
        "1.500" => "65.16",
        other => panic!("no complement for {other}"),
    };
    with(&r, SIBLING_PCT, num(sibling))
}

#[test]
fn money_allows_two_decimal_places_and_quantity_six() {
    let app = TestApp::start();
    let (mut money, mut quantity) = (0, 0);
    for iface in &INTERFACES {
        let record = full(iface);
        for (path, prop) in all_props(iface, &record) {
            let (bad, places, good): (&str, u32, &[&str]) = match prop["format"].as_str() {
                Some("money") => {
                    money += 1;
                    ("1.234", 2, &["19.99", "0.07", "1.500"])
                }
                Some("quantity") => {
                    quantity += 1;
                    ("1.1234567", 6, &["2.123456", "1.500"])
                }
                _ => continue,
            };
            let mut expected = vec![e(&path, places_msg(bad, places))];
            if name_of(&path) == "distribution_percentage" {
                // The line still sums to 100 only with a 7-place complement (65.5365433),
                // which is a second violation of its own.
                expected.push(e(SIBLING_PCT, places_msg("65.5365433", places)));
            }
            expect_refused(
                &app,
                iface,
                &with_decimal(&record, &path, bad),
                &expected,
                &format!("{path} = {bad}"),
            );
            for ok in good {
                let case = format!("{path} = {ok}");
                let item = expect_accepted(&app, iface, &with_decimal(&record, &path, ok), &case);
                let name = name_of(&path);
                assert!(
                    item.xml.contains(&format!("<{name}>{ok}</{name}>")),
                    "{} {case}: the number must be written exactly as received: {}",
                    iface.path,
                    item.xml
                );
                expect_valid_xml(iface, &[&item], &case);
            }
        }
    }
    assert!(money >= 20, "only {money} money properties found");
    assert!(quantity >= 5, "only {quantity} quantity properties found");
}

/// A string of `len` characters starting with a two-byte character, so that lengths are
/// counted in characters, not bytes.
fn long_string(len: usize) -> String {
    std::iter::once('Ä')
        .chain("abcdefghijklmnopqrstuvwxyz0123456789".chars().cycle())
        .take(len)
        .collect()
}

#[test]
fn every_max_length_is_enforced_with_the_value_cut_to_100_characters() {
    let app = TestApp::start();
    let mut limits = 0;
    for iface in &INTERFACES {
        let record = full(iface);
        for (path, prop) in all_props(iface, &record) {
            let Some(max) = prop["maxLength"].as_u64() else {
                continue;
            };
            limits += 1;
            let max = max as usize;
            let long = long_string(max + 1);
            let shown: String = long.chars().take(100).collect();
            let too_long = e(
                &path,
                format!(
                    "string \"{shown}\" is too long (length: {}, maximum allowed: {max})",
                    max + 1
                ),
            );
            if prop.get("enum").is_some() {
                // Also outside the enum: too_long_enum_value_is_both_too_long_and_not_in_the_enum.
                continue;
            }
            let case = format!("{path} of {} characters", max + 1);
            expect_refused(
                &app,
                iface,
                &with(&record, &path, json!(long)),
                &[too_long],
                &case,
            );
            let case = format!("{path} of {max} characters");
            let item = expect_accepted(
                &app,
                iface,
                &with(&record, &path, json!(long_string(max))),
                &case,
            );
            expect_valid_xml(iface, &[&item], &case);
        }
    }
    assert!(limits >= 20, "only {limits} maxLength properties found");
}

#[test]
fn too_long_enum_value_is_both_too_long_and_not_in_the_enum() {
    let app = TestApp::start();
    let mut limits = 0;
    for iface in &INTERFACES {
        let record = full(iface);
        for (path, prop) in all_props(iface, &record) {
            let (Some(max), Some(possible)) = (prop["maxLength"].as_u64(), prop.get("enum")) else {
                continue;
            };
            limits += 1;
            let max = max as usize;
            let long = long_string(max + 1);
            let shown: String = long.chars().take(100).collect();
            // Two rules broken by one value: two entries (D2), at one path, in either order.
            let mut want = vec![
                (
                    0,
                    path.clone(),
                    format!(
                        "string \"{shown}\" is too long (length: {}, maximum allowed: {max})",
                        max + 1
                    ),
                ),
                (0, path.clone(), enum_msg(&shown, possible)),
            ];
            want.sort();
            let case = format!("{path} of {} characters", max + 1);
            let mut got = refused_errors(&app, iface, &with(&record, &path, json!(long)), &case);
            got.sort();
            assert_eq!(got, want, "{} {case}", iface.path);
        }
    }
    assert!(
        limits >= 3,
        "only {limits} enum properties with maxLength found"
    );
}

// ---------------------------------------------------------------------------------------------
// 9. Cases written out in full
// ---------------------------------------------------------------------------------------------

#[test]
fn gl_type_outside_the_enum_lists_deductable_and_vat() {
    let app = TestApp::start();
    let gl = iface("/general-ledger-codes/v1");
    let record = json!({"code": "4000", "type": "X", "description_en": "Office supplies"});
    expect_one_error(
        &app,
        gl,
        &record,
        "/type",
        r#"instance value ("X") not found in enum (possible values: ["DEDUCTABLE","VAT"])"#,
        "type X",
    );
    let record = json!({"code": "4000", "type": "DEDUCTABLE", "description_en": "Office supplies",
        "catalog_product": "yes"});
    expect_one_error(
        &app,
        gl,
        &record,
        "/catalog_product",
        r#"instance value ("yes") not found in enum (possible values: ["YES","NO"])"#,
        "catalog_product yes",
    );
}

#[test]
fn gl_empty_description_en_has_its_own_message_and_empty_code_is_too_short() {
    let app = TestApp::start();
    let gl = iface("/general-ledger-codes/v1");
    let record = json!({"code": "4000", "type": "VAT", "description_en": ""});
    expect_one_error(
        &app,
        gl,
        &record,
        "/description_en",
        "description_en is required.",
        "empty description_en",
    );
    let record = json!({"code": "", "type": "VAT", "description_en": "Office supplies"});
    expect_one_error(
        &app,
        gl,
        &record,
        "/code",
        r#"string "" is too short (length: 0, required minimum: 1)"#,
        "empty code",
    );
    // An empty optional string is fine (D8).
    let record =
        json!({"code": "4000", "type": "VAT", "description_en": "Office supplies", "tax_code": ""});
    expect_accepted(&app, gl, &record, "empty tax_code");
}

#[test]
fn wrong_types_are_named_exactly() {
    let app = TestApp::start();
    let gl = iface("/general-ledger-codes/v1");
    let record = json!({"code": num("1.5"), "type": "VAT", "description_en": "Office supplies"});
    expect_one_error(
        &app,
        gl,
        &record,
        "/code",
        r#"instance type (number) does not match any allowed primitive type (allowed: ["string"])"#,
        "code 1.5",
    );
    let record = json!({"code": "4000", "type": "VAT", "description_en": true});
    expect_one_error(
        &app,
        gl,
        &record,
        "/description_en",
        r#"instance type (boolean) does not match any allowed primitive type (allowed: ["string"])"#,
        "description_en true",
    );
    let po = iface("/purchase-orders/v1");
    let record = with(&minimal(po), "/rows/0/line_number", num("1.5"));
    expect_one_error(
        &app,
        po,
        &record,
        "/rows/0/line_number",
        r#"instance type (number) does not match any allowed primitive type (allowed: ["integer"])"#,
        "line_number 1.5",
    );
    let record = with(&minimal(po), "/rows/0/unit_price", json!("19.99"));
    expect_one_error(
        &app,
        po,
        &record,
        "/rows/0/unit_price",
        r#"instance type (string) does not match any allowed primitive type (allowed: ["number"])"#,
        "unit_price \"19.99\"",
    );
}

#[test]
fn po_v2_coding_percentages_must_sum_to_exactly_100() {
    let app = TestApp::start();
    let po = iface("/purchase-orders/v2");
    let coding = |line: u32, pct: &str, net: &str| {
        json!({"posting_line": line, "distribution_percentage": num(pct), "quantity": 1,
            "coding_net_amount": num(net), "coding_gross_amount": num(net),
            "coding_tax_code": "VAT24", "gl_code": "4000"})
    };
    let po_with = |codings: Vec<Value>| {
        json!({"po_number": "PO-7", "supplier_number": "V1", "po_date": "2024-03-15",
            "rows": [{"line_number": 7, "quantity": 1, "unit": "EA", "unit_price": 100,
                "unit_price_is_net": "true", "row_handling_style": "NO_MATCH",
                "partial_invoice_indicator": "FIRST_LINE", "tolerence_group": "DEFAULT",
                "coding": codings}]})
    };
    expect_one_error(
        &app,
        po,
        &po_with(vec![coding(1, "50", "50"), coding(2, "49.99", "49.99")]),
        "/rows/0/coding",
        "coding distribution_percentage must sum to 100 for line 7",
        "50 + 49.99",
    );
    expect_one_error(
        &app,
        po,
        &po_with(vec![coding(1, "50", "50"), coding(2, "50.01", "50.01")]),
        "/rows/0/coding",
        "coding distribution_percentage must sum to 100 for line 7",
        "50 + 50.01",
    );
    let item = expect_accepted(
        &app,
        po,
        &po_with(vec![
            coding(1, "33.33", "33.33"),
            coding(2, "33.33", "33.33"),
            coding(3, "33.34", "33.34"),
        ]),
        "33.33 + 33.33 + 33.34",
    );
    expect_valid_xml(po, &[&item], "33.33 + 33.33 + 33.34");
    assert!(
        item.xml
            .contains("<distribution_percentage>33.34</distribution_percentage>"),
        "{}: {}",
        po.path,
        item.xml
    );
}

#[test]
fn empty_rows_and_coding_arrays_are_too_short() {
    let app = TestApp::start();
    let po = iface("/purchase-orders/v1");
    expect_one_error(
        &app,
        po,
        &with(&minimal(po), "/rows", json!([])),
        "/rows",
        "array is too short: must have at least 1 elements but instance has 0 elements",
        "rows []",
    );
    // Every array the schemas require to be non-empty.
    let mut arrays = 0;
    for iface in &INTERFACES {
        let record = full(iface);
        for (path, prop) in all_props(iface, &record) {
            if prop["minItems"] != 1 {
                continue;
            }
            arrays += 1;
            expect_one_error(
                &app,
                iface,
                &with(&record, &path, json!([])),
                &path,
                ARRAY_EMPTY_MSG,
                &format!("{path} = []"),
            );
        }
    }
    assert!(arrays >= 5, "only {arrays} arrays with minItems found");
}

#[test]
fn vendor_bank_account_with_a_bad_iban_checksum_is_refused() {
    let app = TestApp::start();
    let vendor = iface("/vendor-data/v1");
    let record = with(
        &full(vendor),
        "/bank_accounts/0/iban",
        json!("DE89370400440532013001"),
    );
    expect_one_error(
        &app,
        vendor,
        &record,
        "/bank_accounts/0/iban",
        r#"string "DE89370400440532013001" is not a valid IBAN"#,
        "iban with a bad checksum",
    );
    let record = with(
        &full(vendor),
        "/bank_accounts/0/iban",
        json!("DE89 3704 0044 0532 0130 00"),
    );
    let item = expect_accepted(&app, vendor, &record, "iban in print format");
    expect_valid_xml(vendor, &[&item], "iban in print format");
}

#[test]
fn all_problems_of_a_record_are_reported_in_document_order() {
    let app = TestApp::start();
    let gl = iface("/general-ledger-codes/v1");
    // Sent in another order than the schema's: entries follow the record as sent.
    let record =
        json!({"end_date": "2023-02-29", "code": "4000", "type": "X", "description_en": ""});
    expect_refused(
        &app,
        gl,
        &record,
        &[
            e(
                "/end_date",
                r#"string "2023-02-29" is not a valid calendar date"#,
            ),
            e(
                "/type",
                r#"instance value ("X") not found in enum (possible values: ["DEDUCTABLE","VAT"])"#,
            ),
            e("/description_en", "description_en is required."),
        ],
        "three problems",
    );

    // Nested and missing: a missing field comes after its object's present members.
    let po = iface("/purchase-orders/v1");
    let mut record = with(&minimal(po), "/po_date", json!("2024/01/01"));
    record = without(&record, "/rows/0/uom");
    record = with(&record, "/rows/0/quantity", num("1.1234567"));
    record = with(&record, "/zz", json!(1));
    expect_refused(
        &app,
        po,
        &record,
        &[
            e(
                "/po_date",
                r#"string "2024/01/01" does not match pattern "^\d{4}-\d{2}-\d{2}$""#,
            ),
            e(
                "/rows/0/quantity",
                "number 1.1234567 has more than 6 decimal places",
            ),
            e("/rows/0/uom", "required key [uom] not found"),
            e("/zz", "extraneous key [zz] is not permitted"),
        ],
        "four problems, nested",
    );
}

#[test]
fn errors_carry_the_index_of_their_record() {
    let app = TestApp::start();
    let gl = iface("/general-ledger-codes/v1");
    let records = [
        json!({"code": "A", "type": "X", "description_en": "a"}),
        json!({"code": "B", "type": "VAT"}),
    ];
    let r = app.post_records(gl.path, &records);
    assert_eq!(r.status, 400, "{}: {}", gl.path, r.text);
    let body = r.json();
    assert_eq!(body["status"], "FAILED", "{}: {}", gl.path, r.text);
    assert_eq!(body["total"], 2, "{}: {}", gl.path, r.text);
    assert_eq!(body["succeeded"], 0, "{}: {}", gl.path, r.text);
    assert_eq!(body["failed"], 2, "{}: {}", gl.path, r.text);
    assert_eq!(
        body["message"], "2 of 2 records failed validation",
        "{}: {}",
        gl.path, r.text
    );
    assert_eq!(
        r.errors(),
        vec![
            (
                0,
                "/type".to_string(),
                r#"instance value ("X") not found in enum (possible values: ["DEDUCTABLE","VAT"])"#
                    .to_string()
            ),
            (
                1,
                "/description_en".to_string(),
                "required key [description_en] not found".to_string()
            ),
        ],
        "{}",
        gl.path
    );
    assert!(
        app.store().items().unwrap().is_empty(),
        "{}: nothing queued",
        gl.path
    );
}

#[test]
fn payment_confirmation_with_one_bad_record_queues_nothing() {
    let app = TestApp::start();
    let pay = iface("/payment-confirmation/v1");
    let good = full(pay);
    let bad = with(
        &with(&good, "/softco_case_id", json!("SC-2")),
        "/payment_date",
        json!("2024-02-30"),
    );
    let r = app.post_records(pay.path, &[good, bad]);
    assert_eq!(r.status, 400, "{}: {}", pay.path, r.text);
    let body = r.json();
    assert_eq!(body["status"], "FAILED", "{}: {}", pay.path, r.text);
    assert_eq!(body["total"], 0, "{}: {}", pay.path, r.text);
    assert_eq!(body["succeeded"], 0, "{}: {}", pay.path, r.text);
    assert_eq!(body["failed"], 0, "{}: {}", pay.path, r.text);
    assert_eq!(
        body["message"], "No items could be processed as the structure was invalid.",
        "{}: {}",
        pay.path, r.text
    );
    assert_eq!(
        r.errors(),
        vec![(
            1,
            "/payment_date".to_string(),
            r#"string "2024-02-30" is not a valid calendar date"#.to_string()
        )],
        "{}",
        pay.path
    );
    assert!(
        app.store().items().unwrap().is_empty(),
        "{}: nothing queued",
        pay.path
    );
}

#[test]
fn control_character_is_refused_with_its_code_point() {
    let app = TestApp::start();
    let gl = iface("/general-ledger-codes/v1");
    let record = json!({"code": "4000", "type": "VAT", "description_en": "Bell\u{7}ring"});
    expect_one_error(
        &app,
        gl,
        &record,
        "/description_en",
        r#"string "Bell\u0007ring" contains a character that XML cannot carry (U+0007)"#,
        "BEL in description_en",
    );
    let po = iface("/purchase-orders/v2");
    let record = with(
        &full(po),
        "/rows/0/coding/0/coding_line_description",
        json!("a\u{7}b"),
    );
    expect_one_error(
        &app,
        po,
        &record,
        "/rows/0/coding/0/coding_line_description",
        r#"string "a\u0007b" contains a character that XML cannot carry (U+0007)"#,
        "BEL in a coding row",
    );
    // Tab, LF and CR are fine.
    let record = json!({"code": "4000", "type": "VAT", "description_en": "a\tb\nc\rd"});
    let item = expect_accepted(&app, gl, &record, "tab, LF and CR");
    expect_valid_xml(gl, &[&item], "tab, LF and CR");
}
