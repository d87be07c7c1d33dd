//! `ap-intake status` and `ap-intake requeue` against the real binary (D18, D21, D22): the
//! same report from the running service over its admin socket and from the data directory of
//! a stopped one, rejected records listed and requeued, the errors when neither can be reached,
//! and what the sandbox sink received. `status/wire.rs`: the `--json` document against
//! committed copies, and the admin socket's version.

mod wire;

use crate::common;
use common::receiver::*;
use common::setup::*;
use common::*;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;

const GL: &str = "general-ledger-codes-v1";
const GL_PATH: &str = "/general-ledger-codes/v1";
const VENDOR: &str = "vendor-data-v1";
impl Setup {
    /// `status <args>`, which must succeed; its stdout.
    fn status(&self, args: &[&str]) -> String {
        self.ok("status", args)
    }
}

/// The whitespace-separated columns of the text report's row of `path`.
fn row(text: &str, path: &str) -> Vec<String> {
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(path))
        .unwrap_or_else(|| panic!("no row for {path} in:\n{text}"))
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[test]
fn status_answers_from_the_running_service_and_from_the_data_directory() {
    let receiver = Receiver::start();
    receiver.answer(|_| (503, vec![], "platform busy".into()));
    let setup = Setup::new("", &receiver.url());
    let mut service = setup.serve();

    let codes = ["4000", "4010", "4020"];
    let records: Vec<Value> = codes.iter().map(|c| gl(c)).collect();
    let r = service.post_records(GL_PATH, &records, Some(KEY));
    assert_eq!(r.status, 202, "{}", r.text);
    let r = service.post_records(
        "/vendor-data/v1",
        &[fixture("vendor-data", "minimal")],
        Some(KEY),
    );
    assert_eq!(r.status, 202, "{}", r.text);

    // The platform has answered 503 at least once.
    let report = setup.report_until("a failed GL delivery", |r| {
        entry(r, GL)["failures"].as_u64().unwrap_or(0) >= 1
    });
    assert_eq!(report["source"], "service", "{report:#}");
    for i in report["interfaces"].as_array().unwrap() {
        let expected = match i["interface"].as_str().unwrap() {
            GL => 3,
            VENDOR => 1,
            _ => 0,
        };
        assert_eq!(i["pending"].as_u64(), Some(expected), "{i:#}");
        assert_eq!(i["rejected"].as_u64(), Some(0), "{i:#}");
        assert_eq!(i["delivered"].as_u64(), Some(0), "{i:#}");
    }
    let g = entry(&report, GL);
    assert_eq!(g["path"], GL_PATH);
    assert!(g["failures"].as_u64().unwrap() >= 1, "{g:#}");
    assert!(
        !g["next_retry_ms"].is_null() || !g["last_error"].is_null(),
        "{g:#}"
    );
    assert!(
        g["last_error"].as_str().unwrap_or("").contains("HTTP 503"),
        "{g:#}"
    );
    assert!(g["oldest_pending_age_secs"].is_u64(), "{g:#}");
    assert!(
        report["sandbox_sink"].is_null(),
        "no sink outside sandbox: {report:#}"
    );

    // The table for people, every column.
    let text = setup.status(&["--wide"]);
    assert_eq!(
        text.lines().next(),
        Some("Queue status, from the running service"),
        "{text}"
    );
    // INTERFACE PENDING OLDEST REJECTED QUARANTINED DELIVERED DELIVERY ...
    let cols = row(&text, GL_PATH);
    assert_eq!(cols[1], "3", "pending: {text}");
    assert_eq!(cols[3], "0", "rejected: {text}");
    assert_eq!(cols[5], "0", "delivered: {text}");
    assert_ne!(cols[2], "-", "oldest pending age: {text}");
    assert!(cols.join(" ").contains("HTTP 503"), "last error: {text}");
    assert_eq!(row(&text, "/vendor-data/v1")[1], "1", "{text}");
    assert!(!text.contains("Sandbox sink"), "{text}");

    // Keys and one record.
    let mut keys = setup.keys(&["pending", "--interface", GL_PATH]);
    keys.sort();
    let expected: Vec<String> = codes.iter().map(|c| gl_key(c)).collect();
    assert_eq!(keys, expected);
    let all = setup.keys(&["pending"]);
    assert_eq!(all.len(), 4, "{all:?}");
    assert!(all.iter().any(|k| k.starts_with("vendor:")), "{all:?}");
    assert!(setup.keys(&["rejected"]).is_empty());
    let shown = setup.status(&["show", &gl_key("4010")]);
    assert!(shown.contains("<code>4010</code>"), "{shown}");
    assert!(!shown.contains("<code>4000</code>"), "{shown}");
    assert!(shown.contains("Pending"), "{shown}");
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("last error:") && l.contains("HTTP 503")),
        "{shown}"
    );

    // The admin socket is the owner's only.
    let socket = setup.data_dir().join("admin.sock");
    let mode = std::fs::metadata(&socket)
        .unwrap_or_else(|e| panic!("{}: {e}", socket.display()))
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");

    // Stopped: the same answers from the data directory.
    let status = service.terminate();
    assert!(status.success(), "{status:?}");
    assert!(!socket.exists(), "the admin socket is removed on shutdown");
    let text = setup.status(&["--wide"]);
    assert_eq!(
        text.lines().next(),
        Some("Queue status, from the data directory (the service is not running)"),
        "{text}"
    );
    let cols = row(&text, GL_PATH);
    assert_eq!(cols[1], "3", "pending: {text}");
    assert_ne!(cols[2], "-", "oldest pending age: {text}");
    assert_eq!(row(&text, "/vendor-data/v1")[1], "1", "{text}");
    let report = setup.report();
    assert_eq!(report["source"], "data_directory", "{report:#}");
    assert_eq!(count(&report, GL, "pending"), 3);
    assert_eq!(count(&report, VENDOR, "pending"), 1);
    let mut keys = setup.keys(&["pending", "--interface", GL_PATH]);
    keys.sort();
    assert_eq!(keys, expected);
    assert!(!socket.exists());
}

#[test]
fn rejected_records_are_listed_and_requeued_from_the_command_line() {
    let receiver = Receiver::start();
    receiver.answer(|req| {
        if req.body.contains("BAD-1") {
            (400, vec![], "unknown cost centre".into())
        } else {
            ok()
        }
    });
    let setup = Setup::new("", &receiver.url());
    let mut service = setup.serve();
    let r = service.post_records(
        GL_PATH,
        &[gl("GOOD-1"), gl("BAD-1"), gl("GOOD-2")],
        Some(KEY),
    );
    assert_eq!(r.status, 202, "{}", r.text);

    let report = setup.report_until("two GL codes delivered, one rejected", |r| {
        count(r, GL, "delivered") == 2 && count(r, GL, "rejected") == 1
    });
    assert_eq!(count(&report, GL, "pending"), 0, "{report:#}");
    let delivered: String = receiver
        .delivered()
        .iter()
        .map(|d| d.body.clone())
        .collect();
    assert!(
        delivered.contains("GOOD-1") && delivered.contains("GOOD-2"),
        "{delivered}"
    );
    assert!(!delivered.contains("BAD-1"), "{delivered}");

    assert_eq!(setup.keys(&["rejected"]), vec![gl_key("BAD-1")]);
    assert_eq!(
        setup.keys(&["rejected", "--interface", GL_PATH]),
        vec![gl_key("BAD-1")]
    );
    assert!(
        setup
            .keys(&["rejected", "--interface", "/vendor-data/v1"])
            .is_empty()
    );
    let shown = setup.status(&["show", &gl_key("BAD-1")]);
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("last error:") && l.contains("HTTP 400: unknown cost centre")),
        "{shown}"
    );
    assert!(shown.contains("Rejected"), "{shown}");
    assert!(shown.contains("<code>BAD-1</code>"), "{shown}");
    let text = setup.status(&["--wide"]);
    let cols = row(&text, GL_PATH);
    assert_eq!(
        (cols[1].as_str(), cols[3].as_str(), cols[5].as_str()),
        ("0", "1", "2"),
        "pending, rejected, delivered: {text}"
    );

    // The platform now takes it; the operator puts it back.
    receiver.answer(|_| ok());
    let out = setup.run("requeue", &[&gl_key("BAD-1")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 record(s) back in the queue"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        receiver.wait_for(PATIENCE, |got| got
            .iter()
            .any(|(r, s)| *s == 200 && r.body.contains("BAD-1"))),
        "BAD-1 was not delivered after the requeue: {:?}",
        receiver.received()
    );
    let report = setup.report_until("BAD-1 delivered after the requeue", |r| {
        count(r, GL, "delivered") == 3
    });
    assert_eq!(count(&report, GL, "rejected"), 0, "{report:#}");
    assert_eq!(count(&report, GL, "pending"), 0, "{report:#}");
    assert!(setup.keys(&["rejected"]).is_empty());

    // A key that is not rejected (delivered, or never seen) is refused.
    for key in [gl_key("GOOD-1"), gl_key("NEVER-SENT")] {
        let out = setup.run("requeue", &[&key]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "requeue {key} succeeded");
        assert!(err.contains("status rejected"), "{key}: {err}");
    }

    // A second rejected record, requeued while the service is stopped.
    receiver.answer(|req| {
        if req.body.contains("BAD-2") {
            (400, vec![], "unknown cost centre".into())
        } else {
            ok()
        }
    });
    let r = service.post_records(GL_PATH, &[gl("BAD-2")], Some(KEY));
    assert_eq!(r.status, 202, "{}", r.text);
    setup.report_until("BAD-2 rejected", |r| count(r, GL, "rejected") == 1);
    let status = service.terminate();
    assert!(status.success(), "{status:?}");
    receiver.answer(|_| ok());
    assert_eq!(setup.keys(&["rejected"]), vec![gl_key("BAD-2")]);
    let out = setup.run("requeue", &["--all-rejected"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 record(s) back in the queue"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let report = setup.report();
    assert_eq!(report["source"], "data_directory", "{report:#}");
    assert_eq!(count(&report, GL, "rejected"), 0, "{report:#}");
    assert_eq!(count(&report, GL, "pending"), 1, "{report:#}");
    assert_eq!(
        setup.keys(&["pending", "--interface", GL_PATH]),
        vec![gl_key("BAD-2")]
    );
    assert!(setup.keys(&["rejected"]).is_empty());

    // The restarted service delivers it.
    let _service = setup.serve();
    assert!(
        receiver.wait_for(PATIENCE, |got| got
            .iter()
            .any(|(r, s)| *s == 200 && r.body.contains("BAD-2"))),
        "BAD-2 was not delivered after the restart: {:?}",
        receiver.received()
    );
    let report = setup.report_until("BAD-2 delivered after the restart", |r| {
        count(r, GL, "pending") == 0 && count(r, GL, "delivered") == 4
    });
    assert_eq!(report["source"], "service", "{report:#}");
    assert_eq!(count(&report, GL, "rejected"), 0, "{report:#}");
}

#[test]
fn status_exits_non_zero_when_it_can_reach_neither() {
    // (a) The data directory holds no queue.
    let setup = Setup::new("", NOWHERE);
    for args in [&[][..], &["--json"][..], &["pending"][..]] {
        let out = setup.run("status", args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "status {args:?} succeeded");
        assert!(err.contains("no queue"), "status {args:?}: {err}");
    }
    let out = setup.run("requeue", &["--all-rejected"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no queue"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // (b) A queue held open by another process (this one), and no admin socket.
    let setup = Setup::new("", NOWHERE);
    let _held =
        ap_intake::queue::SqliteStore::open(&setup.data_dir(), ap_intake::queue::Mode::Serve, 0)
            .unwrap();
    assert!(!setup.data_dir().join("admin.sock").exists());
    let out = setup.run("status", &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "status succeeded: {err}");
    assert!(err.contains("cannot reach the running service"), "{err}");
    assert!(
        err.contains(&setup.data_dir().display().to_string()),
        "names the data directory: {err}"
    );
    let out = setup.run("requeue", &["--all-rejected"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "requeue succeeded: {err}");
    assert!(err.contains("cannot reach the running service"), "{err}");
}

#[test]
fn sandbox_status_shows_what_the_sink_received() {
    let setup = Setup::new("sandbox = true", NOWHERE);
    let service = setup.serve();
    let codes = ["5000", "5010", "5020"];
    let records: Vec<Value> = codes.iter().map(|c| gl(c)).collect();
    let r = service.post_records(GL_PATH, &records, None);
    assert_eq!(r.status, 202, "{}", r.text);

    let report = setup.report_until("3 GL codes delivered to the sink", |r| {
        count(r, GL, "delivered") == 3
    });
    assert_eq!(report["source"], "service", "{report:#}");
    assert_eq!(count(&report, GL, "pending"), 0, "{report:#}");
    let sink = &report["sandbox_sink"];
    assert!(sink["documents"].as_u64().unwrap_or(0) >= 1, "{report:#}");
    assert_eq!(sink["records"].as_u64(), Some(3), "{report:#}");
    let sink_dir = setup.data_dir().join("sandbox-sink");
    assert_eq!(sink["dir"], sink_dir.display().to_string(), "{report:#}");

    let text = setup.status(&[]);
    assert!(
        text.lines().any(|l| l.starts_with("Sandbox sink")),
        "{text}"
    );
    assert_eq!(row(&setup.status(&["--wide"]), GL_PATH)[5], "3", "{text}");

    let mut xml = String::new();
    let mut files = 0u64;
    for e in std::fs::read_dir(&sink_dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "xml") {
            files += 1;
            xml.push_str(&std::fs::read_to_string(&path).unwrap());
        }
    }
    assert_eq!(
        Some(files),
        sink["documents"].as_u64(),
        "one file per document"
    );
    for c in codes {
        assert!(xml.contains(&format!("<code>{c}</code>")), "{c} in {xml}");
    }
}
