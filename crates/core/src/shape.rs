//! What a record looks like, derived once from its JSON Schema: the fields in schema order,
//! their D9 defaults and fallbacks, and what kind of value each holds. Validation uses it for
//! the number rules (D23) and [`crate::xml`] to write the record (D19).

use serde_json::Value;

/// Decimal places allowed in a `"type": "number"` field without a `money` or `quantity`
/// format (only in replaced schemas): generous, but a bound, so no number is ever expanded
/// without limit (D23).
pub const OTHER_DECIMAL_PLACES: u64 = 18;

/// Integer digits allowed in a decimal field (D23).
pub const DECIMAL_INT_DIGITS: u64 = 18;

/// The fields of one object, in schema order.
#[derive(Debug, Clone, Default)]
pub struct Shape {
    fields: Vec<Field>,
    /// Whether fields the schema does not list are allowed (`additionalProperties` is not
    /// `false`).
    open: bool,
}

/// One field of an object.
#[derive(Debug, Clone)]
pub struct Field {
    /// The JSON (and XML) name.
    pub name: String,
    /// Written when the field is absent or empty (D9).
    pub default: Option<String>,
    /// The field whose value is written when this one is absent or empty (D9).
    pub fallback: Option<String>,
    /// What the field holds.
    pub kind: Kind,
}

/// What a field holds, as far as validation and the XML care.
#[derive(Debug, Clone)]
pub enum Kind {
    /// A string, flag or anything the schema does not pin to one type.
    Scalar,
    /// `"type": "integer"`: integral, at most [`crate::number::INTEGER_MAX`], written in
    /// canonical form (XML Schema's `integer` has no `1.0`).
    Integer,
    /// `"type": "number"` with at most this many decimal places (`money` 2, `quantity` 6).
    Decimal(u64),
    /// An object with its own fields.
    Object(Shape),
    /// An array whose items are written as `item` elements.
    Array {
        /// The element name of one item (`x-xml-item`, default `item`).
        item: String,
        /// What each item holds.
        of: Box<Kind>,
    },
}

impl Kind {
    /// The kind of a number found where the schema says nothing (a replaced schema's
    /// additional properties).
    pub const OTHER_NUMBER: Kind = Kind::Decimal(OTHER_DECIMAL_PLACES);
}

impl Shape {
    /// The shape of the object described by `schema` (local `$ref`s are followed).
    pub fn from_schema(schema: &Value) -> Shape {
        shape_of(schema, schema)
    }

    /// The fields, in schema order.
    pub fn fields(&self) -> &[Field] {
        &self.fields
    }

    /// Whether fields the schema does not list are allowed.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// The field called `name`.
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// The `default` of a top-level field, if its schema gives one.
    pub fn default_of(&self, name: &str) -> Option<&str> {
        self.field(name).and_then(|f| f.default.as_deref())
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
    let open = node.get("additionalProperties") != Some(&Value::Bool(false));
    let Some(Value::Object(props)) = node.get("properties") else {
        return Shape {
            fields: Vec::new(),
            open,
        };
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
    Shape { fields, open }
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
    } else if is("number") {
        Kind::Decimal(match node.get("format").and_then(Value::as_str) {
            Some("money") => 2,
            Some("quantity") => 6,
            _ => OTHER_DECIMAL_PLACES,
        })
    } else if is("object") || node.get("properties").is_some() {
        Kind::Object(shape_of(root, node))
    } else {
        Kind::Scalar
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kinds_follow_the_schema() {
        let shape = Shape::from_schema(&json!({
            "properties": {
                "price": {"type": "number", "format": "money"},
                "qty": {"type": "number", "format": "quantity"},
                "other": {"type": "number"},
                "line": {"type": "integer"},
                "rows": {"type": "array", "x-xml-item": "row", "items": {"$ref": "#/definitions/row"}}
            },
            "definitions": {"row": {"type": "object", "properties": {"n": {"type": "integer"}}}}
        }));
        let kind = |n: &str| shape.field(n).map(|f| format!("{:?}", f.kind));
        assert_eq!(kind("price").as_deref(), Some("Decimal(2)"));
        assert_eq!(kind("qty").as_deref(), Some("Decimal(6)"));
        assert_eq!(kind("other").as_deref(), Some("Decimal(18)"));
        assert_eq!(kind("line").as_deref(), Some("Integer"));
        assert!(matches!(
            shape.field("rows").map(|f| &f.kind),
            Some(Kind::Array { item, of }) if item == "row" && matches!(**of, Kind::Object(_))
        ));
    }
}
