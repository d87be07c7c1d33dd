//! What crosses the process boundary is a contract (D22, D37): `ap-intake status --json`
//! compared with committed documents (`tests/it/golden/`), and the admin socket's version.
//!
//! The golden files are the documents as operators' scripts read them: a renamed, removed,
//! retyped or reordered field fails here. When a change to the document is meant (a new
//! field, or a new version), run the tests with `AP_INTAKE_BLESS=1` to write the files again
//! and commit them with the change.
//!
//! What varies from run to run is checked, then replaced by a placeholder (`normalise`):
//! `generated_at_ms` (`"<now: unix ms>"`, the time of the run), `oldest_pending_age_secs`
//! (`"<age: seconds>"`, that time less the queueing time the test chose) and the temp
//! directory in `sandbox_sink.dir` (`<data_dir>`). Every other value is fixed by the test:
//! the records and their times are written into the queue directly, not sent.

use crate::common::process::bin;
use crate::common::setup::*;
use crate::common::*;
use ap_intake::queue::{
    Backoff, Mode, NewRecord, QueueKey, Sent, SqliteStore, Store, sqlite::FILE_NAME,
};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

const GL: &str = "general-ledger-codes-v1";
const VENDOR: &str = "vendor-data-v1";
const PAYMENT: &str = "payment-confirmation-v1";
/// When the test's records were queued (2023-11-14T22:13:20Z).
const T0: u64 = 1_700_000_000_000;
/// A retry due long after any run of the test (2100-01-01).
const FAR: u64 = 4_102_444_800_000;

fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it/golden")
        .join(name)
}

/// `actual` against the committed file `name`, or written there with `AP_INTAKE_BLESS=1`.
fn assert_golden(name: &str, actual: &str) {
    let path = golden(name);
    if std::env::var_os("AP_INTAKE_BLESS").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (AP_INTAKE_BLESS=1 writes it)", path.display()));
    if expected != actual {
        let line = expected
            .lines()
            .zip(actual.lines())
            .position(|(e, a)| e != a)
            .unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
        panic!(
            "the document differs from {} from line {}: an operator contract changed. If that \
             is meant, write a new version or add the field with a default, then run with \
             AP_INTAKE_BLESS=1 and commit the file.\n--- committed\n{expected}\n--- now\n{actual}",
            path.display(),
            line + 1
        );
    }
}

fn record(interface: &'static str, key: &str, code: &str) -> NewRecord {
    NewRecord {
        key: QueueKey::parse(key).unwrap(),
        interface,
        xml: format!("<record><code>{code}</code></record>"),
        receipt: None,
    }
}

/// A stopped queue whose content is known to the last millisecond: GL codes pending,
/// delivered and rejected, backing off until 2100; vendors pending and quarantined, paused
/// (D32); payment confirmations delivered, flowing; a sandbox sink with two documents.
fn known_queue(data_dir: &Path) {
    let store = SqliteStore::open(data_dir, Mode::Serve, 0).unwrap();
    let gl: Vec<NewRecord> = ["G1", "G2", "G3", "G4", "G5", "G6"]
        .iter()
        .map(|c| record(GL, &gl_key(c), c))
        .collect();
    store.upsert(&gl, T0).unwrap();
    let taken = store.take(GL, 100).unwrap();
    let sent: Vec<Sent> = taken.iter().map(|(k, i)| Sent::of(k, i)).collect();
    assert_eq!(store.delivered(&sent[..2]).unwrap(), 2);
    assert!(
        store
            .reject(&sent[2], "HTTP 400: unknown cost centre")
            .unwrap()
    );
    store.failed(&sent[3..], "HTTP 503: busy").unwrap();
    store
        .set_backoff(
            GL,
            &Backoff {
                failures: 2,
                next_attempt_ms: FAR,
                last_error: Some(
                    "https://platform.example/intake/general-ledger-codes-v1: HTTP 503: busy"
                        .into(),
                ),
                last_error_ms: Some(T0 + 60_000),
                paused: false,
                last_success_ms: Some(T0 + 30_000),
            },
        )
        .unwrap();

    let vendors = [
        record(VENDOR, "vendor:main/V1", "V1"),
        record(VENDOR, "vendor:main/V2", "V2"),
    ];
    store.upsert(&vendors, T0 + 1_000).unwrap();
    store
        .set_backoff(
            VENDOR,
            &Backoff {
                failures: 1,
                next_attempt_ms: T0 + 120_000,
                last_error: Some(
                    "https://platform.example/intake/vendor-data-v1: HTTP 401: unauthorized".into(),
                ),
                last_error_ms: Some(T0 + 90_000),
                paused: true,
                last_success_ms: None,
            },
        )
        .unwrap();

    store
        .upsert(&[record(PAYMENT, "payment-confirmation:P1", "P1")], T0)
        .unwrap();
    let taken = store.take(PAYMENT, 100).unwrap();
    let sent: Vec<Sent> = taken.iter().map(|(k, i)| Sent::of(k, i)).collect();
    assert_eq!(store.delivered(&sent).unwrap(), 1);
    store
        .set_backoff(
            PAYMENT,
            &Backoff {
                last_success_ms: Some(T0 + 5_000),
                ..Backoff::default()
            },
        )
        .unwrap();
    drop(store);

    // V2 made unreadable (its version no longer a number) and met by the delivery's read,
    // which quarantines it (D29).
    let conn = rusqlite::Connection::open(data_dir.join(FILE_NAME)).unwrap();
    let key = QueueKey::parse("vendor:main/V2").unwrap();
    let changed = conn
        .execute(
            "UPDATE item SET version = 'v7' WHERE key = ?1",
            [key.as_bytes()],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(conn);
    let store = SqliteStore::open(data_dir, Mode::Serve, 0).unwrap();
    assert_eq!(store.take(VENDOR, 100).unwrap().len(), 1);
    drop(store);

    let sink = data_dir.join("sandbox-sink");
    std::fs::create_dir_all(&sink).unwrap();
    for name in [
        "1700000000000-1-general-ledger-codes-v1-2.xml",
        "1700000005000-2-payment-confirmation-v1-1.xml",
    ] {
        std::fs::write(sink.join(name), "<document/>").unwrap();
    }
}

/// `report` with what varies replaced (module doc), each value checked first: the time of
/// the report between `before` and `after`, each age what that time makes of its queueing.
fn normalise(mut report: Value, before: u64, after: u64, data_dir: &Path) -> Value {
    let now = report["generated_at_ms"]
        .as_u64()
        .unwrap_or_else(|| panic!("generated_at_ms is not unix ms: {report:#}"));
    assert!(
        (before..=after).contains(&now),
        "{now} not in {before}..={after}"
    );
    report["generated_at_ms"] = json!("<now: unix ms>");
    for entry in report["interfaces"].as_array_mut().unwrap() {
        if entry["oldest_pending_age_secs"].is_null() {
            continue;
        }
        let queued = match entry["interface"].as_str() {
            Some(VENDOR) => T0 + 1_000,
            _ => T0,
        };
        let age = entry["oldest_pending_age_secs"].as_u64();
        assert_eq!(age, Some((now - queued) / 1000), "{entry:#}");
        entry["oldest_pending_age_secs"] = json!("<age: seconds>");
    }
    let dir = &mut report["sandbox_sink"]["dir"];
    let shown = dir.as_str().unwrap().to_string();
    let data_dir = data_dir.display().to_string();
    assert!(shown.starts_with(&data_dir), "{shown}");
    *dir = json!(shown.replacen(&data_dir, "<data_dir>", 1));
    report
}

/// `ap-intake status --json` on a stopped queue of known content is the committed document,
/// byte for byte once what varies is replaced: every field of an interface's entry, the
/// three delivery states (D32), counts of every state (D18, D29), the sink (D21).
#[test]
fn status_json_is_the_committed_document() {
    let setup = Setup::new("", NOWHERE);
    known_queue(&setup.data_dir());
    let before = ap_intake::queue::now_ms();
    let text = setup.ok("status", &["--json"]);
    let after = ap_intake::queue::now_ms();
    let report: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("status --json: {e}: {text}"));
    assert_eq!(
        text.trim_end(),
        serde_json::to_string_pretty(&report).unwrap(),
        "printed as pretty JSON"
    );
    let report = normalise(report, before, after, &setup.data_dir());
    assert_golden(
        "status.json",
        &(serde_json::to_string_pretty(&report).unwrap() + "\n"),
    );
}

/// The cluster's part of the document (D39, D41), which only a PostgreSQL queue fills: the
/// report the command builds, made by hand, in the form the command prints.
#[test]
fn status_json_of_a_cluster_is_the_committed_document() {
    use ap_intake::queue::Node;
    use ap_intake::status::{InterfaceReport, Report, Source};
    let node = |name: &str, instance: &str, live: bool| Node {
        name: name.into(),
        instance: instance.into(),
        started_at_ms: T0,
        last_seen_ms: T0 + 30_000,
        leases: 3,
        live,
    };
    let report = Report {
        source: Source::Service,
        generated_at_ms: T0 + 40_000,
        interfaces: vec![InterfaceReport {
            interface: GL.into(),
            path: "/general-ledger-codes/v1".into(),
            pending: 6,
            rejected: 0,
            quarantined: 0,
            delivered: 0,
            oldest_pending_age_secs: Some(40),
            failures: 0,
            last_error: None,
            last_error_ms: None,
            next_retry_ms: None,
            delivery: "flowing".into(),
            last_success_ms: None,
        }],
        sandbox_sink: None,
        nodes: vec![
            node("a", "0123456789abcdef0123456789abcdef", true),
            node("a", "fedcba9876543210fedcba9876543210", true),
            node("b", "00000000111111112222222233333333", false),
        ],
        duplicate_node_names: vec!["a".into()],
        kept: Default::default(),
    };
    let wire = ap_intake::status::wire::Report::from(&report);
    assert_golden(
        "status-cluster.json",
        &(serde_json::to_string_pretty(&wire).unwrap() + "\n"),
    );
}

/// One line to the admin socket at `socket` and its answer, parsed.
fn exchange(socket: &Path, line: &str) -> Value {
    let mut stream = UnixStream::connect(socket).unwrap();
    stream.write_all(line.as_bytes()).unwrap();
    stream.write_all(b"\n").unwrap();
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer).unwrap();
    serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{e}: {answer}"))
}

/// The running service answers in version 1, the version first; reads a command without a
/// version (an `ap-intake` of an earlier release) as version 1 and answers it without one, the
/// form that release reads; and refuses a newer one, naming both versions.
#[test]
fn the_admin_socket_speaks_version_1_and_refuses_a_newer_one() {
    let setup = Setup::new("", NOWHERE);
    let _service = setup.serve();
    let socket = setup.data_dir().join("admin.sock");

    let status = exchange(&socket, r#"{"version":1,"command":"status"}"#);
    let members: Vec<&String> = status.as_object().unwrap().keys().collect();
    assert_eq!(members, ["version", "status"], "the version first");
    assert_eq!(status["version"], 1, "{status:#}");
    assert_eq!(status["status"]["version"], 1, "{status:#}");
    assert_eq!(status["status"]["source"], "service", "{status:#}");

    let old = exchange(&socket, r#"{"command":"status"}"#);
    let members: Vec<&String> = old.as_object().unwrap().keys().collect();
    assert_eq!(members, ["status"], "answered as before versions: {old:#}");
    assert_eq!(old["status"]["source"], "service", "{old:#}");

    let keys = exchange(
        &socket,
        r#"{"version":1,"command":"keys","state":"rejected","interface":null}"#,
    );
    assert_eq!(keys, json!({"version": 1, "parked": []}));

    let newer = exchange(&socket, r#"{"version":2,"command":"status"}"#);
    let error = newer["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{newer:#}"));
    assert_eq!(newer["version"], 1, "{newer:#}");
    assert!(
        error.contains("admin protocol version 2 is unknown")
            && error.contains("reads version 1 and earlier"),
        "{error}"
    );

    let bad = exchange(&socket, r#"{"version":"one","command":"status"}"#);
    assert!(
        bad["error"]
            .as_str()
            .is_some_and(|e| e.contains("version \"one\"")),
        "{bad:#}"
    );
}

/// A stand-in for a running service on `socket`: answers each command with `answer` and
/// hands the command line it read to the test.
fn fake_service(socket: &Path, answer: &'static str) -> std::sync::mpsc::Receiver<String> {
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    let listener = UnixListener::bind(socket).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut line = String::new();
            if BufReader::new(&stream).read_line(&mut line).is_err() {
                return;
            }
            let _ = tx.send(line);
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    rx
}

/// `ap-intake status` sends version 1 and reads an answer without a version (a service
/// still running the earlier release) as version 1.
#[test]
fn status_reads_the_answer_of_an_earlier_service() {
    let setup = Setup::new("", NOWHERE);
    let commands = fake_service(
        &setup.data_dir().join("admin.sock"),
        "{\"keys\":[\"gl-code:main/A\"]}\n",
    );
    assert_eq!(setup.keys(&["pending"]), [gl_key("A")]);
    let sent: Value = serde_json::from_str(&commands.recv().unwrap()).unwrap();
    assert_eq!(
        sent,
        json!({"version": 1, "command": "keys", "state": "pending", "interface": null})
    );
}

/// An answer of a newer version is refused with both versions named, and the command does
/// not turn to the data directory, which the running service holds.
#[test]
fn status_refuses_the_answer_of_a_newer_service() {
    let setup = Setup::new("", NOWHERE);
    let _commands = fake_service(
        &setup.data_dir().join("admin.sock"),
        "{\"version\":2,\"status\":{}}\n",
    );
    let out = bin()
        .args(["status", "--json", "--config"])
        .arg(&setup.config)
        .env_remove("RUNTIME_DIRECTORY")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("admin protocol version 2 is unknown to ap-intake")
            && err.contains("use the ap-intake of the service's release"),
        "{err}"
    );
    assert!(!err.contains("no queue"), "{err}");
}
