//! The places of a record a mutation can aim at, each with its (resolved) schema.

use super::json::{J, Seg};
use super::valid::resolve;
use serde_json::Value;

#[derive(Clone, Debug)]
pub struct Slot {
    pub path: Vec<Seg>,
    pub node: Value,
    /// Listed in its object's `required`.
    pub required: bool,
    /// An element of an array (no key of its own).
    pub item: bool,
    /// A bank account's `iban` or `account_number`: removing or emptying it may take the
    /// account's identity (D13), so the neutral mutations leave it alone.
    pub guarded: bool,
    /// A coding row's `distribution_percentage`: its value is bound by the line's sum (D11).
    pub sum_bound: bool,
    /// The `coding` array of a row whose percentages must sum to 100.
    pub coding: bool,
}

impl Slot {
    pub fn ty(&self) -> &str {
        self.node.get("type").and_then(Value::as_str).unwrap_or("")
    }

    pub fn is_field(&self) -> bool {
        !self.item && !self.path.is_empty()
    }

    pub fn is_number(&self) -> bool {
        matches!(self.ty(), "integer" | "number")
    }

    pub fn pattern(&self) -> Option<&str> {
        self.node.get("pattern").and_then(Value::as_str)
    }

    pub fn format(&self) -> Option<&str> {
        self.node.get("format").and_then(Value::as_str)
    }

    pub fn max_len(&self) -> Option<usize> {
        self.node
            .get("maxLength")
            .and_then(Value::as_u64)
            .map(|m| m as usize)
    }

    /// A string with no enum, pattern or format: any characters XML carries will do.
    pub fn is_free_text(&self) -> bool {
        self.ty() == "string"
            && self.node.get("enum").is_none()
            && self.pattern().is_none()
            && self.format().is_none()
    }

    /// Whether a value of JSON type `name` has this slot's type (an integer is a number).
    pub fn accepts_type(&self, name: &str) -> bool {
        self.ty() == name || (self.ty() == "number" && name == "integer")
    }
}

/// Every slot of `record` (valid for `schema`), the record itself first.
pub fn slots(schema: &Value, record: &J) -> Vec<Slot> {
    let mut out = vec![Slot {
        path: vec![],
        node: schema.clone(),
        required: false,
        item: false,
        guarded: false,
        sum_bound: false,
        coding: false,
    }];
    walk(schema, schema, record, &mut vec![], false, &mut out);
    out
}

fn walk(
    root: &Value,
    node: &Value,
    v: &J,
    path: &mut Vec<Seg>,
    in_coding: bool,
    out: &mut Vec<Slot>,
) {
    let node = resolve(root, node);
    match v {
        J::Obj(members) => {
            let required: Vec<&str> = node["required"]
                .as_array()
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let format = node.get("format").and_then(Value::as_str);
            for (k, child) in members {
                let Some(prop) = node["properties"].get(k) else {
                    continue;
                };
                let prop = resolve(root, prop);
                path.push(Seg::Key(k.clone()));
                out.push(Slot {
                    path: path.clone(),
                    node: prop.clone(),
                    required: required.contains(&k.as_str()),
                    item: false,
                    guarded: format == Some("bank-account")
                        && matches!(k.as_str(), "iban" | "account_number"),
                    sum_bound: in_coding && k == "distribution_percentage",
                    coding: format == Some("coding-sum") && k == "coding",
                });
                let child_in_coding = format == Some("coding-sum") && k == "coding";
                walk(root, prop, child, path, child_in_coding, out);
                path.pop();
            }
        }
        J::Arr(items) => {
            let of = resolve(root, &node["items"]);
            for (i, item) in items.iter().enumerate() {
                path.push(Seg::Index(i));
                out.push(Slot {
                    path: path.clone(),
                    node: of.clone(),
                    required: false,
                    item: true,
                    guarded: false,
                    sum_bound: false,
                    coding: false,
                });
                walk(root, of, item, path, in_coding, out);
                path.pop();
            }
        }
        _ => {}
    }
}
