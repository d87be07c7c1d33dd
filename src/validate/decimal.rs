//! Exact decimal handling of JSON numbers as received (D6).
//!
//! With serde_json's `arbitrary_precision` a number keeps the text the client sent, so decimal
//! places are counted on that text and values are passed on unchanged. Counting on the text
//! (instead of parsing into `rust_decimal`, which holds 28 digits) stays exact for any length.

use rust_decimal::Decimal;
use std::borrow::Cow;

/// The parts of a JSON number's text: sign, digits before and after the point, exponent.
struct Parts<'a> {
    negative: bool,
    int: &'a str,
    frac: &'a str,
    exp: i64,
}

fn parts(text: &str) -> Option<Parts<'_>> {
    let (negative, rest) = match text.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, text),
    };
    let (mantissa, exp) = match rest.find(['e', 'E']) {
        Some(i) => (&rest[..i], rest[i + 1..].parse::<i64>().ok()?),
        None => (rest, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    (!int.is_empty() && digits(int) && digits(frac)).then_some(Parts {
        negative,
        int,
        frac,
        exp,
    })
}

/// Decimal places of the exact value, trailing zeros ignored: `1.500` has 1, `1e-3` has 3,
/// `1.5e1` has 0. `None` when the text is not a JSON number.
pub fn places(text: &str) -> Option<u64> {
    let p = parts(text)?;
    let frac = p.frac.trim_end_matches('0');
    let places = frac.len() as i64 - p.exp;
    Some(places.max(0) as u64)
}

/// The number in plain notation, exactly: the text itself unless it has an exponent, in which
/// case the point is moved (`1e+2` is `100`, `2.5E-3` is `0.0025`).
pub fn plain(text: &str) -> Cow<'_, str> {
    let Some(p) = parts(text) else {
        return Cow::Borrowed(text);
    };
    if p.exp == 0 && !text.contains(['e', 'E']) {
        return Cow::Borrowed(text);
    }
    let digits: String = [p.int, p.frac].concat();
    // Position of the decimal point within `digits` after applying the exponent.
    let point = p.int.len() as i64 + p.exp;
    let (int, frac) = if point <= 0 {
        (
            "0".to_string(),
            "0".repeat(point.unsigned_abs() as usize) + &digits,
        )
    } else if point as usize >= digits.len() {
        (
            digits.clone() + &"0".repeat(point as usize - digits.len()),
            String::new(),
        )
    } else {
        let (a, b) = digits.split_at(point as usize);
        (a.to_string(), b.to_string())
    };
    let int = int.trim_start_matches('0');
    let int = if int.is_empty() { "0" } else { int };
    let frac = frac.trim_end_matches('0');
    let sign = if p.negative { "-" } else { "" };
    Cow::Owned(if frac.is_empty() {
        format!("{sign}{int}")
    } else {
        format!("{sign}{int}.{frac}")
    })
}

/// The exact value, for arithmetic (coding sums, D6). `None` beyond rust_decimal's range.
pub fn exact(text: &str) -> Option<Decimal> {
    Decimal::from_str_exact(&plain(text)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_counted_on_the_exact_value() {
        assert_eq!(places("19.99"), Some(2));
        assert_eq!(places("1.500"), Some(1));
        assert_eq!(places("100"), Some(0));
        assert_eq!(places("0.07"), Some(2));
        assert_eq!(places("1.234"), Some(3));
        assert_eq!(places("-2.125"), Some(3));
        assert_eq!(places("1e-3"), Some(3));
        assert_eq!(places("1.5e1"), Some(0));
        assert_eq!(places("1.25E+1"), Some(1));
        assert_eq!(places("abc"), None);
    }

    #[test]
    fn plain_moves_the_point_exactly() {
        assert_eq!(plain("19.99"), "19.99");
        assert_eq!(plain("1.50"), "1.50");
        assert_eq!(plain("1e+2"), "100");
        assert_eq!(plain("2.5E-3"), "0.0025");
        assert_eq!(plain("-1.25e1"), "-12.5");
        assert_eq!(plain("123.456e1"), "1234.56");
    }

    #[test]
    fn sums_are_exact() {
        let sum: Decimal = ["33.33", "33.33", "33.34"]
            .iter()
            .filter_map(|t| exact(t))
            .sum();
        assert_eq!(sum, Decimal::from(100));
    }
}
