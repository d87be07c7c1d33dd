//! Violations and their exact texts (decisions.md, "Validation messages"; D2).
//!
//! boon reports a tree of errors; the leaves become [`Violation`]s with the texts ERP clients
//! are written against, one per missing or unknown field, ordered as the record reads.

use super::formats;
use crate::tree::{Members, Ref, Tree};
use boon::{ErrorKind, InstanceToken, ValidationError};
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};

/// One step of a path into a record.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Step {
    /// A member of an object.
    Key(String),
    /// An element of an array.
    Index(usize),
}

/// One rule broken by one value (D2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Where in the record: the offending value, or the missing or unknown field.
    pub steps: Vec<Step>,
    /// The exact text of the decisions table.
    pub message: String,
}

impl Violation {
    /// A violation at `steps` with `message`.
    pub fn new(steps: Vec<Step>, message: impl Into<String>) -> Self {
        Self {
            steps,
            message: message.into(),
        }
    }

    /// The path as a JSON Pointer (RFC 6901), `""` for the record itself.
    pub fn pointer(&self) -> String {
        let mut out = String::new();
        for step in &self.steps {
            out.push('/');
            match step {
                Step::Key(k) => out.push_str(&k.replace('~', "~0").replace('/', "~1")),
                Step::Index(i) => out.push_str(&i.to_string()),
            }
        }
        out
    }
}

/// A string as it appears in a message: JSON text (quoted, escaped), cut to 100 characters.
pub fn render_str(s: &str) -> String {
    let cut: String = s.chars().take(100).collect();
    serde_json::to_string(&cut).unwrap_or_default()
}

/// Any value as it appears in a message: JSON text, cut to 100 characters. Only the start of
/// a large array or object is ever written out.
fn render_value(v: &Value) -> String {
    /// Takes bytes until it has enough, then refuses more, which stops the serializer.
    struct Head(Vec<u8>);
    impl std::io::Write for Head {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.0.len() >= 400 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            self.0.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    match v {
        Value::String(s) => render_str(s),
        other => {
            let mut head = Head(Vec::new());
            let _ = serde_json::to_writer(&mut head, other);
            String::from_utf8_lossy(&head.0).chars().take(100).collect()
        }
    }
}

/// The primitive type name of a value; an integral number is an `integer`.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if !n.as_str().contains(['.', 'e', 'E']) => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The value at `steps` in `root`.
pub(super) fn lookup<'a>(root: &'a Value, steps: &[Step]) -> Option<&'a Value> {
    steps.iter().try_fold(root, |v, step| match step {
        Step::Key(k) => v.get(k.as_str()),
        Step::Index(i) => v.get(*i),
    })
}

/// What [`from_boon`] needs besides the error: the record, its schema document (for texts boon
/// only has in converted form), and the paths whose numbers the number rules have judged.
pub struct Context<'a> {
    /// The record validated.
    pub record: &'a Value,
    /// The record's schema document.
    pub schema: &'a Value,
    /// Paths of numbers already reported by the number rules (D23): boon's own type verdict
    /// on them (made in binary floating point) is dropped.
    pub numbers_judged: &'a HashSet<&'a [Step]>,
}

/// The violations of a boon error tree, in the order boon found them.
pub fn from_boon(err: &ValidationError, cx: &Context<'_>, out: &mut Vec<Violation>) {
    if err.causes.is_empty() {
        leaf(err, cx, out);
    }
    for cause in &err.causes {
        from_boon(cause, cx, out);
    }
}

/// The subschema a leaf error is about.
fn subschema<'a>(schema: &'a Value, schema_url: &str) -> Option<&'a Value> {
    schema_url
        .split_once('#')
        .and_then(|(_, ptr)| schema.pointer(ptr))
}

/// The `pattern` as the schema writes it: boon reports the regex it compiled (`\d` becomes
/// `[0-9]`), while the message quotes the schema (`^\d{4}-\d{2}-\d{2}$`).
fn schema_pattern<'a>(schema: &'a Value, schema_url: &str, compiled: &'a str) -> &'a str {
    subschema(schema, schema_url)
        .and_then(|s| s.get("pattern"))
        .and_then(Value::as_str)
        .unwrap_or(compiled)
}

fn leaf(err: &ValidationError, cx: &Context<'_>, out: &mut Vec<Violation>) {
    let steps = steps_of(err);
    let value = lookup(cx.record, &steps).unwrap_or(&Value::Null);
    let with = |name: &str| {
        let mut s = steps.clone();
        s.push(Step::Key(name.to_string()));
        s
    };
    match &err.kind {
        ErrorKind::Required { want } => {
            for name in want {
                let message = format!("required key [{name}] not found");
                out.push(Violation::new(with(name), message));
            }
        }
        ErrorKind::AdditionalProperties { got } => {
            for name in got {
                let message = format!("extraneous key [{name}] is not permitted");
                out.push(Violation::new(with(name), message));
            }
        }
        // Numbers are judged exactly by `numbers.rs`, not by boon's f64 (D23).
        ErrorKind::Type { .. }
            if value.is_number() && cx.numbers_judged.contains(steps.as_slice()) => {}
        // Checked on the row, about its coding rows: point at them.
        ErrorKind::Format { want, err, .. } if *want == "coding-sum" => {
            out.push(Violation::new(with("coding"), err.to_string()));
        }
        ErrorKind::Enum { .. } => {
            // boon stops at a failed enum; a value that is also too long breaks two rules (D2).
            let max = subschema(cx.schema, err.schema_url)
                .and_then(|s| s.get("maxLength"))
                .and_then(Value::as_u64);
            if let (Some(max), Value::String(s)) = (max, value) {
                let len = s.chars().count() as u64;
                if len > max {
                    let message = format!(
                        "string {} is too long (length: {len}, maximum allowed: {max})",
                        render_value(value)
                    );
                    out.push(Violation::new(steps.clone(), message));
                }
            }
            out.push(Violation::new(
                steps.clone(),
                message(err, value, &steps, cx.schema),
            ));
        }
        _ => out.push(Violation::new(
            steps.clone(),
            message(err, value, &steps, cx.schema),
        )),
    }
}

/// Where in the record a boon error points.
fn steps_of(err: &ValidationError) -> Vec<Step> {
    err.instance_location
        .tokens
        .iter()
        .map(|t| match t {
            InstanceToken::Prop(p) => Step::Key(p.to_string()),
            InstanceToken::Item(i) => Step::Index(*i),
        })
        .collect()
}

/// The decisions table's text for one boon error about `value` at `steps` (D2).
fn message(err: &ValidationError, value: &Value, steps: &[Step], schema: &Value) -> String {
    let shown = || render_value(value);
    match &err.kind {
        ErrorKind::Type { want, .. } => {
            let allowed: Vec<String> = want.iter().map(|t| t.to_string()).collect();
            format!(
                "instance type ({}) does not match any allowed primitive type (allowed: {})",
                type_name(value),
                serde_json::to_string(&allowed).unwrap_or_default()
            )
        }
        ErrorKind::Enum { want } => format!(
            "instance value ({}) not found in enum (possible values: {})",
            shown(),
            Value::Array(want.to_vec())
        ),
        ErrorKind::Pattern { want, .. } => format!(
            "string {} does not match pattern \"{}\"",
            shown(),
            schema_pattern(schema, err.schema_url, want)
        ),
        // The decisions table words an empty description_en its own way.
        ErrorKind::MinLength { got: 0, .. }
            if steps.last() == Some(&Step::Key("description_en".into())) =>
        {
            "description_en is required.".to_string()
        }
        ErrorKind::MinLength { got, want } => format!(
            "string {} is too short (length: {got}, required minimum: {want})",
            shown()
        ),
        ErrorKind::MaxLength { got, want } => format!(
            "string {} is too long (length: {got}, maximum allowed: {want})",
            shown()
        ),
        ErrorKind::MinItems { got, want } => format!(
            "array is too short: must have at least {want} elements but instance has {got} elements"
        ),
        ErrorKind::Format { want, err, .. } if formats::is_ours(want) => err.to_string(),
        ErrorKind::Format { want, .. } => format!("string {} is not a valid {want}", shown()),
        other => other.to_string(),
    }
}

/// Strings XML 1.0 cannot carry: control characters other than tab, LF and CR, and the
/// non-characters U+FFFE and U+FFFF. quick-xml would write them as they are and make the
/// document invalid, so they are refused here.
pub fn xml_unsafe<T: Tree>(record: &T, out: &mut Vec<Violation>) {
    let mut path: Vec<PathStep<'_>> = Vec::new();
    unsafe_chars(record, &mut path, &mut |at, message| {
        let steps = at
            .iter()
            .map(|s| match s {
                PathStep::Key(k) => Step::Key((*k).to_string()),
                PathStep::Index(i) => Step::Index(*i),
            })
            .collect();
        out.push(Violation::new(steps, message));
    });
}

/// A step of a path borrowed from the record; owned [`Step`]s are made only for a violation.
#[derive(Clone, Copy)]
enum PathStep<'r> {
    Key(&'r str),
    Index(usize),
}

fn unsafe_chars<'r, T: Tree + 'r>(
    v: &'r T,
    path: &mut Vec<PathStep<'r>>,
    found: &mut impl FnMut(&[PathStep<'r>], String),
) {
    match v.get_ref() {
        Ref::String(s) => {
            let bad = s.chars().find(|&c| {
                (c < '\u{20}' && !matches!(c, '\t' | '\n' | '\r'))
                    || matches!(c, '\u{FFFE}' | '\u{FFFF}')
            });
            if let Some(c) = bad {
                let message = format!(
                    "string {} contains a character that XML cannot carry (U+{:04X})",
                    render_str(s),
                    c as u32
                );
                found(path, message);
            }
        }
        Ref::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                path.push(PathStep::Index(i));
                unsafe_chars(item, path, found);
                path.pop();
            }
        }
        Ref::Object(map) => map.each(|k, v| {
            path.push(PathStep::Key(k));
            unsafe_chars(v, path, found);
            path.pop();
        }),
        _ => {}
    }
}

/// Orders violations as the record reads (D2): by the position of each step in the document.
/// A missing field sorts after the members its object has; a rule about a whole object or
/// array (a coding sum, too few rows) after its contents. The sort is stable, so violations
/// at one place keep the order they were found in.
pub fn sort_in_document_order(record: &Value, violations: &mut [Violation]) {
    if violations.len() < 2 {
        return;
    }
    let mut positions = Positions::default();
    violations.sort_by_cached_key(|v| document_position(record, &v.steps, &mut positions));
}

/// Member positions of large objects, indexed once: a record with a million unknown fields
/// must not cost a million scans of a million members.
#[derive(Default)]
struct Positions<'a> {
    by_object: HashMap<*const Map<String, Value>, HashMap<&'a str, usize>>,
}

impl<'a> Positions<'a> {
    fn of(&mut self, map: &'a Map<String, Value>, key: &str) -> Option<usize> {
        if map.len() <= 16 {
            return map.keys().position(|k| k == key);
        }
        self.by_object
            .entry(map as *const _)
            .or_insert_with(|| {
                map.keys()
                    .enumerate()
                    .map(|(i, k)| (k.as_str(), i))
                    .collect()
            })
            .get(key)
            .copied()
    }
}

fn document_position<'a>(
    record: &'a Value,
    steps: &[Step],
    positions: &mut Positions<'a>,
) -> Vec<usize> {
    let mut key = Vec::with_capacity(steps.len() + 1);
    let mut current = Some(record);
    for step in steps {
        let (pos, next) = match (current, step) {
            (Some(Value::Object(map)), Step::Key(k)) => match positions.of(map, k) {
                Some(p) => (p, map.get(k)),
                None => (map.len(), None),
            },
            (Some(Value::Array(items)), Step::Index(i)) => (*i, items.get(*i)),
            _ => (usize::MAX, None),
        };
        key.push(pos);
        current = next;
    }
    if matches!(current, Some(Value::Object(_) | Value::Array(_))) {
        key.push(usize::MAX);
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strings_are_shown_as_json_text_cut_to_100_characters() {
        assert_eq!(render_str("a\"b"), r#""a\"b""#);
        assert_eq!(render_str("\u{7}"), r#""\u0007""#);
        let long = "x".repeat(150);
        assert_eq!(render_str(&long), format!("\"{}\"", "x".repeat(100)));
    }

    #[test]
    fn pointer_escapes_per_rfc6901() {
        let v = Violation::new(vec![Step::Key("a/b~c".into()), Step::Index(2)], "m");
        assert_eq!(v.pointer(), "/a~1b~0c/2");
    }

    #[test]
    fn document_order_puts_missing_fields_after_present_ones() {
        let record = json!({"b": 1, "rows": [{"x": 1}], "a": 2});
        let mut v = vec![
            Violation::new(vec![Step::Key("missing".into())], "1"),
            Violation::new(vec![Step::Key("a".into())], "2"),
            Violation::new(vec![Step::Key("rows".into())], "3"),
            Violation::new(
                vec![
                    Step::Key("rows".into()),
                    Step::Index(0),
                    Step::Key("x".into()),
                ],
                "4",
            ),
            Violation::new(vec![Step::Key("b".into())], "5"),
        ];
        sort_in_document_order(&record, &mut v);
        let order: Vec<&str> = v.iter().map(|v| v.message.as_str()).collect();
        assert_eq!(order, ["5", "4", "3", "2", "1"]);
    }

    #[test]
    fn control_characters_are_found_with_their_code_point() {
        let mut out = vec![];
        xml_unsafe(&json!({"a": "ok\tfine", "b": ["x\u{7}y"]}), &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].pointer(), "/b/0");
        assert_eq!(
            out[0].message,
            r#"string "x\u0007y" contains a character that XML cannot carry (U+0007)"#
        );
    }
}
