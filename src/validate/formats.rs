//! The rules JSON Schema cannot say (D14), as custom `format`s a schema attaches to a field:
//! decimal places, calendar dates, IBAN and BIC, coding sums, bank-account identity.
//!
//! Each check returns the exact message of the decisions table; `messages` passes it through.
//! A check ignores values of other types: the schema's `type` reports those.

use super::messages::render_str;
use crate::number::Decimal;
use serde_json::Value;
use std::error::Error;

type Check = Result<(), Box<dyn Error>>;

/// The formats registered with the schema compiler, by name.
pub fn all() -> Vec<boon::Format> {
    vec![
        boon::Format {
            name: "money",
            func: money,
        },
        boon::Format {
            name: "quantity",
            func: quantity,
        },
        boon::Format {
            name: "date",
            func: calendar_date,
        },
        boon::Format {
            name: "iban",
            func: iban,
        },
        boon::Format {
            name: "bic",
            func: bic,
        },
        boon::Format {
            name: "coding-sum",
            func: coding_sum,
        },
        boon::Format {
            name: "bank-account",
            func: bank_account,
        },
    ]
}

/// Whether a format's error text is already the final message.
pub fn is_ours(name: &str) -> bool {
    matches!(
        name,
        "money" | "quantity" | "date" | "iban" | "bic" | "coding-sum" | "bank-account"
    )
}

/// Money (`Kind::Decimal(2)`) and quantities (`Kind::Decimal(6)`): the schema's `format` names
/// the kind, and `numbers.rs` checks places and integer digits on the exact value (D6, D23),
/// where a number's digits are read without expanding it. Nothing is left for boon to check.
fn money(_: &Value) -> Check {
    Ok(())
}

/// See [`money`].
fn quantity(_: &Value) -> Check {
    Ok(())
}

/// A `YYYY-MM-DD` string that names a real day (D7). Strings of another shape are left to the
/// `pattern`, so a bad date gets exactly one message.
fn calendar_date(v: &Value) -> Check {
    let Value::String(s) = v else { return Ok(()) };
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
        return Err(format!("string {} is not a valid calendar date", render_str(s)).into());
    }
    Ok(())
}

/// The text of a string that is not empty; `None` for an optional string left empty (D8) and
/// for anything else (its type is the schema's business).
fn filled(v: &Value) -> Option<&str> {
    v.as_str().filter(|s| !s.is_empty())
}

/// An IBAN with a valid mod-97 checksum (D13), in electronic or print format. Empty is an
/// optional string left empty (D8); the bank account then needs an account number.
fn iban(v: &Value) -> Check {
    let Some(s) = filled(v) else { return Ok(()) };
    if s.parse::<iban::Iban>().is_err() {
        return Err(format!("string {} is not a valid IBAN", render_str(s)).into());
    }
    Ok(())
}

/// A BIC: 4 letters (bank), 2 letters (country), 2 letters or digits (location), optionally 3
/// letters or digits (branch) (D13). Empty is an optional string left empty (D8).
fn bic(v: &Value) -> Check {
    let Some(s) = filled(v) else { return Ok(()) };
    let b = s.as_bytes();
    let alnum = |r: &[u8]| {
        r.iter()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
    };
    let ok = (b.len() == 8 || b.len() == 11)
        && b[..6].iter().all(u8::is_ascii_uppercase)
        && alnum(&b[6..]);
    if !ok {
        return Err(format!("string {} is not a valid BIC", render_str(s)).into());
    }
    Ok(())
}

/// The distribution percentages of a PO v2 line's coding rows total exactly 100 (D6, D11).
/// Skipped when a percentage is missing or not a number: that is reported on its own.
fn coding_sum(v: &Value) -> Check {
    let Some(Value::Array(coding)) = v.get("coding") else {
        return Ok(());
    };
    if coding.is_empty() {
        return Ok(());
    }
    let mut sum = rust_decimal::Decimal::ZERO;
    for row in coding {
        match row.get("distribution_percentage") {
            Some(Value::Number(n)) => match Decimal::parse(n.as_str()).and_then(|d| d.exact()) {
                Some(d) => sum += d,
                None => return Ok(()),
            },
            _ => return Ok(()),
        }
    }
    if sum != rust_decimal::Decimal::ONE_HUNDRED {
        let line = match v.get("line_number") {
            Some(Value::Number(n)) => n.as_str().to_string(),
            Some(Value::String(s)) => s.clone(),
            _ => "?".to_string(),
        };
        return Err(
            format!("coding distribution_percentage must sum to 100 for line {line}").into(),
        );
    }
    Ok(())
}

/// A vendor bank account is identified by an IBAN or an account number (D13).
fn bank_account(v: &Value) -> Check {
    let Value::Object(o) = v else { return Ok(()) };
    let present = |k: &str| matches!(o.get(k), Some(Value::String(s)) if !s.is_empty());
    if !present("iban") && !present("account_number") {
        return Err("bank account needs an iban or an account_number".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msg(r: Check) -> String {
        r.err().map(|e| e.to_string()).unwrap_or_default()
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
