use crate::common::*;
use crate::interfaces::support::*;

use ap_intake::interfaces::INTERFACES;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// 2-4. Required, unknown, wrong types, null
// ---------------------------------------------------------------------------------------------

#[test]
fn every_required_field_missing_is_named_with_its_path() {
    let app = TestApp::start();
    for iface in &INTERFACES {
        let record = full(iface);
        let mut cases = 0;
        for scope in scopes(iface, &record) {
            for name in &scope.required {
                let path = scope.field(name);
                expect_one_error(
                    &app,
                    iface,
                    &without(&record, &path),
                    &path,
                    &required_msg(name),
                    &format!("without {path}"),
                );
                cases += 1;
            }
        }
        assert!(cases > 0, "{}: the schema requires nothing?", iface.path);
    }
}

#[test]
fn every_required_string_given_empty_is_too_short() {
    let app = TestApp::start();
    for iface in &INTERFACES {
        let record = full(iface);
        for (path, prop) in all_props(iface, &record) {
            if prop["minLength"] != 1 {
                continue;
            }
            let want = if name_of(&path) == "description_en" {
                DESCRIPTION_EN_EMPTY_MSG
            } else {
                EMPTY_MSG
            };
            expect_one_error(
                &app,
                iface,
                &with(&record, &path, json!("")),
                &path,
                want,
                &format!("{path} = \"\""),
            );
        }
    }
}

#[test]
fn unknown_fields_are_named_at_top_level_and_in_rows() {
    let app = TestApp::start();
    for iface in &INTERFACES {
        let record = full(iface);
        for scope in scopes(iface, &record) {
            let path = scope.field("x_unknown");
            expect_one_error(
                &app,
                iface,
                &with(&record, &path, json!("surprise")),
                &path,
                &extraneous_msg("x_unknown"),
                &format!("with {path}"),
            );
        }
    }
}

/// A value of another JSON type than `ty`, and the type name it is reported as.
fn wrong_value_for(ty: &str) -> (Value, &'static str) {
    match ty {
        "string" => (json!(5), "integer"),
        "number" | "integer" => (json!("12"), "string"),
        "array" => (json!({}), "object"),
        "object" => (json!([]), "array"),
        "boolean" => (json!("true"), "string"),
        other => panic!("unexpected schema type {other}"),
    }
}

#[test]
fn every_property_of_the_wrong_type_names_found_and_allowed_types() {
    let app = TestApp::start();
    for iface in &INTERFACES {
        let record = full(iface);
        for (path, prop) in all_props(iface, &record) {
            let ty = prop["type"]
                .as_str()
                .unwrap_or_else(|| panic!("{}: {path} has no single type", iface.path));
            let (value, found) = wrong_value_for(ty);
            expect_one_error(
                &app,
                iface,
                &with(&record, &path, value.clone()),
                &path,
                &type_msg(found, ty),
                &format!("{path} = {value}"),
            );
        }
    }
}

#[test]
fn null_is_refused_for_every_property() {
    let app = TestApp::start();
    for iface in &INTERFACES {
        let record = full(iface);
        for (path, prop) in all_props(iface, &record) {
            let ty = prop["type"].as_str().unwrap();
            expect_one_error(
                &app,
                iface,
                &with(&record, &path, Value::Null),
                &path,
                &type_msg("null", ty),
                &format!("{path} = null"),
            );
        }
    }
}
