//! Mutations of numbers (D6, D11, D23): hostile values judged on their exact value, the same
//! value in other notations, and coding percentages that no longer sum to 100.

use super::dec::Dec;
use super::json::{J, Seg, pointer};
use super::mutate::{Ctx, type_msg};
use super::slots::Slot;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;

/// A number as messages show it: as the client wrote it, cut to 100 characters (D23
/// addendum).
pub fn render_num(t: &str) -> String {
    t.chars().take(100).collect()
}

/// A number put into a number field, judged on its exact value (D23).
pub fn bad_number(cx: &mut Ctx, slot: &Slot, text: &str) {
    let path = slot.path.clone();
    let J::Num(old) = cx.record.at(&path).unwrap().clone() else {
        unreachable!()
    };
    let d = Dec::parse(text).expect("a JSON number");
    let shown = render_num(text);
    if slot.ty() == "integer" {
        if d.places() > 0 {
            cx.fail(&path, type_msg("number", "integer"));
        } else if !d.fits_integer() {
            let m =
                format!("number {shown} is out of range (maximum allowed: 9223372036854775807)");
            cx.fail(&path, m);
        }
    } else {
        let places = super::valid::places(&slot.node);
        if d.int_digits() > 18 {
            cx.fail(
                &path,
                format!("number {shown} has more than 18 integer digits"),
            );
        }
        if d.places() > i128::from(places) {
            cx.fail(
                &path,
                format!("number {shown} has more than {places} decimal places"),
            );
        }
        let changed = !d.same_value(&Dec::parse(&old).unwrap());
        if slot.sum_bound && changed {
            // The line's percentages no longer total 100: a record error (D11), whose text
            // names the line (asserted elsewhere).
            cx.out.invalid = true;
        }
    }
    cx.set(&path, J::Num(text.to_string()));
}

/// The same value in another notation (D23: judged and written by value, not by text).
pub fn renotate(t: &str, style: usize) -> String {
    let (sign, body) = match t.strip_prefix('-') {
        Some(b) => ("-", b),
        None => ("", t),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    // JSON allows no leading zeros: `0.05` has the digits `5`.
    let all = format!("{int}{frac}");
    let digits = match all.trim_start_matches('0') {
        "" => "0",
        d => d,
    };
    if digits == "0" {
        let zeros = [
            "0.000",
            "0e10000000000000",
            "-0",
            "0.0E+5",
            "0E-1",
            "-0.0e-0",
        ];
        return zeros[style % zeros.len()].to_string();
    }
    match style % 6 {
        0 => format!("{sign}{int}.{frac}000"),
        1 => format!("{sign}{digits}e-{}", frac.len()),
        2 => format!(
            "{sign}0.{digits}E{:+}",
            digits.len() as i64 - frac.len() as i64
        ),
        3 => format!("{sign}{int}.{frac}{}", "0".repeat(120)),
        4 => format!(
            "{sign}{digits}{}e-{}",
            "0".repeat(10_000),
            frac.len() + 10_000
        ),
        _ => format!("{sign}{digits}0E{}", -(frac.len() as i64) - 1),
    }
}

/// The line's first coding percentage, one millionth off: the sum is no longer 100 (D11).
pub fn break_sum(cx: &mut Ctx, path: &[Seg]) {
    let mut first = path.to_vec();
    first.extend([Seg::Index(0), Seg::Key("distribution_percentage".into())]);
    let Some(J::Num(t)) = cx.record.at(&first).cloned() else {
        return;
    };
    let v: rust_decimal::Decimal = t.parse().unwrap();
    let off = v + rust_decimal::Decimal::new(1, 6);
    cx.set(&first, J::Num(off.normalize().to_string()));
    let m = "coding distribution_percentage must sum to 100 for line ".to_string();
    cx.fail_at(pointer(path), m, true);
}

/// Numbers for number fields: D23's hostile ones, and random ones around its bounds.
pub fn number_text() -> impl Strategy<Value = String> {
    let fixed = select(vec![
        "1e99999999999",
        "-1e-99999999999",
        "0e10000000000000",
        "1E+9223372036854775807",
        "1.0000000000000000001",
        "1.500",
        "1000e-3",
        "1.5e1",
        "25e-1",
        "-0",
        "1e-7",
        "9223372036854775807",
        "-9223372036854775808",
        "9223372036854775808",
        "123456789012345678.99",
        "1234567890123456789",
        "999999999999999999.995",
    ])
    .prop_map(str::to_string);
    let long = select(vec![0usize, 1, 2, 3]).prop_map(|k| match k {
        0 => format!("1{}", "0".repeat(9_999)),
        1 => format!("0.{}1", "0".repeat(9_998)),
        2 => format!("1.{}", "0".repeat(9_999)),
        _ => "9".repeat(10_000),
    });
    let digits = |n| vec(proptest::char::range('0', '9'), n).prop_map(String::from_iter);
    let random = (
        any::<bool>(),
        1u8..=9,
        digits(0..22),
        digits(0..12),
        proptest::option::of(-40i32..40),
    )
        .prop_map(|(neg, first, int, frac, exp)| {
            let mut t = format!("{}{first}{int}", if neg { "-" } else { "" });
            if !frac.is_empty() {
                t = format!("{t}.{frac}");
            }
            if let Some(e) = exp {
                t = format!("{t}e{e}");
            }
            t
        });
    prop_oneof![3 => fixed, 1 => long, 4 => random]
}
