//! Clients ERP shops use, run against the real service as they ship: curl and Java's
//! `java.net.http.HttpClient` over HTTPS with HTTP/2 (ALPN h2). Each fails a test, or skips
//! it without the tool (a failure under `AP_INTAKE_REQUIRE_TOOLS=1`, as in CI).

use crate::common::certs::Ca;
use crate::common::skip::skip;
use crate::common::*;
use crate::tls::{start_tls, tls_table};
use rcgen::ExtendedKeyUsagePurpose;
use std::path::Path;
use std::process::Command;

/// A service on HTTPS with a certificate for 127.0.0.1 and localhost, its CA's PEM file, a
/// body of 5,000 GL codes (1.2 MB) and one of 100, all in `files`.
struct Https {
    app: TestApp,
    files: tempfile::TempDir,
}

impl Https {
    fn start() -> Self {
        let ca = Ca::new("ap-intake outside test CA");
        let leaf = ca.leaf(
            "localhost",
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let files = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(files.path().join(name), text).unwrap();
        write("server.crt", &leaf.cert_pem);
        write("server.key", &leaf.key_pem);
        write("ca.crt", &ca.pem());
        let records: Vec<serde_json::Value> = (0..5000)
            .map(|i| {
                serde_json::json!({"code": format!("OUT{i:05}"), "type": "VAT",
                    "description_en": format!("{:0>180}", i)})
            })
            .collect();
        write("body.json", &envelope(&records).to_string());
        write("small.json", &envelope(&records[..100]).to_string());
        let tls = tls_table(
            &files.path().join("server.crt"),
            &files.path().join("server.key"),
            "",
        );
        let app = start_tls("", &tls);
        Self { app, files }
    }

    fn path(&self, name: &str) -> String {
        self.files.path().join(name).display().to_string()
    }

    fn base(&self) -> String {
        format!("https://127.0.0.1:{}", self.app.addr.port())
    }
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Issue 45, item 1: `curl --http2` with `Expect: 100-continue` over TLS waited 30 s for a
/// `100 Continue` that never came, then got 408. It must get its 202 at once (RFC 9110
/// section 10.1.1), without leaning on curl's own expect timeout (set to 40 s here).
#[test]
fn curl_over_http2_expecting_100_continue_is_answered_at_once() {
    if !have("curl") {
        return skip("curl");
    }
    let https = Https::start();
    let out = Command::new("curl")
        .args([
            "-sS",
            "--http2",
            "--expect100-timeout",
            "40",
            "--max-time",
            "60",
        ])
        .args(["--cacert", &https.path("ca.crt")])
        .args([
            "-H",
            "Expect: 100-continue",
            "-H",
            "Content-Type: application/json",
        ])
        .args(["-H", &format!("x-api-key: {KEY}")])
        .args(["--data-binary", &format!("@{}", https.path("body.json"))])
        .args([
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{http_version} %{time_total}",
        ])
        .arg(format!("{}/general-ledger-codes/v1", https.base()))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    let err = String::from_utf8_lossy(&out.stderr);
    let words: Vec<&str> = said.split_whitespace().collect();
    assert_eq!(words.get(..2), Some(&["202", "2"][..]), "{said} {err}");
    let secs: f64 = words[2].parse().unwrap();
    assert!(secs < 10.0, "answered after {secs} s: {said}");
    assert!(https.app.store().items().unwrap().len() == 5000);
}

/// Issue 45, items 1 and 2, with the client that found them: Java's HttpClient (HTTP/2 on
/// https by default) with `expectContinue(true)` gets its 202, where it used to fail after
/// about 41 s; with an Authenticator set, a wrong key gets the 401 and its message, where the
/// client used to throw "WWW-Authenticate header missing for response code 401".
#[test]
fn java_http_client_gets_its_answers_over_http2() {
    if !have("java") {
        return skip("java (a JDK: java runs tests/clients/JavaClient.java from source)");
    }
    let https = Https::start();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/JavaClient.java");
    let out = Command::new("java")
        .arg(&source)
        .args([&https.base(), KEY, &https.path("ca.crt")])
        .args([&https.path("body.json"), &https.path("small.json")])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}\n{err}");
    let expect = said
        .lines()
        .find(|l| l.starts_with("expect "))
        .unwrap_or("");
    let words: Vec<&str> = expect.split_whitespace().collect();
    assert_eq!(
        words.get(1..3),
        Some(&["202", "HTTP_2"][..]),
        "{said}\n{err}"
    );
    let ms: u64 = words[3].parse().unwrap();
    assert!(ms < 10_000, "answered after {ms} ms: {said}");
    let auth = said.lines().find(|l| l.starts_with("auth ")).unwrap_or("");
    assert!(
        auth.starts_with(r#"auth 401 ApiKey realm="ap-intake", header="x-api-key""#)
            && auth.contains("API key invalid"),
        "{said}\n{err}"
    );
}
