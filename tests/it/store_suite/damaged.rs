//! Damaged rows (D29) on both engines: a row whose state no version writes (a hand edit, a
//! newer version's code) is quarantined when the service opens the queue, is never delivered,
//! counts as quarantined, and an operator can requeue it.

use crate::common::eventually;
use crate::store_suite::{AP, key, pending_keys, queue_invoices};
use ap_intake::queue::{Mode, PostgresStore, SqliteStore, State, Store};
use std::path::Path;
use std::time::Duration;

/// Queues A, B and C, gives A the state code 7 behind the store's back, and reopens the
/// queue as the service does.
fn a_damaged(
    name: &str,
    open: &dyn Fn() -> Box<dyn Store>,
    damage: &dyn Fn(&[u8]),
) -> Box<dyn Store> {
    let s = open();
    queue_invoices(&*s, &[("A", "<a/>"), ("B", "<b/>"), ("C", "<c/>")], 1000);
    drop(s);
    damage(key("inv", "A").as_bytes());
    let s = open();
    eventually(
        &format!("{name}: the damaged row is quarantined"),
        Duration::from_secs(10),
        || s.stats(AP).unwrap().quarantined == 1,
    );
    s
}

fn check(name: &str, s: &dyn Store) {
    let a = s.get(&key("inv", "A")).unwrap().expect("A stays queued");
    assert_eq!(a.state, State::Quarantined, "{name}");
    assert_eq!(
        a.last_error.as_deref(),
        Some("quarantined: unknown state 7"),
        "{name}"
    );
    let st = s.stats(AP).unwrap();
    assert_eq!((st.pending, st.quarantined), (2, 1), "{name}");
    assert_eq!(
        s.keys(State::Quarantined, Some(AP)).unwrap(),
        [key("inv", "A")],
        "{name}"
    );
    assert_eq!(
        pending_keys(s, AP, 10),
        [key("inv", "B"), key("inv", "C")],
        "{name}: never delivered"
    );
    assert!(s.requeue(&key("inv", "A")).unwrap(), "{name}: requeued");
    assert_eq!(
        pending_keys(s, AP, 10),
        [key("inv", "A"), key("inv", "B"), key("inv", "C")],
        "{name}: back at its place"
    );
}

#[test]
fn d29_a_row_of_an_unknown_state_is_quarantined_on_both_engines() {
    let dir = tempfile::tempdir().unwrap();
    let at: &Path = dir.path();
    let s = a_damaged(
        "sqlite",
        &|| Box::new(SqliteStore::open(at, Mode::Serve, 0).unwrap()),
        &|k| {
            let c = rusqlite::Connection::open(at.join("queue.sqlite3")).unwrap();
            let n = c
                .execute("UPDATE item SET state = 7 WHERE key = ?1", [k])
                .unwrap();
            assert_eq!(n, 1);
        },
    );
    check("sqlite", &*s);

    let Some(db) = crate::common::pg::TestDb::create() else {
        crate::common::pg::skipped();
        return;
    };
    let settings = db.settings("suite", 30);
    let s = a_damaged(
        "postgres",
        &|| Box::new(PostgresStore::open(&settings, Mode::Serve).unwrap()),
        &|k| {
            let mut c = postgres::Client::connect(&db.url, postgres::NoTls).unwrap();
            let n = c
                .execute("UPDATE ap_intake.item SET state = 7 WHERE key = $1", &[&k])
                .unwrap();
            assert_eq!(n, 1);
        },
    );
    check("postgres", &*s);
}
