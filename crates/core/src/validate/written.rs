//! Numbers as the client wrote them, for the messages that show one (D23 addendum).
//!
//! serde_json with `arbitrary_precision` keeps a number's text, except its exponent: `1e400`
//! and `1E+400` both become `1e+400`. A message's `<v>` is the client's own text, so when a
//! number message shows a number with an exponent, its text is read again from the body.
//! Nothing is kept while parsing (a body of a million exponents would pay for it); the body is
//! walked only for the records whose messages need it, each record once.

use super::messages::{Step, Violation, lookup};
use super::numbers;
use serde_json::Value;
use std::borrow::Cow;
use std::cell::OnceCell;
use std::collections::{HashMap, HashSet};

/// A request body, read again for numbers as written.
pub struct AsWritten<'b> {
    text: &'b [u8],
    /// Where each record of `objects.object.record` starts and ends, found on first use.
    records: OnceCell<Vec<(usize, usize)>>,
}

impl<'b> AsWritten<'b> {
    /// `body` is the body the records were parsed from (a byte order mark is skipped, as the
    /// parser skipped it).
    pub fn new(body: &'b [u8]) -> Self {
        Self {
            text: body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body),
            records: OnceCell::new(),
        }
    }

    /// Rewrites the number messages among the first `shown` of `violations` of record `index`
    /// (parsed as `record`) to show each number as the client wrote it. Only messages a
    /// response can show are rewritten (at most 1,000, D2), so the work is bounded by the
    /// record's length.
    pub fn reword(&self, index: usize, record: &Value, violations: &mut [Violation], shown: usize) {
        let shown = shown.min(violations.len());
        let rewritten: Vec<(usize, &str)> = violations[..shown]
            .iter()
            .enumerate()
            .filter(|(_, v)| v.message.starts_with("number "))
            .filter_map(|(i, v)| match lookup(record, &v.steps) {
                Some(Value::Number(n)) if n.as_str().contains('e') => Some((i, n.as_str())),
                _ => None,
            })
            .collect();
        if rewritten.is_empty() {
            return;
        }
        let records = self
            .records
            .get_or_init(|| record_spans(self.text).unwrap_or_default());
        let Some(&(start, end)) = records.get(index) else {
            return;
        };
        let mut wanted = Wanted::default();
        for &(i, _) in &rewritten {
            wanted.add(&violations[i].steps);
        }
        let mut walk = Walk {
            b: &self.text[..end],
            at: start,
        };
        walk.collect(&mut Vec::new(), &mut wanted);
        let found: Vec<Option<&str>> = rewritten
            .iter()
            .map(|&(i, _)| wanted.found(&violations[i].steps))
            .collect();
        for (&(i, parsed), written) in rewritten.iter().zip(found) {
            if let Some(written) = written {
                numbers::reword(&mut violations[i].message, parsed, written);
            }
        }
    }
}

/// The paths whose numbers are wanted, every prefix of them, and the texts found there.
#[derive(Default)]
struct Wanted<'t> {
    paths: HashMap<Vec<Step>, Option<&'t [u8]>>,
    leads: HashSet<Vec<Step>>,
}

impl<'t> Wanted<'t> {
    fn add(&mut self, path: &[Step]) {
        self.paths.insert(path.to_vec(), None);
        for n in 0..path.len() {
            self.leads.insert(path[..n].to_vec());
        }
    }

    /// Whether a wanted path goes through `path`, or is it.
    fn through(&self, path: &[Step]) -> bool {
        self.leads.contains(path) || self.paths.contains_key(path)
    }

    /// Notes a number's text at `path` (the first one there, as the parser kept the first of
    /// duplicate keys).
    fn note(&mut self, path: &[Step], text: &'t [u8]) {
        if let Some(slot @ None) = self.paths.get_mut(path) {
            *slot = Some(text);
        }
    }

    fn found(&self, path: &[Step]) -> Option<&'t str> {
        let text = (*self.paths.get(path)?)?;
        std::str::from_utf8(text).ok()
    }
}

/// Where each record of `objects.object.record` starts and ends in `text`.
fn record_spans(text: &[u8]) -> Option<Vec<(usize, usize)>> {
    let mut w = Walk { b: text, at: 0 };
    for name in ["objects", "object", "record"] {
        w.member(name)?;
    }
    let mut spans = Vec::new();
    if !w.eat(b'[') || w.eat(b']') {
        return Some(spans);
    }
    loop {
        w.ws();
        let start = w.at;
        w.skip()?;
        spans.push((start, w.at));
        if !w.eat(b',') {
            return Some(spans);
        }
    }
}

/// A walk over JSON text the parser has already accepted (so it is well formed).
struct Walk<'t> {
    b: &'t [u8],
    at: usize,
}

impl<'t> Walk<'t> {
    fn ws(&mut self) {
        while matches!(self.b.get(self.at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.at).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        let here = self.peek() == Some(c);
        self.at += usize::from(here);
        here
    }

    /// A string: the text between its quotes, escapes as written.
    fn string(&mut self) -> Option<&'t [u8]> {
        if !self.eat(b'"') {
            return None;
        }
        let start = self.at;
        loop {
            let i = self.at + memchr::memchr2(b'"', b'\\', &self.b[self.at..])?;
            if self.b[i] == b'\\' {
                self.at = i + 2;
            } else {
                self.at = i + 1;
                return Some(&self.b[start..i]);
            }
        }
    }

    /// A number or a literal.
    fn scalar(&mut self) -> &'t [u8] {
        self.ws();
        let start = self.at;
        while !matches!(
            self.b.get(self.at),
            None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
        ) {
            self.at += 1;
        }
        &self.b[start..self.at]
    }

    /// Past one value of any kind.
    fn skip(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(|_| ()),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match self.peek()? {
                        b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => depth -= 1,
                        _ => {}
                    }
                    self.at += 1;
                    if depth == 0 {
                        return Some(());
                    }
                }
            }
            _ => {
                self.scalar();
                Some(())
            }
        }
    }

    /// Into the value of the first member `name` of the object here (the parser kept the
    /// first of duplicate keys, D24).
    fn member(&mut self, name: &str) -> Option<()> {
        if !self.eat(b'{') {
            return None;
        }
        loop {
            let key = self.string()?;
            self.eat(b':');
            if decoded(key)? == name {
                return Some(());
            }
            self.skip()?;
            if !self.eat(b',') {
                return None;
            }
        }
    }

    /// Walks the value here at `path`, noting the text of each number at a wanted path and
    /// skipping every value no wanted path goes through.
    fn collect(&mut self, path: &mut Vec<Step>, wanted: &mut Wanted<'t>) -> Option<()> {
        match self.peek()? {
            b'{' => {
                self.at += 1;
                if self.eat(b'}') {
                    return Some(());
                }
                loop {
                    let key = self.string()?;
                    self.eat(b':');
                    path.push(Step::Key(decoded(key)?.into_owned()));
                    self.value(path, wanted)?;
                    path.pop();
                    if !self.eat(b',') {
                        return self.eat(b'}').then_some(());
                    }
                }
            }
            b'[' => {
                self.at += 1;
                if self.eat(b']') {
                    return Some(());
                }
                for i in 0.. {
                    path.push(Step::Index(i));
                    self.value(path, wanted)?;
                    path.pop();
                    if !self.eat(b',') {
                        break;
                    }
                }
                self.eat(b']').then_some(())
            }
            b'"' => self.string().map(|_| ()),
            _ => {
                let text = self.scalar();
                wanted.note(path, text);
                Some(())
            }
        }
    }

    fn value(&mut self, path: &mut Vec<Step>, wanted: &mut Wanted<'t>) -> Option<()> {
        if wanted.through(path) {
            self.collect(path, wanted)
        } else {
            self.skip()
        }
    }
}

/// A key's text with its escapes resolved.
fn decoded(raw: &[u8]) -> Option<Cow<'_, str>> {
    if !raw.contains(&b'\\') {
        return std::str::from_utf8(raw).ok().map(Cow::Borrowed);
    }
    let quoted = [&b"\""[..], raw, b"\""].concat();
    serde_json::from_slice::<String>(&quoted)
        .ok()
        .map(Cow::Owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(body: &str, index: usize, paths: &[&[Step]]) -> Vec<Option<String>> {
        let w = AsWritten::new(body.as_bytes());
        let (start, end) = record_spans(w.text).unwrap()[index];
        let mut wanted = Wanted::default();
        for p in paths {
            wanted.add(p);
        }
        Walk {
            b: &w.text[..end],
            at: start,
        }
        .collect(&mut Vec::new(), &mut wanted);
        paths
            .iter()
            .map(|p| wanted.found(p).map(str::to_string))
            .collect()
    }

    fn key(k: &str) -> Step {
        Step::Key(k.into())
    }

    #[test]
    fn numbers_are_found_by_path_as_written() {
        let body = r#" {"x":[1,{"a":"}]\"{"}], "objects" : {"object":{"n":2,"record":[
            {"a": 1E400},
            {"s": "1e5", "a\u0062": [3, 4e+4, {"c": -2.5E-7 }], "a": 9},
            {"a": 1, "a": 2e9}
        ]}}}"#;
        assert_eq!(texts(body, 0, &[&[key("a")]]), [Some("1E400".into())]);
        let deep = [key("ab"), Step::Index(2), key("c")];
        let second = [key("ab"), Step::Index(1)];
        assert_eq!(
            texts(body, 1, &[&deep, &second, &[key("s")]]),
            [Some("-2.5E-7".into()), Some("4e+4".into()), None]
        );
        // The first of duplicate keys is the one the parser kept.
        assert_eq!(texts(body, 2, &[&[key("a")]]), [Some("1".into())]);
    }

    #[test]
    fn number_messages_show_the_number_as_written_d23() {
        let body = "\u{feff}{\"objects\":{\"object\":{\"record\":[{\"p\":1E400,\"q\":1e+5}]}}}";
        let record: Value = serde_json::from_str(r#"{"p":1E400,"q":1e+5}"#).unwrap();
        let mut v = vec![
            Violation::new(
                vec![key("p")],
                "number 1e+400 has more than 18 integer digits",
            ),
            Violation::new(vec![key("q")], "number 1e+5 has more than 2 decimal places"),
        ];
        AsWritten::new(body.as_bytes()).reword(0, &record, &mut v, 1000);
        assert_eq!(v[0].message, "number 1E400 has more than 18 integer digits");
        assert_eq!(v[1].message, "number 1e+5 has more than 2 decimal places");
        let mut unshown = vec![Violation::new(
            vec![key("p")],
            "number 1e+400 has more than 18 integer digits",
        )];
        AsWritten::new(body.as_bytes()).reword(0, &record, &mut unshown, 0);
        assert!(
            unshown[0].message.contains("1e+400"),
            "beyond what is shown"
        );
    }
}
