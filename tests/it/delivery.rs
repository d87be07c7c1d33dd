//! Delivery to the platform (D18): documents, batches, outages, Retry-After, rejections,
//! resends in flight and retry state across restarts. The platform is a real HTTP listener.

use crate::common;
use ap_intake::queue::State;
use common::receiver::{Receiver, gl_records, ok};
use common::*;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const GL: &str = "/general-ledger-codes/v1";
const FAST: &str = "[delivery]\nbackoff_base_ms = 20\nbackoff_cap_ms = 100\ntimeout_secs = 5\n";
const WAIT: Duration = Duration::from_secs(20);

fn gl(code: &str, description: &str) -> Value {
    json!({"code": code, "type": "VAT", "description_en": description})
}

/// The last delivered description of every GL code, in delivery order.
fn latest_delivered(r: &Receiver) -> HashMap<String, String> {
    r.delivered()
        .iter()
        .flat_map(|d| gl_records(&d.body))
        .collect()
}

fn queue_empty(app: &TestApp) -> bool {
    app.store().keys(State::Pending, None).unwrap().is_empty()
}

fn wait_until(cond: impl Fn() -> bool) -> bool {
    wait_for(WAIT, cond)
}

#[test]
fn each_interface_gets_its_own_documents_at_its_own_path() {
    let platform = Receiver::start();
    let app = TestApp::delivering_to(&platform.url(), FAST);
    app.post_records(GL, &[gl("A", "a"), gl("B", "b")]);
    app.post_records("/vendor-data/v1", &[fixture("vendor-data", "minimal")]);
    app.post_records(
        "/accounting-objects/v1?accountingType=PROJECT",
        &[fixture("accounting-objects", "minimal")],
    );
    assert!(platform.wait_for(WAIT, |r| r.len() >= 3));
    assert!(wait_until(|| queue_empty(&app)));
    let got = platform.delivered();
    let by_path: HashMap<&str, &str> = got
        .iter()
        .map(|r| (r.path.as_str(), r.body.as_str()))
        .collect();
    let gl_doc = by_path["/intake/general-ledger-codes-v1"];
    assert!(
        gl_doc.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?><gl_codes><gl_code>"),
        "{gl_doc}"
    );
    assert_eq!(gl_records(gl_doc).len(), 2, "one document for both records");
    assert!(by_path["/intake/vendor-data-v1"].contains("<vendors><vendor>"));
    assert!(
        by_path["/intake/accounting-objects-v1"]
            .contains("<accountingType>PROJECT</accountingType>")
    );
    for r in &got {
        assert_eq!(
            r.header("content-type"),
            Some("application/xml; charset=utf-8")
        );
        assert_valid_xml(
            r.body.as_bytes(),
            match r.path.as_str() {
                "/intake/general-ledger-codes-v1" => "general-ledger-codes.xsd",
                "/intake/vendor-data-v1" => "vendor-data.xsd",
                _ => "accounting-objects.xsd",
            },
        );
    }
    let stats = app.store().stats("general-ledger-codes-v1").unwrap();
    assert_eq!((stats.pending, stats.delivered), (0, 2));
}

#[test]
fn documents_hold_at_most_batch_size_records() {
    let platform = Receiver::start();
    let app = TestApp::delivering_to(
        &platform.url(),
        &FAST.replace("[delivery]\n", "[delivery]\nbatch_size = 2\n"),
    );
    let records: Vec<Value> = (0..5).map(|i| gl(&format!("C{i}"), "x")).collect();
    assert_eq!(app.post_records(GL, &records).status, 202);
    assert!(wait_until(|| latest_delivered(&platform).len() == 5));
    let sizes: Vec<usize> = platform
        .delivered()
        .iter()
        .map(|d| gl_records(&d.body).len())
        .collect();
    assert!(sizes.iter().all(|&n| (1..=2).contains(&n)), "{sizes:?}");
}

/// The `authorization` header the platform gets when `[platform]` also has `secret_key`
/// pointing at a file holding `secret`, plus `lines`.
fn authorization_with(lines: &str, secret_key: &str, secret: &str) -> Option<String> {
    let platform = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("secret");
    std::fs::write(&file, format!("{secret}\n")).unwrap();
    let platform_lines = format!("[platform]\n{lines}{secret_key} = \"{}\"\n", file.display());
    let text = config_for(&dir.path().join("data"), "", &platform.url(), FAST)
        .replace("[platform]\n", &platform_lines);
    let config = ap_intake::config::Config::parse(&text, std::path::Path::new("t.toml")).unwrap();
    let app = TestApp::start_config(dir, config);
    app.post_records(GL, &[gl("A", "a")]);
    assert!(platform.wait_for(WAIT, |r| !r.is_empty()));
    platform.received()[0]
        .0
        .header("authorization")
        .map(str::to_string)
}

#[test]
fn platform_credentials_are_sent_from_files() {
    assert_eq!(
        authorization_with("", "bearer_token_file", "s3cret-token").as_deref(),
        Some("Bearer s3cret-token")
    );
    // base64("ap:pa:ss")
    assert_eq!(
        authorization_with("username = \"ap\"\n", "password_file", "pa:ss").as_deref(),
        Some("Basic YXA6cGE6c3M=")
    );
}

#[test]
fn an_outage_is_retried_until_every_key_arrives_in_its_latest_version() {
    let platform = Receiver::start();
    let up = platform.down("maintenance");
    let app = TestApp::delivering_to(&platform.url(), FAST);
    for round in 0..4 {
        let records: Vec<Value> = (0..20)
            .map(|i| gl(&format!("K{i}"), &format!("round {round}")))
            .collect();
        assert_eq!(app.post_records(GL, &records).status, 202);
        // Each resend lands between delivery attempts that fail.
        assert!(platform.wait_for(WAIT, |r| r.len() > round));
    }
    assert!(
        platform.wait_for(WAIT, |r| r.iter().filter(|(_, s)| *s == 503).count() >= 3),
        "retried during the outage"
    );
    let stats = app.store().stats("general-ledger-codes-v1").unwrap();
    assert_eq!(stats.pending, 20, "nothing lost, one pending item per key");
    assert!(stats.backoff.failures >= 1);
    assert!(
        stats
            .backoff
            .last_error
            .unwrap()
            .contains("HTTP 503: maintenance")
    );
    let item = app.item("gl-code:main/K0").unwrap();
    assert!(item.attempts >= 1 && item.last_error.is_some());

    up.store(true, Ordering::Relaxed);
    assert!(wait_until(|| queue_empty(&app)));
    let latest = latest_delivered(&platform);
    assert_eq!(latest.len(), 20);
    assert!(latest.values().all(|d| d == "round 3"), "{latest:?}");
    // The lane settles the delivery, then resets its retry state: right after the queue
    // empties, not at the same instant.
    assert!(
        wait_until(|| app
            .store()
            .stats("general-ledger-codes-v1")
            .unwrap()
            .backoff
            .failures
            == 0),
        "reset once the platform answers"
    );
}

#[test]
fn network_errors_are_retried_forever() {
    // Nothing listens on the platform port at first.
    let parked = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = parked.local_addr().unwrap().port();
    drop(parked);
    let app = TestApp::delivering_to(&format!("http://127.0.0.1:{port}/intake"), FAST);
    app.post_records(GL, &[gl("N1", "net")]);
    assert!(wait_until(|| app
        .store()
        .stats("general-ledger-codes-v1")
        .unwrap()
        .backoff
        .failures
        >= 3));
    assert_eq!(
        app.store()
            .stats("general-ledger-codes-v1")
            .unwrap()
            .pending,
        1
    );
}

#[test]
fn retry_after_is_honoured() {
    let platform = Receiver::start();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&calls);
    platform.answer(move |_| {
        if c.fetch_add(1, Ordering::Relaxed) == 0 {
            (
                429,
                vec![("Retry-After".into(), "1".into())],
                "slow down".into(),
            )
        } else {
            ok()
        }
    });
    let app = TestApp::delivering_to(&platform.url(), FAST);
    app.post_records(GL, &[gl("R1", "r")]);
    assert!(platform.wait_for(WAIT, |r| r.len() >= 2));
    let got = platform.received();
    let gap = got[1].0.at - got[0].0.at;
    assert!(
        gap >= Duration::from_millis(950),
        "second attempt after {gap:?}, Retry-After was 1 s"
    );
    assert!(wait_until(|| queue_empty(&app)));
}

#[test]
fn a_refused_batch_is_split_and_only_the_culprit_parked() {
    let platform = Receiver::start();
    platform.answer(|r| {
        if r.body.contains("<code>BAD</code>") {
            (422, vec![], "unknown cost centre".into())
        } else {
            ok()
        }
    });
    let app = TestApp::delivering_to(&platform.url(), FAST);
    assert_eq!(
        app.post_records(GL, &[gl("G1", "a"), gl("BAD", "b"), gl("G2", "c")])
            .status,
        202
    );
    assert!(wait_until(
        || latest_delivered(&platform).len() == 2 && queue_empty(&app)
    ));
    let received = platform.received();
    assert_eq!(
        gl_records(&received[0].0.body).len(),
        3,
        "first the whole batch"
    );
    assert_eq!(received[0].1, 422);
    assert!(
        received[1..]
            .iter()
            .all(|(r, _)| gl_records(&r.body).len() == 1),
        "then record by record"
    );
    let bad = app.item("gl-code:main/BAD").unwrap();
    assert_eq!(bad.state, State::Rejected);
    assert_eq!(
        bad.last_error.as_deref(),
        Some("HTTP 422: unknown cost centre")
    );
    let stats = app.store().stats("general-ledger-codes-v1").unwrap();
    assert_eq!((stats.pending, stats.rejected, stats.delivered), (0, 1, 2));
    assert_eq!(stats.backoff.failures, 0, "a refusal is not an outage");

    // The operator requeues it once the platform knows the cost centre.
    platform.answer(|_| ok());
    let requeued = ap_intake::admin::query(
        &app.locations(),
        &ap_intake::admin::Request::Requeue {
            key: "gl-code:main/BAD".into(),
        },
    )
    .unwrap();
    assert_eq!(requeued, ap_intake::admin::Response::Requeued(1));
    assert!(wait_until(
        || latest_delivered(&platform).contains_key("BAD")
    ));
    assert!(wait_until(|| app.item("gl-code:main/BAD").is_none()));
}

#[test]
fn a_record_replaced_during_its_delivery_is_delivered_again() {
    let platform = Receiver::start();
    let held = platform.hold();
    let app = TestApp::delivering_to(&platform.url(), FAST);
    assert_eq!(app.post_records(GL, &[gl("V", "version 1")]).status, 202);
    assert!(
        wait_until(|| held.arrived() == 1),
        "version 1 is on the wire"
    );
    assert_eq!(app.post_records(GL, &[gl("V", "version 2")]).status, 202);
    held.release();
    assert!(wait_until(|| queue_empty(&app)));
    let versions: Vec<String> = platform
        .delivered()
        .iter()
        .flat_map(|d| gl_records(&d.body))
        .map(|(_, d)| d)
        .collect();
    assert_eq!(
        versions,
        ["version 1", "version 2"],
        "the older delivery did not remove the newer version"
    );
}

#[test]
fn retry_state_survives_a_restart_and_its_time_is_clamped_to_the_cap() {
    let platform = Receiver::start();
    platform.answer(|_| {
        (
            503,
            vec![("Retry-After".into(), "3600".into())],
            "down".into(),
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let slow = "[delivery]\nbackoff_base_ms = 20\nbackoff_cap_ms = 2000\ntimeout_secs = 5\n";
    let text = config_for(&dir.path().join("data"), "", &platform.url(), slow);
    let config = ap_intake::config::Config::parse(&text, std::path::Path::new("t.toml")).unwrap();
    let app = TestApp::start_config(dir, config.clone());
    app.post_records(GL, &[gl("S", "s")]);
    assert!(platform.wait_for(WAIT, |r| r.len() == 1));
    let dir = app.stop();
    let restarted = Instant::now();
    let app = TestApp::start_config(dir, config);
    let stats = app.store().stats("general-ledger-codes-v1").unwrap();
    assert_eq!(stats.backoff.failures, 1);
    assert!(stats.backoff.next_attempt_ms > ap_intake::queue::now_ms() + 3_000_000);
    assert_eq!(stats.pending, 1);
    // D31: read back, the hour of Retry-After is clamped to the backoff cap (2 s): the next
    // attempt comes about 2 s after the restart, neither at once nor an hour later.
    assert!(
        platform.wait_for(Duration::from_secs(5), |r| r.len() == 2),
        "a stored retry time is clamped to the cap when read"
    );
    let second = platform.received()[1].0.at;
    assert!(
        second.duration_since(restarted) >= Duration::from_millis(1500),
        "the stored retry time holds across the restart: attempt after {:?}",
        second.duration_since(restarted)
    );
}
