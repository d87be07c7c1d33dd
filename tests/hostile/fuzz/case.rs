//! One request of a property test: the records (generated, resent, mutated), how the body is
//! written and sent, and what the answer must be.

use super::json::{self, J, Style};
use super::mutate::{self, Expect, Op};
use super::slots::slots;
use super::valid;
use crate::common::schema;
use ap_intake::interfaces::{INTERFACES, Interface};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::Value;

/// `[limits] max_records` of the property tests' service: small, so 413 is cheap to reach.
pub const MAX_RECORDS: usize = 50;

/// What is done to the envelope or the body as a whole.
#[derive(Clone, Debug)]
pub enum Body {
    Sound,
    /// Cut after this many characters (modulo the length): not JSON.
    Truncate(usize),
    /// These bytes put in at a character boundary (modulo the length): not UTF-8 (D25).
    BadUtf8(usize, &'static [u8]),
    /// `objects`, `object` or `record` given twice (D24).
    DuplicateEnvelopeKey(usize),
    /// `record` empty or not an array.
    RecordNotArray(usize),
    /// No `objects`: a flat record, an array, a string.
    NoObjects(usize),
    NoObject(usize),
    NoRecord(usize),
    /// More records than [`MAX_RECORDS`].
    TooMany(usize),
}

pub struct Case {
    pub iface: &'static Interface,
    pub records: Vec<J>,
    /// Whether each record must be refused.
    pub invalid: Vec<bool>,
    pub expects: Vec<Vec<Expect>>,
    /// A record nested past the limit: the request is a structure failure (D27).
    pub too_deep: bool,
    pub body: Body,
    pub style: Style,
    pub bom: bool,
    pub gzip: bool,
    pub content_type: &'static str,
}

impl Case {
    pub fn path(&self) -> String {
        crate::common::post_path(self.iface)
    }

    /// The JSON text before the body-level damage.
    pub fn json_text(&self) -> String {
        let obj = |k: &str, v: J| J::Obj(vec![(k.to_string(), v)]);
        let records = J::Arr(self.records.clone());
        let doc = match &self.body {
            Body::DuplicateEnvelopeKey(i) => match i % 3 {
                0 => J::Obj(vec![
                    (
                        "objects".into(),
                        json::envelope(self.records.clone())
                            .get("objects")
                            .unwrap()
                            .clone(),
                    ),
                    (
                        "objects".into(),
                        obj("object", obj("record", J::Arr(vec![]))),
                    ),
                ]),
                1 => obj(
                    "objects",
                    J::Obj(vec![
                        ("object".into(), obj("record", records)),
                        ("object".into(), J::Obj(vec![])),
                    ]),
                ),
                _ => obj(
                    "objects",
                    obj(
                        "object",
                        J::Obj(vec![
                            ("record".into(), records.clone()),
                            ("record".into(), records),
                        ]),
                    ),
                ),
            },
            Body::RecordNotArray(i) => {
                let not = [
                    J::Arr(vec![]),
                    J::Obj(vec![]),
                    J::str("x"),
                    J::Null,
                    J::Num("1".into()),
                ];
                obj(
                    "objects",
                    obj("object", obj("record", not[i % not.len()].clone())),
                )
            }
            Body::NoObjects(i) => match i % 4 {
                0 => self.records[0].clone(),
                1 => records,
                2 => J::str("objects"),
                _ => obj("Objects", obj("object", obj("record", records))),
            },
            Body::NoObject(i) => match i % 3 {
                0 => obj("objects", J::Obj(vec![])),
                1 => obj("objects", obj("object", records)),
                _ => obj("objects", obj("objects", obj("record", records))),
            },
            Body::NoRecord(i) => match i % 2 {
                0 => obj("objects", obj("object", J::Obj(vec![]))),
                _ => obj("objects", obj("object", obj("records", records))),
            },
            _ => json::envelope(self.records.clone()),
        };
        doc.text(self.style)
    }

    /// The body as sent (before any content coding).
    pub fn bytes(&self) -> Vec<u8> {
        let text = self.json_text();
        let mut out = if self.bom {
            b"\xEF\xBB\xBF".to_vec()
        } else {
            vec![]
        };
        match &self.body {
            Body::Truncate(at) => {
                let cut = text
                    .char_indices()
                    .map(|(i, _)| i)
                    .nth(at % text.len())
                    .unwrap_or(0);
                out.extend_from_slice(&text.as_bytes()[..cut]);
            }
            Body::BadUtf8(at, bad) => {
                let at = self.bad_byte_at(*at);
                out.extend_from_slice(&text.as_bytes()[..at]);
                out.extend_from_slice(bad);
                out.extend_from_slice(&text.as_bytes()[at..]);
            }
            _ => out.extend_from_slice(text.as_bytes()),
        }
        out
    }

    /// Where in the JSON text the bad bytes go.
    pub fn bad_byte_at(&self, at: usize) -> usize {
        let text = self.json_text();
        let bounds: Vec<usize> = text
            .char_indices()
            .map(|(i, _)| i)
            .chain([text.len()])
            .collect();
        bounds[at % bounds.len()]
    }
}

/// Which answer a case must get, and its cases (weighted toward answers that look at records).
pub fn cases(iface: &'static Interface) -> BoxedStrategy<Case> {
    cases_with(iface, true)
}

/// [`cases`], with the records mutated or all left valid (the body may still be damaged).
pub fn cases_with(iface: &'static Interface, mutated: bool) -> BoxedStrategy<Case> {
    let schema = schema(iface);
    let record = valid::value(&schema, &schema);
    let ops = if mutated {
        prop_oneof![2 => Just(vec![]), 3 => vec(mutate::op(), 1..4)].boxed()
    } else {
        Just(vec![]).boxed()
    };
    let records = vec((record, ops), 1..=5);
    let resends = vec((any::<usize>(), any::<usize>(), any::<bool>()), 0..3);
    let body = prop_oneof![
        30 => Just(Body::Sound),
        1 => any::<usize>().prop_map(Body::Truncate),
        1 => (any::<usize>(), select(vec![&b"\xFF"[..], b"\x80", b"\xC0\xAF", b"\xE2\x82", b"\xED\xA0\x80"]))
            .prop_map(|(a, b)| Body::BadUtf8(a, b)),
        1 => any::<usize>().prop_map(Body::DuplicateEnvelopeKey),
        1 => any::<usize>().prop_map(Body::RecordNotArray),
        1 => any::<usize>().prop_map(Body::NoObjects),
        1 => any::<usize>().prop_map(Body::NoObject),
        1 => any::<usize>().prop_map(Body::NoRecord),
        1 => (1usize..5).prop_map(Body::TooMany),
    ];
    let content_type = prop_oneof![
        20 => Just("application/json"),
        2 => Just("application/JSON; charset=utf-8"),
        2 => Just("application/json;charset=\"UTF-8\""),
        1 => Just("application/json; charset=latin1"),
        1 => Just("text/plain"),
    ];
    let style =
        (any::<bool>(), proptest::bool::weighted(0.2)).prop_map(|(pretty, escape_non_ascii)| {
            Style {
                pretty,
                escape_non_ascii,
            }
        });
    let flags = (proptest::bool::weighted(0.1), proptest::bool::weighted(0.1));
    (records, resends, body, content_type, style, flags)
        .prop_map(
            move |(records, resends, body, content_type, style, (bom, gzip))| {
                build(
                    iface,
                    &schema,
                    records,
                    resends,
                    body,
                    content_type,
                    style,
                    bom,
                    gzip,
                )
            },
        )
        .boxed()
}

#[allow(clippy::too_many_arguments)]
fn build(
    iface: &'static Interface,
    schema: &Value,
    generated: Vec<(J, Vec<Op>)>,
    resends: Vec<(usize, usize, bool)>,
    body: Body,
    content_type: &'static str,
    style: Style,
    bom: bool,
    gzip: bool,
) -> Case {
    let (mut records, ops): (Vec<J>, Vec<Vec<Op>>) = generated.into_iter().unzip();
    // D16: a later record with an earlier one's key (or all of its content).
    for (a, b, whole) in resends {
        let n = records.len();
        let (from, to) = (a % n, b % n);
        if from >= to {
            continue;
        }
        if whole {
            records[to] = records[from].clone();
            continue;
        }
        for part in iface.key {
            if let ap_intake::interfaces::KeyPart::Field(name) = part {
                match records[from].get(name).cloned() {
                    Some(v) => records[to].set(name, v),
                    None => {
                        records[to].remove(name);
                    }
                }
            }
        }
    }
    let mut invalid = Vec::new();
    let mut expects = Vec::new();
    let mut too_deep = false;
    for (record, ops) in records.iter_mut().zip(&ops) {
        let slots = slots(schema, record);
        let out = mutate::apply(record, &slots, ops);
        invalid.push(out.invalid);
        expects.push(out.expects);
        too_deep |= out.too_deep;
    }
    if let Body::TooMany(extra) = body {
        let more = MAX_RECORDS + extra - records.len().min(MAX_RECORDS);
        for i in 0..more {
            records.push(records[i % records.len()].clone());
            invalid.push(invalid[i % invalid.len()]);
            expects.push(vec![]);
        }
    }
    let mut case = Case {
        iface,
        records,
        invalid,
        expects,
        too_deep,
        body,
        style,
        bom,
        gzip,
        content_type,
    };
    // Indenting 1,000 levels of nesting in 50 records would pass the 32 MiB body limit.
    if case.style.pretty && case.bytes().len() > 1 << 20 {
        case.style.pretty = false;
    }
    // An answer sent before the body is read is lost when the body is large (see
    // `an_early_415_reaches_a_client_still_sending_a_large_body`): those stay small here.
    if case.refused_unread() && case.bytes().len() > EARLY_ANSWER_BODY {
        case.content_type = "application/json";
    }
    case
}

/// The body the service drains before an answer it gives without reading the body (D26).
const EARLY_ANSWER_BODY: usize = 64 << 10;

impl Case {
    /// Whether the media type gets 415 before the body is read (D5, D25).
    pub fn refused_unread(&self) -> bool {
        !self
            .content_type
            .to_ascii_lowercase()
            .starts_with("application/json")
            || self.content_type.contains("latin1")
    }
}

/// Every interface's cases, one interface per case.
pub fn all_cases() -> impl Strategy<Value = Case> {
    proptest::strategy::Union::new(INTERFACES.iter().map(cases))
}

/// The key a valid record is queued under (D15): blank fields take their schema default.
pub fn queue_key(
    iface: &Interface,
    schema: &Value,
    record: &J,
) -> Option<ap_intake::queue::QueueKey> {
    use ap_intake::interfaces::KeyPart;
    let parts: Option<Vec<String>> = iface
        .key
        .iter()
        .map(|p| match p {
            KeyPart::AccountingType => Some("PROJECT".to_string()),
            KeyPart::Field(name) => match record.get(name) {
                Some(J::Str(s)) if !s.is_empty() => Some(s.clone()),
                Some(J::Str(_)) | None => Some(
                    schema["properties"][name]["default"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                ),
                Some(_) => None,
            },
        })
        .collect();
    let parts = parts?;
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    ap_intake::queue::QueueKey::new(iface.key_space, &parts).ok()
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let body = String::from_utf8_lossy(&self.bytes()).into_owned();
        let shown = if body.len() > 20_000 {
            format!(
                "{}... ({} bytes)",
                &body[..body.char_indices().nth(20_000).map_or(0, |c| c.0)],
                body.len()
            )
        } else {
            body
        };
        write!(
            f,
            "POST {} (Content-Type: {}{}{})\n{shown}\ninvalid: {:?}\nbody: {:?}",
            self.path(),
            self.content_type,
            if self.gzip { ", gzip" } else { "" },
            if self.bom { ", BOM" } else { "" },
            self.invalid,
            self.body,
        )
    }
}
