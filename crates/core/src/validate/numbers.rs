//! The number rules (D6, D23), checked along the record's [`Shape`] on each number's exact
//! value, never expanded: integer fields hold whole numbers of at most
//! 9223372036854775807 in magnitude, decimal fields at most 18 integer digits and their
//! format's decimal places.

use super::messages::{Step, Violation};
use crate::number::{Decimal, INTEGER_MAX};
use crate::shape::{DECIMAL_INT_DIGITS, Kind, Shape};
use crate::tree::{Members, Ref, Tree};

/// A step of the path walked, borrowed from the record: owned [`Step`]s are only made for a
/// violation.
#[derive(Clone, Copy)]
enum At<'r> {
    Key(&'r str),
    Index(usize),
}

fn owned(path: &[At<'_>]) -> Vec<Step> {
    path.iter()
        .map(|s| match s {
            At::Key(k) => Step::Key((*k).to_string()),
            At::Index(i) => Step::Index(*i),
        })
        .collect()
}

/// Every number-rule violation of `record`, in document order.
pub fn check<T: Tree>(shape: &Shape, record: &T, out: &mut Vec<Violation>) {
    if let Ref::Object(map) = record.get_ref() {
        object::<T>(shape, map, &mut Vec::new(), out);
    }
}

fn object<'r, T: Tree + 'r>(
    shape: &Shape,
    map: &'r T::Object,
    steps: &mut Vec<At<'r>>,
    out: &mut Vec<Violation>,
) {
    map.each(|name, v| {
        let kind = match shape.field(name) {
            Some(f) => &f.kind,
            // An unknown field is the schema's business (refused, or kept as it is by a
            // replaced schema that allows it): its numbers still need a bound.
            None if shape.is_open() => &Kind::OTHER_NUMBER,
            None => return,
        };
        steps.push(At::Key(name));
        value(kind, v, steps, out);
        steps.pop();
    });
}

fn value<'r, T: Tree + 'r>(
    kind: &Kind,
    v: &'r T,
    steps: &mut Vec<At<'r>>,
    out: &mut Vec<Violation>,
) {
    match (v.get_ref(), kind) {
        (Ref::Number(n), Kind::Integer) => integer(n, steps, out),
        (Ref::Number(n), Kind::Decimal(places)) => decimal(n, *places, steps, out),
        (Ref::Number(n), Kind::Scalar) => {
            // A schema without a type here: bounded like any other decimal.
            decimal(n, crate::shape::OTHER_DECIMAL_PLACES, steps, out);
        }
        (Ref::Object(map), Kind::Object(shape)) => object::<T>(shape, map, steps, out),
        (Ref::Array(items), Kind::Array { of, .. }) => {
            for (i, item) in items.iter().enumerate() {
                steps.push(At::Index(i));
                value(of, item, steps, out);
                steps.pop();
            }
        }
        // Any other mismatch is a type error the schema reports.
        _ => {}
    }
}

/// The number's text as a message shows it (`<v>`: cut to 100 characters).
fn shown(text: &str) -> &str {
    match text.char_indices().nth(100) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

/// Rewrites a number message of this module that shows `parsed` (the parser's text of the
/// number) to show `written` (the client's own text, D23 addendum) instead.
pub fn reword(message: &mut String, parsed: &str, written: &str) {
    let old = format!("number {} ", shown(parsed));
    if let Some(rest) = message.strip_prefix(&old) {
        *message = format!("number {} {rest}", shown(written));
    }
}

fn integer(text: &str, steps: &[At<'_>], out: &mut Vec<Violation>) {
    let Some(d) = Decimal::parse(text) else {
        return;
    };
    let message = if !d.is_integral() {
        // A value with a fraction is a number, not an integer: the type rule's message.
        r#"instance type (number) does not match any allowed primitive type (allowed: ["integer"])"#
            .to_string()
    } else if !d.fits_integer() {
        format!(
            "number {} is out of range (maximum allowed: {INTEGER_MAX})",
            shown(text)
        )
    } else {
        return;
    };
    out.push(Violation::new(owned(steps), message));
}

fn decimal(text: &str, places: u64, steps: &[At<'_>], out: &mut Vec<Violation>) {
    let Some(d) = Decimal::parse(text) else {
        return;
    };
    if d.int_digits() > DECIMAL_INT_DIGITS {
        out.push(Violation::new(
            owned(steps),
            format!(
                "number {} has more than {DECIMAL_INT_DIGITS} integer digits",
                shown(text)
            ),
        ));
    }
    if d.places() > places {
        out.push(Violation::new(
            owned(steps),
            format!(
                "number {} has more than {places} decimal places",
                shown(text)
            ),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn messages(record: &str) -> Vec<(String, String)> {
        let shape = Shape::from_schema(&json!({
            "additionalProperties": false,
            "properties": {
                "n": {"type": "integer"},
                "price": {"type": "number", "format": "money"},
                "qty": {"type": "number", "format": "quantity"},
                "rows": {"type": "array", "items": {"type": "object", "properties": {"line": {"type": "integer"}}}}
            }
        }));
        let record: Value = serde_json::from_str(record).unwrap();
        let mut out = Vec::new();
        check(&shape, &record, &mut out);
        out.into_iter().map(|v| (v.pointer(), v.message)).collect()
    }

    #[test]
    fn integers() {
        assert!(messages(r#"{"n": 1.0, "rows": [{"line": 1e2}]}"#).is_empty());
        assert!(messages(r#"{"n": 0e10000000000000}"#).is_empty());
        assert!(messages(r#"{"n": -9223372036854775807}"#).is_empty());
        assert_eq!(
            messages(r#"{"n": 1.0000000000000000001}"#),
            [("/n".into(), r#"instance type (number) does not match any allowed primitive type (allowed: ["integer"])"#.into())]
        );
        assert_eq!(
            messages(r#"{"rows": [{"line": 1E+9223372036854775807}]}"#),
            [("/rows/0/line".into(), "number 1e+9223372036854775807 is out of range (maximum allowed: 9223372036854775807)".into())]
        );
    }

    #[test]
    fn decimals() {
        assert!(messages(r#"{"price": 1000e-3, "qty": 1.5e1}"#).is_empty());
        assert!(messages(r#"{"price": 0e-10000000000000}"#).is_empty());
        assert!(messages(r#"{"price": 123456789012345678.99}"#).is_empty());
        assert_eq!(
            messages(r#"{"price": 1e99999999999}"#),
            [(
                "/price".into(),
                "number 1e+99999999999 has more than 18 integer digits".into()
            )]
        );
        assert_eq!(
            messages(r#"{"qty": -1e-99999999999}"#),
            [(
                "/qty".into(),
                "number -1e-99999999999 has more than 6 decimal places".into()
            )]
        );
        assert_eq!(
            messages(r#"{"price": 1234567890123456789.123}"#).len(),
            2,
            "both rules are broken, both are reported (D2)"
        );
    }

    #[test]
    fn unknown_fields_of_a_closed_schema_are_left_to_the_schema() {
        assert!(messages(r#"{"x": 1e99999999999}"#).is_empty());
    }
}
