//! Helpers shared by the test modules: walking a schema, editing records, expected texts,
//! posting and checking.

use crate::common::*;

use ap_intake::interfaces::{Interface, Mode};
use ap_intake::queue::Item;
use serde_json::{Map, Value, json};
use std::collections::HashMap;

// ---------------------------------------------------------------------------------------------
// Walking a schema
// ---------------------------------------------------------------------------------------------

/// One object level of a record: the top level, `rows[0]`, `rows[0].coding[0]`, a vendor's
/// `bank_accounts[0]`.
pub(crate) struct Scope {
    /// JSON Pointer of the object inside the record (`""` for the record itself).
    pub(crate) at: String,
    /// The object schema's `properties`.
    pub(crate) props: Map<String, Value>,
    /// The object schema's `required`.
    pub(crate) required: Vec<String>,
}

impl Scope {
    /// The pointer of one of its fields.
    pub(crate) fn field(&self, name: &str) -> String {
        format!("{}/{name}", self.at)
    }
}

/// The object levels of `schema`, each located at the first element of its array in `record`
/// (the full fixture, which has every array filled).
pub(crate) fn scopes(iface: &Interface, record: &Value) -> Vec<Scope> {
    let mut out = Vec::new();
    walk(iface, &schema(iface), record, String::new(), &mut out);
    out
}

pub(crate) fn walk(
    iface: &Interface,
    node: &Value,
    record: &Value,
    at: String,
    out: &mut Vec<Scope>,
) {
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
pub(crate) fn all_props(iface: &Interface, record: &Value) -> Vec<(String, Value)> {
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
pub(crate) fn name_of(pointer: &str) -> &str {
    pointer.rsplit_once('/').unwrap().1
}

// ---------------------------------------------------------------------------------------------
// Editing records
// ---------------------------------------------------------------------------------------------

pub(crate) fn full(iface: &Interface) -> Value {
    fixture(stem(iface), "full")
}

pub(crate) fn minimal(iface: &Interface) -> Value {
    fixture(stem(iface), "minimal")
}

/// `record` with the field at `pointer` set to `value` (added at the end when absent).
pub(crate) fn with(record: &Value, pointer: &str, value: Value) -> Value {
    let mut r = record.clone();
    let (parent, name) = pointer.rsplit_once('/').unwrap();
    r.pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .unwrap_or_else(|| panic!("no object at {parent:?}"))
        .insert(name.to_string(), value);
    r
}

/// `record` without the field at `pointer`.
pub(crate) fn without(record: &Value, pointer: &str) -> Value {
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
pub(crate) fn num(text: &str) -> Value {
    let v: Value = serde_json::from_str(text).unwrap();
    assert_eq!(v.to_string(), text, "the number must keep its text");
    v
}

// ---------------------------------------------------------------------------------------------
// Expected texts (decisions.md, "Validation messages")
// ---------------------------------------------------------------------------------------------

pub(crate) fn required_msg(field: &str) -> String {
    format!("required key [{field}] not found")
}

pub(crate) fn extraneous_msg(field: &str) -> String {
    format!("extraneous key [{field}] is not permitted")
}

pub(crate) fn enum_msg(value: &str, possible: &Value) -> String {
    format!(
        "instance value (\"{value}\") not found in enum (possible values: {})",
        serde_json::to_string(possible).unwrap()
    )
}

pub(crate) fn type_msg(found: &str, allowed: &str) -> String {
    format!(
        "instance type ({found}) does not match any allowed primitive type (allowed: [\"{allowed}\"])"
    )
}

pub(crate) fn date_pattern_msg(value: &str) -> String {
    format!(r#"string "{value}" does not match pattern "^\d{{4}}-\d{{2}}-\d{{2}}$""#)
}

pub(crate) fn calendar_msg(value: &str) -> String {
    format!(r#"string "{value}" is not a valid calendar date"#)
}

pub(crate) fn places_msg(value: &str, places: u32) -> String {
    format!("number {value} has more than {places} decimal places")
}

pub(crate) const EMPTY_MSG: &str = r#"string "" is too short (length: 0, required minimum: 1)"#;
pub(crate) const DESCRIPTION_EN_EMPTY_MSG: &str = "description_en is required.";
pub(crate) const ARRAY_EMPTY_MSG: &str =
    "array is too short: must have at least 1 elements but instance has 0 elements";
pub(crate) const PAYMENT_REFUSED_MSG: &str =
    "No items could be processed as the structure was invalid.";

pub(crate) fn e(path: impl Into<String>, error: impl Into<String>) -> (String, String) {
    (path.into(), error.into())
}

// ---------------------------------------------------------------------------------------------
// Posting and checking
// ---------------------------------------------------------------------------------------------

/// Key and version of every queued item.
pub(crate) fn snapshot(app: &TestApp) -> HashMap<Vec<u8>, u64> {
    app.store()
        .items()
        .unwrap()
        .into_iter()
        .map(|(k, i)| (k.as_bytes().to_vec(), i.version))
        .collect()
}

/// The items written since `before` was taken.
pub(crate) fn written_since(app: &TestApp, before: &HashMap<Vec<u8>, u64>) -> Vec<Item> {
    app.store()
        .items()
        .unwrap()
        .into_iter()
        .filter(|(k, i)| before.get(k.as_bytes()) != Some(&i.version))
        .map(|(_, i)| i)
        .collect()
}

/// POSTs one record, asserts the 202 body, returns the one item it queued.
pub(crate) fn expect_accepted(
    app: &TestApp,
    iface: &Interface,
    record: &Value,
    case: &str,
) -> Item {
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
pub(crate) fn expect_valid_xml(iface: &Interface, items: &[&Item], case: &str) -> String {
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
pub(crate) fn refused_errors(
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
pub(crate) fn expect_refused(
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
pub(crate) fn expect_one_error(
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
pub(crate) fn element_text<'x>(xml: &'x str, name: &str) -> Option<&'x str> {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    let start = xml.find(&open)? + open.len();
    let len = xml[start..].find(&close)?;
    Some(&xml[start..start + len])
}

pub(crate) fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}
