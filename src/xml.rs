//! The internal XML format (D19), written with quick-xml.
//!
//! A record becomes one element whose children follow its schema: one element per field,
//! named as the JSON field, in the order of the schema's `properties`, with the D9 defaults
//! (`default`, `x-fallback`) applied and arrays nested under `x-xml-item` elements. The format
//! is documented in `schemas/README.md` and described by the XSDs beside it.

use crate::interfaces::Interface;
use crate::validate::decimal;
use quick_xml::Writer;
use quick_xml::events::{BytesDecl, BytesEnd, BytesStart, BytesText, Event};
use serde_json::{Map, Value};

/// What the XML of a record looks like, derived once from its JSON Schema.
#[derive(Debug, Clone, Default)]
pub struct Shape {
    fields: Vec<Field>,
}

#[derive(Debug, Clone)]
struct Field {
    name: String,
    /// Written when the field is absent or empty (D9).
    default: Option<String>,
    /// The field whose value is written when this one is absent or empty (D9).
    fallback: Option<String>,
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    Scalar,
    /// JSON Schema counts `1.0` as an integer; XML Schema does not, so it is written `1`.
    Integer,
    Object(Shape),
    Array {
        item: String,
        of: Box<Kind>,
    },
}

impl Shape {
    /// The shape of the object described by `schema` (local `$ref`s are followed).
    pub fn from_schema(schema: &Value) -> Shape {
        shape_of(schema, schema)
    }

    /// The `default` of a top-level field, if its schema gives one.
    pub fn default_of(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|f| f.name == name)
            .and_then(|f| f.default.as_deref())
    }
}

fn resolve<'a>(root: &'a Value, node: &'a Value) -> &'a Value {
    match node.get("$ref").and_then(Value::as_str) {
        Some(r) if r.starts_with('#') => root.pointer(&r[1..]).unwrap_or(node),
        _ => node,
    }
}

fn shape_of(root: &Value, node: &Value) -> Shape {
    let node = resolve(root, node);
    let Some(Value::Object(props)) = node.get("properties") else {
        return Shape::default();
    };
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    let fields = props
        .iter()
        .map(|(name, prop)| {
            let prop = resolve(root, prop);
            Field {
                name: name.clone(),
                default: text(prop, "default"),
                fallback: text(prop, "x-fallback"),
                kind: kind_of(root, prop),
            }
        })
        .collect();
    Shape { fields }
}

fn kind_of(root: &Value, node: &Value) -> Kind {
    let node = resolve(root, node);
    let is = |t: &str| node.get("type").and_then(Value::as_str) == Some(t);
    if is("array") {
        let item = node
            .get("x-xml-item")
            .and_then(Value::as_str)
            .unwrap_or("item")
            .to_string();
        let of = node.get("items").map_or(Kind::Scalar, |i| kind_of(root, i));
        Kind::Array {
            item,
            of: Box::new(of),
        }
    } else if is("integer") {
        Kind::Integer
    } else if is("object") || node.get("properties").is_some() {
        Kind::Object(shape_of(root, node))
    } else {
        Kind::Scalar
    }
}

/// The XML element of one record. `lead` are elements written before the record's own fields
/// (an accounting object's `accountingType`).
pub fn record(shape: &Shape, element: &str, lead: &[(&str, &str)], record: &Value) -> String {
    let mut w = Writer::new(Vec::with_capacity(512));
    open(&mut w, element);
    for (name, value) in lead {
        text_element(&mut w, name, value);
    }
    if let Value::Object(map) = record {
        object_fields(&mut w, shape, map);
    }
    close(&mut w, element);
    // Only `&str` content and ASCII markup went in, so the bytes are UTF-8.
    String::from_utf8(w.into_inner()).unwrap_or_default()
}

/// A whole document: the interface's root element around records made by [`record`].
pub fn document<R: AsRef<[u8]>>(
    iface: &Interface,
    records: impl IntoIterator<Item = R>,
) -> Vec<u8> {
    let mut w = Writer::new(Vec::with_capacity(4096));
    let _ = w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)));
    open(&mut w, iface.xml_root);
    let mut out = w.into_inner();
    for r in records {
        out.extend_from_slice(r.as_ref());
    }
    let mut w = Writer::new(out);
    close(&mut w, iface.xml_root);
    w.into_inner()
}

// Writing into a Vec cannot fail, so the io::Result of quick-xml is dropped in these helpers.
fn open(w: &mut Writer<Vec<u8>>, name: &str) {
    let _ = w.write_event(Event::Start(BytesStart::new(name)));
}

fn close(w: &mut Writer<Vec<u8>>, name: &str) {
    let _ = w.write_event(Event::End(BytesEnd::new(name)));
}

fn text_element(w: &mut Writer<Vec<u8>>, name: &str, text: &str) {
    open(w, name);
    let _ = w.write_event(Event::Text(BytesText::new(text)));
    close(w, name);
}

fn is_blank(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        _ => false,
    }
}

fn object_fields(w: &mut Writer<Vec<u8>>, shape: &Shape, map: &Map<String, Value>) {
    for field in &shape.fields {
        let given = map.get(&field.name);
        if !is_blank(given) {
            if let Some(v) = given {
                value(w, &field.name, &field.kind, v);
            }
        } else if let Some(from) = field.fallback.as_ref().and_then(|f| map.get(f)) {
            if !is_blank(Some(from)) {
                value(w, &field.name, &field.kind, from);
            }
        } else if let Some(default) = &field.default {
            text_element(w, &field.name, default);
        } else if let Some(v) = given {
            value(w, &field.name, &field.kind, v); // an empty optional string stays empty
        }
    }
    // Fields a replaced schema allows but does not list are kept rather than lost.
    for (name, v) in map {
        if !shape.fields.iter().any(|f| &f.name == name) {
            value(w, name, &Kind::Scalar, v);
        }
    }
}

fn value(w: &mut Writer<Vec<u8>>, name: &str, kind: &Kind, v: &Value) {
    match (v, kind) {
        (Value::Null, _) => {}
        (Value::String(s), _) => text_element(w, name, s),
        (Value::Number(n), Kind::Integer) => {
            let plain = decimal::plain(n.as_str());
            let int = match plain.split_once('.') {
                Some((int, frac)) if frac.bytes().all(|b| b == b'0') => int,
                _ => &plain,
            };
            text_element(w, name, int)
        }
        (Value::Number(n), _) => text_element(w, name, &decimal::plain(n.as_str())),
        (Value::Bool(b), _) => text_element(w, name, if *b { "true" } else { "false" }),
        (Value::Array(items), Kind::Array { item, of }) => {
            open(w, name);
            for i in items {
                value(w, item, of, i);
            }
            close(w, name);
        }
        (Value::Array(items), _) => {
            open(w, name);
            for i in items {
                value(w, "item", &Kind::Scalar, i);
            }
            close(w, name);
        }
        (Value::Object(map), Kind::Object(shape)) => {
            open(w, name);
            object_fields(w, shape, map);
            close(w, name);
        }
        (Value::Object(map), _) => {
            open(w, name);
            object_fields(w, &Shape::default(), map);
            close(w, name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "organization": {"type": "string", "default": "main"},
                "code": {"type": "string"},
                "description_en": {"type": "string"},
                "description_fi_FI": {"type": "string", "x-fallback": "description_en"},
                "amount": {"type": "number"},
                "line": {"type": "integer"},
                "rows": {"type": "array", "x-xml-item": "row", "items": {"$ref": "#/definitions/row"}}
            },
            "definitions": {"row": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}}
        })
    }

    #[test]
    fn schema_order_defaults_fallbacks_and_nesting() {
        let shape = Shape::from_schema(&schema());
        let rec: Value = serde_json::from_str(
            r#"{"rows":[{"b":2,"a":"x"}],"amount":1.50,"description_en":"Tom & <Jerry>","code":"A1","organization":""}"#,
        )
        .unwrap();
        let xml = record(&shape, "gl_code", &[], &rec);
        assert_eq!(
            xml,
            "<gl_code><organization>main</organization><code>A1</code>\
             <description_en>Tom &amp; &lt;Jerry&gt;</description_en>\
             <description_fi_FI>Tom &amp; &lt;Jerry&gt;</description_fi_FI>\
             <amount>1.50</amount><rows><row><a>x</a><b>2</b></row></rows></gl_code>"
        );
    }

    #[test]
    fn lead_elements_and_exponents() {
        let shape = Shape::from_schema(&schema());
        let rec: Value = serde_json::from_str(r#"{"code":"1","amount":1E2,"line":3.0}"#).unwrap();
        let xml = record(&shape, "r", &[("accountingType", "PROJECT")], &rec);
        assert_eq!(
            xml,
            "<r><accountingType>PROJECT</accountingType><organization>main</organization>\
             <code>1</code><amount>100</amount><line>3</line></r>"
        );
    }
}
