//! The internal XML format (D19): markup written directly, text escaped by quick-xml.
//!
//! A record becomes one element whose children follow its schema: one element per field,
//! named as the JSON field, in the order of the schema's `properties`, with the D9 defaults
//! (`default`, `x-fallback`) applied and arrays nested under `x-xml-item` elements. The format
//! is documented in `schemas/README.md` and described by the XSDs beside it. Numbers are
//! written in their canonical form (D23); validation has bounded them, and [`Decimal`] never
//! expands one beyond its text's length plus a constant in any case.

use crate::interfaces::Interface;
use crate::number::Decimal;
use crate::shape::{Kind, Shape};
use crate::tree::{Members, Ref, Tree};
use quick_xml::escape::escape;

/// The XML element of one record. `lead` are elements written before the record's own fields
/// (an accounting object's `accountingType`).
pub fn record<T: Tree>(shape: &Shape, element: &str, lead: &[(&str, &str)], record: &T) -> String {
    let mut w = Vec::with_capacity(512);
    open(&mut w, element);
    for (name, value) in lead {
        text_element(&mut w, name, value);
    }
    if let Ref::Object(map) = record.get_ref() {
        object_fields::<T>(&mut w, shape, map);
    }
    close(&mut w, element);
    // Only `&str` content and ASCII markup went in, so the bytes are UTF-8; were they not,
    // the lossy form keeps the record visible instead of an empty element.
    match String::from_utf8(w) {
        Ok(xml) => xml,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

/// A whole document: the interface's root element around records made by [`record`].
pub fn document<R: AsRef<[u8]>>(
    iface: &Interface,
    records: impl IntoIterator<Item = R>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(4096);
    out.extend_from_slice(br#"<?xml version="1.0" encoding="UTF-8"?>"#);
    open(&mut out, iface.xml_root);
    for r in records {
        out.extend_from_slice(r.as_ref());
    }
    close(&mut out, iface.xml_root);
    out
}

// Markup is written directly; text goes through quick-xml's `escape` (`<`, `>`, `&`, `'`, `"`
// and CR), what its writer applies to a text event. Element names are the schema's field
// names, which JSON Schema files of ours keep to XML names (schemas/README.md).
fn open(w: &mut Vec<u8>, name: &str) {
    w.push(b'<');
    w.extend_from_slice(name.as_bytes());
    w.push(b'>');
}

fn close(w: &mut Vec<u8>, name: &str) {
    w.extend_from_slice(b"</");
    w.extend_from_slice(name.as_bytes());
    w.push(b'>');
}

fn text_element(w: &mut Vec<u8>, name: &str, text: &str) {
    open(w, name);
    w.extend_from_slice(escape(text).as_bytes());
    close(w, name);
}

fn is_blank<T: Tree>(v: Option<&T>) -> bool {
    match v.map(Tree::get_ref) {
        None | Some(Ref::Null) => true,
        Some(Ref::String(s)) => s.is_empty(),
        _ => false,
    }
}

fn object_fields<T: Tree>(w: &mut Vec<u8>, shape: &Shape, map: &T::Object) {
    let mut known = 0;
    for field in shape.fields() {
        let given = map.get(&field.name);
        known += usize::from(given.is_some());
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
    // Fields a replaced schema allows but does not list are kept rather than lost (there are
    // none when every member was a field).
    if known < map.len() {
        map.each(|name, v| {
            if shape.field(name).is_none() {
                value(w, name, &Kind::OTHER_NUMBER, v);
            }
        });
    }
}

fn value<T: Tree>(w: &mut Vec<u8>, name: &str, kind: &Kind, v: &T) {
    match (v.get_ref(), kind) {
        (Ref::Null, _) => {}
        (Ref::String(s), _) => text_element(w, name, s),
        (Ref::Number(n), kind) => text_element(w, name, &number_text(n, kind)),
        (Ref::Bool(b), _) => text_element(w, name, if b { "true" } else { "false" }),
        (Ref::Array(items), Kind::Array { item, of }) => {
            open(w, name);
            for i in items {
                value(w, item, of, i);
            }
            close(w, name);
        }
        (Ref::Array(items), _) => {
            open(w, name);
            for i in items {
                value(w, "item", &Kind::OTHER_NUMBER, i);
            }
            close(w, name);
        }
        (Ref::Object(map), Kind::Object(shape)) => {
            open(w, name);
            object_fields::<T>(w, shape, map);
            close(w, name);
        }
        (Ref::Object(map), _) => {
            open(w, name);
            object_fields::<T>(w, &Shape::default(), map);
            close(w, name);
        }
    }
}

/// A number's XML text (D23): integers canonical, decimals as received but in plain notation
/// and without trailing zeros beyond the field's places.
fn number_text<'a>(text: &'a str, kind: &Kind) -> std::borrow::Cow<'a, str> {
    let Some(d) = Decimal::parse(text) else {
        return text.into();
    };
    match kind {
        Kind::Integer => d.canonical_integer(),
        Kind::Decimal(places) => d.canonical_decimal(*places),
        _ => d.canonical_decimal(crate::shape::OTHER_DECIMAL_PLACES),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

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
