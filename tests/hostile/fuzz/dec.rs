//! The oracle's own reading of a JSON number (D23), written apart from `src/number.rs` so the
//! two can disagree: sign, significant digits and a power of ten, never expanded.

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dec {
    neg: bool,
    /// Significant digits without leading or trailing zeros; empty for zero.
    digits: String,
    /// The value is `digits × 10^scale`.
    scale: i128,
}

/// Exponents beyond this are as good as infinite for every rule.
const EXP_CAP: i128 = 1_000_000_000_000_000_000_000;

impl Dec {
    /// Reads JSON number text; `None` if it is not one.
    pub fn parse(text: &str) -> Option<Dec> {
        let (neg, rest) = match text.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, text),
        };
        let (mantissa, exp) = match rest.find(['e', 'E']) {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        let exp = match exp {
            None => 0,
            Some(e) => {
                let (sign, digits) = match e.as_bytes().first() {
                    Some(b'-') => (-1, &e[1..]),
                    Some(b'+') => (1, &e[1..]),
                    _ => (1, e),
                };
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                let digits = digits.trim_start_matches('0');
                let magnitude = if digits.len() > 24 {
                    EXP_CAP
                } else {
                    digits.parse::<i128>().unwrap_or(0).min(EXP_CAP)
                };
                sign * magnitude
            }
        };
        let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if int.is_empty() || !all_digits(int) || !all_digits(frac) {
            return None;
        }
        if mantissa.contains('.') && frac.is_empty() {
            return None;
        }
        let all = format!("{int}{frac}");
        let lead = all.len() - all.trim_start_matches('0').len();
        let significant = all.trim_start_matches('0').trim_end_matches('0');
        // The last significant digit's position, counted from the decimal point.
        let last = lead + significant.len();
        let scale = exp + int.len() as i128 - last as i128;
        Some(Dec {
            neg,
            digits: significant.to_string(),
            scale: if significant.is_empty() { 0 } else { scale },
        })
    }

    pub fn is_zero(&self) -> bool {
        self.digits.is_empty()
    }

    /// Decimal places of the exact value (trailing zeros ignored).
    pub fn places(&self) -> i128 {
        (-self.scale).max(0)
    }

    /// Digits before the decimal point of the exact value.
    pub fn int_digits(&self) -> i128 {
        if self.is_zero() {
            0
        } else {
            (self.digits.len() as i128 + self.scale).max(0)
        }
    }

    /// An integral value of magnitude at most 9223372036854775807 (D23).
    pub fn fits_integer(&self) -> bool {
        if self.places() > 0 {
            return false;
        }
        match self.int_digits() {
            0..=18 => true,
            19 => {
                let plain = format!("{}{}", self.digits, "0".repeat(self.scale as usize));
                plain.as_str() <= "9223372036854775807"
            }
            _ => false,
        }
    }

    /// Whether a decimal field with `places` allows it (D6, D23).
    pub fn fits_decimal(&self, places: u32) -> bool {
        self.int_digits() <= 18 && self.places() <= i128::from(places)
    }

    /// An integral value in canonical form: no sign on zero, no fraction, no exponent.
    pub fn canonical_integer(&self) -> String {
        if self.is_zero() {
            return "0".into();
        }
        let sign = if self.neg { "-" } else { "" };
        format!(
            "{sign}{}{}",
            self.digits,
            "0".repeat(self.scale.max(0) as usize)
        )
    }

    /// The same value, sign of zero ignored.
    pub fn same_value(&self, other: &Dec) -> bool {
        self.digits == other.digits
            && self.scale == other.scale
            && (self.neg == other.neg || self.is_zero())
    }
}

#[test]
fn the_oracle_reads_numbers_exactly() {
    let d = |t: &str| Dec::parse(t).unwrap();
    assert_eq!(d("1.500").places(), 1);
    assert_eq!(d("1000e-3").places(), 0);
    assert_eq!(d("1.5e1").int_digits(), 2);
    assert!(d("0e10000000000000").is_zero());
    assert!(d("1e99999999999").int_digits() > 18);
    assert!(d("-1e-99999999999").places() > 6);
    assert!(!d("1E+9223372036854775807").fits_integer());
    assert!(d("9223372036854775807").fits_integer());
    assert!(!d("9223372036854775808").fits_integer());
    assert!(!d("1.0000000000000000001").fits_integer());
    assert!(d("123456789012345678.99").fits_decimal(2));
    assert!(d("12.34").same_value(&d("0.1234E+2")));
    assert!(Dec::parse("1.").is_none() && Dec::parse("e5").is_none());
}
