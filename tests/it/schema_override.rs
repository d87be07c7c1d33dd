//! D14: a schema in `[validation] schema_dir` replaces the built-in one of the same name.

use crate::common;
use common::*;
use serde_json::json;

#[test]
fn an_override_schema_takes_effect() {
    let schemas = tempfile::tempdir().unwrap();
    let mut gl = schema(iface("/general-ledger-codes/v1"));
    gl["properties"]["cost_owner"] = json!({"type": "string", "minLength": 1});
    gl["required"]
        .as_array_mut()
        .unwrap()
        .push(json!("cost_owner"));
    std::fs::write(
        schemas.path().join("general-ledger-codes.json"),
        gl.to_string(),
    )
    .unwrap();
    let app = TestApp::with_schemas(schemas.path());

    let mut rec = fixture("general-ledger-codes", "minimal");
    let r = app.post_records("/general-ledger-codes/v1", &[rec.clone()]);
    assert_eq!(
        r.errors(),
        vec![(
            0,
            "/cost_owner".into(),
            "required key [cost_owner] not found".into()
        )]
    );
    rec["cost_owner"] = json!("Finance");
    let r = app.post_records("/general-ledger-codes/v1", &[rec.clone()]);
    assert_eq!(r.status, 202, "{}", r.text);
    let xml = app.item("gl-code:main/4000").unwrap().xml;
    assert!(xml.contains("<cost_owner>Finance</cost_owner>"), "{xml}");
    // Interfaces without an override keep the built-in schema.
    let r = app.post_records("/non-inventory-items/v1", &[rec]);
    assert_eq!(
        r.errors(),
        vec![(
            0,
            "/cost_owner".into(),
            "extraneous key [cost_owner] is not permitted".into()
        )]
    );
}

#[test]
fn without_the_override_the_field_is_unknown() {
    let app = TestApp::start();
    let mut rec = fixture("general-ledger-codes", "minimal");
    rec["cost_owner"] = json!("Finance");
    let r = app.post_records("/general-ledger-codes/v1", &[rec]);
    assert_eq!(
        r.errors(),
        vec![(
            0,
            "/cost_owner".into(),
            "extraneous key [cost_owner] is not permitted".into()
        )]
    );
}
