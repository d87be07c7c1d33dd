//! A converted record schema cut into named parts, so that client generators name every type
//! after a component (D38 addendum, "written for client generators as well as readers").
//!
//! Generators name an inline schema after its title or its property, and number the
//! collisions (`V1`, `Row1`, `Object8`): every object and enum inside a record is therefore a
//! component of its own, named after its place: the record's properties under the interface's
//! stem (`VendorDataV1Blocked`), an array's items in the singular of the property
//! (`PurchaseOrdersV2Row`, or `...Item` when the name is no plural), deeper parts under their
//! parent (`PurchaseOrdersV2RowCodingItem`). Each part's `title` is its name; a title the
//! schema file gave is kept at the head of the description.
//!
//! `default` is written into the description ("Default when absent: `main`."), not kept as
//! the keyword: openapi-typescript makes a property with a `default` required under
//! components/schemas (its issues 1741 and 2012), and these schemas describe requests, where
//! the default is what the service assumes when the field is left out.

use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

/// Where components point: `#/components/schemas/<name>`.
const BASE: &str = "#/components/schemas/";

/// The record `<stem>Record`, its root definitions and the parts cut out of them, as
/// `(component name, schema)`. `taken` holds the names already in the document and gains
/// the new ones.
pub fn split(
    stem: &str,
    record: Value,
    definitions: Vec<(String, Value)>,
    taken: &mut BTreeSet<String>,
) -> Vec<(String, Value)> {
    let mut cut = Cutter {
        taken,
        moves: Vec::new(),
        out: Vec::new(),
    };
    let record_name = format!("{stem}Record");
    cut.taken.insert(record_name.clone());
    cut.component(record_name, stem, record);
    for (name, def) in definitions {
        cut.taken.insert(name.clone());
        let base = name.replace('.', "");
        cut.component(name, &base, def);
    }
    let Cutter { moves, mut out, .. } = cut;
    for (_, schema) in &mut out {
        repoint(schema, &moves);
    }
    out
}

struct Cutter<'a> {
    taken: &'a mut BTreeSet<String>,
    /// `(old reference prefix, component name)`: where a part was before it was cut out.
    moves: Vec<(String, String)>,
    out: Vec<(String, Value)>,
}

impl Cutter<'_> {
    /// Makes `schema` the component `name`: its parts cut out under `base`, its title the name.
    fn component(&mut self, name: String, base: &str, mut schema: Value) {
        // The slot first: a component comes before its parts in the document.
        let slot = self.out.len();
        self.out.push((name.clone(), Value::Null));
        let at = format!("{BASE}{name}");
        self.cut_parts(&mut schema, base, &at);
        annotate(&mut schema);
        if let Some(obj) = schema.as_object_mut() {
            obj.shift_insert(0, "title".into(), Value::String(name));
        }
        self.out[slot].1 = schema;
    }

    /// Cuts the object and enum parts out of `schema`'s properties and array items.
    fn cut_parts(&mut self, schema: &mut Value, base: &str, at: &str) {
        let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) else {
            return annotate_items(schema);
        };
        for (key, property) in properties.iter_mut() {
            let here = format!("{at}/properties/{}", escape(key));
            let pascal = pascal(key);
            if is_part(property) {
                let name = self.fresh(&format!("{base}{pascal}"));
                self.moves.push((here, name.clone()));
                let part = std::mem::replace(property, reference(&name));
                self.component(name.clone(), &name, part);
                continue;
            }
            annotate(property);
            let Some(items) = property.get_mut("items") else {
                continue;
            };
            if is_part(items) {
                let name = self.fresh(&format!("{base}{}", singular(&pascal)));
                self.moves.push((format!("{here}/items"), name.clone()));
                let part = std::mem::replace(items, reference(&name));
                self.component(name.clone(), &name, part);
            } else {
                annotate(items);
            }
        }
    }

    /// `want`, or `want` with a number when a component has that name already (only a schema
    /// override can do that: the built-in schemas' parts all have names of their own).
    fn fresh(&mut self, want: &str) -> String {
        let mut name = want.to_string();
        let mut n = 2;
        while self.taken.contains(&name) {
            name = format!("{want}{n}");
            n += 1;
        }
        self.taken.insert(name.clone());
        name
    }
}

/// An object with properties, or an enum: a part with a name of its own.
fn is_part(schema: &Value) -> bool {
    schema.get("$ref").is_none()
        && (schema.get("properties").is_some_and(Value::is_object)
            || schema.get("enum").is_some_and(Value::is_array))
}

fn reference(name: &str) -> Value {
    json!({ "$ref": format!("{BASE}{name}") })
}

/// Folds `title` and `default` into the description: a component's title becomes its name,
/// and a default is the service's, not the client's (see the module's comment).
fn annotate(schema: &mut Value) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    let title = obj.remove("title");
    let default = obj.remove("default");
    if title.is_none() && default.is_none() {
        return;
    }
    let mut lines = Vec::new();
    lines.extend(title.map(|t| plain(&t)));
    if let Some(Value::String(description)) = obj.get("description") {
        lines.push(description.clone());
    }
    lines.extend(default.map(|d| format!("Default when absent: `{}`.", plain(&d))));
    obj.insert("description".into(), Value::String(lines.join("\n\n")));
}

/// A string as it is, any other value as JSON.
fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// [`annotate`] on the items of an array that is not cut into parts.
fn annotate_items(schema: &mut Value) {
    if let Some(items) = schema.get_mut("items") {
        annotate(items);
    }
}

/// Points the references into a part that was cut out at the part's component.
fn repoint(schema: &mut Value, moves: &[(String, String)]) {
    match schema {
        Value::Object(obj) => {
            if let Some(Value::String(r)) = obj.get_mut("$ref") {
                let best = moves
                    .iter()
                    .filter(|(old, _)| {
                        r.strip_prefix(old.as_str())
                            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
                    })
                    .max_by_key(|(old, _)| old.len());
                if let Some((old, name)) = best {
                    *r = format!("{BASE}{name}{}", &r[old.len()..]);
                }
            }
            obj.values_mut().for_each(|v| repoint(v, moves));
        }
        Value::Array(list) => list.iter_mut().for_each(|v| repoint(v, moves)),
        _ => {}
    }
}

/// A property name as a type name: `bank_accounts` -> `BankAccounts`, `exact_GRN` ->
/// `ExactGRN`; characters a component name may not hold are dropped.
fn pascal(name: &str) -> String {
    name.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| w[..1].to_ascii_uppercase() + &w[1..])
        .collect()
}

/// The name of one item of the array property `pascal`: `BankAccounts` -> `BankAccount`,
/// `Coding` -> `CodingItem`.
fn singular(pascal: &str) -> String {
    match pascal.strip_suffix('s') {
        Some(stem) if !stem.is_empty() && !stem.ends_with('s') => stem.to_string(),
        _ => format!("{pascal}Item"),
    }
}

/// A JSON Pointer token (`~` is `~0`, `/` is `~1`).
fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// The names of `schemas`, for [`split`]'s `taken`.
pub fn names(schemas: &Map<String, Value>) -> BTreeSet<String> {
    schemas.keys().cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_one(record: Value) -> Map<String, Value> {
        let mut taken = BTreeSet::from(["PoRequest".to_string()]);
        split("Po", record, Vec::new(), &mut taken)
            .into_iter()
            .collect()
    }

    #[test]
    fn objects_and_enums_become_components_named_after_their_place() {
        let record = json!({
            "title": "Purchase order (POST /po)",
            "type": "object",
            "properties": {
                "po_type": {"type": "string", "enum": ["NEW", "CLOSE"]},
                "organization": {"type": "string", "default": "main"},
                "rows": {"type": "array", "items": {
                    "type": "object",
                    "properties": {
                        "coding": {"type": "array", "items": {
                            "type": "object", "properties": {"account": {"type": "string"}}
                        }},
                        "same": {"$ref": "#/components/schemas/PoRecord/properties/po_type"}
                    }
                }},
                "tags": {"type": "array", "items": {"type": "string", "title": "Tag"}}
            }
        });
        let parts = split_one(record);
        let names: Vec<&str> = parts.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            ["PoRecord", "PoPoType", "PoRow", "PoRowCodingItem"],
            "{parts:#?}"
        );
        let po = &parts["PoRecord"];
        assert_eq!(po["title"], "PoRecord");
        assert_eq!(po["description"], "Purchase order (POST /po)");
        assert_eq!(po["properties"]["po_type"], reference("PoPoType"));
        assert_eq!(
            po["properties"]["organization"],
            json!({"type": "string", "description": "Default when absent: `main`."})
        );
        assert_eq!(po["properties"]["rows"]["items"], reference("PoRow"));
        assert_eq!(
            po["properties"]["tags"]["items"],
            json!({"type": "string", "description": "Tag"})
        );
        let row = &parts["PoRow"];
        assert_eq!(row["title"], "PoRow");
        assert_eq!(
            row["properties"]["coding"]["items"],
            reference("PoRowCodingItem")
        );
        // A reference into a part that was cut out follows it.
        assert_eq!(row["properties"]["same"], reference("PoPoType"));
    }

    #[test]
    fn a_name_already_taken_gets_a_number() {
        let record = json!({"properties": {"request": {"enum": ["a"]}}});
        let parts = split_one(record);
        assert_eq!(
            parts["PoRecord"]["properties"]["request"],
            reference("PoRequest2")
        );
    }

    #[test]
    fn plurals_lose_their_s() {
        assert_eq!(singular("Rows"), "Row");
        assert_eq!(singular("BankAccounts"), "BankAccount");
        assert_eq!(singular("Coding"), "CodingItem");
        assert_eq!(singular("Address"), "AddressItem");
        assert_eq!(singular("S"), "SItem");
        assert_eq!(pascal("exact_GRN_level_match"), "ExactGRNLevelMatch");
        assert_eq!(pascal("a-b.c d"), "ABCD");
    }
}
