//! JSON numbers read exactly from their text, without ever expanding them (D6, D23).
//!
//! With serde_json's `arbitrary_precision` a number keeps the text the client sent (exponents
//! normalised to `e+`/`e-`). [`Decimal::parse`] splits that text into sign, significant digits
//! and a power of ten, so the value's integer digits, decimal places and integrality are known
//! from a few integer operations, whatever the exponent: `1e99999999999` costs no more than
//! `1e9`. Text is only produced for numbers whose plain form is short (validation guarantees
//! it; [`MAX_PLAIN_GROWTH`] guarantees it for anything else).

use std::borrow::Cow;

/// Exponents are clamped to this magnitude: beyond it every non-zero number has more integer
/// digits or decimal places than any rule allows, and the arithmetic below cannot overflow.
const EXP_CLAMP: i64 = 1 << 40;

/// The largest magnitude of an integer field (D23).
pub const INTEGER_MAX: u64 = i64::MAX as u64;

/// Plain notation is never more than this many characters longer than the number's text; a
/// number whose plain form would be is written as received. Validated numbers are far below.
pub const MAX_PLAIN_GROWTH: u64 = 64;

/// A JSON number's exact value: `digits × 10^scale` with the sign, where `digits` has no
/// leading or trailing zeros (empty for zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decimal<'a> {
    text: &'a str,
    negative: bool,
    int: &'a str,
    frac: &'a str,
    /// Range of the significant digits in `int` followed by `frac`.
    first: usize,
    end: usize,
    scale: i64,
    has_exponent: bool,
}

impl<'a> Decimal<'a> {
    /// Reads a JSON number's text; `None` when it is not one. Cost: linear in the text.
    pub fn parse(text: &'a str) -> Option<Self> {
        let (negative, rest) = match text.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, text),
        };
        let (mantissa, exp, has_exponent) = match rest.find(['e', 'E']) {
            Some(i) => (&rest[..i], exponent(&rest[i + 1..])?, true),
            None => (rest, 0, false),
        };
        let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if int.is_empty() || !digits(int) || !digits(frac) || (frac.is_empty() && mantissa != int) {
            return None;
        }
        let n = int.len() + frac.len();
        let at = |i: usize| {
            if i < int.len() {
                int.as_bytes()[i]
            } else {
                frac.as_bytes()[i - int.len()]
            }
        };
        let first = (0..n).find(|&i| at(i) != b'0').unwrap_or(n);
        let end = (first..n)
            .rev()
            .find(|&i| at(i) != b'0')
            .map_or(first, |i| i + 1);
        // The last significant digit sits at 10^(int.len() - end) before the exponent.
        let scale = exp + int.len() as i64 - end as i64;
        Some(Self {
            text,
            negative,
            int,
            frac,
            first,
            end,
            scale,
            has_exponent,
        })
    }

    /// The text as received.
    pub fn text(&self) -> &'a str {
        self.text
    }

    /// Whether the value is zero (`0`, `-0.0`, `0e99999`).
    pub fn is_zero(&self) -> bool {
        self.first == self.end
    }

    fn significant(&self) -> u64 {
        (self.end - self.first) as u64
    }

    /// Decimal places of the exact value, trailing zeros ignored: `1.500` has 1, `1e-3` 3,
    /// `1000e-3` none.
    pub fn places(&self) -> u64 {
        if self.is_zero() {
            0
        } else {
            (-self.scale).max(0) as u64
        }
    }

    /// Digits before the decimal point of the exact value: `0.5` has none, `1.5e1` two.
    pub fn int_digits(&self) -> u64 {
        if self.is_zero() {
            0
        } else {
            (self.significant() as i64 + self.scale).max(0) as u64
        }
    }

    /// Whether the exact value is a whole number (`1.0`, `1e2`; not `1.0000000000000000001`).
    pub fn is_integral(&self) -> bool {
        self.places() == 0
    }

    /// The significant digits, in order.
    fn digit_iter(&self) -> impl Iterator<Item = u8> + '_ {
        let (int, frac) = (self.int.as_bytes(), self.frac.as_bytes());
        (self.first..self.end).map(move |i| {
            if i < int.len() {
                int[i]
            } else {
                frac[i - int.len()]
            }
        })
    }

    /// The magnitude of an integral value, when it fits in a `u64`.
    fn magnitude(&self) -> Option<u64> {
        if self.is_zero() {
            return Some(0);
        }
        if !self.is_integral() || self.int_digits() > 20 {
            return None;
        }
        let mut v: u64 = 0;
        for d in self.digit_iter() {
            v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
        }
        for _ in 0..self.scale {
            v = v.checked_mul(10)?;
        }
        Some(v)
    }

    /// Whether an integral value's magnitude is at most [`INTEGER_MAX`] (D23).
    pub fn fits_integer(&self) -> bool {
        self.magnitude().is_some_and(|m| m <= INTEGER_MAX)
    }

    /// The plain notation of the exact value with `places` fraction digits at most, or `None`
    /// when it would be longer than the text by more than [`MAX_PLAIN_GROWTH`].
    fn expanded(&self) -> Option<String> {
        let int_digits = self.int_digits();
        let places = self.places();
        if int_digits + places > self.text.len() as u64 + MAX_PLAIN_GROWTH {
            return None;
        }
        let mut out = String::with_capacity((int_digits + places + 3) as usize);
        if self.negative && !self.is_zero() {
            out.push('-');
        }
        let digits: Vec<u8> = self.digit_iter().collect();
        let point = int_digits as usize; // digits before the point
        if point == 0 {
            out.push('0');
        } else {
            for i in 0..point {
                out.push(char::from(*digits.get(i).unwrap_or(&b'0')));
            }
        }
        if places > 0 {
            out.push('.');
            let leading_zeros = places as usize - (digits.len() - point.min(digits.len()));
            out.extend(std::iter::repeat_n('0', leading_zeros));
            out.extend(
                digits[point.min(digits.len())..]
                    .iter()
                    .map(|&b| char::from(b)),
            );
        }
        Some(out)
    }

    /// An integral value in canonical form (`1.0` and `1e0` are `1`, `-0` is `0`), as XML
    /// Schema's `integer` wants it (D23).
    pub fn canonical_integer(&self) -> Cow<'a, str> {
        match self.expanded() {
            Some(s) if self.is_integral() && s != self.text => Cow::Owned(s),
            _ => Cow::Borrowed(self.text),
        }
    }

    /// A decimal as written to the XML (D6, D23): as received, except that a number written
    /// with an exponent is written in plain notation, and fraction digits beyond `places`
    /// that are trailing zeros are dropped (`1.500` with 2 places is `1.50`).
    pub fn canonical_decimal(&self, places: u64) -> Cow<'a, str> {
        if self.has_exponent {
            return match self.expanded() {
                Some(s) => Cow::Owned(s),
                None => Cow::Borrowed(self.text),
            };
        }
        let keep = self
            .frac
            .len()
            .min(places as usize)
            .max(self.places() as usize);
        if keep >= self.frac.len() {
            return Cow::Borrowed(self.text);
        }
        let cut = self.text.len() - (self.frac.len() - keep);
        let trimmed = &self.text[..cut];
        Cow::Borrowed(trimmed.strip_suffix('.').unwrap_or(trimmed))
    }

    /// The exact value for arithmetic (coding sums), when it has at most 28 significant
    /// digits and places, rust_decimal's range.
    pub fn exact(&self) -> Option<rust_decimal::Decimal> {
        if self.int_digits() + self.places() > 28 {
            return None;
        }
        rust_decimal::Decimal::from_str_exact(&self.expanded()?).ok()
    }
}

/// An exponent's value, clamped to ±[`EXP_CLAMP`] (its digits are read, never multiplied
/// out beyond that).
fn exponent(text: &str) -> Option<i64> {
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut v: i64 = 0;
    for b in digits.bytes() {
        v = (v * 10 + i64::from(b - b'0')).min(EXP_CLAMP);
    }
    Some(if negative { -v } else { v })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(t: &str) -> Decimal<'_> {
        Decimal::parse(t).unwrap_or_else(|| panic!("{t} is a number"))
    }

    #[test]
    fn places_and_integer_digits_come_from_the_exact_value() {
        // (text, places, integer digits, integral)
        let cases = [
            ("19.99", 2, 2, false),
            ("1.500", 1, 1, false),
            ("100", 0, 3, true),
            ("0.07", 2, 0, false),
            ("-2.125", 3, 1, false),
            ("1e-3", 3, 0, false),
            ("1.5e1", 0, 2, true),
            ("1.25e+1", 1, 2, false),
            ("1000e-3", 0, 1, true),
            ("1.0", 0, 1, true),
            ("1e2", 0, 3, true),
            ("0e10000000000000", 0, 0, true),
            ("0e-10000000000000", 0, 0, true),
            ("-0.000", 0, 0, true),
            ("1.0000000000000000001", 19, 1, false),
            ("1e99999999999", 0, 99999999999 + 1, true),
            ("-1e-99999999999", 99999999999, 0, false),
            ("1e+9223372036854775807", 0, EXP_CLAMP as u64 + 1, true),
            ("123456789012345678.5", 1, 18, false),
        ];
        for (text, places, int_digits, integral) in cases {
            let n = d(text);
            assert_eq!(n.places(), places, "places of {text}");
            assert_eq!(n.int_digits(), int_digits, "integer digits of {text}");
            assert_eq!(n.is_integral(), integral, "integral {text}");
        }
    }

    #[test]
    fn ten_thousand_digit_mantissas_are_read_exactly() {
        let one = format!("1{}e-9999", "0".repeat(9999));
        let n = d(&one);
        assert!(n.is_integral() && n.fits_integer());
        assert_eq!(n.canonical_integer(), "1");
        assert_eq!(n.canonical_decimal(2), "1");
        let tiny = format!("0.{}1", "0".repeat(9998));
        assert_eq!(d(&tiny).places(), 9999);
        assert_eq!(d(&tiny).canonical_decimal(2), tiny.as_str());
    }

    #[test]
    fn integer_range_is_checked_on_the_digits() {
        assert!(d("9223372036854775807").fits_integer());
        assert!(d("-9223372036854775807").fits_integer());
        assert!(!d("9223372036854775808").fits_integer());
        assert!(!d("-9223372036854775808").fits_integer());
        assert!(d("9.223372036854775807e18").fits_integer());
        assert!(!d("1e19").fits_integer());
        assert!(!d("1e99999999999").fits_integer());
        assert!(d("0e99999999999").fits_integer());
        assert!(!d("1.5").fits_integer());
    }

    #[test]
    fn canonical_forms() {
        assert_eq!(d("1.0").canonical_integer(), "1");
        assert_eq!(d("1e+2").canonical_integer(), "100");
        assert_eq!(d("-0").canonical_integer(), "0");
        assert_eq!(d("42").canonical_integer(), "42");
        assert_eq!(d("0e+10000000000000").canonical_integer(), "0");
        assert_eq!(d("1.5e+1").canonical_decimal(2), "15");
        assert_eq!(d("25e-1").canonical_decimal(2), "2.5");
        assert_eq!(d("2.5E-3").canonical_decimal(6), "0.0025");
        assert_eq!(d("-1.25e1").canonical_decimal(2), "-12.5");
        assert_eq!(d("1.500").canonical_decimal(2), "1.50");
        assert_eq!(d("1.50").canonical_decimal(2), "1.50");
        assert_eq!(d("1.000").canonical_decimal(2), "1.00");
        assert_eq!(d("1.000").canonical_decimal(0), "1");
        assert_eq!(d("2.0000000").canonical_decimal(6), "2.000000");
        assert_eq!(d("19.99").canonical_decimal(2), "19.99");
        assert_eq!(d("7").canonical_decimal(2), "7");
        // Never expanded beyond the bound, whatever the exponent.
        assert_eq!(d("1e+99999999999").canonical_decimal(2), "1e+99999999999");
        assert_eq!(d("1e+99999999999").canonical_integer(), "1e+99999999999");
    }

    #[test]
    fn sums_are_exact_and_bounded() {
        let sum: rust_decimal::Decimal = ["33.33", "33.33", "33.34"]
            .iter()
            .filter_map(|t| d(t).exact())
            .sum();
        assert_eq!(sum, rust_decimal::Decimal::ONE_HUNDRED);
        assert_eq!(d("1e+2").exact(), Some(rust_decimal::Decimal::ONE_HUNDRED));
        assert_eq!(d("1e+99999999999").exact(), None);
    }

    #[test]
    fn not_numbers() {
        for t in ["", "-", "abc", "1.", ".5", "1e", "1e+", "--1", "1x"] {
            assert!(Decimal::parse(t).is_none(), "{t:?}");
        }
    }
}
