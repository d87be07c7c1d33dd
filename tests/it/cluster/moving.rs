//! `move-to-postgres` (D45): 10,000 records across the nine interfaces and every state,
//! with their retry state, attempts, versions, order and receipts, carried from the embedded
//! queue into a cluster by the real binary; a second run copies nothing; the service started
//! on PostgreSQL delivers each record once. A service on PostgreSQL refuses to leave an
//! embedded queue behind unmoved (exit 78).

use super::{FAST, WAIT};
use crate::common::Items;
use crate::common::pg::{TestDb, skipped};
use crate::common::process::{Service, bin, wait_exit};
use crate::common::receiver::{Receiver, ok};
use ap_intake::interfaces::INTERFACES;
use ap_intake::queue::receipt::{ReceiptLine, RequestInfo};
use ap_intake::queue::{
    Backoff, Mode, NewRecord, PostgresStore, QueueKey, Sent, SqliteStore, State, Store,
};
use std::collections::HashMap;
use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

const RECORDS: usize = 10_000;

fn key(i: usize) -> QueueKey {
    QueueKey::new("mv", &["main", &format!("K{i:05}")]).unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The embedded queue in `data`: RECORDS records round the nine interfaces, every 97th
/// rejected, every 89th quarantined, every 50th failed once, a receipt for the first 100,
/// and retry state for the GL codes.
fn embedded_queue(data: &Path) -> Vec<(QueueKey, ap_intake::queue::Item)> {
    let s = SqliteStore::open(data, Mode::Serve, 0).unwrap();
    let request = Arc::new(RequestInfo {
        request_id: "move-req-1".into(),
        api_key: "all".into(),
        interface: INTERFACES[0].id,
        received_at_ms: ap_intake::queue::now_ms(),
        nonce: 7,
    });
    let records: Vec<NewRecord> = (0..RECORDS)
        .map(|i| NewRecord {
            key: key(i),
            interface: INTERFACES[i % INTERFACES.len()].id,
            xml: format!("<rec><k>K{i:05}</k></rec>"),
            receipt: (i < 100).then(|| ReceiptLine {
                request: Arc::clone(&request),
                index: u32::try_from(i).unwrap(),
            }),
        })
        .collect();
    for chunk in records.chunks(500) {
        s.upsert(chunk, ap_intake::queue::now_ms()).unwrap();
    }
    let sent = |i: usize| Sent::of(&key(i), &s.get(&key(i)).unwrap().unwrap());
    for i in (0..RECORDS).step_by(97) {
        assert!(s.reject(&sent(i), "unknown vendor").unwrap());
    }
    let failed: Vec<Sent> = (1..RECORDS).step_by(50).map(sent).collect();
    s.failed(&failed, "HTTP 503").unwrap();
    let backoff = Backoff {
        failures: 3,
        next_attempt_ms: 0,
        last_error: Some("HTTP 503".into()),
        last_error_ms: Some(1),
        paused: false,
        last_success_ms: None,
    };
    s.set_backoff(INTERFACES[0].id, &backoff).unwrap();
    s.close().unwrap();
    drop(s);
    // Quarantined the way damage is: a state no version writes, swept at the next start.
    let c = rusqlite::Connection::open(data.join("queue.sqlite3")).unwrap();
    for i in (3..RECORDS).step_by(89).filter(|i| i % 97 != 0) {
        c.execute(
            "UPDATE item SET state = 7 WHERE key = ?1",
            [key(i).as_bytes()],
        )
        .unwrap();
    }
    drop(c);
    let s = SqliteStore::open(data, Mode::Serve, 0).unwrap();
    let quarantined = (3..RECORDS).step_by(89).filter(|i| i % 97 != 0).count() as u64;
    crate::common::eventually("the damaged rows are quarantined", WAIT, || {
        INTERFACES
            .iter()
            .map(|f| s.stats(f.id).unwrap().quarantined)
            .sum::<u64>()
            == quarantined
    });
    let items = s.items().unwrap();
    s.close().unwrap();
    items
}

#[test]
fn d45_move_to_postgres_carries_every_state_and_each_record_is_delivered_once() {
    let Some(db) = TestDb::create() else {
        skipped();
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let before = embedded_queue(&data);
    assert_eq!(before.len(), RECORDS);

    // The cluster holds two of the keys already: K00000 stored later (it stays), K00001
    // stored earlier (the moved version replaces it).
    let settings = db.settings("mover", 30);
    let cluster = PostgresStore::open(&settings, Mode::Inspect).unwrap();
    let first = |i: usize, xml: &str| NewRecord {
        key: key(i),
        interface: INTERFACES[i % INTERFACES.len()].id,
        xml: xml.into(),
        receipt: None,
    };
    cluster
        .upsert(
            &[first(0, "<rec><k>K00000</k><newer/></rec>")],
            u64::MAX / 4,
        )
        .unwrap();
    cluster
        .upsert(&[first(1, "<rec><k>K00001</k><older/></rec>")], 1)
        .unwrap();
    cluster.close().unwrap();
    drop(cluster);

    let platform = Receiver::start();
    platform.answer(|_| ok());
    let config = dir.path().join("pg.toml");
    std::fs::write(
        &config,
        db.config(&db.url, &data, &platform.url(), FAST, "mover", 30),
    )
    .unwrap();
    let run = |args: &[&str]| {
        bin()
            .args(args)
            .arg("--config")
            .arg(&config)
            .output()
            .unwrap()
    };
    let moved = run(&["move-to-postgres"]);
    let said = text(&moved);
    assert_eq!(moved.status.code(), Some(0), "{said}");
    let count = |state: State| before.iter().filter(|(_, i)| i.state == state).count();
    let (rejected, quarantined) = (count(State::Rejected), count(State::Quarantined));
    assert!(
        rejected > 90 && quarantined > 90,
        "{rejected} {quarantined}"
    );
    let summary = format!(
        "moved {RECORDS} records ({} pending, {rejected} rejected, {quarantined} quarantined) and 1 receipts",
        RECORDS - rejected - quarantined
    );
    assert!(said.contains(&summary), "want {summary:?} in:\n{said}");
    assert!(
        said.contains("1 keys the cluster already held in a newer version"),
        "{said}"
    );
    let again = run(&["move-to-postgres"]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    assert!(
        text(&again).contains("nothing copied again"),
        "{}",
        text(&again)
    );

    // What moved: versions, attempts, states, retry state, order, the receipt.
    let cluster = PostgresStore::open(&settings, Mode::Inspect).unwrap();
    for (k, item) in before.iter().filter(|(k, _)| *k != key(0)) {
        let there = cluster.get(k).unwrap().expect("moved");
        assert_eq!(
            (
                there.version,
                there.state,
                there.attempts,
                &there.xml,
                there.queued_at_ms
            ),
            (
                item.version,
                item.state,
                item.attempts,
                &item.xml,
                item.queued_at_ms
            ),
            "{k}"
        );
    }
    assert!(
        cluster
            .get(&key(0))
            .unwrap()
            .unwrap()
            .xml
            .contains("<newer/>")
    );
    assert_eq!(cluster.stats(INTERFACES[0].id).unwrap().backoff.failures, 3);
    let receipts = cluster.receipts("move-req-1", None).unwrap();
    assert_eq!(receipts.len(), 1);
    assert_eq!(receipts[0].records.len(), 100);
    let line_of = |iface: &str, store: &dyn Store| -> Vec<QueueKey> {
        store
            .take(iface, 40)
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect()
    };
    let embedded = SqliteStore::open(&data, Mode::Inspect, 0).unwrap();
    for iface in INTERFACES.iter().skip(1) {
        assert_eq!(
            line_of(iface.id, &cluster),
            line_of(iface.id, &embedded),
            "{}",
            iface.id
        );
    }
    drop(embedded);
    cluster.close().unwrap();
    drop(cluster);

    // The service on PostgreSQL: the moved queue is not left behind, so it starts.
    let mut service = Service::start(&config, dir.path());
    for flag in ["--all-rejected", "--all-quarantined"] {
        let out = run(&["requeue", flag]);
        assert!(out.status.success(), "{}", text(&out));
    }
    let delivered = || -> HashMap<String, usize> {
        let mut seen = HashMap::new();
        for d in platform.delivered() {
            for part in d.body.split("<k>").skip(1) {
                let k = part.split('<').next().unwrap_or("").to_string();
                *seen.entry(k).or_insert(0) += 1;
            }
        }
        seen
    };
    crate::common::eventually(
        "every moved record is delivered",
        Duration::from_secs(120),
        || delivered().len() == RECORDS,
    );
    let seen = delivered();
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
    let newer = platform
        .delivered()
        .iter()
        .any(|d| d.body.contains("<newer/>"));
    let older = platform
        .delivered()
        .iter()
        .any(|d| d.body.contains("<older/>"));
    assert!(
        newer && !older,
        "K00000 keeps the cluster's version, K00001 the moved one"
    );
    assert!(service.terminate().success());
}

#[test]
fn d45_a_service_on_postgres_refuses_to_leave_an_unmoved_queue_behind() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let s = SqliteStore::open(&data, Mode::Serve, 0).unwrap();
    let record = NewRecord {
        key: key(1),
        interface: INTERFACES[0].id,
        xml: "<rec/>".into(),
        receipt: None,
    };
    s.upsert(&[record], 1).unwrap();
    s.close().unwrap();
    drop(s);
    // Neither needs a database: the refusal comes before one is reached, and the unreachable
    // one is the point of the second.
    let config = dir.path().join("pg.toml");
    let text_of = crate::common::config_for(&data, "", crate::common::NOWHERE, "")
        .replace("[storage]\n", "[storage]\nbackend = \"postgres\"\n")
        + "\n[storage.postgres]\nurl = \"postgres://u@127.0.0.1:9/db?connect_timeout=2\"\n";
    std::fs::write(&config, text_of).unwrap();
    let mut child = bin()
        .args(["serve", "--config"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_exit(&mut child, Duration::from_secs(20)).expect("serve exits");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(78), "{stderr}");
    assert!(
        stderr.contains("1 records in the embedded queue") && stderr.contains("move-to-postgres"),
        "{stderr}"
    );

    let unreachable = bin()
        .args(["move-to-postgres", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(unreachable.status.code(), Some(1), "{}", text(&unreachable));
    assert!(
        text(&unreachable).contains("nothing was moved"),
        "{}",
        text(&unreachable)
    );
    let plain = bin()
        .args(["move-to-postgres", "--config"])
        .arg(dir.path().join("nowhere.toml"))
        .output()
        .unwrap();
    assert_ne!(plain.status.code(), Some(0), "{}", text(&plain));
}
