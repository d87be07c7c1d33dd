//! Valid records generated from an interface's JSON Schema: properties, required, types,
//! enums, the date and code patterns, maxLength, the money / quantity / date / iban / bic
//! formats, arrays with minItems, local `$ref`s, and the two rules of code: PO v2 coding rows
//! summing to 100 (D11) and vendor bank accounts with an iban or account_number (D13).
//!
//! A schema construct without a generator panics here, so a schema change cannot quietly
//! narrow what the property tests cover.

use super::json::J;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::Value;

pub const DATE_PATTERN: &str = r"^\d{4}-\d{2}-\d{2}$";
pub const CURRENCY_PATTERN: &str = "^([A-Z]{3})?$";
pub const COUNTRY_PATTERN: &str = "^([A-Z]{2})?$";

/// `node`, or what its local `$ref` points at.
pub fn resolve<'a>(root: &'a Value, node: &'a Value) -> &'a Value {
    match node.get("$ref").and_then(Value::as_str) {
        Some(r) => root
            .pointer(
                r.strip_prefix('#')
                    .unwrap_or_else(|| panic!("non-local $ref {r}")),
            )
            .unwrap_or_else(|| panic!("$ref {r} points nowhere")),
        None => node,
    }
}

/// Decimal places a number field allows (D6).
pub fn places(node: &Value) -> u32 {
    match node.get("format").and_then(Value::as_str) {
        Some("money") => 2,
        Some("quantity") => 6,
        other => panic!("number format {other:?} has no generator"),
    }
}

/// A valid value for `node`.
pub fn value(root: &Value, node: &Value) -> BoxedStrategy<J> {
    let node = resolve(root, node);
    match node.get("type").and_then(Value::as_str) {
        Some("object") => object(root, node),
        Some("array") => array(root, node),
        Some("string") => string(node),
        Some("integer") => integer(),
        Some("number") => number(places(node)),
        Some("boolean") => any::<bool>().prop_map(J::Bool).boxed(),
        other => panic!("schema type {other:?} has no generator"),
    }
}

fn object(root: &Value, node: &Value) -> BoxedStrategy<J> {
    let required: Vec<&str> = node["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let fields: Vec<BoxedStrategy<Option<(String, J)>>> = node["properties"]
        .as_object()
        .expect("object schema with properties")
        .iter()
        .map(|(name, prop)| {
            let required = required.contains(&name.as_str());
            let name = name.clone();
            let v = value(root, prop).prop_map(move |v| Some((name.clone(), v)));
            if required {
                v.boxed()
            } else {
                prop_oneof![2 => Just(None), 3 => v].boxed()
            }
        })
        .collect();
    let fix = node
        .get("format")
        .and_then(Value::as_str)
        .map(str::to_string);
    (fields, any::<u64>())
        .prop_map(move |(fields, seed)| {
            let mut obj = J::Obj(fields.into_iter().flatten().collect());
            match fix.as_deref() {
                Some("coding-sum") => split_percentages(&mut obj, seed),
                Some("bank-account") => {
                    let has = |k: &str| matches!(obj.get(k), Some(J::Str(s)) if !s.is_empty());
                    if !has("iban") && !has("account_number") {
                        obj.set("account_number", J::str(&format!("{seed}")));
                    }
                }
                Some(f) => panic!("object format {f} has no generator"),
                None => {}
            }
            obj
        })
        .boxed()
}

/// The coding rows' distribution percentages: positive parts of exactly 100, in hundredths
/// or millionths (`33.333333 + 33.333333 + 33.333334`, D6's exact sums).
fn split_percentages(row: &mut J, seed: u64) {
    let Some(J::Arr(coding)) = row.at_mut(&[super::json::Seg::Key("coding".into())]) else {
        return;
    };
    let n = coding.len() as u64;
    let (unit_places, total) = if seed.is_multiple_of(3) {
        (6u32, 100_000_000u64)
    } else {
        (2, 10_000)
    };
    let mut rng = seed | 1;
    let mut left = total;
    for (i, c) in coding.iter_mut().enumerate() {
        let remaining = n - i as u64;
        let part = if remaining == 1 {
            left
        } else {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            1 + rng % (left - remaining + 1).max(1)
        };
        left -= part;
        let scale = 10u64.pow(unit_places);
        let text = format!(
            "{}.{:0w$}",
            part / scale,
            part % scale,
            w = unit_places as usize
        );
        let text = text.trim_end_matches('0').trim_end_matches('.').to_string();
        c.set("distribution_percentage", J::Num(text));
    }
}

fn array(root: &Value, node: &Value) -> BoxedStrategy<J> {
    let min = node.get("minItems").and_then(Value::as_u64).unwrap_or(0) as usize;
    let items = node.get("items").expect("array schema with items");
    vec(value(root, items), min..=min + 2)
        .prop_map(J::Arr)
        .boxed()
}

fn string(node: &Value) -> BoxedStrategy<J> {
    if let Some(Value::Array(values)) = node.get("enum") {
        let values: Vec<String> = values.iter().map(|v| v.as_str().unwrap().into()).collect();
        return select(values).prop_map(J::Str).boxed();
    }
    match node.get("pattern").and_then(Value::as_str) {
        Some(DATE_PATTERN) => return date().prop_map(J::Str).boxed(),
        Some(CURRENCY_PATTERN) => return upper_or_empty(3),
        Some(COUNTRY_PATTERN) => return upper_or_empty(2),
        Some(p) => panic!("pattern {p} has no generator"),
        None => {}
    }
    match node.get("format").and_then(Value::as_str) {
        Some("iban") => return iban().prop_map(J::Str).boxed(),
        Some("bic") => return bic().prop_map(J::Str).boxed(),
        Some(f) => panic!("string format {f} has no generator"),
        None => {}
    }
    let min = node.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
    let max = node
        .get("maxLength")
        .and_then(Value::as_u64)
        .map(|m| m as usize);
    text()
        .prop_map(move |s| {
            let mut chars: Vec<char> = s.chars().collect();
            while chars.len() < min {
                chars.push('x');
            }
            chars.truncate(max.unwrap_or(usize::MAX));
            J::Str(chars.into_iter().collect())
        })
        .boxed()
}

/// Characters XML 1.0 carries, with the awkward ones well represented: markup, quotes,
/// multi-byte and astral characters, DEL and C1 controls, bidi overrides, U+FEFF inside a
/// string, the last characters before and after the surrogates, and non-characters other than
/// U+FFFE and U+FFFF.
pub fn xml_char() -> BoxedStrategy<char> {
    prop_oneof![
        8 => proptest::char::range(' ', '~'),
        2 => proptest::char::range('\u{a0}', '\u{17f}'),
        1 => proptest::char::range('\u{4e00}', '\u{4e3f}'),
        1 => proptest::char::range('\u{1f600}', '\u{1f64f}'),
        2 => select(vec![
            '<', '>', '&', '"', '\'', '\\', '/', '%', ':', '\t', '\n', '\r', '\u{7f}', '\u{85}',
            '\u{200b}', '\u{202e}', '\u{feff}', '\u{fffd}', '\u{d7ff}', '\u{e000}', '\u{1fffe}',
            '\u{10ffff}', '\u{301}',
        ]),
    ]
    .boxed()
}

/// Free text: a few telling strings, or random characters from [`xml_char`].
pub fn text() -> BoxedStrategy<String> {
    prop_oneof![
        1 => select(vec![
            "Müller & Söhne <GmbH>",
            "]]><![CDATA[x]]>",
            "&amp; &lt; &#13;",
            "漢字テキスト",
            "😀👍🏽",
            "a/b:c%2F~0",
            "  spaced  ",
            "\r\n\t",
        ])
        .prop_map(str::to_string),
        4 => vec(xml_char(), 0..16).prop_map(String::from_iter),
    ]
    .boxed()
}

fn upper_or_empty(n: usize) -> BoxedStrategy<J> {
    prop_oneof![
        1 => Just(String::new()),
        4 => vec(proptest::char::range('A', 'Z'), n).prop_map(String::from_iter),
    ]
    .prop_map(J::Str)
    .boxed()
}

pub fn days_in(year: u32, month: u32) -> u32 {
    let leap = (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400);
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// A real calendar day (D7), leap days and the ends of the year range included.
fn date() -> impl Strategy<Value = String> {
    let year = prop_oneof![4 => 1900u32..2100, 1 => select(vec![1u32, 1600, 2000, 2024, 9999])];
    (year, 1u32..=12, 1u32..=31)
        .prop_map(|(y, m, d)| format!("{y:04}-{m:02}-{:02}", d.min(days_in(y, m))))
}

/// A German or Finnish IBAN with its mod-97 check digits, sometimes in print format.
fn iban() -> impl Strategy<Value = String> {
    (
        select(vec![("DE", 18usize), ("FI", 14)]),
        any::<u64>(),
        any::<u64>(),
        any::<bool>(),
    )
        .prop_map(|((country, len), a, b, print)| {
            let digits: String = format!("{a:020}{b:020}").chars().take(len).collect();
            let check = 98 - mod97(&format!("{digits}{country}00"));
            let iban = format!("{country}{check:02}{digits}");
            if !print {
                return iban;
            }
            let chars: Vec<char> = iban.chars().collect();
            let groups: Vec<String> = chars.chunks(4).map(String::from_iter).collect();
            groups.join(" ")
        })
}

/// ISO 7064 mod 97 of a string of digits and letters (A = 10 ... Z = 35).
pub fn mod97(s: &str) -> u32 {
    s.chars().fold(0u32, |acc, c| {
        let v = c.to_digit(36).expect("alphanumeric");
        if v >= 10 {
            (acc * 100 + v) % 97
        } else {
            (acc * 10 + v) % 97
        }
    })
}

/// A BIC: 4 + 2 letters, 2 letters or digits, and an optional branch of 3.
fn bic() -> impl Strategy<Value = String> {
    let upper = || proptest::char::range('A', 'Z');
    let alnum = || {
        prop_oneof![
            proptest::char::range('A', 'Z'),
            proptest::char::range('0', '9')
        ]
    };
    (
        vec(upper(), 6),
        vec(alnum(), 2),
        proptest::option::of(vec(alnum(), 3)),
    )
        .prop_map(|(a, b, c)| {
            let mut s: String = a.into_iter().chain(b).collect();
            s.extend(c.unwrap_or_default());
            s
        })
}

fn integer() -> BoxedStrategy<J> {
    prop_oneof![
        4 => (-1000i64..100_000).prop_map(|i| i.to_string()),
        1 => any::<i64>().prop_map(|i| i.max(-i64::MAX).to_string()),
        1 => select(vec!["0", "-0", "9223372036854775807", "-9223372036854775807"])
            .prop_map(str::to_string),
    ]
    .prop_map(J::Num)
    .boxed()
}

/// A plain decimal within the field's places and D23's 18 integer digits.
fn number(places: u32) -> BoxedStrategy<J> {
    let int = prop_oneof![4 => 0u64..10_000, 1 => 0u64..1_000_000_000_000_000_000];
    let frac = vec(proptest::char::range('0', '9'), 0..=places as usize);
    (proptest::bool::weighted(0.1), int, frac)
        .prop_map(|(neg, int, frac)| {
            let frac: String = frac.into_iter().collect();
            let sign = if neg { "-" } else { "" };
            if frac.is_empty() {
                J::Num(format!("{sign}{int}"))
            } else {
                J::Num(format!("{sign}{int}.{frac}"))
            }
        })
        .boxed()
}
