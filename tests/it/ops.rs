//! Operating the appliance: rate limits, header timeouts, the connection cap, the admin
//! listener (healthz, readyz, metrics), logs, check-config and print-config.

use crate::common;
use common::process::{Service, bin, post};
use common::*;
use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

const GL: &str = "/general-ledger-codes/v1";

fn gl_body() -> String {
    envelope(&[fixture("general-ledger-codes", "minimal")]).to_string()
}

/// A test app whose config text is `config_for(..)` passed through `edit`.
fn app_with(edit: impl Fn(String) -> String) -> TestApp {
    let dir = tempfile::tempdir().unwrap();
    let text = edit(config_for(&dir.path().join("data"), "", NOWHERE, ""));
    let config = ap_intake::config::Config::parse(&text, Path::new("t.toml")).unwrap();
    TestApp::start_config(dir, config)
}

fn get(url: &str) -> Reply {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    reply_of(&mut agent.get(url).call().unwrap())
}

#[test]
fn a_key_over_its_rate_limit_gets_429_with_retry_after() {
    const LIMITED: &str = "limited-key";
    let app = app_with(|t| {
        format!(
            "{t}\n[[api_keys]]\nname = \"limited\"\nsha256 = \"{}\"\ninterfaces = [\"*\"]\nrate_limit_per_second = 1\nburst = 2\n",
            sha(LIMITED)
        )
    });
    let send = |key| {
        app.post_with(
            GL,
            &gl_body(),
            &[("x-api-key", key), ("Content-Type", "application/json")],
        )
    };
    assert_eq!(send(LIMITED).status, 202);
    assert_eq!(send(LIMITED).status, 202, "the burst allows two at once");
    let r = send(LIMITED);
    assert_eq!(r.status, 429, "{}", r.text);
    let retry: u64 = r
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .unwrap();
    assert!((1..=2).contains(&retry), "{retry}");
    let b = r.json();
    assert_eq!(b["status"], "FAILED");
    assert!(b["message"].as_str().unwrap().contains("rate limit"));
    assert_eq!(b["request_id"].as_str(), r.header("x-request-id"));
    assert_eq!(send(KEY).status, 202, "other keys have their own limits");
    eventually("the limit refills", Duration::from_secs(5), || {
        send(LIMITED).status == 202
    });
}

#[test]
fn headers_that_do_not_arrive_in_time_get_408() {
    let app = app_with(|t| {
        t.replace(
            "body_timeout_secs = 2",
            "body_timeout_secs = 2\nheader_timeout_secs = 1",
        )
    });
    let started = Instant::now();
    let r = app.raw(b"POST /general-ledger-codes/v1 HTTP/1.1\r\nHost: x\r\n");
    assert_eq!(r.status, 408, "{}", r.text);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(r.json()["status"], "FAILED");
    assert!(r.json()["message"].as_str().unwrap().contains("headers"));
    assert_eq!(r.json()["request_id"].as_str(), r.header("x-request-id"));
    // A prompt client is unaffected.
    assert_eq!(app.post(GL, &gl_body()).status, 202);
}

#[test]
fn connections_over_the_cap_wait_for_a_free_slot() {
    let app = app_with(|t| {
        t.replace(
            "body_timeout_secs = 2",
            "body_timeout_secs = 2\nmax_connections = 2",
        )
    });
    let idle: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(app.addr).unwrap())
        .collect();
    // The kernel hands connections to accept() in the order they were made: the two idle
    // ones take both slots before the third is looked at.
    let body = gl_body();
    let mut third = TcpStream::connect(app.addr).unwrap(); // queued by the kernel
    let request = format!(
        "POST {GL} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nx-api-key: {KEY}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    third.write_all(request.as_bytes()).unwrap();
    third
        .set_read_timeout(Some(Duration::from_millis(700)))
        .unwrap();
    let mut buf = [0u8; 64];
    assert!(
        third.read(&mut buf).is_err(),
        "not served while both slots are taken"
    );
    drop(idle);
    third
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut answer = String::new();
    third.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
}

/// Issue 46: readiness writes nothing while the queue is busy. A probe and a scrape answer
/// from the last write when it was recent (`queue::recent`); only a queue that has written
/// nothing for `PROBE_EVERY` is probed with a write of its own. Scrapes do not compete with
/// the intake's commits.
#[test]
fn readiness_answers_from_the_last_write_and_probes_at_most_every_few_seconds() {
    let app = TestApp::start(); // nothing queued: nothing is delivered
    let probe_row = || -> Option<i64> {
        let file = app.data_dir().join(ap_intake::queue::sqlite::FILE_NAME);
        let conn = rusqlite::Connection::open(file).unwrap();
        conn.query_row("SELECT value FROM meta WHERE name = 'probe'", [], |r| {
            r.get(0)
        })
        .ok()
    };
    let ready = || {
        assert_eq!(get(&app.ops_url("/readyz")).status, 200);
        assert!(
            get(&app.ops_url("/metrics"))
                .text
                .contains("\nap_intake_ready 1\n")
        );
    };
    // The start's own writes (pruning receipts) answer for a while; then the queue idles.
    std::thread::sleep(ap_intake::queue::recent::PROBE_EVERY + Duration::from_millis(200));
    ready();
    let first = probe_row().expect("an idle queue is probed with a write");
    for _ in 0..10 {
        ready();
    }
    assert_eq!(probe_row(), Some(first), "one probe answers for a while");
    std::thread::sleep(ap_intake::queue::recent::PROBE_EVERY + Duration::from_millis(200));
    ready();
    let second = probe_row().unwrap();
    assert!(
        second > first,
        "probed again after a quiet spell: {first} -> {second}"
    );
    // A commit of the intake answers for the queue as well as a probe would.
    std::thread::sleep(ap_intake::queue::recent::PROBE_EVERY + Duration::from_millis(200));
    let gl = [fixture("general-ledger-codes", "minimal")];
    assert_eq!(app.post_records(GL, &gl).status, 202);
    for _ in 0..10 {
        ready();
    }
    assert_eq!(probe_row(), Some(second), "the commit answered, no probe");
}

#[test]
fn healthz_readyz_and_metrics() {
    let app = TestApp::start();
    let h = get(&app.ops_url("/healthz"));
    assert_eq!((h.status, h.json()), (200, json!({"status": "ok"})));
    let r = get(&app.ops_url("/readyz"));
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.json(),
        json!({"status": "ready", "storage": "writable", "schemas": "9 of 9 compiled"})
    );

    let mut bad = fixture("general-ledger-codes", "minimal");
    bad["type"] = json!("X");
    assert_eq!(
        app.post_records(GL, &[fixture("general-ledger-codes", "minimal"), bad])
            .status,
        207
    );
    assert_eq!(app.post("/nope", "{}").status, 404);
    // Deliveries go nowhere (connection refused): attempts and retry failures are counted.
    let mut text = String::new();
    // Asserted line by line below.
    wait_for(Duration::from_secs(10), || {
        let m = get(&app.ops_url("/metrics"));
        assert_eq!(m.status, 200);
        // A scraper that does not ask for OpenMetrics gets the text format (alerts.rs).
        assert_eq!(
            m.header("content-type"),
            Some("text/plain; version=0.0.4; charset=utf-8")
        );
        text = m.text;
        text.contains(r#"ap_intake_delivery_failures_total{interface="general-ledger-codes-v1",kind="retry"}"#)
    });
    for line in [
        r#"ap_intake_requests_total{interface="general-ledger-codes-v1",status="207"} 1"#,
        r#"ap_intake_requests_total{interface="-",status="404"} 1"#,
        r#"ap_intake_records_accepted_total{interface="general-ledger-codes-v1"} 1"#,
        r#"ap_intake_records_rejected_total{interface="general-ledger-codes-v1"} 1"#,
        r#"ap_intake_queue_records{interface="general-ledger-codes-v1",state="pending"} 1"#,
        r#"ap_intake_queue_records{interface="general-ledger-codes-v1",state="rejected"} 0"#,
        r#"ap_intake_request_duration_seconds_count{interface="general-ledger-codes-v1"} 1"#,
        r#"ap_intake_delivery_attempts_total{interface="general-ledger-codes-v1"} "#,
        r#"ap_intake_delivery_failures_total{interface="general-ledger-codes-v1",kind="retry"} "#,
        "# TYPE ap_intake_request_duration_seconds histogram",
        // The one valid record was stored in one transaction of the queue writer.
        "ap_intake_queue_commit_seconds_count 1\n",
        "# TYPE ap_intake_queue_commit_seconds histogram",
        // ... which stored that one record.
        "ap_intake_queue_commit_records_sum 1.0\n",
        "ap_intake_queue_commit_records_bucket{le=\"1.0\"} 1\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    assert_eq!(get(&app.ops_url("/nope")).status, 404);
}

#[test]
fn the_admin_listener_is_loopback_by_default_and_can_be_turned_off() {
    let c = ap_intake::config::Config::parse("sandbox = true\n", Path::new("t.toml")).unwrap();
    assert_eq!(
        c.admin.listen.map(|a| a.to_string()).as_deref(),
        Some("127.0.0.1:9090")
    );
    let c = ap_intake::config::Config::parse(
        "sandbox = true\n[admin]\nlisten = \"\"\n",
        Path::new("t.toml"),
    )
    .unwrap();
    assert_eq!(c.admin.listen, None);
}

#[test]
fn logs_go_to_a_daily_file_as_json_with_one_line_per_request_and_no_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let password = "hunter2-platform-secret";
    let text = config_for(
        &dir.path().join("data"),
        "",
        NOWHERE,
        &format!(
            "[log]\nformat = \"json\"\ndir = \"{}\"\nmax_files = 3\nrequests = \"all\"\n",
            logs.display()
        ),
    )
    .replace(
        "[platform]\n",
        &format!("[platform]\nusername = \"ap\"\npassword = \"{password}\"\n"),
    );
    let file = dir.path().join("c.toml");
    std::fs::write(&file, text).unwrap();
    let service = Service::start(&file, dir.path());
    let r = post(service.addr, GL, &gl_body(), Some(KEY));
    assert_eq!(r.status, 202);
    assert_eq!(
        post(service.addr, GL, &gl_body(), Some("not-the-key")).status,
        401
    );
    // The file appender writes from its own thread: wait for both request lines.
    eventually(
        "the request lines in the log file",
        Duration::from_secs(10),
        || {
            let text: String = std::fs::read_dir(&logs)
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| std::fs::read_to_string(e.path()).ok())
                .collect();
            text.contains("\"status\":202") && text.contains("\"status\":401")
        },
    );
    let stderr = service.stderr();
    service.kill_9();

    let files: Vec<_> = std::fs::read_dir(&logs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let name = files[0].file_name().unwrap().to_string_lossy().to_string();
    assert!(
        name.starts_with("ap-intake.") && name.ends_with(".log"),
        "{name}"
    );
    let content = std::fs::read_to_string(&files[0]).unwrap();
    let lines: Vec<serde_json::Value> = content
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON lines"))
        .collect();
    let request = lines
        .iter()
        .find(|l| l["message"] == "request" && l["status"] == 202)
        .unwrap_or_else(|| panic!("a request line in {content}"));
    assert_eq!(request["request_id"].as_str(), r.header("x-request-id"));
    assert_eq!(request["key"], "all", "the key's name, never the key");
    assert_eq!(request["interface"], "general-ledger-codes-v1");
    assert_eq!(
        (request["accepted"].as_u64(), request["failed"].as_u64()),
        (Some(1), Some(0))
    );
    assert!(request["latency_ms"].is_string() || request["latency_ms"].is_number());
    assert!(lines.iter().any(|l| l["status"] == 401));
    for (what, text) in [("log file", &content), ("stderr", &stderr)] {
        for secret in [KEY, "not-the-key", password] {
            assert!(
                !text.contains(secret),
                "{what} contains the secret {secret:?}"
            );
        }
    }
}

#[test]
fn check_config_and_print_config() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    std::fs::write(&file, config_for(&dir.path().join("data"), "", NOWHERE, "")).unwrap();
    let out = bin()
        .args(["check-config", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("OK") && stdout.contains("plain http") && stdout.contains("9 compiled"),
        "{stdout}"
    );
    assert!(
        !dir.path().join("data").exists(),
        "checking does not create the data directory"
    );

    std::fs::write(
        &file,
        "sandbox = true\n[validation]\nschema_dir = \"/nonexistent\"\n",
    )
    .unwrap();
    let out = bin()
        .args(["check-config", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("validation.schema_dir"));

    let out = bin().arg("print-config").output().unwrap();
    assert!(out.status.success());
    let printed = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        printed,
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config.example.toml"))
            .unwrap()
    );
    ap_intake::config::Config::parse(&printed, Path::new("printed.toml"))
        .expect("the printed config is valid");
}
