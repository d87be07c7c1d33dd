//! A record's JSON Schema as loaded (draft-07, built-in or an override, D14) turned into an
//! OpenAPI 3.1 Schema Object (JSON Schema 2020-12) that says the same thing.
//!
//! What differs between the two drafts, and what is done about it:
//! - `$schema` and `$id` are dropped: the schema now lives inside the OpenAPI document, and an
//!   `$id` would make its `$ref`s resolve against another base.
//! - `definitions` (and `$defs`) at the root become components of their own,
//!   `<Prefix>.<name>`; deeper ones are renamed `$defs` where they are.
//! - `$ref`s are rewritten to where their target now is: `#` to the record's component,
//!   `#/definitions/x` to `x`'s component, any other `#/...` pointer into the record's
//!   component. A `$ref`'s sibling keywords, ignored by draft-07, are dropped (2020-12 would
//!   apply them), annotations excepted.
//! - `items` as an array is `prefixItems`, and `additionalItems` beside it is `items`;
//!   `dependencies` splits into `dependentRequired` and `dependentSchemas`.
//!
//! Everything else (`x-` keywords, the product's own `format`s, `examples`) is valid 2020-12 as
//! it stands.

use serde_json::{Map, Value};

/// Keywords kept beside a `$ref`: annotations, which change no verdict.
const ANNOTATIONS: [&str; 7] = [
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
];

/// Keywords whose value is an object of schemas.
const SCHEMA_MAPS: [&str; 3] = ["properties", "patternProperties", "$defs"];

/// Keywords whose value is one schema.
const ONE_SCHEMA: [&str; 7] = [
    "additionalProperties",
    "contains",
    "propertyNames",
    "if",
    "then",
    "else",
    "not",
];

/// Keywords whose value is an array of schemas.
const SCHEMA_LISTS: [&str; 3] = ["allOf", "anyOf", "oneOf"];

/// A record schema ready for `components/schemas`.
pub struct Converted {
    /// The record's own schema.
    pub record: Value,
    /// The root definitions, as `(component name, schema)`.
    pub definitions: Vec<(String, Value)>,
}

/// Converts `schema`, which will be the component `<prefix>Record`.
pub fn convert(schema: &Value, prefix: &str) -> Converted {
    let names = Names {
        record: format!("{prefix}Record"),
        prefix,
    };
    let mut definitions = Vec::new();
    let mut root = schema.clone();
    if let Some(obj) = root.as_object_mut() {
        for key in ["definitions", "$defs"] {
            let Some(Value::Object(defs)) = obj.remove(key) else {
                continue;
            };
            for (name, def) in &defs {
                definitions.push((names.definition(name), walk(def, &names)));
            }
        }
    }
    Converted {
        record: walk(&root, &names),
        definitions,
    }
}

/// The records of the schema's `examples` (draft-06 and later: an array of instances).
pub fn examples(schema: &Value) -> Vec<Value> {
    schema
        .get("examples")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// Component names of one record schema.
struct Names<'a> {
    record: String,
    prefix: &'a str,
}

impl Names<'_> {
    /// The component name of the root definition `name` (a JSON Pointer token, unescaped):
    /// component names allow letters, digits, `.`, `-` and `_` only.
    fn definition(&self, name: &str) -> String {
        let clean: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "._-".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        format!("{}.{clean}", self.prefix)
    }

    /// Where a `$ref` of the record schema points inside the OpenAPI document.
    fn reference(&self, reference: &str) -> String {
        let Some(pointer) = reference.strip_prefix('#') else {
            // Another document: left as it is (the built-in schemas have none).
            return reference.to_string();
        };
        let mut tokens = pointer.split('/').skip(1);
        let first = tokens.next();
        match first {
            None | Some("") => format!("#/components/schemas/{}", self.record),
            Some("definitions" | "$defs") => match tokens.next() {
                Some(name) => format!(
                    "#/components/schemas/{}{}",
                    self.definition(&unescape(name)),
                    rest(tokens)
                ),
                None => format!("#/components/schemas/{}", self.record),
            },
            Some(token) => format!(
                "#/components/schemas/{}/{token}{}",
                self.record,
                rest(tokens)
            ),
        }
    }
}

/// The remaining tokens of a pointer, `/`-joined, with `definitions` renamed as in `walk`.
fn rest<'a>(tokens: impl Iterator<Item = &'a str>) -> String {
    tokens
        .map(|t| if t == "definitions" { "$defs" } else { t })
        .fold(String::new(), |acc, t| acc + "/" + t)
}

/// A JSON Pointer token as text (`~1` is `/`, `~0` is `~`; URI fragments percent-encode).
fn unescape(token: &str) -> String {
    let decoded = percent_encoding::percent_decode_str(token).decode_utf8_lossy();
    decoded.replace("~1", "/").replace("~0", "~")
}

/// One (sub)schema, converted.
fn walk(schema: &Value, names: &Names<'_>) -> Value {
    let Some(obj) = schema.as_object() else {
        return schema.clone(); // true, false
    };
    let mut out = Map::new();
    if let Some(reference) = obj.get("$ref").and_then(Value::as_str) {
        out.insert("$ref".into(), Value::String(names.reference(reference)));
        for key in ANNOTATIONS {
            if let Some(v) = obj.get(key) {
                out.insert(key.into(), v.clone());
            }
        }
        return Value::Object(out);
    }
    let tuple = obj.get("items").is_some_and(Value::is_array);
    for (key, value) in obj {
        match key.as_str() {
            "$schema" | "$id" => {}
            "definitions" | "$defs" => {
                out.insert("$defs".into(), map(value, names));
            }
            "items" if tuple => {
                out.insert("prefixItems".into(), list(value, names));
            }
            "additionalItems" if tuple => {
                out.insert("items".into(), walk(value, names));
            }
            "additionalItems" => {} // ignored by draft-07 without an items array
            "items" => {
                out.insert("items".into(), walk(value, names));
            }
            "dependencies" => dependencies(value, names, &mut out),
            k if SCHEMA_MAPS.contains(&k) => {
                out.insert(key.clone(), map(value, names));
            }
            k if ONE_SCHEMA.contains(&k) => {
                out.insert(key.clone(), walk(value, names));
            }
            k if SCHEMA_LISTS.contains(&k) => {
                out.insert(key.clone(), list(value, names));
            }
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    Value::Object(out)
}

fn map(value: &Value, names: &Names<'_>) -> Value {
    match value.as_object() {
        Some(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), walk(v, names))).collect()),
        None => value.clone(),
    }
}

fn list(value: &Value, names: &Names<'_>) -> Value {
    match value.as_array() {
        Some(a) => Value::Array(a.iter().map(|v| walk(v, names)).collect()),
        None => value.clone(),
    }
}

/// draft-07 `dependencies`: a property's array of names is `dependentRequired`, its schema
/// `dependentSchemas`.
fn dependencies(value: &Value, names: &Names<'_>, out: &mut Map<String, Value>) {
    let Some(deps) = value.as_object() else {
        return;
    };
    let mut required = Map::new();
    let mut schemas = Map::new();
    for (name, dep) in deps {
        if dep.is_array() {
            required.insert(name.clone(), dep.clone());
        } else {
            schemas.insert(name.clone(), walk(dep, names));
        }
    }
    if !required.is_empty() {
        out.insert("dependentRequired".into(), Value::Object(required));
    }
    if !schemas.is_empty() {
        out.insert("dependentSchemas".into(), Value::Object(schemas));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn draft07_keywords_become_their_2020_12_forms() {
        let schema = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "$id": "https://example.test/gl.json",
            "type": "object",
            "definitions": {
                "code": {"type": "string", "minLength": 1},
                "a/b": {"$ref": "#/definitions/code", "description": "kept", "minLength": 9}
            },
            "properties": {
                "code": {"$ref": "#/definitions/code"},
                "other": {"$ref": "#/definitions/a~1b"},
                "self": {"$ref": "#"},
                "like_code": {"$ref": "#/properties/code"},
                "pair": {"type": "array", "items": [{"type": "string"}], "additionalItems": false},
                "list": {"type": "array", "items": {"type": "string"}, "additionalItems": false},
                "deep": {
                    "definitions": {"x": {"type": "integer"}},
                    "$ref": "#/properties/deep/definitions/x"
                }
            },
            "dependencies": {"code": ["other"], "pair": {"required": ["list"]}},
            "examples": [{"code": "4000"}]
        });
        let c = convert(&schema, "Gl");
        let r = &c.record;
        assert!(r.get("$schema").is_none() && r.get("$id").is_none());
        assert!(r.get("definitions").is_none());
        let p = &r["properties"];
        assert_eq!(p["code"], json!({"$ref": "#/components/schemas/Gl.code"}));
        assert_eq!(p["other"], json!({"$ref": "#/components/schemas/Gl.a_b"}));
        assert_eq!(p["self"], json!({"$ref": "#/components/schemas/GlRecord"}));
        assert_eq!(
            p["like_code"],
            json!({"$ref": "#/components/schemas/GlRecord/properties/code"})
        );
        assert_eq!(
            p["pair"],
            json!({"type": "array", "prefixItems": [{"type": "string"}], "items": false})
        );
        assert_eq!(
            p["list"],
            json!({"type": "array", "items": {"type": "string"}})
        );
        assert_eq!(
            p["deep"],
            json!({"$ref": "#/components/schemas/GlRecord/properties/deep/$defs/x"})
        );
        assert_eq!(r["dependentRequired"], json!({"code": ["other"]}));
        assert_eq!(
            r["dependentSchemas"],
            json!({"pair": {"required": ["list"]}})
        );
        assert_eq!(examples(&schema), vec![json!({"code": "4000"})]);
        let defs: Vec<_> = c.definitions.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(defs, ["Gl.code", "Gl.a_b"]);
        assert_eq!(
            c.definitions[1].1,
            json!({"$ref": "#/components/schemas/Gl.code", "description": "kept"})
        );
    }

    #[test]
    fn nested_definitions_are_renamed_in_place() {
        let schema = json!({"properties": {"a": {
            "definitions": {"x": {"type": "integer"}},
            "properties": {"b": {"$ref": "#/properties/a/definitions/x"}}
        }}});
        let r = convert(&schema, "T").record;
        assert_eq!(
            r["properties"]["a"]["$defs"],
            json!({"x": {"type": "integer"}})
        );
        assert_eq!(
            r["properties"]["a"]["properties"]["b"]["$ref"],
            "#/components/schemas/TRecord/properties/a/$defs/x"
        );
    }
}
