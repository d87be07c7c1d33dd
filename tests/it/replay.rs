//! Replay (D49) with the real binary and a real listener standing in for the platform:
//!
//! - `ap-intake replay` against the running service (admin socket) delivers each replayed
//!   key exactly once more; on a stopped service `--dry-run` changes nothing, and a replay
//!   queued there is delivered once the service starts; a named key with nothing kept is
//!   reported, not replayed; each replay is in the audit trail;
//! - on PostgreSQL with two nodes delivering, a replay delivers each key once more in all.

use crate::common;
use ap_intake::admin::replay::Asked;
use ap_intake::admin::{self, Request, Response};
use ap_intake::config::Config;
use common::receiver::{Receiver, gl_records};
use common::setup::Setup;
use common::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

const GL: &str = "/general-ledger-codes/v1";
const KEEP: &str = "[retention]\ndelivered_days = 7\n";
const WAIT: Duration = Duration::from_secs(20);

/// How many times the platform took each GL code.
fn taken(platform: &Receiver) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for doc in platform.delivered() {
        for (code, _) in gl_records(&doc.body) {
            *counts.entry(code).or_insert(0) += 1;
        }
    }
    counts
}

/// Waits until the platform took every code of `codes` `times` times, and none more often.
fn each_taken(platform: &Receiver, codes: &[&str], times: usize) {
    let reached = wait_for(WAIT, || {
        let t = taken(platform);
        codes.iter().all(|c| t.get(*c) == Some(&times))
    });
    let t = taken(platform);
    assert!(reached, "each of {codes:?} taken {times} times: {t:?}");
    // A moment more: nothing is delivered a further time.
    std::thread::sleep(Duration::from_millis(300));
    let later = taken(platform);
    assert!(
        codes.iter().all(|c| later.get(*c) == Some(&times)),
        "taken once too often: {later:?}"
    );
}

/// D49 on the embedded queue: running and stopped, a dry run, a key with nothing kept.
#[test]
fn d49_replay_delivers_each_kept_key_once_more_running_or_stopped() {
    let platform = Receiver::start();
    let setup = Setup::new("", &platform.url());
    let text = std::fs::read_to_string(&setup.config).unwrap() + "\n" + KEEP;
    std::fs::write(&setup.config, text).unwrap();
    let mut service = setup.serve();
    let sent = service.post_records(GL, &[gl("R1"), gl("R2")], Some(KEY));
    assert_eq!(sent.status, 202, "{}", sent.text);
    each_taken(&platform, &["R1", "R2"], 1);
    let report = setup.report();
    assert_eq!(
        report["kept_keys"], 2,
        "status counts what is kept: {report:#}"
    );
    assert!(report["kept_bytes"].as_u64().unwrap() > 40, "{report:#}");

    // Running: through the admin socket, only R1 named; a never-sent key is reported.
    let out = setup.ok(
        "replay",
        &[
            "--since",
            "1h",
            "--key",
            &gl_key("R1"),
            "--key",
            &gl_key("NEVER"),
        ],
    );
    assert!(out.contains("queued 1 key(s) again"), "{out}");
    assert!(out.contains("could not replay 1 key(s)"), "{out}");
    assert!(out.contains(&gl_key("NEVER")), "{out}");
    each_taken(&platform, &["R1"], 2);
    assert_eq!(taken(&platform).get("R2"), Some(&1));
    service.terminate();

    // Stopped: a dry run queues nothing; the replay does, and the next start delivers it.
    let dry = setup.ok("replay", &["--since", "1h", "--dry-run"]);
    assert!(dry.contains("would queue 2 key(s) again"), "{dry}");
    assert!(
        setup.keys(&["pending"]).is_empty(),
        "a dry run queues nothing"
    );
    let out = setup.ok("replay", &["--since", "1h", "--interface", GL]);
    assert!(out.contains("queued 2 key(s) again"), "{out}");
    let mut service = setup.serve();
    each_taken(&platform, &["R1"], 3);
    each_taken(&platform, &["R2"], 2);
    service.terminate();

    let trail = setup.ok("status", &["audit", "--json"]);
    let trail: serde_json::Value = serde_json::from_str(&trail).unwrap();
    let replays: Vec<&serde_json::Value> = trail
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["action"] == "replay")
        .collect();
    assert_eq!(replays.len(), 2, "two replays, the dry run not: {trail:#}");
    assert_eq!(replays[0]["changed"]["queued"]["count"], 1, "{trail:#}");
    assert_eq!(replays[0]["changed"]["not_kept"]["count"], 1, "{trail:#}");
}

/// D49 on PostgreSQL: two nodes deliver from one queue; a replay asked of one of them
/// delivers each key once more, whichever node takes it.
#[test]
fn d49_replay_on_postgres_with_two_nodes_delivers_each_key_once_more() {
    let Some(db) = pg::TestDb::create() else {
        pg::skipped();
        return;
    };
    let platform = Receiver::start();
    let start = |node: &str| {
        let dir = tempfile::tempdir().unwrap();
        let text = pg::TestDb::config_text(
            &db.url,
            &dir.path().join("data"),
            &platform.url(),
            &format!(
                "[delivery]\nbackoff_base_ms = 20\nbackoff_cap_ms = 100\nbatch_size = 7\n{KEEP}"
            ),
            node,
            30,
        );
        TestApp::start_config(dir, Config::parse(&text, Path::new("n.toml")).unwrap())
    };
    let (a, b) = (start("a"), start("b"));
    let codes: Vec<String> = (0..60).map(|i| format!("P{i:02}")).collect();
    let records: Vec<serde_json::Value> = codes.iter().map(|c| gl(c)).collect();
    let sent = a.post_records(GL, &records);
    assert_eq!(sent.status, 202, "{}", sent.text);
    let codes: Vec<&str> = codes.iter().map(String::as_str).collect();
    each_taken(&platform, &codes, 1);
    let asked = Asked {
        since_ms: 0,
        until_ms: None,
        interface: None,
        keys: Vec::new(),
        dry_run: false,
    };
    match admin::query(&b.locations(), &Request::Replay(asked)).unwrap() {
        Response::Replayed(done) => assert_eq!(done.queued.len(), 60, "{done:?}"),
        other => panic!("{other:?}"),
    }
    each_taken(&platform, &codes, 2);
    drop(a);
}
