//! What a record must be to be valid, compiled from its interface's JSON Schema (D14) for the
//! fast path: the keywords our schemas use, with boon's meaning of each. A schema that uses
//! any other keyword (an override may) compiles to no plan, and its interface is checked by
//! the reference path alone.
//!
//! A plan only ever says "valid" or "ask the reference path": it never words a violation, so
//! every refusal is answered by boon and the message code as before.

use super::parse::{Node, Object};
use crate::validate::formats;
use serde_json::{Map, Value};

/// The draft this plan reads schemas as (the one boon compiles them with, D14).
const DRAFT_07: [&str; 2] = [
    "http://json-schema.org/draft-07/schema#",
    "http://json-schema.org/draft-07/schema",
];

/// Keywords that change nothing about validity.
const ANNOTATIONS: [&str; 9] = [
    "$schema",
    "$id",
    "$comment",
    "title",
    "description",
    "examples",
    "default",
    "x-fallback",
    "x-xml-item",
];

/// A record's rules.
#[derive(Debug)]
pub struct Plan {
    record: Obj,
}

#[derive(Debug)]
struct Rule {
    ty: Ty,
    /// A format of ours (`formats::NAMES`), run on the value whatever its type, as boon does.
    format: Option<&'static str>,
}

#[derive(Debug)]
enum Ty {
    String {
        min: Option<usize>,
        max: Option<usize>,
        one_of: Option<Vec<String>>,
        pattern: Option<Pattern>,
    },
    Integer,
    Number,
    Boolean,
    Null,
    Object(Obj),
    Array {
        min_items: Option<usize>,
        items: Option<Box<Rule>>,
    },
}

/// A closed object (`additionalProperties: false`): its properties and which are required.
#[derive(Debug)]
struct Obj {
    fields: Vec<(String, Rule)>,
    /// Bit `i` set: `fields[i]` is required.
    required: u64,
}

/// The `pattern`s the plan can judge as boon's regex does (ECMA `\d` is `[0-9]`); any other
/// is judged by the reference path.
#[derive(Debug, PartialEq)]
enum Pattern {
    /// `^\d{4}-\d{2}-\d{2}$`.
    Date,
    /// `^([A-Z]{n})?$`: empty, or n ASCII capitals.
    OptionalCapitals(usize),
    /// Any other: a value here is left to the reference path.
    Other,
}

impl Plan {
    /// The plan of a record schema, or `None` when the schema uses what a plan cannot say.
    pub fn compile(schema: &Value) -> Option<Plan> {
        match schema.get("$schema") {
            None => {}
            Some(Value::String(s)) if DRAFT_07.contains(&s.as_str()) => {}
            Some(_) => return None,
        }
        let rule = rule(schema)?;
        match rule {
            Rule {
                ty: Ty::Object(record),
                format: None,
            } => Some(Plan { record }),
            _ => None,
        }
    }

    /// Whether `record` is valid by every keyword of the schema. `false` means "not shown
    /// valid here", never "invalid": the caller asks the reference path.
    pub fn accepts(&self, record: &Node<'_>) -> bool {
        match record {
            Node::Object(o) => object(&self.record, o),
            _ => false,
        }
    }
}

fn int(v: &Value) -> Option<usize> {
    v.as_u64().and_then(|n| usize::try_from(n).ok())
}

/// One schema node, or `None` when it has a keyword or a form the plan does not take.
fn rule(node: &Value) -> Option<Rule> {
    let Value::Object(map) = node else {
        return None;
    };
    let mut keywords = map
        .keys()
        .map(String::as_str)
        .filter(|k| !ANNOTATIONS.contains(k));
    let format = match map.get("format") {
        None => None,
        Some(Value::String(f)) => Some(*formats::NAMES.iter().find(|n| **n == f)?),
        Some(_) => return None,
    };
    let ty = match map.get("type").and_then(Value::as_str)? {
        "string" => {
            let allowed = [
                "type",
                "format",
                "minLength",
                "maxLength",
                "enum",
                "pattern",
            ];
            if !keywords.all(|k| allowed.contains(&k)) {
                return None;
            }
            string(map)?
        }
        "object" => {
            let allowed = [
                "type",
                "format",
                "properties",
                "required",
                "additionalProperties",
            ];
            if !keywords.all(|k| allowed.contains(&k)) {
                return None;
            }
            Ty::Object(obj(map)?)
        }
        "array" => {
            if !keywords.all(|k| ["type", "format", "items", "minItems"].contains(&k)) {
                return None;
            }
            let min_items = match map.get("minItems") {
                Some(n) => Some(int(n)?),
                None => None,
            };
            let items = match map.get("items") {
                Some(i) => Some(Box::new(rule(i)?)),
                None => None,
            };
            Ty::Array { min_items, items }
        }
        simple => {
            if !keywords.all(|k| ["type", "format"].contains(&k)) {
                return None;
            }
            match simple {
                "integer" => Ty::Integer,
                "number" => Ty::Number,
                "boolean" => Ty::Boolean,
                "null" => Ty::Null,
                _ => return None,
            }
        }
    };
    Some(Rule { ty, format })
}

fn string(map: &Map<String, Value>) -> Option<Ty> {
    let opt_int = |k: &str| match map.get(k) {
        Some(v) => int(v).map(Some),
        None => Some(None),
    };
    let one_of = match map.get("enum") {
        None => None,
        Some(Value::Array(values)) => Some(
            values
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()?,
        ),
        Some(_) => return None,
    };
    let pattern = match map.get("pattern") {
        None => None,
        Some(Value::String(p)) => Some(pattern(p)),
        Some(_) => return None,
    };
    Some(Ty::String {
        min: opt_int("minLength")?,
        max: opt_int("maxLength")?,
        one_of,
        pattern,
    })
}

fn pattern(p: &str) -> Pattern {
    if p == r"^\d{4}-\d{2}-\d{2}$" {
        return Pattern::Date;
    }
    p.strip_prefix("^([A-Z]{")
        .and_then(|rest| rest.strip_suffix("})?$"))
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|n| (1..=64).contains(n))
        .map_or(Pattern::Other, Pattern::OptionalCapitals)
}

fn obj(map: &Map<String, Value>) -> Option<Obj> {
    if map.get("additionalProperties") != Some(&Value::Bool(false)) {
        return None;
    }
    let fields: Vec<(String, Rule)> = match map.get("properties") {
        None => Vec::new(),
        Some(Value::Object(props)) => props
            .iter()
            .map(|(name, node)| Some((name.clone(), rule(node)?)))
            .collect::<Option<_>>()?,
        Some(_) => return None,
    };
    if fields.len() > 64 {
        return None;
    }
    let mut required = 0u64;
    if let Some(names) = map.get("required") {
        for name in names.as_array()? {
            // A required name the object does not allow: no record can be valid.
            let i = fields
                .iter()
                .position(|(f, _)| Some(f.as_str()) == name.as_str())?;
            required |= 1 << i;
        }
    }
    Some(Obj { fields, required })
}

fn object(o: &Obj, members: &Object<'_>) -> bool {
    let mut seen = 0u64;
    for (name, v) in members.members() {
        // An unknown member, or one given twice (D24): the reference path's to word.
        let Some(i) = o.fields.iter().position(|(f, _)| f == name) else {
            return false;
        };
        let bit = 1u64 << i;
        if seen & bit != 0 || !valid(&o.fields[i].1, v) {
            return false;
        }
        seen |= bit;
    }
    seen & o.required == o.required
}

fn valid(rule: &Rule, v: &Node<'_>) -> bool {
    let typed = match (&rule.ty, v) {
        (
            Ty::String {
                min,
                max,
                one_of,
                pattern,
            },
            Node::String(s),
        ) => {
            let len = if s.is_ascii() {
                s.len()
            } else {
                s.chars().count()
            };
            min.is_none_or(|m| len >= m)
                && max.is_none_or(|m| len <= m)
                && one_of.as_ref().is_none_or(|e| e.iter().any(|x| x == s))
                && pattern.as_ref().is_none_or(|p| matches(p, s))
        }
        // The reader never yields an exponent; a fraction, even `.0`, is the reference
        // path's to judge.
        (Ty::Integer, Node::Number(n)) => !n.contains('.'),
        (Ty::Number, Node::Number(_)) | (Ty::Boolean, Node::Bool(_)) | (Ty::Null, Node::Null) => {
            true
        }
        (Ty::Object(o), Node::Object(members)) => object(o, members),
        (Ty::Array { min_items, items }, Node::Array(values)) => {
            min_items.is_none_or(|m| values.len() >= m)
                && items
                    .as_ref()
                    .is_none_or(|r| values.iter().all(|x| valid(r, x)))
        }
        _ => false,
    };
    typed && rule.format.is_none_or(|f| formats::check(f, v).is_ok())
}

fn matches(p: &Pattern, s: &str) -> bool {
    let b = s.as_bytes();
    match p {
        Pattern::Date => {
            b.len() == 10
                && b.iter().enumerate().all(|(i, c)| match i {
                    4 | 7 => *c == b'-',
                    _ => c.is_ascii_digit(),
                })
        }
        Pattern::OptionalCapitals(n) => {
            b.is_empty() || (b.len() == *n && b.iter().all(u8::is_ascii_uppercase))
        }
        Pattern::Other => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::fast::parse::parse;
    use serde_json::json;

    fn plan() -> Plan {
        Plan::compile(&json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "additionalProperties": false,
            "required": ["code"],
            "properties": {
                "code": {"type": "string", "minLength": 1, "maxLength": 3},
                "kind": {"type": "string", "enum": ["A", "B"]},
                "day": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$", "format": "date"},
                "cur": {"type": "string", "pattern": "^([A-Z]{3})?$"},
                "n": {"type": "integer"},
                "rows": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "additionalProperties": false,
                    "properties": {"x": {"type": "number", "format": "money"}}
                }}
            }
        }))
        .unwrap()
    }

    fn accepts(text: &str) -> bool {
        plan().accepts(&parse(text.as_bytes()).unwrap())
    }

    #[test]
    fn valid_records_are_accepted() {
        assert!(accepts(r#"{"code":"ä€x"}"#));
        assert!(accepts(
            r#"{"code":"A","kind":"B","day":"2024-02-29","cur":"","n":-5,"rows":[{"x":1.5},{}]}"#
        ));
        assert!(accepts(r#"{"code":"A","cur":"EUR"}"#));
    }

    #[test]
    fn anything_doubtful_is_left_to_the_reference_path() {
        for text in [
            r#"{}"#,
            r#"{"code":""}"#,
            r#"{"code":"ABCD"}"#,
            r#"{"code":"A","kind":"C"}"#,
            r#"{"code":"A","day":"2024-02-30"}"#,
            r#"{"code":"A","day":"2024-2-3"}"#,
            r#"{"code":"A","cur":"EU"}"#,
            r#"{"code":"A","n":1.0}"#,
            r#"{"code":"A","n":"1"}"#,
            r#"{"code":"A","rows":[]}"#,
            r#"{"code":"A","rows":[{"y":1}]}"#,
            r#"{"code":"A","other":1}"#,
            r#"{"code":"A","code":"B"}"#,
            r#"{"code":null}"#,
            r#"["code"]"#,
        ] {
            assert!(!accepts(text), "{text}");
        }
    }

    #[test]
    fn schemas_with_other_keywords_have_no_plan() {
        for schema in [
            json!({"type": "object", "properties": {}}),
            json!({"type": "object", "additionalProperties": false, "minProperties": 1}),
            json!({"type": "object", "additionalProperties": false,
                   "properties": {"a": {"type": "integer", "maximum": 3}}}),
            json!({"type": "object", "additionalProperties": false,
                   "properties": {"a": {"type": "string", "format": "email"}}}),
            json!({"type": "object", "additionalProperties": false,
                   "properties": {"a": {"$ref": "#/definitions/a"}}}),
            json!({"type": "object", "additionalProperties": false,
                   "properties": {"a": {"type": ["string", "null"]}}}),
            json!({"$schema": "https://json-schema.org/draft/2020-12/schema",
                   "type": "object", "additionalProperties": false}),
            json!({"type": "object", "additionalProperties": false, "required": ["x"]}),
        ] {
            assert!(Plan::compile(&schema).is_none(), "{schema}");
        }
        assert_eq!(pattern("^[A-Z]+$"), Pattern::Other);
        assert_eq!(pattern("^([A-Z]{2})?$"), Pattern::OptionalCapitals(2));
    }

    #[test]
    fn every_built_in_schema_has_a_plan() {
        for iface in &crate::interfaces::INTERFACES {
            let text = crate::interfaces::builtin_schema(iface.schema).unwrap();
            let schema: Value = serde_json::from_str(text).unwrap();
            assert!(Plan::compile(&schema).is_some(), "{}", iface.schema);
        }
    }
}
