//! Everything decided around the records: envelope, query, limits, media type, paths, methods,
//! authentication and request ids (D3, D4, D5, D20).

use crate::common;
use common::*;
use serde_json::{Value, json};

const GL: &str = "/general-ledger-codes/v1";

fn gl_body() -> String {
    envelope(&[fixture("general-ledger-codes", "minimal")]).to_string()
}

fn raw_post(path: &str, headers: &str, body: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A structure failure (D3): 400, counts 0, one error at index 0, expected_format.
fn assert_structure_failure(r: &Reply, message: &str, path: &str) {
    assert_eq!(r.status, 400, "{}", r.text);
    let b = r.json();
    assert_eq!(b["status"], "FAILED");
    assert_eq!(r.counts(), (0, 0, 0));
    assert_eq!(r.errors(), vec![(0, path.to_string(), message.to_string())]);
    assert_eq!(b["message"], message);
    assert!(
        b["expected_format"]
            .as_str()
            .unwrap()
            .contains(r#"{"objects":{"object":{"record":["#)
    );
    assert_eq!(b["request_id"].as_str(), r.header("x-request-id"));
}

#[test]
fn envelope_failures_have_their_exact_messages() {
    let app = TestApp::start();
    assert_structure_failure(
        &app.post(GL, r#"{"code":"1","type":"VAT"}"#),
        "The request is missing the objects section.",
        "",
    );
    assert_structure_failure(
        &app.post(GL, r#"[{"code":"1"}]"#),
        "The request is missing the objects section.",
        "",
    );
    assert_structure_failure(
        &app.post(GL, r#"{"objects":{}}"#),
        r#"object has missing required properties (["object"])"#,
        "/objects/object",
    );
    assert_structure_failure(
        &app.post(GL, r#"{"objects":{"object":[]}}"#),
        r#"object has missing required properties (["object"])"#,
        "/objects/object",
    );
    assert_structure_failure(
        &app.post(GL, r#"{"objects":{"object":{}}}"#),
        r#"object has missing required properties (["record"])"#,
        "/objects/object/record",
    );
    assert_structure_failure(
        &app.post(GL, r#"{"objects":{"object":{"record":[]}}}"#),
        "record must be a non-empty array",
        "/objects/object/record",
    );
    assert_structure_failure(
        &app.post(GL, r#"{"objects":{"object":{"record":{"code":"1"}}}}"#),
        "record must be a non-empty array",
        "/objects/object/record",
    );
    assert!(app.store().items().unwrap().is_empty());
}

#[test]
fn a_body_that_is_not_json_names_line_and_column() {
    let app = TestApp::start();
    let r = app.post(GL, "{\"objects\": {\n  \"object\": ,}}");
    assert_eq!(r.status, 400);
    let (index, path, error) = r.errors().remove(0);
    assert_eq!((index, path.as_str()), (0, ""));
    assert!(
        error.starts_with("request body is not valid JSON: "),
        "{error}"
    );
    assert!(error.contains("line 2 column 13"), "{error}");
    assert!(r.json()["expected_format"].is_string());
}

#[test]
fn accounting_type_is_required_and_must_be_configured() {
    let app = TestApp::start_with(
        "",
        "[accounting_objects]\ntypes = [\"COSTCENTRE\", \"PROJECT\"]\n",
    );
    let body = envelope(&[fixture("accounting-objects", "minimal")]).to_string();
    let r = app.post("/accounting-objects/v1", &body);
    assert_structure_failure(
        &r,
        "required query parameter [accountingType] not found",
        "",
    );
    let r = app.post("/accounting-objects/v1?accountingType=project", &body);
    assert_structure_failure(
        &r,
        r#"instance value ("project") not found in enum (possible values: ["COSTCENTRE","PROJECT"])"#,
        "",
    );
    let r = app.post("/accounting-objects/v1?accountingType=PROJECT", &body);
    assert_eq!(r.status, 202, "{}", r.text);
    let item = app
        .item("accounting-object:PROJECT/main/CC-4100")
        .or_else(|| {
            let items = app.store().items().unwrap();
            panic!(
                "keys: {:?}",
                items.iter().map(|(k, _)| k.to_string()).collect::<Vec<_>>()
            )
        });
    assert!(
        item.unwrap()
            .xml
            .starts_with("<accounting_object><accountingType>PROJECT</accountingType>")
    );
}

#[test]
fn unknown_paths_are_404_and_other_methods_405() {
    let app = TestApp::start();
    for path in [
        "/nope",
        "/general-ledger-codes/v1/",
        "/general-ledger-codes/v2",
        "/",
    ] {
        let r = app.post(path, &gl_body());
        assert_eq!(r.status, 404, "{path}");
        let b = r.json();
        assert_eq!(b["status"], "FAILED");
        assert!(b["message"].as_str().unwrap().contains(path), "{}", r.text);
        assert_eq!(b["request_id"].as_str(), r.header("x-request-id"));
    }
    for method in ["GET", "PUT", "DELETE"] {
        let r = app.raw(format!("{method} {GL} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").as_bytes());
        assert_eq!(r.status, 405, "{method}");
        assert_eq!(r.header("allow"), Some("POST"));
        assert_eq!(r.json()["status"], "FAILED");
        assert!(r.json()["request_id"].is_string());
    }
}

#[test]
fn the_goods_received_v2_alias_serves_the_same_interface() {
    let app = TestApp::start();
    let rec = fixture("goods-received-v2", "minimal");
    for path in ["/goods_received/v2", "/goods-received/v2"] {
        let r = app.post_records(path, std::slice::from_ref(&rec));
        assert_eq!(r.status, 202, "{path}: {}", r.text);
    }
    assert_eq!(
        app.store().items().unwrap().len(),
        1,
        "both paths share one key (D12, D16)"
    );
}

#[test]
fn content_type_must_be_json_in_any_case_with_parameters() {
    let app = TestApp::start();
    let ok = |ct: &str| app.post_with(GL, &gl_body(), &[("x-api-key", KEY), ("Content-Type", ct)]);
    for ct in [
        "application/json",
        "application/Json",
        "APPLICATION/JSON; charset=utf-8",
    ] {
        assert_eq!(ok(ct).status, 202, "{ct}");
    }
    for ct in ["text/plain", "application/xml", "application/jsonx"] {
        let r = ok(ct);
        assert_eq!(r.status, 415, "{ct}");
        assert_eq!(r.json()["status"], "FAILED");
        assert!(
            r.json()["message"]
                .as_str()
                .unwrap()
                .contains("application/json")
        );
    }
    let r = app.raw(&raw_post(GL, &format!("x-api-key: {KEY}\r\n"), &gl_body()));
    assert_eq!(r.status, 415, "missing Content-Type: {}", r.text);
    assert!(r.json()["message"].as_str().unwrap().contains("missing"));
}

#[test]
fn bodies_and_batches_over_the_limits_are_413() {
    let app = TestApp::start_with("", "[limits]\nmax_body_bytes = 2000\nmax_records = 3\n");
    let big = format!(
        r#"{{"objects":{{"object":{{"record":[{{"code":"{}"}}]}}}}}}"#,
        "x".repeat(3000)
    );
    let r = app.post(GL, &big);
    assert_eq!(r.status, 413, "{}", r.text);
    assert_eq!(r.json()["status"], "FAILED");
    assert!(r.json()["message"].as_str().unwrap().contains("2000 bytes"));
    // A chunked body declares no length and is cut off while it is read.
    let chunk = big.as_bytes();
    let mut req = format!("POST {GL} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nx-api-key: {KEY}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").into_bytes();
    req.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
    req.extend_from_slice(chunk);
    req.extend_from_slice(b"\r\n0\r\n\r\n");
    assert_eq!(app.raw(&req).status, 413);
    let four: Vec<Value> = (0..4)
        .map(|i| json!({"code": format!("C{i}"), "type": "VAT", "description_en": "d"}))
        .collect();
    let r = app.post_records(GL, &four);
    assert_eq!(r.status, 413, "{}", r.text);
    assert!(r.json()["message"].as_str().unwrap().contains("at most 3"));
    assert!(
        app.store().items().unwrap().is_empty(),
        "nothing of a refused request is queued"
    );
    assert_eq!(app.post_records(GL, &four[..3]).status, 202);
}

#[test]
fn a_body_that_does_not_arrive_in_time_is_408() {
    let app = TestApp::start(); // body_timeout_secs = 2
    let partial = format!(
        "POST {GL} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nx-api-key: {KEY}\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{{\"objects\":"
    );
    let r = app.raw(partial.as_bytes());
    assert_eq!(r.status, 408, "{}", r.text);
    assert_eq!(r.json()["status"], "FAILED");
    assert!(r.json()["request_id"].is_string());
}

#[test]
fn api_keys_are_checked_before_the_body_is_read() {
    let app = TestApp::start();
    // Headers only: the declared body never comes. An answer other than 408 shows the key was
    // judged before the body was waited for.
    let head = |key: &str| {
        format!(
            "POST {GL} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{key}Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
        )
    };
    let r = app.raw(head("").as_bytes());
    assert_eq!(r.status, 401, "{}", r.text);
    let r = app.raw(head("x-api-key: wrong\r\n").as_bytes());
    assert_eq!(r.status, 401);
    let r = app.raw(head(&format!("X-Api-Key: {GL_ONLY_KEY}\r\n")).as_bytes());
    assert_eq!(
        r.status, 408,
        "a permitted key gets past auth and its body is awaited: {}",
        r.text
    );
    let r = app.raw(format!("POST /vendor-data/v1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-API-KEY: {GL_ONLY_KEY}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n").as_bytes());
    assert_eq!(r.status, 403, "{}", r.text);
}

#[test]
fn auth_failures_have_exactly_status_and_message() {
    let app = TestApp::start();
    let cases = [
        (vec![("Content-Type", "application/json")], 401),
        (
            vec![
                ("x-api-key", "not-a-key"),
                ("Content-Type", "application/json"),
            ],
            401,
        ),
        (
            vec![("x-api-key", ""), ("Content-Type", "application/json")],
            401,
        ),
        (
            vec![
                ("X-Api-Key", GL_ONLY_KEY),
                ("Content-Type", "application/json"),
            ],
            403,
        ),
    ];
    for (headers, status) in cases {
        let r = app.post_with("/vendor-data/v1", &gl_body(), &headers);
        assert_eq!(r.status, status, "{headers:?}");
        // RFC 9110 section 15.5.2: a 401 carries a challenge (Java's HttpClient with an
        // authenticator set fails without one); a 403 none.
        let challenge =
            (status == 401).then_some(r#"ApiKey realm="ap-intake", header="x-api-key""#);
        assert_eq!(r.header("www-authenticate"), challenge, "{headers:?}");
        let b = r.json();
        let keys: Vec<&String> = b.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["status", "message"], "D4: {}", r.text);
        assert_eq!(b["status"], "FAILED");
        assert!(r.header("x-request-id").is_some());
    }
    assert!(app.store().items().unwrap().is_empty());
    let r = app.post_with(
        GL,
        &gl_body(),
        &[
            ("X-Api-Key", GL_ONLY_KEY),
            ("Content-Type", "application/json"),
        ],
    );
    assert_eq!(r.status, 202, "the limited key may use its interface");
}

#[test]
fn oauth_headers_are_accepted_and_not_required() {
    let app = TestApp::start();
    let r = app.post_with(
        GL,
        &gl_body(),
        &[
            ("x-api-key", KEY),
            ("Content-Type", "application/Json"),
            ("Client_Id", "c"),
            ("Client_Secret", "s"),
            ("Access_Token_URL", "https://t"),
        ],
    );
    assert_eq!(r.status, 202, "{}", r.text);
}

#[test]
fn every_response_carries_a_request_id() {
    let app = TestApp::start();
    let responses = [
        app.post(GL, &gl_body()),
        app.post(GL, "{}"),
        app.post("/nope", "{}"),
        app.post_with(GL, "{}", &[("Content-Type", "application/json")]),
    ];
    let mut seen = std::collections::HashSet::new();
    for r in &responses {
        let id = r.header("x-request-id").expect("x-request-id");
        assert!(!id.is_empty());
        assert!(seen.insert(id.to_string()), "ids are unique");
    }
    let r = app.post_with(
        GL,
        &gl_body(),
        &[
            ("x-api-key", KEY),
            ("Content-Type", "application/json"),
            ("x-request-id", "erp-batch-42"),
        ],
    );
    assert_eq!(
        r.header("x-request-id"),
        Some("erp-batch-42"),
        "a sane client id is kept"
    );
    assert_eq!(r.json()["request_id"], "erp-batch-42");
}

#[test]
fn sandbox_needs_no_key() {
    let app = TestApp::start_with("sandbox = true", "");
    let r = app.post_with(GL, &gl_body(), &[("Content-Type", "application/json")]);
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(r.json()["message"], "1 record(s) queued");
}
