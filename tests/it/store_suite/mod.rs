//! The suite every queue storage backend must pass: [`SqliteStore`] and, with
//! `AP_INTAKE_TEST_PG`, [`PostgresStore`] (D28, D39).

use ap_intake::queue::{
    Backoff, Item, Mode, NewRecord, PostgresStore, QueueKey, Sent, SqliteStore, Store,
};
use std::path::Path;

mod audit;
mod batches;
mod contract;
mod damaged;
mod delivery;
mod feed;
mod leases;
mod parking;
mod receipts;
mod reopen;
mod replay;
mod stats;
mod upsert;

type Open<'a> = &'a dyn Fn(&Path) -> Box<dyn Store>;

/// Runs `test` once per backend, each time with a fresh, empty store: SQLite in a temp dir,
/// and PostgreSQL in a database of its own when `AP_INTAKE_TEST_PG` is set (otherwise the
/// test says it skipped PostgreSQL).
fn each_backend(test: impl Fn(&str, &Path, Open<'_>)) {
    let dir = tempfile::tempdir().unwrap();
    test("sqlite", dir.path(), &|dir| {
        Box::new(SqliteStore::open(dir, Mode::Serve, 0).unwrap())
    });
    let Some(db) = crate::common::pg::TestDb::create() else {
        crate::common::pg::skipped();
        return;
    };
    let settings = db.settings("suite", 30);
    let dir = tempfile::tempdir().unwrap();
    test("postgres", dir.path(), &|_| {
        Box::new(PostgresStore::open(&settings, Mode::Inspect).unwrap())
    });
}

/// Opens the store in `dir`, runs `session` on it, syncs and closes it again: what a later
/// `open(dir)` finds is what survived.
fn before_reopening<T>(dir: &Path, open: Open<'_>, session: impl FnOnce(&dyn Store) -> T) -> T {
    let s = open(dir);
    let out = session(&*s);
    s.close().unwrap();
    out
}

const GL_CODES: &str = "general-ledger-codes-v1";
const AP: &str = "ap-invoices-v1";

/// A record of the general-ledger-codes interface with the key `space:main/code`.
fn rec(space: &str, code: &str, xml: &str) -> NewRecord {
    rec_in(GL_CODES, space, code, xml)
}

/// A record of `interface` with the key `space:main/code`.
fn rec_in(interface: &'static str, space: &str, code: &str, xml: &str) -> NewRecord {
    NewRecord {
        key: key(space, code),
        interface,
        xml: xml.to_string(),
        receipt: None,
    }
}

fn key(space: &str, code: &str) -> QueueKey {
    QueueKey::new(space, &["main", code]).unwrap()
}

/// Queues the (code, xml) records of `interface`, keyed in `space`, in one upsert at `now_ms`.
fn queue(
    s: &dyn Store,
    interface: &'static str,
    space: &str,
    records: &[(&str, &str)],
    now_ms: u64,
) {
    let records: Vec<NewRecord> = records
        .iter()
        .map(|&(code, xml)| rec_in(interface, space, code, xml))
        .collect();
    s.upsert(&records, now_ms).unwrap();
}

/// Queues the (code, xml, now_ms) records of `interface`, keyed in `space`, one upsert each,
/// in the order given.
fn queue_each(s: &dyn Store, interface: &'static str, space: &str, records: &[(&str, &str, u64)]) {
    for &(code, xml, now_ms) in records {
        queue(s, interface, space, &[(code, xml)], now_ms);
    }
}

/// Queues the (code, xml) records of [`GL_CODES`], keyed `gl-code:main/code`, in one upsert at
/// `now_ms`.
fn queue_gl_codes(s: &dyn Store, records: &[(&str, &str)], now_ms: u64) {
    queue(s, GL_CODES, "gl-code", records, now_ms);
}

/// Queues the (code, xml) invoices of [`AP`], keyed `inv:main/code`, in one upsert at `now_ms`.
fn queue_invoices(s: &dyn Store, records: &[(&str, &str)], now_ms: u64) {
    queue(s, AP, "inv", records, now_ms);
}

/// The stored item of a key that is queued.
fn stored(s: &dyn Store, k: &QueueKey) -> Item {
    s.get(k).unwrap().expect("the key is queued")
}

/// What a delivery of the key's current version sends.
fn sent(s: &dyn Store, k: &QueueKey) -> Sent {
    Sent::of(k, &stored(s, k))
}

/// Queues invoices A (`<a1/>`) and B at 1000, takes a batch of both, then replaces A with
/// `<a2/>` at 2000: the batch's A is stale, its B current.
fn a_batch_of_a_and_b_then_a_replaced(s: &dyn Store) -> [Sent; 2] {
    queue_invoices(s, &[("A", "<a1/>"), ("B", "<b/>")], 1000);
    let batch = [sent(s, &key("inv", "A")), sent(s, &key("inv", "B"))];
    queue_invoices(s, &[("A", "<a2/>")], 2000);
    batch
}

/// The keys `take` hands out, in its order.
fn pending_keys(s: &dyn Store, interface: &str, limit: usize) -> Vec<QueueKey> {
    s.take(interface, limit)
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect()
}

fn sorted(mut keys: Vec<QueueKey>) -> Vec<QueueKey> {
    keys.sort();
    keys
}

/// (pending, rejected, delivered) of an interface.
fn counts(s: &dyn Store, interface: &str) -> (u64, u64, u64) {
    let st = s.stats(interface).unwrap();
    (st.pending, st.rejected, st.delivered)
}

/// A backoff after `failures` failures, the latest with `error`.
fn backoff(failures: u32, error: &str) -> Backoff {
    Backoff {
        failures,
        next_attempt_ms: 10_000 + u64::from(failures),
        last_error: Some(error.to_string()),
        last_error_ms: Some(9_000),
        paused: failures.is_multiple_of(2),
        last_success_ms: Some(8_000 + u64::from(failures)),
    }
}
