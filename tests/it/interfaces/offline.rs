//! D38: the dry run (`POST /validate/<path>`) and `ap-intake validate` answer exactly as the
//! real path does, for a corpus derived from every interface's schema and fixtures: valid
//! records, each field null, of the wrong type or missing, unknown fields, mixed batches and
//! broken envelopes. The dry run queues nothing; unknown query parameters are refused.

use crate::common::process::bin;
use crate::common::*;
use crate::interfaces::support::*;

use ap_intake::interfaces::{INTERFACES, Interface};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

/// One request body of the corpus.
pub(super) struct Case {
    pub(super) name: String,
    pub(super) body: Vec<u8>,
}

fn case(name: impl Into<String>, records: &[Value]) -> Case {
    Case {
        name: name.into(),
        body: envelope(records).to_string().into_bytes(),
    }
}

fn raw(name: &str, body: &[u8]) -> Case {
    Case {
        name: name.into(),
        body: body.to_vec(),
    }
}

/// Valid and invalid bodies for `iface`, derived from its schema and fixtures.
pub(super) fn corpus(iface: &Interface) -> Vec<Case> {
    let (min, full) = (minimal(iface), full(iface));
    let mut cases = vec![
        case("minimal", std::slice::from_ref(&min)),
        case("full", std::slice::from_ref(&full)),
        case("minimal and full", &[min.clone(), full.clone()]),
        case("unknown field", &[with(&min, "/no_such_field", json!(1))]),
    ];
    for (pointer, prop) in all_props(iface, &full) {
        let wrong = if prop["type"] == "string" {
            json!(12345)
        } else {
            json!("text")
        };
        cases.push(case(
            format!("{pointer} null"),
            &[with(&full, &pointer, Value::Null)],
        ));
        cases.push(case(
            format!("{pointer} of the wrong type, after a valid record"),
            &[min.clone(), with(&full, &pointer, wrong)],
        ));
        if full.pointer(&pointer).is_some() {
            cases.push(case(
                format!("{pointer} missing"),
                &[without(&full, &pointer)],
            ));
        }
    }
    cases.extend([
        raw("not JSON", b"{"),
        raw("not an object", b"[]"),
        raw("no object", br#"{"objects":{}}"#),
        raw(
            "empty record array",
            br#"{"objects":{"object":{"record":[]}}}"#,
        ),
        raw(
            "duplicate key in the envelope",
            br#"{"objects":{"object":{"record":[{}],"record":[{}]}}}"#,
        ),
        raw("not UTF-8", b"\xff\xfe{}"),
        raw("empty body", b""),
    ]);
    cases
}

fn post_bytes(app: &TestApp, path: &str, body: &[u8]) -> Reply {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let mut resp = agent
        .post(&app.url(path))
        .header("x-api-key", KEY)
        .header("Content-Type", "application/json")
        .send(body)
        .unwrap();
    reply_of(&mut resp)
}

/// A body without its request id, which differs between any two requests.
fn without_id(text: &str) -> Value {
    let mut v: Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    v.as_object_mut()
        .map(|o| o.remove("request_id"))
        .unwrap_or_else(|| panic!("not an object: {text}"));
    v
}

/// The real answer's body as the dry run must give it: the same, but for the message of an
/// all-valid request (D38).
fn as_dry_run(real: &Reply) -> (u16, Value) {
    let mut body = without_id(&real.text);
    if real.status == 202 {
        body["message"] = json!(format!(
            "{} record(s) valid, none queued",
            body["succeeded"]
        ));
        return (200, body);
    }
    (real.status, body)
}

/// Runs `ap-intake validate --json` on the cases; each file's answer body and the exit code.
fn offline(
    config: &Path,
    dir: &Path,
    iface: &Interface,
    accounting_type: Option<&str>,
    cases: &[Case],
) -> (Vec<Value>, Option<i32>) {
    let files: Vec<_> = cases
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let file = dir.join(format!("{}-{i}.json", stem(iface)));
            std::fs::write(&file, &c.body).unwrap();
            file
        })
        .collect();
    let mut cmd = bin();
    cmd.args(["validate", "--json", "--interface", iface.path, "--config"])
        .arg(config);
    if let Some(t) = accounting_type {
        cmd.args(["--accounting-type", t]);
    }
    let out = cmd.args(&files).output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let bodies: Vec<Value> = stdout.lines().map(without_id).collect();
    assert_eq!(
        bodies.len(),
        cases.len(),
        "{}: one answer per file; stderr: {}",
        iface.path,
        String::from_utf8_lossy(&out.stderr)
    );
    (bodies, out.status.code())
}

#[test]
fn dry_runs_and_offline_validation_answer_as_the_real_path_d38() {
    let app = TestApp::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("ap-intake.toml");
    std::fs::write(&config, config_text(&app.data_dir(), "", "")).unwrap();
    let mut compared = 0;
    for iface in &INTERFACES {
        let cases = corpus(iface);
        let before = snapshot(&app);
        let dry: Vec<Reply> = cases
            .iter()
            .map(|c| post_bytes(&app, &format!("/validate{}", post_path(iface)), &c.body))
            .collect();
        assert_eq!(
            snapshot(&app),
            before,
            "{}: a dry run queued something",
            iface.path
        );
        let real: Vec<Reply> = cases
            .iter()
            .map(|c| post_bytes(&app, &post_path(iface), &c.body))
            .collect();
        let accounting_type = iface.needs_accounting_type.then_some("PROJECT");
        let (bodies, code) = offline(&config, dir.path(), iface, accounting_type, &cases);
        for (i, c) in cases.iter().enumerate() {
            let what = format!("{} {:?}", iface.path, c.name);
            assert_eq!(
                (dry[i].status, without_id(&dry[i].text)),
                as_dry_run(&real[i]),
                "{what}: the dry run differs from the real answer"
            );
            assert_eq!(
                bodies[i],
                without_id(&real[i].text),
                "{what}: `ap-intake validate` differs from the service"
            );
            compared += 1;
        }
        let all_valid = real.iter().all(|r| r.status == 202);
        assert_eq!(code, Some(if all_valid { 0 } else { 1 }), "{}", iface.path);
        assert!(!all_valid, "{}: the corpus has invalid bodies", iface.path);
    }
    eprintln!(
        "D38: {compared} bodies answered alike by the path, its dry run and `ap-intake validate`"
    );
    assert!(compared > 9 * 20, "only {compared} cases compared");
}

#[test]
fn an_accounting_object_without_its_type_gets_the_same_answer_offline() {
    let app = TestApp::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("ap-intake.toml");
    std::fs::write(&config, config_text(&app.data_dir(), "", "")).unwrap();
    let iface = iface("/accounting-objects/v1");
    let cases = [case("minimal", &[minimal(iface)])];
    let real = post_bytes(&app, iface.path, &cases[0].body);
    assert_eq!(real.status, 400, "{}", real.text);
    let (bodies, code) = offline(&config, dir.path(), iface, None, &cases);
    assert_eq!(bodies[0], without_id(&real.text));
    assert_eq!(code, Some(1));
    let (bodies, _) = offline(&config, dir.path(), iface, Some("NOT-A-TYPE"), &cases);
    let real = post_bytes(
        &app,
        &format!("{}?accountingType=NOT-A-TYPE", iface.path),
        &cases[0].body,
    );
    assert_eq!(bodies[0], without_id(&real.text));
}

#[test]
fn unknown_query_parameters_are_refused_not_ignored_d38() {
    let app = TestApp::start();
    let body = envelope(&[gl("Q1")]).to_string();
    for path in [
        "/general-ledger-codes/v1?dryRun=true",
        "/validate/general-ledger-codes/v1?dryRun=true",
        "/accounting-objects/v1?accountingType=PROJECT&dryRun=1",
    ] {
        let before = snapshot(&app);
        let r = app.post(path, &body);
        assert_eq!(r.status, 400, "{path}: {}", r.text);
        let j = r.json();
        assert_eq!(j["message"], "unknown query parameter [dryRun]", "{path}");
        assert_eq!(j["status"], "FAILED");
        assert_eq!(snapshot(&app), before, "{path}: something was queued");
    }
    let r = app.post("/general-ledger-codes/v1?accountingType=PROJECT", &body);
    assert_eq!(
        r.json()["message"],
        "unknown query parameter [accountingType]",
        "only accounting objects take accountingType"
    );
    // The real path with no query queues, the dry run answers 200.
    let r = app.post("/validate/general-ledger-codes/v1", &body);
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["message"], "1 record(s) valid, none queued");
    assert!(app.item(&gl_key("Q1")).is_none(), "the dry run queued Q1");
    assert_eq!(app.post("/general-ledger-codes/v1", &body).status, 202);
    assert!(app.item(&gl_key("Q1")).is_some());
}

#[test]
fn the_dry_run_is_authenticated_and_bounded_like_the_real_path() {
    let app = TestApp::start_with(
        "",
        "[limits]\nmax_body_bytes = 1000\ninflight_bytes = 100000\n",
    );
    let body = envelope(&[gl("A1")]).to_string();
    let path = "/validate/general-ledger-codes/v1";
    let r = app.post_with(path, &body, &[("Content-Type", "application/json")]);
    assert_eq!(r.status, 401, "{}", r.text);
    let r = app.post_with(
        "/validate/vendor-data/v1",
        &body,
        &[
            ("x-api-key", GL_ONLY_KEY),
            ("Content-Type", "application/json"),
        ],
    );
    assert_eq!(r.status, 403, "{}", r.text);
    let big = envelope(&[gl(&"B".repeat(2000))]).to_string();
    assert_eq!(app.post(path, &big).status, 413);
    assert_eq!(app.post("/validate/no-such/v1", &body).status, 404);
    assert_eq!(app.post("/validate", &body).status, 404);
}

#[test]
fn validate_reads_standard_input_and_explains_usage_errors() {
    use std::io::Write;
    let body = envelope(&[gl("S1"), json!({"code": "S2"})]).to_string();
    let mut child = bin()
        .args(["validate", "--interface", "/general-ledger-codes/v1", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.starts_with("-: 1 of 2 record(s) valid\n"), "{text}");
    assert!(text.contains("\n  record 1 "), "{text}");

    let out = bin()
        .args(["validate", "--interface", "/nowhere/v1", "x.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("\"/nowhere/v1\" is not an interface path")
    );
    let out = bin()
        .args([
            "validate",
            "--interface",
            "/general-ledger-codes/v1",
            "/no/such/file.json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read /no/such/file.json"));
    let out = bin()
        .args(["validate", "--interface", "/general-ledger-codes/v1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "no file is a usage error");
}
