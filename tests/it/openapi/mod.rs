//! D38: `GET /openapi.json`, the OpenAPI 3.1 document generated at start-up from the schemas
//! actually loaded: valid by openapi-spec-validator, every interface path with an example the
//! service accepts, every answer of D1-D5, D26, D27 described, the accountingType enum from
//! the config, the key scheme (none in sandbox).

mod fit;

use crate::common;
use common::*;
use fit::Fit;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Duration;

/// Reports a test skipped for want of `tool`, or fails it under `AP_INTAKE_REQUIRE_TOOLS=1`.
pub fn skip_without(tool: &str) {
    common::skip::skip(&format!("{tool} is missing"));
}

/// A GET without a key; redirects are not followed.
pub fn get(app: &TestApp, path: &str) -> Reply {
    get_as(app, path, None)
}

/// A GET with `key`, if any.
fn get_as(app: &TestApp, path: &str, key: Option<&str>) -> Reply {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .max_redirects_will_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let mut req = agent.get(&app.url(path));
    if let Some(key) = key {
        req = req.header("x-api-key", key);
    }
    reply_of(&mut req.call().unwrap())
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
    if !probe.is_ok_and(|o| o.status.success()) {
        return skip_without("openapi-spec-validator (python3)");
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
            let value = resolve(doc, &p["schema"])["enum"][0].as_str().unwrap();
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
        let n = records.len() as u64;
        let body = example.to_string();

        // Its dry run: the same example, the same request, 200 and nothing queued.
        let validate = format!("/validate{path}");
        assert_eq!(
            example_request(&doc, &validate),
            (example.clone(), query.clone())
        );
        let r = app.post(&format!("{validate}{query}"), &body);
        assert_eq!(r.status, 200, "{validate}{query}: {}", r.text);
        assert_eq!(r.counts(), (n, n, 0));
        assert_documented(&doc, &validate, "post", &r);

        let r = app.post(&format!("{path}{query}"), &body);
        assert_eq!(r.status, 202, "{path}{query}: {}", r.text);
        assert_eq!(r.counts(), (n, n, 0));
        assert_documented(&doc, path, "post", &r);

        // Its receipt, as documented, field by field.
        let id = r.header("x-request-id").unwrap();
        let r = get_as(&app, &format!("/requests/{id}"), Some(KEY));
        assert_eq!(r.status, 200, "{}", r.text);
        assert_documented(&doc, "/requests/{request_id}", "get", &r);
        let documented = &doc["components"]["schemas"]["Receipt"];
        let record = resolve(&doc, &documented["properties"]["records"]["items"]);
        let record_fields = &record["required"];
        let fields: BTreeSet<String> = record_fields
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap().to_string())
            .collect();
        let receipt = r.json();
        let shown = receipt["records"].as_array().unwrap();
        assert_eq!(shown.len() as u64, n, "{receipt}");
        for record in shown {
            assert_eq!(keys(record), fields, "{record}");
        }
    }
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
    let mut fit = Fit::new(&doc);
    let operations = interface_paths().into_iter().flat_map(|(path, iface)| {
        // The dry run answers 200 where the interface answers 202 (D38).
        [
            (path.to_string(), iface, "202"),
            (format!("/validate{path}"), iface, "200"),
        ]
    });
    for (path, iface, ok) in operations {
        let body = resolve(&doc, &doc["paths"][&path]["post"]["requestBody"]);
        let media = &body["content"]["application/json"];
        let fits = fit.media(media, &media["example"]);
        assert!(
            fits.is_ok(),
            "{path} request example: {}",
            fits.unwrap_err()
        );
        let responses = doc["paths"][&path]["post"]["responses"]
            .as_object()
            .unwrap();
        let codes: BTreeSet<&str> = responses.keys().map(String::as_str).collect();
        let mut expected: BTreeSet<&str> = CODES.into_iter().collect();
        expected.remove("202");
        expected.insert(ok);
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
            let examples = media["examples"].as_object().unwrap();
            assert!(!examples.is_empty(), "{path} {code}");
            for (name, example) in examples {
                let fits = fit.media(media, &example["value"]);
                assert!(fits.is_ok(), "{path} {code} {name}: {}", fits.unwrap_err());
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

/// Asserts that `reply` has a documented status for `method` on `path`, and a body with the
/// fields of one of that status's examples.
fn assert_documented(doc: &Value, path: &str, method: &str, reply: &Reply) {
    let code = reply.status.to_string();
    let response = &doc["paths"][path][method]["responses"][&code];
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
    // And it fits the schema declared for it, as a generated client parses it (D38).
    let media = &resolve(doc, response)["content"]["application/json"];
    let fits = Fit::new(doc).media(media, &reply.json());
    assert!(fits.is_ok(), "{path} {code}: {}", fits.unwrap_err());
    assert!(reply.header("x-request-id").is_some());
}

#[test]
fn the_documented_bodies_are_the_real_ones() {
    let app = TestApp::start();
    let doc = document(&app);
    let gl = "/general-ledger-codes/v1";
    let dry = "/validate/general-ledger-codes/v1";
    let receipt = "/requests/{request_id}";
    let body = example_request(&doc, gl).0.to_string();
    let json = ("Content-Type", "application/json");
    let partial = envelope(&[common::gl("4001"), json!({"type": "VAT"})]).to_string();
    let invalid = envelope(&[json!({"type": "VAT"})]).to_string();
    let too_long = format!(
        "POST {gl} HTTP/1.1\r\nHost: x\r\nx-api-key: {KEY}\r\nContent-Type: \
         application/json\r\nContent-Length: 40000000\r\nConnection: close\r\n\r\n"
    );
    let no_key = |path: &str| app.post_with(path, &body, &[json]);
    let forbidden = app.post_with(
        "/vendor-data/v1",
        &body,
        &[("x-api-key", GL_ONLY_KEY), json],
    );
    // A body that is not gzip: the short failure body (D5), also declared for 400.
    let not_gzip = app.post_with(
        gl,
        &body,
        &[("x-api-key", KEY), json, ("Content-Encoding", "gzip")],
    );
    let cases: [(&str, &str, u16, Reply); 17] = [
        (gl, "post", 202, app.post(gl, &body)),
        (gl, "post", 207, app.post(gl, &partial)),
        (gl, "post", 400, app.post(gl, &invalid)),
        (gl, "post", 400, app.post(gl, "{\"record\": []}")),
        (gl, "post", 400, not_gzip),
        (gl, "post", 401, no_key(gl)),
        ("/vendor-data/v1", "post", 403, forbidden),
        (gl, "post", 404, app.post(&format!("{gl}/"), &body)),
        (gl, "post", 405, get(&app, gl)),
        (gl, "post", 413, app.raw(too_long.as_bytes())),
        (
            gl,
            "post",
            415,
            app.post_with(gl, &body, &[("x-api-key", KEY)]),
        ),
        (dry, "post", 200, app.post(dry, &body)),
        (dry, "post", 207, app.post(dry, &partial)),
        (dry, "post", 400, app.post(dry, &invalid)),
        (
            receipt,
            "get",
            404,
            get_as(&app, "/requests/5f0c2a9e00000fff", Some(KEY)),
        ),
        (receipt, "get", 401, get(&app, "/requests/5f0c2a9e00000fff")),
        (
            receipt,
            "get",
            405,
            app.post("/requests/5f0c2a9e00000fff", ""),
        ),
    ];
    for (path, method, status, reply) in &cases {
        assert_eq!(reply.status, *status, "{method} {path}: {}", reply.text);
        assert_documented(&doc, path, method, reply);
    }
}

/// The answers other configs give (429, 503) fit the schemas declared for them too.
#[test]
fn the_answers_of_a_rate_limit_and_a_full_disk_are_the_documented_ones() {
    let gl = "/general-ledger-codes/v1";
    let limited = TestApp::start_with(
        "",
        &format!(
            "[[api_keys]]\nname = \"limited\"\nsha256 = \"{}\"\ninterfaces = [\"*\"]\n\
             rate_limit_per_second = 1\nburst = 1\n",
            sha("limited-key")
        ),
    );
    let doc = document(&limited);
    let body = example_request(&doc, gl).0.to_string();
    let send = |app: &TestApp, key: &str| {
        app.post_with(
            gl,
            &body,
            &[("x-api-key", key), ("Content-Type", "application/json")],
        )
    };
    assert_eq!(send(&limited, "limited-key").status, 202);
    let r = send(&limited, "limited-key");
    assert_eq!(r.status, 429, "{}", r.text);
    assert!(r.header("retry-after").is_some());
    assert_documented(&doc, gl, "post", &r);
    drop(limited);

    // No filesystem has an exabyte free: every write that grows the queue is refused (D30).
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(&dir.path().join("data"), "", "");
    let mut config =
        ap_intake::config::Config::parse(&text, std::path::Path::new("t.toml")).unwrap();
    config.storage.min_free_bytes = 1 << 60;
    let full = TestApp::start_config(dir, config);
    let r = send(&full, KEY);
    assert_eq!(r.status, 503, "{}", r.text);
    assert_documented(&document(&full), gl, "post", &r);
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
    let app = TestApp::with_schemas(schemas.path());
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
        // One component, shared by the interface and its dry run.
        assert_eq!(
            param["schema"],
            json!({"$ref": "#/components/schemas/AccountingType"})
        );
        resolve(&doc, &param["schema"])["enum"].clone()
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
    // The empty requirement: no credentials (linters want security declared everywhere).
    assert_eq!(doc["security"], json!([{}]));
    assert!(doc["components"].get("securitySchemes").is_none());
    // Nor the parts only those answers use (linters flag unused components).
    for part in [
        "responses/Unauthorized",
        "responses/Forbidden",
        "schemas/AuthFailure",
    ] {
        assert!(
            doc["components"].pointer(&format!("/{part}")).is_none(),
            "{part}"
        );
    }
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
