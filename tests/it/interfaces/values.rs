use crate::common::*;
use crate::interfaces::support::*;

use ap_intake::interfaces::INTERFACES;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// 5-8. Enums, dates, decimals, lengths
// ---------------------------------------------------------------------------------------------

#[test]
fn every_enum_property_lists_its_possible_values() {
    let app = TestApp::start();
    let mut enums = 0;
    for iface in &INTERFACES {
        let record = full(iface);
        for (path, prop) in all_props(iface, &record) {
            let Some(possible) = prop.get("enum") else {
                continue;
            };
            enums += 1;
            expect_one_error(
                &app,
                iface,
                &with(&record, &path, json!("BOGUS")),
                &path,
                &enum_msg("BOGUS", possible),
                &format!("{path} = \"BOGUS\""),
            );
            // Every listed value is accepted.
            for ok in possible.as_array().unwrap() {
                expect_accepted(
                    &app,
                    iface,
                    &with(&record, &path, ok.clone()),
                    &format!("{path} = {ok}"),
                );
            }
        }
    }
    assert!(enums >= 20, "only {enums} enum properties found");
}

#[test]
fn every_date_property_checks_pattern_and_calendar() {
    let app = TestApp::start();
    for iface in &INTERFACES {
        let record = full(iface);
        let mut dates = 0;
        for (path, prop) in all_props(iface, &record) {
            if prop["format"] != "date" {
                continue;
            }
            dates += 1;
            for bad in ["2024/01/01", "24-01-01", "2024-1-01", ""] {
                expect_one_error(
                    &app,
                    iface,
                    &with(&record, &path, json!(bad)),
                    &path,
                    &date_pattern_msg(bad),
                    &format!("{path} = {bad:?}"),
                );
            }
            for bad in [
                "2023-02-29",
                "2024-02-30",
                "2024-13-01",
                "2024-04-31",
                "1900-02-29",
            ] {
                expect_one_error(
                    &app,
                    iface,
                    &with(&record, &path, json!(bad)),
                    &path,
                    &calendar_msg(bad),
                    &format!("{path} = {bad:?}"),
                );
            }
            let item = expect_accepted(
                &app,
                iface,
                &with(&record, &path, json!("2024-02-29")),
                &format!("{path} = 2024-02-29"),
            );
            expect_valid_xml(iface, &[&item], &format!("{path} = 2024-02-29"));
        }
        assert!(dates > 0, "{}: no date property found", iface.path);
    }
}

/// The coding row whose distribution_percentage [`with_decimal`] adjusts.
const SIBLING_PCT: &str = "/rows/0/coding/1/distribution_percentage";

/// `record` with `value` at `path`; a coding row's distribution_percentage has its sibling
/// ([`SIBLING_PCT`]) set to the complement, so that the line still sums to exactly 100 and the
/// coding-sum rule stays out of the way (the full fixture's first line is split
/// 33.33 / 33.33 / 33.34).
fn with_decimal(record: &Value, path: &str, value: &str) -> Value {
    let r = with(record, path, num(value));
    if name_of(path) != "distribution_percentage" {
        return r;
    }
    assert_eq!(path, "/rows/0/coding/0/distribution_percentage");
    let split: Vec<String> = (0..3)
        .map(|i| record["rows"][0]["coding"][i]["distribution_percentage"].to_string())
        .collect();
    assert_eq!(split, ["33.33", "33.33", "33.34"], "fixture changed");
    let sibling = match value {
        "1.1234567" => "65.5365433",
        "2.123456" => "64.536544",
        "19.99" => "46.67",
        "0.07" => "66.59",
        "1.500" => "65.16",
        other => panic!("no complement for {other}"),
    };
    with(&r, SIBLING_PCT, num(sibling))
}

#[test]
fn money_allows_two_decimal_places_and_quantity_six() {
    let app = TestApp::start();
    let (mut money, mut quantity) = (0, 0);
    for iface in &INTERFACES {
        let record = full(iface);
        for (path, prop) in all_props(iface, &record) {
            // (sent, written): as received, except trailing zeros beyond the field's places
            // (D23: 1.500 is money's 1.50).
            type Good = &'static [(&'static str, &'static str)];
            let (bad, places, good): (&str, u32, Good) = match prop["format"].as_str() {
                Some("money") => {
                    money += 1;
                    (
                        "1.234",
                        2,
                        &[("19.99", "19.99"), ("0.07", "0.07"), ("1.500", "1.50")],
                    )
                }
                Some("quantity") => {
                    quantity += 1;
                    (
                        "1.1234567",
                        6,
                        &[("2.123456", "2.123456"), ("1.500", "1.500")],
                    )
                }
                _ => continue,
            };
            let mut expected = vec![e(&path, places_msg(bad, places))];
            if name_of(&path) == "distribution_percentage" {
                // The line still sums to 100 only with a 7-place complement (65.5365433),
                // which is a second violation of its own.
                expected.push(e(SIBLING_PCT, places_msg("65.5365433", places)));
            }
            expect_refused(
                &app,
                iface,
                &with_decimal(&record, &path, bad),
                &expected,
                &format!("{path} = {bad}"),
            );
            for (ok, written) in good {
                let case = format!("{path} = {ok}");
                let item = expect_accepted(&app, iface, &with_decimal(&record, &path, ok), &case);
                let name = name_of(&path);
                assert!(
                    item.xml.contains(&format!("<{name}>{written}</{name}>")),
                    "{} {case}: the number must be written as {written}: {}",
                    iface.path,
                    item.xml
                );
                expect_valid_xml(iface, &[&item], &case);
            }
        }
    }
    assert!(money >= 20, "only {money} money properties found");
    assert!(quantity >= 5, "only {quantity} quantity properties found");
}

/// A string of `len` characters starting with a two-byte character, so that lengths are
/// counted in characters, not bytes.
fn long_string(len: usize) -> String {
    std::iter::once('Ä')
        .chain("abcdefghijklmnopqrstuvwxyz0123456789".chars().cycle())
        .take(len)
        .collect()
}

#[test]
fn every_max_length_is_enforced_with_the_value_cut_to_100_characters() {
    let app = TestApp::start();
    let mut limits = 0;
    for iface in &INTERFACES {
        let record = full(iface);
        for (path, prop) in all_props(iface, &record) {
            let Some(max) = prop["maxLength"].as_u64() else {
                continue;
            };
            limits += 1;
            let max = max as usize;
            let long = long_string(max + 1);
            let shown: String = long.chars().take(100).collect();
            let too_long = e(
                &path,
                format!(
                    "string \"{shown}\" is too long (length: {}, maximum allowed: {max})",
                    max + 1
                ),
            );
            if prop.get("enum").is_some() {
                // Also outside the enum: too_long_enum_value_is_both_too_long_and_not_in_the_enum.
                continue;
            }
            let case = format!("{path} of {} characters", max + 1);
            expect_refused(
                &app,
                iface,
                &with(&record, &path, json!(long)),
                &[too_long],
                &case,
            );
            let case = format!("{path} of {max} characters");
            let item = expect_accepted(
                &app,
                iface,
                &with(&record, &path, json!(long_string(max))),
                &case,
            );
            expect_valid_xml(iface, &[&item], &case);
        }
    }
    assert!(limits >= 20, "only {limits} maxLength properties found");
}

#[test]
fn too_long_enum_value_is_both_too_long_and_not_in_the_enum() {
    let app = TestApp::start();
    let mut limits = 0;
    for iface in &INTERFACES {
        let record = full(iface);
        for (path, prop) in all_props(iface, &record) {
            let (Some(max), Some(possible)) = (prop["maxLength"].as_u64(), prop.get("enum")) else {
                continue;
            };
            limits += 1;
            let max = max as usize;
            let long = long_string(max + 1);
            let shown: String = long.chars().take(100).collect();
            // Two rules broken by one value: two entries (D2), at one path, in either order.
            let mut want = vec![
                (
                    0,
                    path.clone(),
                    format!(
                        "string \"{shown}\" is too long (length: {}, maximum allowed: {max})",
                        max + 1
                    ),
                ),
                (0, path.clone(), enum_msg(&shown, possible)),
            ];
            want.sort();
            let case = format!("{path} of {} characters", max + 1);
            let mut got = refused_errors(&app, iface, &with(&record, &path, json!(long)), &case);
            got.sort();
            assert_eq!(got, want, "{} {case}", iface.path);
        }
    }
    assert!(
        limits >= 3,
        "only {limits} enum properties with maxLength found"
    );
}
