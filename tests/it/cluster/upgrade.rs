//! Upgrading a cluster (issue 45, item 8; README "Upgrading a cluster"): a node meets a queue
//! schema newer than it knows, as when a newer node has migrated the database. At start it
//! refuses with exit 78 naming both versions; while it runs, its heartbeat finds the newer
//! schema, it stops taking records and exits 78.

use super::*;
use crate::common::process::{Service, bin, wait_exit};

/// What a newer node's migration leaves behind: the schema version past this one's.
fn migrate_past(db: &TestDb, version: i64) {
    let mut c = postgres::Client::connect(&db.url, postgres::NoTls).unwrap();
    c.execute(
        "UPDATE ap_intake.ap_intake_meta SET value = $1 WHERE name = 'schema_version'",
        &[&version],
    )
    .unwrap();
}

#[test]
fn a_node_refuses_a_schema_newer_than_it_knows_at_start_and_while_it_runs() {
    let db = database!();
    let platform = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.toml");
    let lease_secs = 5;
    let text = db.config(
        &db.url,
        &dir.path().join("data"),
        &platform.url(),
        FAST,
        "a",
        lease_secs,
    );
    std::fs::write(&file, text).unwrap();
    let mut a = Service::start(&file, dir.path());
    assert_eq!(a.post_records(GL, &[gl("U1")], Some(KEY)).status, 202);

    migrate_past(&db, 99);
    let status = wait_exit(&mut a.child, Duration::from_secs(lease_secs + 10));
    let log = a.stderr();
    assert_eq!(status.and_then(|s| s.code()), Some(78), "{log}");
    assert!(
        log.contains("the queue database has schema 99")
            && log.contains("this version reads schema 4"),
        "the running node names both versions: {log}"
    );

    let out = bin()
        .args(["serve", "--config"])
        .arg(&file)
        .current_dir(dir.path())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{said}");
    assert!(
        said.contains(
            "has queue schema 99, written by a newer ap-intake; this version reads schema 4"
        ),
        "the refusal at start names both versions: {said}"
    );
}
