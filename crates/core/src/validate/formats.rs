//! The rules JSON Schema cannot say (D14), as custom `format`s a schema attaches to a field:
//! decimal places, calendar dates, IBAN and BIC, coding sums, bank-account identity.
//!
//! Each check returns the exact message of the decisions table; `messages` passes it through.
//! A check ignores values of other types: the schema's `type` reports those.

use super::messages::render_str;
use crate::number::Decimal;
use crate::tree::{Ref, Tree};
use serde_json::Value;
use std::error::Error;

type Check = Result<(), Box<dyn Error>>;

/// The formats of ours, by the name a schema gives them. [`check`] runs them on any tree;
/// boon runs them on `serde_json` values through [`all`].
pub const NAMES: [&str; 7] = [
    "money",
    "quantity",
    "date",
    "iban",
    "bic",
    "coding-sum",
    "bank-account",
];

/// The formats registered with the schema compiler, by name.
pub fn all() -> Vec<boon::Format> {
    fn f(name: &'static str, func: fn(&Value) -> Check) -> boon::Format {
        boon::Format { name, func }
    }
    vec![
        f("money", |v| boxed(check("money", v))),
        f("quantity", |v| boxed(check("quantity", v))),
        f("date", |v| boxed(check("date", v))),
        f("iban", |v| boxed(check("iban", v))),
        f("bic", |v| boxed(check("bic", v))),
        f("coding-sum", |v| boxed(check("coding-sum", v))),
        f("bank-account", |v| boxed(check("bank-account", v))),
    ]
}

fn boxed(r: Result<(), String>) -> Check {
    r.map_err(Into::into)
}

/// Whether a format's error text is already the final message.
pub fn is_ours(name: &str) -> bool {
    NAMES.contains(&name)
}

/// Runs the format `name` of ours on `v`: `Err` with the exact message when `v` breaks it.
/// A name that is not ours passes (the fast path never compiles a schema that uses one).
pub fn check<T: Tree>(name: &str, v: &T) -> Result<(), String> {
    match name {
        // Money (`Kind::Decimal(2)`) and quantities (`Kind::Decimal(6)`): the schema's
        // `format` names the kind, and `numbers.rs` checks places and integer digits on the
        // exact value (D6, D23), where a number's digits are read without expanding it.
        // Nothing is left to check here.
        "money" | "quantity" => Ok(()),
        "date" => v.as_str().map_or(Ok(()), calendar_date),
        "iban" => filled(v).map_or(Ok(()), iban),
        "bic" => filled(v).map_or(Ok(()), bic),
        "coding-sum" => coding_sum(v),
        "bank-account" => bank_account(v),
        _ => Ok(()),
    }
}

/// A `YYYY-MM-DD` string that names a real day (D7). Strings of another shape are left to the
/// `pattern`, so a bad date gets exactly one message.
fn calendar_date(s: &str) -> Result<(), String> {
    let b = s.as_bytes();
    let shaped = b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit());
    if !shaped {
        return Ok(());
    }
    let num = |r: std::ops::Range<usize>| s[r].parse::<u32>().unwrap_or(0);
    let (year, month, day) = (num(0..4), num(5..7), num(8..10));
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => 0,
    };
    if year == 0 || day == 0 || day > days {
        return Err(format!(
            "string {} is not a valid calendar date",
            render_str(s)
        ));
    }
    Ok(())
}

/// The text of a string that is not empty; `None` for an optional string left empty (D8) and
/// for anything else (its type is the schema's business).
fn filled<T: Tree>(v: &T) -> Option<&str> {
    v.as_str().filter(|s| !s.is_empty())
}

/// An IBAN with a valid mod-97 checksum (D13), in electronic or print format. Empty is an
/// optional string left empty (D8); the bank account then needs an account number.
fn iban(s: &str) -> Result<(), String> {
    if s.parse::<iban::Iban>().is_err() {
        return Err(format!("string {} is not a valid IBAN", render_str(s)));
    }
    Ok(())
}

/// A BIC: 4 letters (bank), 2 letters (country), 2 letters or digits (location), optionally 3
/// letters or digits (branch) (D13). Empty is an optional string left empty (D8).
fn bic(s: &str) -> Result<(), String> {
    let b = s.as_bytes();
    let alnum = |r: &[u8]| {
        r.iter()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
    };
    let ok = (b.len() == 8 || b.len() == 11)
        && b[..6].iter().all(u8::is_ascii_uppercase)
        && alnum(&b[6..]);
    if !ok {
        return Err(format!("string {} is not a valid BIC", render_str(s)));
    }
    Ok(())
}

/// The distribution percentages of a PO v2 line's coding rows total exactly 100 (D6, D11).
/// Skipped when a percentage is missing or not a number: that is reported on its own.
fn coding_sum<T: Tree>(v: &T) -> Result<(), String> {
    let Some(Ref::Array(coding)) = v.member("coding").map(Tree::get_ref) else {
        return Ok(());
    };
    if coding.is_empty() {
        return Ok(());
    }
    let mut sum = rust_decimal::Decimal::ZERO;
    for row in coding {
        match row.member("distribution_percentage").map(Tree::get_ref) {
            Some(Ref::Number(n)) => match Decimal::parse(n).and_then(|d| d.exact()) {
                Some(d) => sum += d,
                None => return Ok(()),
            },
            _ => return Ok(()),
        }
    }
    if sum != rust_decimal::Decimal::ONE_HUNDRED {
        let line = match v.member("line_number").map(Tree::get_ref) {
            Some(Ref::Number(n)) => n.to_string(),
            Some(Ref::String(s)) => s.to_string(),
            _ => "?".to_string(),
        };
        return Err(format!(
            "coding distribution_percentage must sum to 100 for line {line}"
        ));
    }
    Ok(())
}

/// A vendor bank account is identified by an IBAN or an account number (D13).
fn bank_account<T: Tree>(v: &T) -> Result<(), String> {
    let Ref::Object(_) = v.get_ref() else {
        return Ok(());
    };
    let present = |k: &str| v.member(k).and_then(filled).is_some();
    if !present("iban") && !present("account_number") {
        return Err("bank account needs an iban or an account_number".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msg(r: Result<(), String>) -> String {
        r.err().unwrap_or_default()
    }

    fn calendar_date(v: &Value) -> Result<(), String> {
        check("date", v)
    }

    fn iban(v: &Value) -> Result<(), String> {
        check("iban", v)
    }

    fn bic(v: &Value) -> Result<(), String> {
        check("bic", v)
    }

    fn coding_sum(v: &Value) -> Result<(), String> {
        check("coding-sum", v)
    }

    #[test]
    fn calendar_dates() {
        assert!(calendar_date(&json!("2024-02-29")).is_ok());
        assert!(calendar_date(&json!("2000-02-29")).is_ok());
        assert_eq!(
            msg(calendar_date(&json!("2024-02-30"))),
            r#"string "2024-02-30" is not a valid calendar date"#
        );
        assert!(calendar_date(&json!("1900-02-29")).is_err());
        assert!(calendar_date(&json!("2023-13-01")).is_err());
        assert!(calendar_date(&json!("2023-00-10")).is_err());
        // Another shape is the pattern's business, not this check's.
        assert!(calendar_date(&json!("2024/02/30")).is_ok());
    }

    #[test]
    fn iban_and_bic() {
        assert!(iban(&json!("DE89370400440532013000")).is_ok());
        assert!(iban(&json!("DE89 3704 0044 0532 0130 00")).is_ok());
        assert_eq!(
            msg(iban(&json!("DE89370400440532013001"))),
            r#"string "DE89370400440532013001" is not a valid IBAN"#
        );
        assert!(bic(&json!("DEUTDEFF")).is_ok());
        assert!(bic(&json!("DEUTDEFF500")).is_ok());
        assert!(bic(&json!("DEUTDEF")).is_err());
        assert!(bic(&json!("deutdeff")).is_err());
        // D8: optional strings may be empty.
        assert!(iban(&json!("")).is_ok());
        assert!(bic(&json!("")).is_ok());
    }

    #[test]
    fn coding_sums_are_exact() {
        let row = |p: Vec<Value>| {
            json!({"line_number": 3, "coding": p.into_iter()
                .map(|p| json!({"distribution_percentage": p})).collect::<Vec<_>>()})
        };
        let ok: Value = serde_json::from_str("[33.33, 33.33, 33.34]").unwrap();
        assert!(coding_sum(&row(ok.as_array().unwrap().clone())).is_ok());
        let bad: Value = serde_json::from_str("[50, 49.99]").unwrap();
        assert_eq!(
            msg(coding_sum(&row(bad.as_array().unwrap().clone()))),
            "coding distribution_percentage must sum to 100 for line 3"
        );
    }
}
