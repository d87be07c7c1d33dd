//! JSON as a tree of text: keys may repeat (D24 needs bodies serde_json's `Value` cannot hold)
//! and numbers are kept exactly as written (D23 needs `1E+9223372036854775807` on the wire).

use std::fmt::Write;

#[derive(Clone, Debug, PartialEq)]
pub enum J {
    Null,
    Bool(bool),
    /// A number's text, sent as it is.
    Num(String),
    Str(String),
    Arr(Vec<J>),
    /// Members in order; a key may appear twice.
    Obj(Vec<(String, J)>),
}

/// One step into a record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// How a body is written: the same value must read the same whichever is chosen.
#[derive(Clone, Copy, Debug, Default)]
pub struct Style {
    /// Newlines and indentation between tokens.
    pub pretty: bool,
    /// Every non-ASCII character of strings and keys as `\uXXXX` (astral ones as surrogate
    /// pairs).
    pub escape_non_ascii: bool,
}

impl J {
    pub fn str(s: &str) -> J {
        J::Str(s.to_string())
    }

    /// The JSON type name the service reports for this value (decisions.md, "wrong JSON type").
    pub fn type_name(&self) -> &'static str {
        match self {
            J::Null => "null",
            J::Bool(_) => "boolean",
            J::Num(t) if t.contains(['.', 'e', 'E']) => "number",
            J::Num(_) => "integer",
            J::Str(_) => "string",
            J::Arr(_) => "array",
            J::Obj(_) => "object",
        }
    }

    pub fn get(&self, key: &str) -> Option<&J> {
        match self {
            J::Obj(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn at(&self, path: &[Seg]) -> Option<&J> {
        path.iter().try_fold(self, |v, seg| match (v, seg) {
            (J::Obj(_), Seg::Key(k)) => v.get(k),
            (J::Arr(items), Seg::Index(i)) => items.get(*i),
            _ => None,
        })
    }

    pub fn at_mut(&mut self, path: &[Seg]) -> Option<&mut J> {
        path.iter().try_fold(self, |v, seg| match (v, seg) {
            (J::Obj(m), Seg::Key(k)) => m.iter_mut().find(|(n, _)| n == k).map(|(_, v)| v),
            (J::Arr(items), Seg::Index(i)) => items.get_mut(*i),
            _ => None,
        })
    }

    /// Sets member `key` of an object (replacing its first occurrence, or appending it).
    pub fn set(&mut self, key: &str, value: J) {
        if let J::Obj(m) = self {
            match m.iter_mut().find(|(k, _)| k == key) {
                Some((_, v)) => *v = value,
                None => m.push((key.to_string(), value)),
            }
        }
    }

    /// Removes the first occurrence of member `key`.
    pub fn remove(&mut self, key: &str) -> Option<J> {
        match self {
            J::Obj(m) => {
                let i = m.iter().position(|(k, _)| k == key)?;
                Some(m.remove(i).1)
            }
            _ => None,
        }
    }

    /// Whether any object in the value repeats a key.
    pub fn has_duplicate_keys(&self) -> bool {
        match self {
            J::Obj(m) => {
                let mut seen = std::collections::HashSet::new();
                m.iter()
                    .any(|(k, v)| !seen.insert(k) || v.has_duplicate_keys())
            }
            J::Arr(items) => items.iter().any(J::has_duplicate_keys),
            _ => false,
        }
    }

    pub fn text(&self, style: Style) -> String {
        let mut out = String::new();
        self.write(&mut out, style, 0);
        out
    }

    fn write(&self, out: &mut String, style: Style, depth: usize) {
        let newline = |out: &mut String, depth: usize| {
            if style.pretty {
                out.push('\n');
                out.push_str(&"  ".repeat(depth));
            }
        };
        match self {
            J::Null => out.push_str("null"),
            J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            J::Num(t) => out.push_str(t),
            J::Str(s) => string(out, s, style),
            J::Arr(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    newline(out, depth + 1);
                    v.write(out, style, depth + 1);
                }
                if !items.is_empty() {
                    newline(out, depth);
                }
                out.push(']');
            }
            J::Obj(m) => {
                out.push('{');
                for (i, (k, v)) in m.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    newline(out, depth + 1);
                    string(out, k, style);
                    out.push_str(if style.pretty { ": " } else { ":" });
                    v.write(out, style, depth + 1);
                }
                if !m.is_empty() {
                    newline(out, depth);
                }
                out.push('}');
            }
        }
    }
}

fn string(out: &mut String, s: &str, style: Style) {
    if !style.escape_non_ascii {
        out.push_str(&serde_json::to_string(s).unwrap());
        return;
    }
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{u:04x}");
                }
            }
        }
    }
    out.push('"');
}

/// A path as a JSON Pointer (RFC 6901), as the service writes `path`.
pub fn pointer(path: &[Seg]) -> String {
    path.iter()
        .map(|s| match s {
            Seg::Key(k) => format!("/{}", k.replace('~', "~0").replace('/', "~1")),
            Seg::Index(i) => format!("/{i}"),
        })
        .collect()
}

/// `items` wrapped in `{"objects":{"object":{"record":[...]}}}`.
pub fn envelope(records: Vec<J>) -> J {
    let obj = |k: &str, v: J| J::Obj(vec![(k.to_string(), v)]);
    obj("objects", obj("object", obj("record", J::Arr(records))))
}

/// The value at a JSON Pointer inside a record.
pub fn lookup<'a>(record: &'a J, pointer: &str) -> Option<&'a J> {
    if pointer.is_empty() {
        return Some(record);
    }
    pointer[1..].split('/').try_fold(record, |v, seg| {
        let seg = seg.replace("~1", "/").replace("~0", "~");
        match v {
            J::Obj(_) => v.get(&seg),
            J::Arr(items) => seg.parse::<usize>().ok().and_then(|i| items.get(i)),
            _ => None,
        }
    })
}

/// Where a path falls in the record as written: the member or element position at each step,
/// a missing member after the present ones, and an object or array after its contents.
pub fn position(record: &J, pointer: &str) -> Vec<usize> {
    let mut out = vec![];
    let mut at = Some(record);
    let segs = pointer
        .split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~"));
    for seg in segs {
        let (pos, next) = match at {
            Some(J::Obj(m)) => match m.iter().position(|(k, _)| *k == seg) {
                Some(p) => (p, Some(&m[p].1)),
                None => (m.len(), None),
            },
            Some(J::Arr(items)) => match seg.parse::<usize>() {
                Ok(i) => (i, items.get(i)),
                Err(_) => (usize::MAX, None),
            },
            _ => (usize::MAX, None),
        };
        out.push(pos);
        at = next;
    }
    if matches!(at, Some(J::Obj(_) | J::Arr(_))) {
        out.push(usize::MAX);
    }
    out
}
