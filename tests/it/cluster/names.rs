//! Two nodes that share a name (D41): two processes on one host with the default name (the
//! host name), or cloned machines. Leases belong to the process that took them, so neither
//! delivers what the other holds, and a clean stop hands back what a node held.

use super::{FAST, GL, GL_ID, WAIT, deliveries, node, pending};
use crate::common::pg::{TestDb, skipped};
use crate::common::process::Service;
use crate::common::receiver::{Receiver, ok};
use crate::common::*;
use serde_json::Value;
use std::time::{Duration, Instant};

/// The name both nodes of a test carry.
const TWIN: &str = "twin";

/// The keys leased right now, per instance holding them.
fn leases(db: &TestDb) -> Vec<(String, i64)> {
    let mut c = postgres::Client::connect(&db.url, postgres::NoTls).unwrap();
    c.query(
        "SELECT lease_instance, count(*) FROM ap_intake.item WHERE lease_until > now()
         GROUP BY lease_instance ORDER BY lease_instance",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// D41: 2,000 records sent at a steady pace, every other request through each of two nodes
/// with one name, both delivering to one platform: every record reaches it exactly once.
/// (With leases keyed by the name, 1,393 and 1,899 of 2,000 went twice.)
#[test]
fn d41_two_nodes_with_one_name_deliver_no_record_twice() {
    let db = database!();
    let platform = Receiver::start();
    platform.answer(|_| {
        std::thread::sleep(Duration::from_millis(5)); // a document takes a moment on the wire
        ok()
    });
    // One platform; each node's documents under a path of its own, to tell who sent what.
    let a = node(&db, &format!("{}/a", platform.url()), TWIN, 30);
    let b = node(&db, &format!("{}/b", platform.url()), TWIN, 30);
    let client = agent();
    let started = Instant::now();
    for request in 0..80 {
        let records: Vec<Value> = (0..25)
            .map(|i| gl(&format!("T{request:02}-{i:02}")))
            .collect();
        let app = if request % 2 == 0 { &a } else { &b };
        assert_eq!(app.post_records_on(&client, GL, &records).status, 202);
        std::thread::sleep(Duration::from_millis(20));
    }
    eventually("the 2,000 records delivered", WAIT * 2, || pending(&a) == 0);
    let took = started.elapsed();
    let seen = deliveries(&platform);
    let twice = seen.values().filter(|n| **n > 1).count();
    let documents = |who: &str| {
        platform
            .delivered()
            .iter()
            .filter(|d| d.path.contains(&format!("/intake/{who}/")))
            .count()
    };
    let (from_a, from_b) = (documents("a"), documents("b"));
    eprintln!(
        "D41: {twice} of 2,000 records delivered twice by two nodes named {TWIN:?} \
         ({from_a} documents from one, {from_b} from the other, {took:?})"
    );
    assert_eq!(seen.len(), 2000, "every record delivered");
    assert_eq!(twice, 0, "records delivered twice");
    assert!(from_a > 0 && from_b > 0, "both nodes delivered");
    assert_eq!(a.store().stats(GL_ID).unwrap().delivered, 2000);
}

/// D41: a node stopped cleanly (the real binary, SIGTERM) releases its leases: a namesake
/// that could not take them while it ran delivers them at once, not a lease (60 s) later.
#[test]
fn d41_a_node_stopped_cleanly_releases_its_leases() {
    let db = database!();
    let down = Receiver::start();
    down.answer(|_| (503, vec![], "down for maintenance".into()));
    let platform = Receiver::start();
    platform.answer(|_| ok());
    let lease_secs = 60;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.toml");
    let data = dir.path().join("data");
    let text = db.config(&db.url, &data, &down.url(), FAST, TWIN, lease_secs);
    std::fs::write(&file, text).unwrap();
    let mut a = Service::start(&file, dir.path());
    let records: Vec<Value> = (0..20).map(|i| gl(&format!("R{i:02}"))).collect();
    assert_eq!(a.post_records(GL, &records, Some(KEY)).status, 202);
    eventually("node a failed to deliver and retries", WAIT, || {
        down.received().len() >= 2
    });
    let held = leases(&db);
    assert!(
        held.len() == 1 && held[0].1 == 20,
        "node a holds the 20 keys between its retries: {held:?}"
    );
    let a_instance = &held[0].0;
    let b = node(&db, &platform.url(), TWIN, lease_secs);
    // b's lanes start, and its watch looks for pending records every 5 s.
    std::thread::sleep(Duration::from_secs(6));
    assert!(
        deliveries(&platform).is_empty(),
        "node b took what node a holds"
    );
    let stopped = Instant::now();
    assert!(a.terminate().success(), "{}", a.stderr());
    assert!(
        leases(&db).iter().all(|(i, _)| i != a_instance),
        "node a released its leases as it stopped"
    );
    eventually("node b delivers what a held", WAIT, || {
        deliveries(&platform).len() == 20
    });
    let took = stopped.elapsed();
    eprintln!(
        "D41: node b delivered node a's 20 records {took:?} after a clean stop of a (lease {lease_secs} s)"
    );
    assert!(
        took < Duration::from_secs(15),
        "took {took:?}: at once (the watch's 5 s), not after the lease"
    );
    eventually("the queue is empty", WAIT, || pending(&b) == 0);
}

/// The report `ap-intake status` gets from node `app` over its admin socket.
fn status(app: &TestApp) -> ap_intake::status::Report {
    use ap_intake::admin::{Request, Response};
    match ap_intake::admin::query(&app.locations(), &Request::Status).unwrap() {
        Response::Status(r) => r,
        other => panic!("status answered {other:?}"),
    }
}

/// D41: status lists both processes that carry one name, each with its own instance, and
/// warns about the name in the table and in `--json`; a node with a name of its own is not
/// warned about. Once one of the two stops cleanly, its row goes and so does the warning.
#[test]
fn d41_status_lists_both_nodes_of_one_name_and_warns() {
    let db = database!();
    let platform = Receiver::start();
    platform.answer(|_| ok());
    let a = node(&db, &platform.url(), TWIN, 30);
    let b = node(&db, &platform.url(), TWIN, 30);
    let solo = node(&db, &platform.url(), "solo", 30);
    let report = status(&solo);
    let names: Vec<&str> = report.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["solo", TWIN, TWIN], "{report:?}");
    let twins: Vec<&str> = report.nodes[1..]
        .iter()
        .map(|n| n.instance.as_str())
        .collect();
    assert_ne!(twins[0], twins[1], "two processes, two instances");
    assert!(twins.iter().all(|i| i.len() == 32), "{twins:?}");
    assert!(report.nodes.iter().all(|n| n.live), "{:?}", report.nodes);
    assert_eq!(report.duplicate_node_names, [TWIN]);

    // What `status --json` prints.
    let json = serde_json::to_value(ap_intake::status::wire::Report::from(&report)).unwrap();
    assert_eq!(json["duplicate_node_names"], serde_json::json!([TWIN]));
    for n in json["nodes"].as_array().unwrap() {
        for field in [
            "name",
            "instance",
            "started_at_ms",
            "last_seen_ms",
            "leases",
            "live",
        ] {
            assert!(n.get(field).is_some(), "{field} in {n}");
        }
    }
    let text = ap_intake::status::render(&report, false);
    assert!(
        text.contains("WARNING: node name \"twin\" is used by 2 running processes"),
        "{text}"
    );
    assert!(!text.contains("\"solo\" is used"), "{text}");
    for instance in &twins {
        assert!(text.contains(&instance[..8]), "{instance} listed: {text}");
    }

    b.stop();
    let report = status(&a);
    let names: Vec<&str> = report.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["solo", TWIN], "the stopped node's row went");
    assert!(report.duplicate_node_names.is_empty(), "{report:?}");
    let json = serde_json::to_value(ap_intake::status::wire::Report::from(&report)).unwrap();
    assert!(json.get("duplicate_node_names").is_none(), "{json}");
}

/// D41: a database of schema 1 (leases and nodes by name) is brought to schema 2 (and on to
/// the latest) at the first open: the queue is kept, a lease taken by name still holds until it lapses (its document
/// may be on the wire), and the old node rows go; the new node lists itself by instance.
#[test]
fn d41_a_schema_1_database_is_migrated_keeping_the_queue_and_its_leases() {
    use ap_intake::queue::{Mode, PostgresStore, QueueKey, Store};
    let db = database!();
    let mut c = postgres::Client::connect(&db.url, postgres::NoTls).unwrap();
    c.batch_execute(
        "CREATE SCHEMA ap_intake;
         CREATE TABLE ap_intake.ap_intake_meta (name text PRIMARY KEY, value bigint NOT NULL);
         INSERT INTO ap_intake.ap_intake_meta VALUES ('schema_version', 1);",
    )
    .unwrap();
    c.batch_execute(include_str!("../../../crates/queue/src/pg/schema_v1.sql"))
        .unwrap();
    let (held, free) = (gl_key("HELD"), gl_key("FREE"));
    for (i, (key, node)) in [(&held, Some("old")), (&free, None)]
        .into_iter()
        .enumerate()
    {
        let key = QueueKey::parse(key).unwrap();
        c.execute(
            "INSERT INTO ap_intake.item (key, interface, state, version, queued_at, seq,
               updated_at, xml, lease_node, lease_until)
             VALUES ($1, $2, 0, $3, 1000, $3, 1000, '<r/>', $4,
               CASE WHEN $4::text IS NULL THEN NULL ELSE now() + interval '1 hour' END)",
            &[&key.as_bytes(), &GL_ID, &(i as i64 + 1), &node],
        )
        .unwrap();
    }
    c.execute(
        "INSERT INTO ap_intake.node VALUES ('old', now(), now())",
        &[],
    )
    .unwrap();

    let store = PostgresStore::open(&db.settings("new", 30), Mode::Serve).unwrap();
    let version: i64 = c
        .query_one(
            "SELECT value FROM ap_intake.ap_intake_meta WHERE name = 'schema_version'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(version, 4, "brought up to the schema this version writes");
    assert_eq!(store.items().unwrap().len(), 2, "the queue is kept");
    assert_eq!(
        store.stats(GL_ID).unwrap().pending,
        2,
        "and counted by schema 4's migration"
    );
    let taken: Vec<String> = store
        .take(GL_ID, 10)
        .unwrap()
        .into_iter()
        .map(|(k, _)| k.to_string())
        .collect();
    assert_eq!(taken, [free], "the lease taken under schema 1 still holds");
    let nodes = store.nodes().unwrap();
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    assert_eq!(
        (nodes[0].name.as_str(), nodes[0].instance.as_str()),
        ("new", store.instance())
    );
    assert_eq!(nodes[0].leases, 1, "the key it took");
    drop(store);
    let left: i64 = c
        .query_one("SELECT count(*) FROM ap_intake.node", &[])
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "a store dropped cleanly takes its row with it");
}
