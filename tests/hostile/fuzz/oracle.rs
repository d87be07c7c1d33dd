//! What every answer must satisfy (D1-D5, D15-D16, D23-D25), given the case that was sent.

use super::case::{Body, Case, MAX_RECORDS};
use super::json::{J, lookup, position};
use crate::common::Reply;
use ap_intake::interfaces::Mode;
use regex::Regex;
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::OnceLock;

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}
pub(crate) use ensure;

/// The shapes of every record error text: decisions.md's table, D23/D24, and the texts the
/// code gives the currency/country patterns, BIC and bank accounts (D13).
fn shapes() -> &'static [Regex] {
    static SHAPES: OnceLock<Vec<Regex>> = OnceLock::new();
    SHAPES.get_or_init(|| {
        let s = r#""([^"\\]|\\.)*""#; // a JSON string, as <v> shows one
        let n = r"-?[0-9][0-9.eE+-]*"; // a number's text, cut to 100 characters
        let t = "(string|integer|number|object|array|boolean|null)";
        [
            r"required key \[.*\] not found".to_string(),
            r"extraneous key \[.*\] is not permitted".into(),
            r"duplicate key \[.*\] is not permitted".into(),
            format!(r"instance value \({s}\) not found in enum \(possible values: \[{s}(,{s})*\]\)"),
            format!(r#"string {s} does not match pattern "\^\\d\{{4\}}-\\d\{{2\}}-\\d\{{2\}}\$""#),
            format!(r#"string {s} does not match pattern "\^\(\[A-Z\]\{{[23]\}}\)\?\$""#),
            format!("string {s} is not a valid calendar date"),
            format!(r#"instance type \({t}\) does not match any allowed primitive type \(allowed: \["{t}"\]\)"#),
            format!(r"string {s} is too long \(length: [0-9]+, maximum allowed: [0-9]+\)"),
            r#"string "" is too short \(length: 0, required minimum: 1\)"#.into(),
            r"description_en is required\.".into(),
            r"array is too short: must have at least 1 elements but instance has 0 elements".into(),
            format!(r"number {n} has more than (2|6) decimal places"),
            format!(r"number {n} has more than 18 integer digits"),
            format!(r"number {n} is out of range \(maximum allowed: 9223372036854775807\)"),
            r"coding distribution_percentage must sum to 100 for line .*".into(),
            format!(r"string {s} is not a valid (IBAN|BIC)"),
            r"bank account needs an iban or an account_number".into(),
            format!(r"string {s} contains a character that XML cannot carry \(U\+[0-9A-F]{{4,6}}\)"),
        ]
        .iter()
        .map(|p| Regex::new(&format!("^(?s:{p})$")).unwrap())
        .collect()
    })
}

fn more_entry() -> &'static Regex {
    static MORE: OnceLock<Regex> = OnceLock::new();
    MORE.get_or_init(|| Regex::new(r"^[0-9]+ more error\(s\) not shown$").unwrap())
}

/// Whether a record error text has one of the documented shapes.
pub fn documented(error: &str) -> bool {
    shapes().iter().any(|r| r.is_match(error))
}

#[derive(Debug)]
pub struct Entry {
    pub index: usize,
    pub path: String,
    pub error: String,
}

/// The answer's common body, checked for the fields every JSON answer has (D4).
fn body(reply: &Reply) -> Result<Value, String> {
    let v: Value = serde_json::from_str(&reply.text)
        .map_err(|e| format!("answer {} is not JSON ({e}): {}", reply.status, reply.text))?;
    let id = v["request_id"].as_str().unwrap_or("");
    ensure!(!id.is_empty(), "no request_id: {}", reply.text);
    ensure!(
        reply.header("x-request-id") == Some(id),
        "x-request-id {:?} is not the body's {id}",
        reply.header("x-request-id")
    );
    ensure!(
        v["status"].is_string() && v["message"].is_string(),
        "status and message: {v}"
    );
    Ok(v)
}

fn counts(v: &Value) -> Result<(usize, usize, usize), String> {
    let n = |k: &str| {
        v[k].as_u64()
            .map(|n| n as usize)
            .ok_or(format!("{k} in {v}"))
    };
    Ok((n("total")?, n("succeeded")?, n("failed")?))
}

fn entries(v: &Value) -> Result<Vec<Entry>, String> {
    let list = v["errors"].as_array().ok_or(format!("errors in {v}"))?;
    list.iter()
        .map(|e| {
            Ok(Entry {
                index: e["index"].as_u64().ok_or(format!("index in {e}"))? as usize,
                path: e["path"]
                    .as_str()
                    .ok_or(format!("path in {e}"))?
                    .to_string(),
                error: e["error"]
                    .as_str()
                    .ok_or(format!("error in {e}"))?
                    .to_string(),
            })
        })
        .collect()
}

/// The structure failures this case may get (message or its start, path), or none when the
/// records must be looked at.
fn structure_wants(case: &Case) -> Option<Vec<(String, bool, &'static str)>> {
    let bom = if case.bom { 3 } else { 0 };
    if let Body::BadUtf8(at, _) = case.body {
        let at = bom + case.bad_byte_at(at);
        return Some(vec![(
            format!("request body is not valid UTF-8 (byte {at})"),
            false,
            "",
        )]);
    }
    let mut wants = vec![];
    if case.too_deep {
        wants.push((
            "request body is nested more than 64 levels deep".into(),
            true,
            "",
        ));
    }
    let exact = |m: &str, p: &'static str| (m.to_string(), false, p);
    match &case.body {
        Body::Sound | Body::TooMany(_) | Body::BadUtf8(..) => {}
        Body::Truncate(_) => wants.push(("request body is not valid JSON: ".into(), true, "")),
        Body::DuplicateEnvelopeKey(i) => wants.push(match i % 3 {
            0 => exact("duplicate key [objects] is not permitted", "/objects"),
            1 => exact("duplicate key [object] is not permitted", "/objects/object"),
            _ => exact(
                "duplicate key [record] is not permitted",
                "/objects/object/record",
            ),
        }),
        Body::RecordNotArray(_) => wants.push(exact(
            "record must be a non-empty array",
            "/objects/object/record",
        )),
        Body::NoObjects(_) => wants.push(exact("The request is missing the objects section.", "")),
        Body::NoObject(_) => wants.push(exact(
            r#"object has missing required properties (["object"])"#,
            "/objects/object",
        )),
        Body::NoRecord(_) => wants.push(exact(
            r#"object has missing required properties (["record"])"#,
            "/objects/object/record",
        )),
    }
    // Records moved out of `objects.object.record` make their repeated keys envelope keys.
    if !matches!(
        case.body,
        Body::Sound | Body::TooMany(_) | Body::Truncate(_)
    ) && case.records.iter().any(J::has_duplicate_keys)
    {
        wants.push(("duplicate key [".into(), true, "*"));
    }
    (!wants.is_empty()).then_some(wants)
}

/// Checks the answer to `case`; returns the indices of the records it reports queued.
pub fn check_answer(case: &Case, reply: &Reply) -> Result<Vec<usize>, String> {
    ensure!(
        [202, 207, 400, 413, 415].contains(&reply.status),
        "status {} is none of 202/207/400/413/415: {}",
        reply.status,
        reply.text
    );
    let v = body(reply)?;
    let message = v["message"].as_str().unwrap();
    if case.refused_unread() {
        let want = if case.content_type.contains("latin1") {
            "only UTF-8 JSON is accepted (charset=latin1)".to_string()
        } else {
            format!(
                "Content-Type {:?} is not supported; send application/json",
                case.content_type
            )
        };
        ensure!(
            reply.status == 415 && message == want,
            "want 415 {want:?}: {}",
            reply.text
        );
        return Ok(vec![]);
    }
    if let Some(wants) = structure_wants(case) {
        ensure!(
            reply.status == 400,
            "want a structure failure {wants:?}: {}",
            reply.text
        );
        ensure!(counts(&v)? == (0, 0, 0), "structure failure counts: {v}");
        ensure!(
            v["expected_format"] == r#"{"objects":{"object":{"record":[{...},{...}]}}}"#,
            "expected_format: {v}"
        );
        let errors = entries(&v)?;
        ensure!(
            errors.len() == 1 && errors[0].index == 0,
            "one error at index 0: {v}"
        );
        let e = &errors[0];
        ensure!(e.error == message, "message and error differ: {v}");
        let fits = wants.iter().any(|(m, prefix, path)| {
            (if *prefix {
                e.error.starts_with(m.as_str())
            } else {
                e.error == *m
            }) && (*path == "*" || e.path == *path)
        });
        ensure!(
            fits,
            "want one of {wants:?}, got {} at {:?}",
            e.error,
            e.path
        );
        return Ok(vec![]);
    }
    let n = case.records.len();
    if n > MAX_RECORDS {
        let want =
            format!("the request has {n} records; at most {MAX_RECORDS} are accepted per request");
        ensure!(
            reply.status == 413 && message == want,
            "want 413 {want:?}: {}",
            reply.text
        );
        return Ok(vec![]);
    }
    records(case, &v, reply.status)
}

fn records(case: &Case, v: &Value, status: u16) -> Result<Vec<usize>, String> {
    let n = case.records.len();
    let message = v["message"].as_str().unwrap();
    let (total, succeeded, failed) = counts(v)?;
    let mut errors = entries(v)?;
    let more = match errors.last() {
        Some(e) if more_entry().is_match(&e.error) => errors.pop(),
        _ => None,
    };
    ensure!(
        errors.len() <= 1000,
        "more than 1,000 entries (D2): {}",
        errors.len()
    );
    ensure!(
        more.is_none() || errors.len() == 1000,
        "cut before 1,000 entries: {}",
        errors.len()
    );
    for e in &errors {
        ensure!(
            documented(&e.error),
            "undocumented error text at {}: {:?}",
            e.index,
            e.error
        );
        ensure!(e.index < n, "index {} but {n} records", e.index);
        ensure!(
            e.path.is_empty() || e.path.starts_with('/'),
            "path {:?}",
            e.path
        );
        ensure!(
            !more_entry().is_match(&e.error),
            "a 'more' entry before the last"
        );
    }
    let all: Vec<usize> = errors.iter().chain(&more).map(|e| e.index).collect();
    ensure!(
        all.windows(2).all(|w| w[0] <= w[1]),
        "errors not ordered by index: {all:?}"
    );
    let shown: BTreeSet<usize> = all.iter().copied().collect();
    let invalid: BTreeSet<usize> = (0..n).filter(|&i| case.invalid[i]).collect();
    // Records past the first one with entries left out may have none shown (D2's cap).
    let cut = more.as_ref().map_or(usize::MAX, |m| m.index);
    ensure!(
        shown.is_subset(&invalid) && invalid.iter().all(|i| *i > cut || shown.contains(i)),
        "records with entries {shown:?}, invalid records {invalid:?} (cut at {cut})"
    );
    if more.is_none() {
        ensure!(
            failed == shown.len() || case.iface.mode == Mode::AllOrNothing && !invalid.is_empty(),
            "failed {failed} but {} records have entries",
            shown.len()
        );
    }
    for (i, expects) in case.expects.iter().enumerate().filter(|(i, _)| *i < cut) {
        for x in expects {
            let hit = errors.iter().any(|e| {
                e.index == i
                    && e.path == x.path
                    && if x.prefix {
                        e.error.starts_with(&x.error)
                    } else {
                        e.error == x.error
                    }
            });
            ensure!(hit, "record {i}: no entry {:?} at {:?}", x.error, x.path);
        }
    }
    // D2: within a record, entries follow the document (checked where keys are unique).
    for w in errors.windows(2) {
        let record = &case.records[w[0].index];
        if w[0].index == w[1].index && !record.has_duplicate_keys() {
            let (a, b) = (position(record, &w[0].path), position(record, &w[1].path));
            ensure!(
                a <= b,
                "record {}: {:?} before {:?}",
                w[0].index,
                w[0],
                w[1]
            );
        }
    }
    for e in &errors {
        if let Some(found) = e.error.strip_prefix("instance type (") {
            let record = &case.records[e.index];
            if let (false, Some(v)) = (record.has_duplicate_keys(), lookup(record, &e.path)) {
                ensure!(
                    found.starts_with(v.type_name()),
                    "{} but the value is {v:?}",
                    e.error
                );
            }
        }
    }
    let bad = invalid.len();
    if case.iface.mode == Mode::AllOrNothing && bad > 0 {
        // D3: payment confirmations are all or nothing, and the counts stay 0.
        ensure!(
            status == 400 && v["status"] == "FAILED",
            "all-or-nothing refusal: {v}"
        );
        ensure!(
            (total, succeeded, failed) == (0, 0, 0),
            "all-or-nothing counts: {v}"
        );
        let want = "No items could be processed as the structure was invalid.";
        ensure!(message == want, "all-or-nothing message: {message}");
        return Ok(vec![]);
    }
    ensure!(
        (total, succeeded, failed) == (n, n - bad, bad),
        "counts {:?}, want {:?}",
        (total, succeeded, failed),
        (n, n - bad, bad)
    );
    let (want_status, word, want_message) = match (n - bad, bad) {
        (s, 0) => (202, "SUCCESS", format!("{s} record(s) queued")),
        (0, f) => (
            400,
            "FAILED",
            format!("{f} of {n} records failed validation"),
        ),
        (s, f) => (
            207,
            "PARTIAL",
            format!("{s} record(s) queued, {f} record(s) failed validation"),
        ),
    };
    ensure!(
        status == want_status && v["status"] == word && message == want_message,
        "want {want_status} {word} {want_message:?}: {status} {v}"
    );
    Ok((0..n).filter(|i| !case.invalid[*i]).collect())
}
