//! Mutations of strings and string formats: empty, characters XML cannot carry, multi-byte
//! text at and past maxLength, bad dates, enum values, patterns, IBANs and BICs (D7, D8, D13,
//! decisions.md "Validation messages").

use super::json::{J, Seg};
use super::mutate::{Ctx, Op};
use super::slots::Slot;
use super::valid::{CURRENCY_PATTERN, DATE_PATTERN};
use serde_json::Value;

pub const BAD_CHARS: [char; 8] = [
    '\u{0}', '\u{7}', '\u{b}', '\u{c}', '\u{1b}', '\u{1f}', '\u{fffe}', '\u{ffff}',
];
const BAD_DATES: [&str; 17] = [
    "2024-02-30",
    "2023-02-29",
    "1900-02-29",
    "0000-01-01",
    "2024-13-01",
    "2024-00-10",
    "2024-04-31",
    "2024-1-01",
    "24-01-01",
    "2024/01/01",
    "2024-01-01T00:00:00",
    "2024-01-01\n",
    " 2024-01-01",
    "\u{662}\u{660}\u{662}\u{664}-\u{660}\u{661}-\u{660}\u{661}",
    "２０２４-０１-０１",
    "+2024-01-01",
    "",
];
const MULTIBYTE: [char; 4] = ['ä', '漢', '😀', '\u{10ffff}'];

/// A string as messages show it: JSON text of its first 100 characters.
pub fn render(s: &str) -> String {
    serde_json::to_string(&s.chars().take(100).collect::<String>()).unwrap()
}

fn enum_msg(shown: &str, values: &Value) -> String {
    format!("instance value ({shown}) not found in enum (possible values: {values})")
}

fn pattern_msg(s: &str, pattern: &str) -> String {
    format!("string {} does not match pattern \"{pattern}\"", render(s))
}

/// Applies one of the string mutations to `slot`.
pub fn mutate(cx: &mut Ctx, slot: &Slot, op: &Op) {
    let path = slot.path.clone();
    let name = match path.last() {
        Some(Seg::Key(k)) => k.clone(),
        _ => String::new(),
    };
    match op {
        Op::EmptyString(_) => {
            if slot.node["minLength"].as_u64().unwrap_or(0) > 0 {
                let m = if name == "description_en" {
                    "description_en is required.".to_string()
                } else {
                    r#"string "" is too short (length: 0, required minimum: 1)"#.to_string()
                };
                cx.fail(&path, m);
            } else if let Some(values) = slot.node.get("enum") {
                cx.fail(&path, enum_msg("\"\"", values));
            } else if slot.pattern() == Some(DATE_PATTERN) {
                cx.fail(&path, pattern_msg("", DATE_PATTERN));
            }
            // An empty IBAN or BIC is an optional string left empty (D8): accepted, and an
            // empty IBAN counts as no IBAN for the bank account's identity (D13).
            cx.set(&path, J::str(""));
        }
        Op::BadChar(_, c, at) => {
            let mut chars: Vec<char> = cx.str_at(&path).chars().collect();
            let bad = BAD_CHARS[c % BAD_CHARS.len()];
            chars.insert(at % (chars.len() + 1), bad);
            let s: String = chars.into_iter().collect();
            let m = format!(
                "string {} contains a character that XML cannot carry (U+{:04X})",
                render(&s),
                bad as u32
            );
            cx.fail(&path, m);
            cx.set(&path, J::Str(s));
        }
        Op::Multibyte(_, c) => {
            let len = slot.max_len().unwrap_or(1 + c % 40);
            let s = std::iter::repeat_n(MULTIBYTE[c % MULTIBYTE.len()], len).collect();
            cx.set(&path, J::Str(s));
        }
        Op::TooLong(_, c) => {
            let max = slot.max_len().unwrap();
            let s: String = std::iter::repeat_n(MULTIBYTE[c % MULTIBYTE.len()], max + 1).collect();
            let m = format!(
                "string {} is too long (length: {}, maximum allowed: {max})",
                render(&s),
                max + 1
            );
            cx.fail(&path, m);
            cx.set(&path, J::Str(s));
        }
        Op::BadDate(_, d) => {
            let s = BAD_DATES[d % BAD_DATES.len()];
            let b = s.as_bytes();
            let shaped = b.len() == 10
                && b.iter().enumerate().all(|(i, c)| {
                    if i == 4 || i == 7 {
                        *c == b'-'
                    } else {
                        c.is_ascii_digit()
                    }
                });
            let m = if shaped {
                format!("string {} is not a valid calendar date", render(s))
            } else {
                pattern_msg(s, DATE_PATTERN)
            };
            cx.fail(&path, m);
            cx.set(&path, J::str(s));
        }
        Op::BadEnum(_, v) => {
            let current = cx.str_at(&path);
            let values = &slot.node["enum"];
            let candidates = [
                current.to_lowercase(),
                format!("{current} "),
                format!(" {current}"),
                "TRUE".into(),
                "Yes".into(),
            ];
            let Some(s) = candidates
                .iter()
                .cycle()
                .skip(v % candidates.len())
                .take(candidates.len())
                .find(|c| {
                    !values
                        .as_array()
                        .unwrap()
                        .contains(&Value::String((*c).clone()))
                })
            else {
                return;
            };
            cx.fail(&path, enum_msg(&render(s), values));
            cx.set(&path, J::Str(s.clone()));
        }
        Op::BadPattern(_, v) => {
            let pattern = slot.pattern().unwrap();
            let bad: &[&str] = if pattern == CURRENCY_PATTERN {
                &["eur", "EURO", "E1R", "€€€", " EU", "EU\n"]
            } else {
                &["fi", "FIN", "F1", "ÄÖ", "F", "FI "]
            };
            let s = bad[v % bad.len()];
            cx.fail(&path, pattern_msg(s, pattern));
            cx.set(&path, J::str(s));
        }
        Op::BadIban(_, v) => {
            let current = cx.str_at(&path);
            let changed = current
                .char_indices()
                .rev()
                .find(|(_, c)| c.is_ascii_digit())
                .map(|(i, c)| {
                    let d = (c.to_digit(10).unwrap() + 1) % 10;
                    format!("{}{d}{}", &current[..i], &current[i + 1..])
                })
                .unwrap();
            let bad = [
                changed,
                "XX89370400440532013000".into(),
                "DE8937040044053201300".into(),
            ];
            let s = &bad[v % bad.len()];
            cx.fail(&path, format!("string {} is not a valid IBAN", render(s)));
            cx.set(&path, J::Str(s.clone()));
        }
        Op::BadBic(_, v) => {
            let bad = [
                "DEUTDEF",
                "deutdeff",
                "DEUTDEFF5",
                "DEUT DEFF",
                "1EUTDEFF",
                "DEUTDEFFÄ0",
            ];
            let s = bad[v % bad.len()];
            cx.fail(&path, format!("string {} is not a valid BIC", render(s)));
            cx.set(&path, J::str(s));
        }
        _ => unreachable!("not a string mutation: {op:?}"),
    }
}
