//! Strict JSON into a tree that borrows its strings from the body, for the fast path. It gives
//! up (`None`) on anything the reference reader treats with care or that it would refuse: bytes
//! that are not UTF-8 or a byte order mark (D25), nesting deeper than [`MAX_DEPTH`], a number
//! with an exponent (the reference path writes those in plain notation, D23), an escaped key,
//! any departure from RFC 8259. What it accepts, serde_json reads to the same values.

use crate::tree::{Members, Ref, Tree};
use std::borrow::Cow;

/// Deepest nesting the fast path reads; the deepest record of the nine interfaces sits at 9
/// (envelope 4, record, rows, row, coding, coding row). Anything deeper is the reference
/// path's to refuse (D27).
pub const MAX_DEPTH: usize = 16;

/// A JSON value whose strings borrow from the body where they carry no escape.
#[derive(Debug, Clone, PartialEq)]
pub enum Node<'a> {
    /// `null`.
    Null,
    /// `true`, `false`.
    Bool(bool),
    /// A number's text, without an exponent.
    Number(&'a str),
    /// A string, unescaped.
    String(Cow<'a, str>),
    /// An array.
    Array(Vec<Node<'a>>),
    /// An object.
    Object(Object<'a>),
}

/// An object's members in document order (keys are not checked for repeats here: the plan
/// does that for records).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Object<'a>(Vec<(&'a str, Node<'a>)>);

impl<'a> Object<'a> {
    /// The members, in document order.
    pub fn members(&self) -> &[(&'a str, Node<'a>)] {
        &self.0
    }

    /// The members, taken out.
    pub fn into_members(self) -> Vec<(&'a str, Node<'a>)> {
        self.0
    }
}

impl<'a> Tree for Node<'a> {
    type Object = Object<'a>;

    fn get_ref(&self) -> Ref<'_, Self> {
        match self {
            Node::Null => Ref::Null,
            Node::Bool(b) => Ref::Bool(*b),
            Node::Number(n) => Ref::Number(n),
            Node::String(s) => Ref::String(s),
            Node::Array(items) => Ref::Array(items),
            Node::Object(o) => Ref::Object(o),
        }
    }
}

impl<'a> Members<Node<'a>> for Object<'a> {
    fn get(&self, name: &str) -> Option<&Node<'a>> {
        self.0.iter().find(|(k, _)| *k == name).map(|(_, v)| v)
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn each<'s>(&'s self, mut f: impl FnMut(&'s str, &'s Node<'a>))
    where
        Node<'a>: 's,
    {
        for (k, v) in &self.0 {
            f(k, v);
        }
    }
}

/// Reads `body` as one JSON value, or `None` (see the module's documentation).
pub fn parse(body: &[u8]) -> Option<Node<'_>> {
    let mut p = Parser::new(body)?;
    p.ws();
    let v = p.value(0)?;
    p.ws();
    p.at_end().then_some(v)
}

/// A reader over a body, for reading it a value at a time.
pub struct Parser<'a> {
    text: &'a str,
    b: &'a [u8],
    at: usize,
    /// Members of the objects being read, innermost last: each object takes its own off the
    /// end into a vector of the right size.
    members: Vec<(&'a str, Node<'a>)>,
    /// The same for arrays.
    items: Vec<Node<'a>>,
}

impl<'a> Parser<'a> {
    /// A reader at the start of `body`, if it is UTF-8.
    pub fn new(body: &'a [u8]) -> Option<Self> {
        Some(Self {
            text: std::str::from_utf8(body).ok()?,
            b: body,
            at: 0,
            members: Vec::new(),
            items: Vec::new(),
        })
    }

    /// The next byte, not taken.
    pub fn peek(&self) -> Option<u8> {
        self.b.get(self.at).copied()
    }

    /// Takes the next byte if it is `c`.
    pub fn take(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.at += 1)
    }

    /// Whether the whole body has been read.
    pub fn at_end(&self) -> bool {
        self.at == self.b.len()
    }

    /// Skips JSON whitespace.
    pub fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    /// An object key without escapes (at its opening quote).
    pub fn key(&mut self) -> Option<&'a str> {
        if self.peek()? != b'"' {
            return None;
        }
        match self.string()? {
            Cow::Borrowed(k) => Some(k),
            Cow::Owned(_) => None,
        }
    }

    /// One value, nested `depth` levels deep in the body.
    pub fn value(&mut self, depth: usize) -> Option<Node<'a>> {
        match self.peek()? {
            b'{' => self.object(depth + 1),
            b'[' => self.array(depth + 1),
            b'"' => self.string().map(Node::String),
            b't' => self.word(b"true", Node::Bool(true)),
            b'f' => self.word(b"false", Node::Bool(false)),
            b'n' => self.word(b"null", Node::Null),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn word(&mut self, word: &[u8], node: Node<'a>) -> Option<Node<'a>> {
        if self.b.get(self.at..)?.starts_with(word) {
            self.at += word.len();
            Some(node)
        } else {
            None
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while let Some(b'0'..=b'9') = self.peek() {
            self.at += 1;
        }
        self.at - start
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)?`; an exponent gives up.
    fn number(&mut self) -> Option<Node<'a>> {
        let start = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek()? {
            b'0' => self.at += 1,
            b'1'..=b'9' => {
                self.digits();
            }
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            if self.digits() == 0 {
                return None;
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            return None;
        }
        self.text.get(start..self.at).map(Node::Number)
    }

    /// A string starting at its opening quote.
    fn string(&mut self) -> Option<Cow<'a, str>> {
        self.at += 1;
        let start = self.at;
        loop {
            match self.peek()? {
                b'"' => {
                    let s = self.text.get(start..self.at)?;
                    self.at += 1;
                    return Some(Cow::Borrowed(s));
                }
                b'\\' => return self.escaped(start).map(Cow::Owned),
                0..=0x1f => return None,
                _ => self.at += 1,
            }
        }
    }

    /// The rest of a string from its first backslash; `start` is where its text began.
    fn escaped(&mut self, start: usize) -> Option<String> {
        let mut out = String::from(self.text.get(start..self.at)?);
        loop {
            let run = self.at;
            while let Some(c) = self.peek() {
                if c == b'"' || c == b'\\' || c < 0x20 {
                    break;
                }
                self.at += 1;
            }
            out.push_str(self.text.get(run..self.at)?);
            match self.peek()? {
                b'"' => {
                    self.at += 1;
                    return Some(out);
                }
                b'\\' => {
                    self.at += 1;
                    let c = match self.peek()? {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            self.at += 1;
                            let c = self.unicode()?;
                            out.push(c);
                            continue;
                        }
                        _ => return None,
                    };
                    self.at += 1;
                    out.push(c);
                }
                _ => return None,
            }
        }
    }

    /// The character of a `\u` escape (after the `u`), with its low surrogate when it is a
    /// high one; a lone surrogate gives up.
    fn unicode(&mut self) -> Option<char> {
        let high = self.hex4()?;
        if !(0xD800..0xDC00).contains(&high) {
            return char::from_u32(high);
        }
        if self.b.get(self.at..self.at + 2)? != b"\\u" {
            return None;
        }
        self.at += 2;
        let low = self.hex4()?;
        if !(0xDC00..0xE000).contains(&low) {
            return None;
        }
        char::from_u32(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = self.text.get(self.at..self.at + 4)?;
        if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        self.at += 4;
        u32::from_str_radix(digits, 16).ok()
    }

    fn object(&mut self, depth: usize) -> Option<Node<'a>> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.at += 1;
        self.ws();
        let base = self.members.len();
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(Node::Object(Object::default()));
        }
        loop {
            let key = self.key()?;
            self.ws();
            if self.peek()? != b':' {
                return None;
            }
            self.at += 1;
            self.ws();
            let v = self.value(depth)?;
            self.members.push((key, v));
            self.ws();
            match self.peek()? {
                b',' => {
                    self.at += 1;
                    self.ws();
                }
                b'}' => {
                    self.at += 1;
                    let members = self.members.drain(base..).collect();
                    return Some(Node::Object(Object(members)));
                }
                _ => return None,
            }
        }
    }

    fn array(&mut self, depth: usize) -> Option<Node<'a>> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.at += 1;
        self.ws();
        let base = self.items.len();
        if self.peek()? == b']' {
            self.at += 1;
            return Some(Node::Array(Vec::new()));
        }
        loop {
            let v = self.value(depth)?;
            self.items.push(v);
            self.ws();
            match self.peek()? {
                b',' => {
                    self.at += 1;
                    self.ws();
                }
                b']' => {
                    self.at += 1;
                    let items = self.items.drain(base..).collect();
                    return Some(Node::Array(items));
                }
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// What serde_json makes of a text the fast reader accepted, compared value by value.
    fn same(n: &Node<'_>, v: &Value) -> bool {
        match (n, v) {
            (Node::Null, Value::Null) => true,
            (Node::Bool(a), Value::Bool(b)) => a == b,
            (Node::Number(a), Value::Number(b)) => *a == b.as_str(),
            (Node::String(a), Value::String(b)) => a == b,
            (Node::Array(a), Value::Array(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same(x, y))
            }
            (Node::Object(a), Value::Object(b)) => {
                a.members().len() == b.len()
                    && a.members()
                        .iter()
                        .zip(b)
                        .all(|((k, x), (l, y))| k == l && same(x, y))
            }
            _ => false,
        }
    }

    #[test]
    fn accepted_texts_read_as_serde_json_reads_them() {
        for text in [
            r#"{"a":1,"b":-0,"c":1.50,"d":"x","e":[true,false,null],"f":{}}"#,
            " \t\r\n{ \"a\" : [ ] , \"b\" : { \"c\" : \"\" } }\n",
            r#"["\"\\\/\b\f\n\r\t","\u00e4\u20AC\ud83d\ude00","äö€😀",0,-12.0001]"#,
            r#""plain""#,
            "123",
        ] {
            let node = parse(text.as_bytes()).unwrap_or_else(|| panic!("refused {text}"));
            let value: Value = serde_json::from_str(text).unwrap();
            assert!(same(&node, &value), "{text}");
        }
    }

    #[test]
    fn gives_up_on_what_it_does_not_read_as_the_reference_does() {
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        for text in [
            "",
            "{",
            "[1,]",
            r#"{"a":1,}"#,
            "01",
            "1.",
            ".5",
            "-",
            "1e5",
            "1.5E-3",
            "tru",
            "nul",
            r#""\x""#,
            r#""\ud800""#,
            r#""\ud800\u0041""#,
            "\"a\u{1}\"",
            "\u{feff}{}",
            r#"{"a\u0062":1}"#,
            "{} {}",
            "'a'",
            &deep,
        ] {
            assert_eq!(parse(text.as_bytes()), None, "{text:?}");
        }
        assert_eq!(parse(b"\"\xff\""), None);
        let nested = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(parse(nested.as_bytes()).is_some());
    }
}
