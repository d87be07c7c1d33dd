//! D38 addendum: typed clients generated from the live `/openapi.json` with each tool's
//! default options work the first time. The generators are the ones integrators use, pinned
//! in tests/clients/ (requirements.txt, package-lock.json) and installed by .ci/run into
//! target/ci-python and target/ci-node; a test skips without them, or fails under
//! `AP_INTAKE_REQUIRE_TOOLS=1` as in CI.
//!
//! - `python.rs`: openapi-python-client (every operation, a model per component, no `Any`;
//!   installed and used against the service) and datamodel-code-generator (every class named
//!   after a component);
//! - `typescript.rs`: openapi-typescript (every documented example type-checks under
//!   `tsc --strict`) and a script on openapi-fetch, compiled and run.

mod lint;
mod python;
mod typescript;

use crate::common::TestApp;
use crate::openapi::{document, skip_without};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository's tests/clients/.
fn support(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(file)
}

/// Where .ci/run installs the tools, under target/.
fn installed(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target")
        .join(dir)
}

/// Runs `cmd` and returns its output, failing the test when it exits non-zero.
fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Both output streams of `out`, as text.
fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The service's document, written to `dir/openapi.json`.
fn write_document(app: &TestApp, dir: &Path) -> (Value, PathBuf) {
    let doc = document(app);
    let file = dir.join("openapi.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    (doc, file)
}

/// The component names under `components/schemas`.
fn components(doc: &Value) -> BTreeSet<String> {
    doc["components"]["schemas"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect()
}

/// Every operation of the document: `(method, path, operation)`.
fn operations(doc: &Value) -> Vec<(String, String, Value)> {
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            ops.push((method.clone(), path.clone(), op.clone()));
        }
    }
    ops
}

/// A name as generators write identifiers: `request-receipt` -> `request_receipt`.
fn snake(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    out.trim_matches('_').to_string()
}

/// The names of `class X(...)` lines in Python source.
fn python_classes(source: &str) -> Vec<String> {
    source
        .lines()
        .filter_map(|l| l.strip_prefix("class "))
        .map(|l| {
            l.split(['(', ':'])
                .next()
                .unwrap_or_default()
                .trim()
                .to_string()
        })
        .collect()
}

/// The first ```` ```lang ```` block after the line starting with `after` in README.md's "A
/// generated client", pointed at `url` with `key`: the README's examples run as tests.
fn readme_example(after: &str, lang: &str, url: &str, key: &str) -> String {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let section = readme.split("\n### A generated client\n").nth(1).unwrap();
    let from = section.find(&format!("\n{after}")).unwrap();
    let fence = format!("```{lang}\n");
    let start = from + section[from..].find(&fence).unwrap() + fence.len();
    let end = start + section[start..].find("```").unwrap();
    section[start..end]
        .replace("http://127.0.0.1:8080", url.trim_end_matches('/'))
        .replace("YOUR-KEY", key)
}

/// The GL code schema with one more field, `cost_owner` (an override, D14).
fn gl_override(dir: &Path) {
    let gl_iface = crate::common::iface("/general-ledger-codes/v1");
    let mut gl = crate::common::schema(gl_iface);
    gl["properties"]["cost_owner"] = serde_json::json!({"type": "string", "maxLength": 40});
    std::fs::write(dir.join(gl_iface.schema), gl.to_string()).unwrap();
}

#[test]
fn names_as_generators_write_them() {
    assert_eq!(
        snake("validate-general-ledger-codes-v1"),
        "validate_general_ledger_codes_v1"
    );
    assert_eq!(snake("Dry run"), "dry_run");
    assert_eq!(
        python_classes("class A(BaseModel):\n    x: int\nclass B:\n"),
        ["A", "B"]
    );
    assert!(support("gl_codes.ts").exists() && support("use_python_client.py").exists());
}

/// A service that also issues tokens (D47): a client `erp-generated` that may use every
/// interface, and a token of it fetched from `/oauth2/token`. The generated clients send
/// with the key and with the token (issue 47).
fn app_with_tokens() -> (TestApp, String) {
    let app = TestApp::with_client("erp-generated", "generated-secret");
    let mut r = crate::common::agent()
        .post(&app.url("/oauth2/token"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .send(
            "grant_type=client_credentials&client_id=erp-generated&client_secret=generated-secret",
        )
        .unwrap();
    let r = crate::common::reply_of(&mut r);
    assert_eq!(r.status, 200, "{}", r.text);
    let token = r.json()["access_token"].as_str().unwrap().to_string();
    (app, format!("token:{token}"))
}
