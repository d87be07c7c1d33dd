//! D38: `GET /openapi.json`, the OpenAPI 3.1 document generated at start-up from the schemas
//! actually loaded: valid by openapi-spec-validator, every interface path with an example the
//! service accepts, every answer of D1-D5, D26, D27 described, the accountingType enum from
//! the config, the key scheme (none in sandbox).

use crate::common;
use common::*;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Duration;

/// Set to 1 (CI does) to fail instead of skipping when chromedriver or openapi-spec-validator
/// is missing.
pub const REQUIRE_TOOLS: &str = "AP_INTAKE_REQUIRE_TOOLS";

/// Whether a missing tool may skip a test: `false` fails it instead (CI).
pub fn may_skip(tool: &str) -> bool {
    if std::env::var(REQUIRE_TOOLS).is_ok_and(|v| v == "1") {
        panic!("{tool} is missing and {REQUIRE_TOOLS}=1");
    }
    eprintln!("SKIPPED: {tool} is missing (set {REQUIRE_TOOLS}=1 to fail instead)");
    true
}

/// A GET without a key.
pub fn get(app: &TestApp, path: &str) -> Reply {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .max_redirects_will_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    reply_of(&mut agent.get(&app.url(path)).call().unwrap())
}

/// The document the service serves.
pub fn document(app: &TestApp) -> Value {
    let r = get(app, "/openapi.json");
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.header("x-request-id").is_some());
    assert!(
        r.header("content-type")
            .unwrap()
            .starts_with("application/json")
    );
    r.json()
}

/// `value`, or what its `$ref` points at inside `doc`.
fn resolve<'a>(doc: &'a Value, value: &'a Value) -> &'a Value {
    match value.get("$ref").and_then(Value::as_str) {
        Some(r) => doc
            .pointer(r.trim_start_matches('#'))
            .unwrap_or_else(|| panic!("unresolved {r}")),
        None => value,
    }
}

/// Checks `doc` with openapi-spec-validator (Python), or skips when it is not installed.
fn assert_valid_openapi(doc: &Value) {
    let probe = std::process::Command::new("python3")
        .args(["-c", "import openapi_spec_validator"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) && may_skip("openapi-spec-validator (python3)") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("openapi.json");
    std::fs::write(&file, doc.to_string()).unwrap();
    let script = "import json, sys\nfrom openapi_spec_validator import validate\n\
                  validate(json.load(open(sys.argv[1])))\nprint('valid')";
    let out = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openapi-spec-validator refuses the document:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every path an interface is served at.
fn interface_paths() -> Vec<(&'static str, &'static ap_intake::interfaces::Interface)> {
    ap_intake::interfaces::INTERFACES
        .iter()
        .flat_map(|i| {
            std::iter::once(i.path)
                .chain(i.aliases.iter().copied())
                .map(move |p| (p, i))
        })
        .collect()
}

/// The request example of the POST operation at `path`, and its query string.
fn example_request(doc: &Value, path: &str) -> (Value, String) {
    let op = &doc["paths"][path]["post"];
    let body = resolve(doc, &op["requestBody"]);
    let example = body["content"]["application/json"]["example"].clone();
    assert!(example.is_object(), "{path}: no request example");
    let mut query = String::new();
    for p in op["parameters"].as_array().unwrap() {
        let p = resolve(doc, p);
        if p["in"] == "query" {
            assert_eq!(p["required"], true, "{path}: {p}");
            let value = p["schema"]["enum"][0].as_str().unwrap();
            query = format!("?{}={value}", p["name"].as_str().unwrap());
        }
    }
    (example, query)
}

#[test]
fn the_document_passes_openapi_spec_validator() {
    let app = TestApp::start();
    let doc = document(&app);
    assert_eq!(doc["openapi"], "3.1.0");
    assert_valid_openapi(&doc);
    drop(app);
    let sandbox = TestApp::start_with("sandbox = true", "");
    assert_valid_openapi(&document(&sandbox));
}

#[test]
fn every_interface_path_has_an_example_the_service_accepts() {
    let app = TestApp::start();
    let doc = document(&app);
    let paths = interface_paths();
    assert_eq!(
        paths.len(),
        10,
        "nine interfaces and the goods received v2 alias"
    );
    for (path, iface) in paths {
        let (example, query) = example_request(&doc, path);
        let records = example["objects"]["object"]["record"].as_array().unwrap();
        assert!(!records.is_empty(), "{path}");
        // The example is the schema's own (schemas/<name>.json "examples").
        assert_eq!(records[0], schema(iface)["examples"][0], "{path}");
        let r = app.post(&format!("{path}{query}"), &example.to_string());
        assert_eq!(r.status, 202, "{path}{query}: {}", r.text);
        assert_eq!(r.counts(), (records.len() as u64, records.len() as u64, 0));
    }
    for iface in &ap_intake::interfaces::INTERFACES {
        let validate = format!("/validate{}", iface.path);
        assert!(doc["paths"][&validate]["post"].is_object(), "{validate}");
        assert!(
            doc["paths"][&validate]["post"]["responses"]["200"].is_object(),
            "{validate}"
        );
    }
    let receipt = &doc["paths"]["/requests/{request_id}"]["get"];
    assert!(receipt["responses"]["200"].is_object(), "{receipt}");
    assert!(receipt["responses"]["404"].is_object(), "{receipt}");
}

/// The answers of D1-D5, D26, D27 on an interface path.
const CODES: [&str; 14] = [
    "202", "207", "400", "401", "403", "404", "405", "408", "413", "415", "429", "500", "501",
    "503",
];

#[test]
fn every_answer_is_described_with_its_body_schema_and_an_example() {
    let app = TestApp::start();
    let doc = document(&app);
    for (path, iface) in interface_paths() {
        let responses = doc["paths"][path]["post"]["responses"].as_object().unwrap();
        let codes: BTreeSet<&str> = responses.keys().map(String::as_str).collect();
        let mut expected: BTreeSet<&str> = CODES.into_iter().collect();
        if iface.mode == ap_intake::interfaces::Mode::AllOrNothing {
            // Payment confirmations are all-or-nothing (D3): never 207.
            expected.remove("207");
        }
        assert_eq!(codes, expected, "{path}");
        for (code, response) in responses {
            let response = resolve(&doc, response);
            assert!(
                response["description"]
                    .as_str()
                    .is_some_and(|d| !d.is_empty())
            );
            let media = &response["content"]["application/json"];
            let schema = resolve(&doc, &media["schema"]);
            assert_eq!(schema["type"], "object", "{path} {code}");
            let examples = media["examples"].as_object().unwrap();
            assert!(!examples.is_empty(), "{path} {code}");
            for (name, example) in examples {
                let value = &example["value"];
                for field in schema["required"].as_array().unwrap() {
                    let field = field.as_str().unwrap();
                    assert!(value.get(field).is_some(), "{path} {code} {name}: {field}");
                }
            }
            let headers = response["headers"].as_object().unwrap();
            assert!(headers.contains_key("x-request-id"), "{path} {code}");
            if code == "429" || code == "503" {
                assert!(headers.contains_key("Retry-After"), "{path} {code}");
            }
            if code == "405" {
                assert!(headers.contains_key("Allow"), "{path} {code}");
            }
        }
    }
}

/// The field names of `body`.
fn keys(body: &Value) -> BTreeSet<String> {
    body.as_object().unwrap().keys().cloned().collect()
}

/// Asserts that `reply` has the documented status for `path` and a body shaped like one of
/// its documented examples (the same fields).
fn assert_documented(doc: &Value, path: &str, reply: &Reply) {
    let code = reply.status.to_string();
    let response = &doc["paths"][path]["post"]["responses"][&code];
    assert!(response.is_object(), "{path}: {code} is not documented");
    let examples = resolve(doc, response)["content"]["application/json"]["examples"]
        .as_object()
        .unwrap();
    let real = keys(&reply.json());
    assert!(
        examples.values().any(|e| keys(&e["value"]) == real),
        "{path} {code}: the real body {} has other fields than every example",
        reply.text
    );
    assert!(reply.header("x-request-id").is_some());
}

#[test]
fn the_documented_bodies_are_the_real_ones() {
    let app = TestApp::start();
    let doc = document(&app);
    let path = "/general-ledger-codes/v1";
    let (example, _) = example_request(&doc, path);
    let json_headers = [("x-api-key", KEY), ("Content-Type", "application/json")];
    let body = example.to_string();
    assert_documented(&doc, path, &app.post_with(path, &body, &json_headers));
    let partial = envelope(&[gl("4001"), json!({"type": "VAT"})]).to_string();
    assert_documented(&doc, path, &app.post(path, &partial));
    let invalid = envelope(&[json!({"type": "VAT"})]).to_string();
    assert_documented(&doc, path, &app.post(path, &invalid));
    assert_documented(&doc, path, &app.post(path, "{\"record\": []}"));
    assert_documented(
        &doc,
        path,
        &app.post_with(path, &body, &[("Content-Type", "application/json")]),
    );
    assert_documented(
        &doc,
        "/vendor-data/v1",
        &app.post_with(
            "/vendor-data/v1",
            &body,
            &[
                ("x-api-key", GL_ONLY_KEY),
                ("Content-Type", "application/json"),
            ],
        ),
    );
    let r = app.post_with(&format!("{path}/"), &body, &json_headers);
    assert_eq!(r.status, 404);
    assert_documented(&doc, path, &r);
    let r = get(&app, path);
    assert_eq!(r.status, 405);
    assert_documented(&doc, path, &r);
    assert_documented(
        &doc,
        path,
        &app.post_with(path, &body, &[("x-api-key", KEY)]),
    );
    let r = app.raw(
        format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nx-api-key: {KEY}\r\nContent-Type: \
             application/json\r\nContent-Length: 40000000\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    );
    assert_eq!(r.status, 413, "{}", r.text);
    assert_documented(&doc, path, &r);
}

#[test]
fn a_schema_override_shows_in_the_document() {
    let schemas = tempfile::tempdir().unwrap();
    let mut gl = schema(iface("/general-ledger-codes/v1"));
    // Written as override authors write draft-07: definitions and $ref.
    gl["definitions"] = json!({"owner": {"type": "string", "minLength": 1, "maxLength": 40}});
    gl["properties"]["cost_owner"] = json!({"$ref": "#/definitions/owner"});
    gl["required"]
        .as_array_mut()
        .unwrap()
        .push(json!("cost_owner"));
    let mut example = gl["examples"][0].clone();
    example["cost_owner"] = json!("Finance");
    gl["examples"] = json!([example]);
    std::fs::write(
        schemas.path().join("general-ledger-codes.json"),
        gl.to_string(),
    )
    .unwrap();
    let app = TestApp::start_with(
        "",
        &format!(
            "[validation]\nschema_dir = \"{}\"\n",
            schemas.path().display()
        ),
    );
    let doc = document(&app);
    let record = &doc["components"]["schemas"]["GeneralLedgerCodesV1Record"];
    assert_eq!(
        record["properties"]["cost_owner"],
        json!({"$ref": "#/components/schemas/GeneralLedgerCodesV1.owner"})
    );
    assert!(
        record["required"]
            .as_array()
            .unwrap()
            .contains(&json!("cost_owner"))
    );
    assert_eq!(
        doc["components"]["schemas"]["GeneralLedgerCodesV1.owner"]["maxLength"],
        40
    );
    assert!(record.get("$schema").is_none() && record.get("$id").is_none());
    // Interfaces without an override keep the built-in schema.
    let items = &doc["components"]["schemas"]["NonInventoryItemsV1Record"];
    assert!(items["properties"].get("cost_owner").is_none());

    let (example, _) = example_request(&doc, "/general-ledger-codes/v1");
    assert_eq!(
        example["objects"]["object"]["record"][0]["cost_owner"],
        "Finance"
    );
    let r = app.post("/general-ledger-codes/v1", &example.to_string());
    assert_eq!(r.status, 202, "{}", r.text);
    assert_valid_openapi(&doc);
}

#[test]
fn the_accounting_type_parameter_lists_the_configured_types() {
    let enum_of = |app: &TestApp| {
        let doc = document(app);
        let op = &doc["paths"]["/accounting-objects/v1"]["post"];
        let param = op["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| resolve(&doc, p).clone())
            .find(|p| p["name"] == "accountingType")
            .unwrap();
        assert_eq!(param["in"], "query");
        assert_eq!(param["required"], true);
        // Only the accounting objects take it.
        let gl = &doc["paths"]["/general-ledger-codes/v1"]["post"]["parameters"];
        assert!(!gl.to_string().contains("AccountingType"), "{gl}");
        param["schema"]["enum"].clone()
    };
    let app = TestApp::start();
    assert_eq!(
        enum_of(&app),
        json!(ap_intake::config::DEFAULT_ACCOUNTING_TYPES)
    );
    drop(app);
    let app = TestApp::start_with(
        "",
        "[accounting_objects]\ntypes = [\"COSTCENTRE\", \"REGION\"]\n",
    );
    assert_eq!(enum_of(&app), json!(["COSTCENTRE", "REGION"]));
}

#[test]
fn the_key_scheme_is_described_except_in_sandbox() {
    let app = TestApp::start();
    let doc = document(&app);
    assert_eq!(
        doc["components"]["securitySchemes"]["ApiKey"],
        json!({"type": "apiKey", "in": "header", "name": "x-api-key",
               "description": doc["components"]["securitySchemes"]["ApiKey"]["description"]})
    );
    assert_eq!(doc["security"], json!([{"ApiKey": []}]));
    // Neither the document nor the console needs a key.
    assert_eq!(get(&app, "/openapi.json").status, 200);
    drop(app);

    let sandbox = TestApp::start_with("sandbox = true", "");
    let doc = document(&sandbox);
    assert!(doc.get("security").is_none(), "{}", doc["security"]);
    assert!(doc["components"].get("securitySchemes").is_none());
    let text = doc["paths"].to_string();
    for code in ["401", "403", "429"] {
        assert!(
            !text.contains(&format!("\"{code}\"")),
            "sandbox documents {code}"
        );
    }
    assert!(
        doc["info"]["description"]
            .as_str()
            .unwrap()
            .contains("Sandbox")
    );
}
