//! A request body read into JSON values, with the checks serde_json's own `Value` cannot make:
//! UTF-8 with the offset of the first bad byte and a skipped byte order mark (D25), at most
//! [`MAX_DEPTH`] levels of nesting (D27), and duplicate keys found instead of silently
//! replaced (D24). What reading a body will cost is estimated beforehand by
//! [`super::cost`].
//!
//! The reader is a `DeserializeSeed` over serde_json's parser: every value knows where it is
//! through a chain of frames on the stack (parent, key or index), so nothing is allocated to
//! track the path and a duplicate's JSON Pointer is built only when one is found.

use super::messages::Step;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::fmt;

/// Deepest nesting of arrays and objects accepted in a body (D27); the envelope takes four.
pub const MAX_DEPTH: usize = 64;

/// Duplicates whose path is kept; beyond these only their count is (D2 shows at most 1,000
/// entries per response, so no later one can be shown).
const SHOWN_DUPLICATES: usize = 1001;

/// How serde_json (with `arbitrary_precision`) hands a number to a visitor: a one-entry map
/// with this key and the number's text as value.
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

/// Why a body could not be read as JSON at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// Not UTF-8: the offset of the first bad byte in the body as received (D25).
    NotUtf8(usize),
    /// Not JSON: serde_json's message with line and column.
    NotJson(String),
    /// Nested deeper than [`MAX_DEPTH`]: where.
    TooDeep(String),
    /// A key repeated outside any record: its path from the body's root and the key (D24).
    EnvelopeDuplicate(Vec<Step>),
}

/// A duplicate key inside a record (D24).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duplicate {
    /// The record's position in `objects.object.record`.
    pub record: usize,
    /// The repeated key's path inside the record; `None` past the first 1,001 duplicates of a
    /// body, which are only counted.
    pub steps: Option<Vec<Step>>,
}

/// A parsed body.
#[derive(Debug)]
pub struct Document {
    /// The body's value.
    pub root: Value,
    /// Duplicate keys inside records, in document order.
    pub duplicates: Vec<Duplicate>,
}

/// Reads a body: skips a UTF-8 byte order mark, checks UTF-8, parses with the nesting limit
/// and duplicate-key detection.
pub fn read(body: &[u8]) -> Result<Document, ReadError> {
    const BOM: &[u8] = b"\xEF\xBB\xBF";
    let skipped = if body.starts_with(BOM) { BOM.len() } else { 0 };
    let text = std::str::from_utf8(&body[skipped..])
        .map_err(|e| ReadError::NotUtf8(skipped + e.valid_up_to()))?;
    let mut ctx = Ctx::default();
    let mut de = serde_json::Deserializer::from_str(text);
    let root = ValueSeed {
        ctx: &mut ctx,
        at: Frame::ROOT,
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v));
    match (root, ctx.stop) {
        (_, Some(Stop::Envelope(steps))) => Err(ReadError::EnvelopeDuplicate(steps)),
        (Err(e), Some(Stop::TooDeep)) => Err(ReadError::TooDeep(e.to_string())),
        (Err(e), _) => Err(ReadError::NotJson(e.to_string())),
        (Ok(root), _) => Ok(Document {
            root,
            duplicates: ctx.duplicates,
        }),
    }
}

enum Stop {
    TooDeep,
    Envelope(Vec<Step>),
}

#[derive(Default)]
struct Ctx {
    duplicates: Vec<Duplicate>,
    stop: Option<Stop>,
}

/// Where a value sits: its parent's frame and the key or index leading to it.
#[derive(Clone, Copy)]
struct Frame<'p> {
    parent: Option<&'p Frame<'p>>,
    seg: Seg<'p>,
    /// Nesting level of this value if it is an array or object (the root is 1).
    depth: usize,
}

#[derive(Clone, Copy)]
enum Seg<'p> {
    Root,
    Key(&'p str),
    Index(usize),
}

impl<'p> Frame<'p> {
    const ROOT: Frame<'static> = Frame {
        parent: None,
        seg: Seg::Root,
        depth: 1,
    };

    fn child(&'p self, seg: Seg<'p>) -> Frame<'p> {
        Frame {
            parent: Some(self),
            seg,
            depth: self.depth + 1,
        }
    }

    /// The path from the root to this value, then `last`.
    fn steps(&self, last: &str) -> Vec<Step> {
        let mut out = vec![Step::Key(last.to_string())];
        let mut at = Some(self);
        while let Some(f) = at {
            match f.seg {
                Seg::Root => {}
                Seg::Key(k) => out.push(Step::Key(k.to_string())),
                Seg::Index(i) => out.push(Step::Index(i)),
            }
            at = f.parent;
        }
        out.reverse();
        out
    }

    /// The record this value is in (`objects.object.record[i]`), if any: the frame at depth 5
    /// reached by that path.
    fn record(&self) -> Option<usize> {
        let mut chain = [Seg::Root; 5];
        let mut at = Some(self);
        while let Some(f) = at {
            if f.depth <= 5 {
                chain[f.depth - 1] = f.seg;
            }
            at = f.parent;
        }
        match chain {
            [
                Seg::Root,
                Seg::Key("objects"),
                Seg::Key("object"),
                Seg::Key("record"),
                Seg::Index(i),
            ] if self.depth >= 5 => Some(i),
            _ => None,
        }
    }
}

struct ValueSeed<'c, 'p> {
    ctx: &'c mut Ctx,
    at: Frame<'p>,
}

impl ValueSeed<'_, '_> {
    fn enter<E: de::Error>(&mut self) -> Result<(), E> {
        if self.at.depth > MAX_DEPTH {
            self.ctx.stop = Some(Stop::TooDeep);
            return Err(E::custom(format!(
                "request body is nested more than {MAX_DEPTH} levels deep"
            )));
        }
        Ok(())
    }

    fn duplicate<E: de::Error>(&mut self, key: &str) -> Result<(), E> {
        match self.at.record() {
            Some(record) => {
                let shown = self.ctx.duplicates.len() < SHOWN_DUPLICATES;
                let steps = shown.then(|| self.at.steps(key).split_off(4));
                self.ctx.duplicates.push(Duplicate { record, steps });
                Ok(())
            }
            None => {
                self.ctx.stop = Some(Stop::Envelope(self.at.steps(key)));
                Err(E::custom("duplicate key"))
            }
        }
    }
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_, '_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_, '_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<Value, A::Error> {
        self.enter()?;
        let mut items = Vec::new();
        loop {
            let at = self.at.child(Seg::Index(items.len()));
            let seed = ValueSeed {
                ctx: &mut *self.ctx,
                at,
            };
            match seq.next_element_seed(seed)? {
                Some(v) => items.push(v),
                None => {
                    // Arrays grow by doubling from four: a row of one, nested deep, would
                    // otherwise hold four times its size (D27's bound is per item).
                    items.shrink_to_fit();
                    return Ok(Value::Array(items));
                }
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Value, A::Error> {
        let Some(mut key) = map.next_key::<String>()? else {
            self.enter()?;
            return Ok(Value::Object(Map::new()));
        };
        if key == NUMBER_TOKEN {
            let text: String = map.next_value()?;
            return text
                .parse::<Number>()
                .map(Value::Number)
                .map_err(de::Error::custom);
        }
        self.enter()?;
        let mut out = Map::new();
        loop {
            let value = {
                let at = self.at.child(Seg::Key(&key));
                map.next_value_seed(ValueSeed {
                    ctx: &mut *self.ctx,
                    at,
                })?
            };
            match out.entry(key) {
                serde_json::map::Entry::Vacant(slot) => {
                    slot.insert(value);
                }
                serde_json::map::Entry::Occupied(slot) => {
                    let key = slot.key().clone();
                    self.duplicate(&key)?;
                }
            }
            match map.next_key::<String>()? {
                Some(k) => key = k,
                None => return Ok(Value::Object(out)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dups(body: &str) -> Vec<(usize, Option<String>)> {
        let doc = read(body.as_bytes()).unwrap();
        doc.duplicates
            .iter()
            .map(|d| {
                let p = d
                    .steps
                    .as_ref()
                    .map(|s| super::super::messages::Violation::new(s.clone(), "").pointer());
                (d.record, p)
            })
            .collect()
    }

    #[test]
    fn duplicates_inside_records_are_found_with_their_path() {
        let body = r#"{"objects":{"object":{"record":[
            {"code":"1","code":"2"},
            {"rows":[{"a":1},{"a":1,"b":2,"a":3}]},
            {"x":{"y":{"z":1,"z":1}}}
        ]}}}"#;
        assert_eq!(
            dups(body),
            vec![
                (0, Some("/code".into())),
                (1, Some("/rows/1/a".into())),
                (2, Some("/x/y/z".into()))
            ]
        );
    }

    #[test]
    fn duplicates_in_the_envelope_stop_the_read() {
        for (body, path) in [
            (
                r#"{"objects":{"object":{"record":[]},"object":{}}}"#,
                "/objects/object",
            ),
            (r#"{"objects":{},"objects":{}}"#, "/objects"),
            (
                r#"{"objects":{"object":{"record":[],"record":[]}}}"#,
                "/objects/object/record",
            ),
        ] {
            match read(body.as_bytes()) {
                Err(ReadError::EnvelopeDuplicate(steps)) => assert_eq!(
                    super::super::messages::Violation::new(steps, "").pointer(),
                    path
                ),
                other => panic!("{body}: {other:?}"),
            }
        }
    }

    #[test]
    fn escaped_keys_are_compared_decoded() {
        let body = r#"{"objects":{"object":{"record":[{"code":"1","c\u006fde":"2"}]}}}"#;
        assert_eq!(dups(body), vec![(0, Some("/code".into()))]);
    }

    #[test]
    fn nesting_is_limited_to_64_levels() {
        let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(read(nest(64).as_bytes()).is_ok());
        match read(nest(65).as_bytes()) {
            Err(ReadError::TooDeep(m)) => {
                assert!(
                    m.starts_with(
                        "request body is nested more than 64 levels deep at line 1 column 6"
                    ),
                    "{m}"
                )
            }
            other => panic!("{other:?}"),
        }
        let objects = format!("{}1{}", r#"{"a":"#.repeat(65), "}".repeat(65));
        assert!(matches!(
            read(objects.as_bytes()),
            Err(ReadError::TooDeep(_))
        ));
    }

    #[test]
    fn encoding() {
        let v = read(b"\xEF\xBB\xBF{\"a\":1}").unwrap();
        assert_eq!(v.root, serde_json::json!({"a": 1}));
        assert_eq!(
            read(b"{\"a\":\"caf\xE9\"}").unwrap_err(),
            ReadError::NotUtf8(9)
        );
        assert_eq!(
            read(b"\xEF\xBB\xBF{\"a\":\"\xFF\"}").unwrap_err(),
            ReadError::NotUtf8(9)
        );
        assert!(matches!(read(b"{"), Err(ReadError::NotJson(m)) if m.contains("line 1 column 1")));
        assert!(matches!(read(b"{} x"), Err(ReadError::NotJson(_))));
    }

    #[test]
    fn numbers_keep_their_text() {
        let v = read(br#"[1.50, 1E2, -0, 12345678901234567890123]"#)
            .unwrap()
            .root;
        let texts: Vec<String> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_number().unwrap().as_str().to_string())
            .collect();
        assert_eq!(texts, ["1.50", "1e+2", "-0", "12345678901234567890123"]);
    }
}
