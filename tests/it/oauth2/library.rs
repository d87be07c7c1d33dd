//! D47, issue 47: a real OAuth 2.0 client library (Python's requests-oauthlib, pinned in
//! tests/clients/requirements.txt and installed by .ci/run) fetches a token from
//! `/oauth2/token` with each client authentication method and posts with it.

use super::*;
use crate::common::skip::skip;
use std::process::Command;

/// .ci/run's venv python, when requests-oauthlib imports there.
fn python() -> Option<PathBuf> {
    let py = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/ci-python/bin/python3");
    let probe = Command::new(&py)
        .args(["-c", "import requests_oauthlib"])
        .output();
    probe.is_ok_and(|o| o.status.success()).then_some(py)
}

#[test]
fn requests_oauthlib_fetches_a_token_both_ways_and_posts_with_it() {
    let Some(py) = python() else {
        return skip("requests-oauthlib (target/ci-python, .ci/run)");
    };
    let keys = tempfile::tempdir().unwrap();
    let app = start(&signing_key(keys.path(), "k.pem"));
    let body = keys.path().join("body.json");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/oauth_client.py");
    for (i, method) in ["basic", "post"].into_iter().enumerate() {
        let code = format!("LIB{i}");
        std::fs::write(&body, envelope(&[gl(&code)]).to_string()).unwrap();
        let out = Command::new(&py)
            .arg(&script)
            .args([&app.url(""), CLIENT, SECRET, method, GL])
            .arg(&body)
            // oauthlib refuses plain http unless told; the test service listens on loopback.
            .env("OAUTHLIB_INSECURE_TRANSPORT", "1")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{method}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let said: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(said["token_type"], "Bearer", "{method}: {said}");
        assert_eq!(
            said["scope"],
            json!(["general-ledger-codes-v1"]),
            "{method}: {said}"
        );
        assert_eq!(said["status"], 202, "{method}: {said}");
        assert_eq!(said["body"]["succeeded"], 1, "{method}: {said}");
        assert!(app.item(&gl_key(&code)).is_some(), "{method}: queued");
    }
    // A wrong secret: the library raises the RFC 6749 error it was sent.
    let out = Command::new(&py)
        .arg(&script)
        .args([&app.url(""), CLIENT, "wrong", "basic", GL])
        .arg(&body)
        .env("OAUTHLIB_INSECURE_TRANSPORT", "1")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("invalid_client"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
