//! The counts on PostgreSQL (issue 46): exact counter rows kept by triggers in the
//! transaction that changes the items, one set per database session (no two commits wait on
//! one row), summed by `stats`; the rows of ended sessions folded at a node's start; a
//! database of queue schema 3, which counted with `count(*)`, counted when it is upgraded.

use super::*;
use ap_intake::queue::{Mode, PostgresStore, QueueKey, Sent, State, Store};
use std::sync::atomic::{AtomicU64, Ordering};

fn open(db: &TestDb, node: &str, mode: Mode) -> PostgresStore {
    PostgresStore::open(&db.settings(node, 30), mode).unwrap()
}

fn sql(db: &TestDb) -> postgres::Client {
    postgres::Client::connect(&db.url, postgres::NoTls).unwrap()
}

/// What the items say: (pending, rejected, quarantined) of GL codes.
fn items(db: &TestDb) -> (u64, u64, u64) {
    let mut c = sql(db);
    let count = |c: &mut postgres::Client, state: State| -> u64 {
        let n: i64 = c
            .query_one(
                "SELECT count(*) FROM ap_intake.item WHERE interface = $1 AND state = $2",
                &[&GL_ID, &state.code()],
            )
            .unwrap()
            .get(0);
        n as u64
    };
    (
        count(&mut c, State::Pending),
        count(&mut c, State::Rejected),
        count(&mut c, State::Quarantined),
    )
}

fn counted(s: &dyn Store) -> (u64, u64, u64) {
    let st = s.stats(GL_ID).unwrap();
    (st.pending, st.rejected, st.quarantined)
}

fn record(code: u64, round: u64) -> ap_intake::queue::NewRecord {
    ap_intake::queue::NewRecord {
        key: QueueKey::new("gl-code", &["main", &format!("K{code:02}")]).unwrap(),
        interface: GL_ID,
        xml: format!("<r{round}/>"),
        receipt: None,
    }
}

/// Queues `keys` new keys, takes `taken` of them, rejects the first taken and delivers the
/// others.
fn queue_reject_one_deliver_the_rest(s: &dyn Store, keys: u64, taken: usize) {
    let batch: Vec<_> = (0..keys).map(|k| record(k, 1)).collect();
    s.upsert(&batch, 1000).unwrap();
    let sent: Vec<Sent> = s
        .take(GL_ID, taken)
        .unwrap()
        .iter()
        .map(|(k, i)| Sent::of(k, i))
        .collect();
    assert!(s.reject(&sent[0], "refused").unwrap());
    assert_eq!(s.delivered(&sent[1..]).unwrap(), taken - 1);
}

/// A small xorshift, so each thread's run is the same every time.
fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// Two nodes, two lanes each, change 40 keys at once for a few seconds: resends, new keys,
/// deliveries, rejections, requeues and drops. The counts `stats` gives on either node are
/// what the items say, and the delivered count is what the lanes delivered.
#[test]
fn counts_stay_exact_while_two_nodes_change_the_same_keys() {
    let db = database!();
    let nodes = [open(&db, "a", Mode::Serve), open(&db, "b", Mode::Serve)];
    let (delivered, rejected) = (AtomicU64::new(0), AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(4);
    std::thread::scope(|scope| {
        for lane in 0..4u64 {
            let s = &nodes[(lane % 2) as usize];
            let (delivered, rejected) = (&delivered, &rejected);
            scope.spawn(move || {
                let mut seed = 0x9E37_79B9_7F4A_7C15 ^ (lane + 1);
                let mut round = 0;
                while Instant::now() < until {
                    round += 1;
                    let batch: Vec<_> = (0..8)
                        .map(|_| record(next(&mut seed) % 40, round))
                        .collect();
                    s.upsert(&batch, 1000 + round).unwrap();
                    let taken = s.take(GL_ID, 6).unwrap();
                    let sent: Vec<Sent> = taken.iter().map(|(k, i)| Sent::of(k, i)).collect();
                    match next(&mut seed) % 4 {
                        0 => {
                            if let Some(one) = sent.first()
                                && s.reject(one, "refused").unwrap()
                            {
                                rejected.fetch_add(1, Ordering::Relaxed);
                            }
                            s.failed(&sent[sent.len().min(1)..], "timeout").unwrap();
                        }
                        1 => {
                            for k in s.keys(State::Rejected, Some(GL_ID)).unwrap().iter().take(2) {
                                if next(&mut seed).is_multiple_of(2) {
                                    s.requeue(k).unwrap();
                                } else {
                                    s.discard(k).unwrap();
                                }
                            }
                            s.failed(&sent, "timeout").unwrap();
                        }
                        _ => {
                            let n = s.delivered(&sent).unwrap();
                            delivered.fetch_add(n as u64, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
    let (delivered, rejected) = (delivered.into_inner(), rejected.into_inner());
    let truth = items(&db);
    eprintln!(
        "counts: items {truth:?}; {delivered} delivered, {rejected} rejected by four lanes \
         on two nodes"
    );
    assert!(
        delivered > 0 && rejected > 0,
        "the run delivered and rejected"
    );
    for s in &nodes {
        assert_eq!(counted(s), truth, "stats on {}", s.node());
        assert_eq!(s.stats(GL_ID).unwrap().delivered, delivered);
    }

    // The sessions end with the nodes; the next node to start folds their rows into one.
    for s in &nodes {
        s.close().unwrap();
    }
    let rows = |db: &TestDb| -> i64 {
        sql(db)
            .query_one(
                "SELECT count(*) FROM ap_intake.counter WHERE writer <> 0",
                &[],
            )
            .unwrap()
            .get(0)
    };
    assert!(rows(&db) > 0, "the sessions kept rows of their own");
    eventually("the closed sessions are gone", WAIT, || {
        let n: i64 = sql(&db)
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND pid <> pg_backend_pid()",
                &[],
            )
            .unwrap()
            .get(0);
        n == 0
    });
    let c = open(&db, "c", Mode::Serve);
    let left: i64 = sql(&db)
        .query_one(
            "SELECT count(*) FROM ap_intake.counter c WHERE writer <> 0
               AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = c.writer)",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "rows of ended sessions are folded at start");
    assert_eq!(counted(&c), truth, "the sums outlive the sessions");
    assert_eq!(c.stats(GL_ID).unwrap().delivered, delivered);
}

/// A database of queue schema 3 (counts by `count(*)`, deliveries in a `delivered` table) is
/// counted by the migration to schema 4, and counts on from there.
#[test]
fn a_schema_3_database_is_counted_when_it_is_upgraded() {
    let db = database!();
    let s = open(&db, "a", Mode::Inspect);
    queue_reject_one_deliver_the_rest(&s, 10, 5);
    s.close().unwrap();
    // What schema 3 kept: the triggers and counter rows of schema 4 taken away again.
    sql(&db)
        .batch_execute(
            "DROP TRIGGER item_counted_insert ON ap_intake.item;
             DROP TRIGGER item_counted_update ON ap_intake.item;
             DROP TRIGGER item_counted_delete ON ap_intake.item;
             DROP TRIGGER item_counted_truncate ON ap_intake.item;
             DROP FUNCTION ap_intake.count_items();
             INSERT INTO ap_intake.delivered SELECT interface, sum(n) FROM ap_intake.counter
               WHERE kind = 'delivered' GROUP BY interface;
             DROP TABLE ap_intake.counter;
             UPDATE ap_intake.ap_intake_meta SET value = 3 WHERE name = 'schema_version';
             INSERT INTO ap_intake.item (key, interface, state, version, queued_at, seq,
                                         updated_at, xml)
               VALUES ('\\x00', 'general-ledger-codes-v1', 0, 99, 1, 99, 1, '<old/>');",
        )
        .unwrap();
    let s = open(&db, "a", Mode::Serve);
    let st = s.stats(GL_ID).unwrap();
    assert_eq!(
        (st.pending, st.rejected, st.quarantined, st.delivered),
        (6, 1, 0, 4),
        "the upgraded counts: 5 left pending and one written under schema 3; 1 rejected"
    );
    s.upsert(&[record(20, 2)], 2000).unwrap();
    assert_eq!(s.stats(GL_ID).unwrap().pending, 7, "and counting on");
    assert_eq!(counted(&s), items(&db));

    // A node of schema 3 that has not yet seen the new schema delivers 2 and counts them as
    // it did: they count, and a fold moves them over.
    let old_node_delivers = "INSERT INTO ap_intake.delivered VALUES ('general-ledger-codes-v1', 2)
        ON CONFLICT (interface) DO UPDATE SET n = delivered.n + excluded.n";
    sql(&db).batch_execute(old_node_delivers).unwrap();
    assert_eq!(s.stats(GL_ID).unwrap().delivered, 6);
    s.prune_step(0).unwrap();
    let left: i64 = sql(&db)
        .query_one("SELECT count(*) FROM ap_intake.delivered", &[])
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "the fold moved them");
    assert_eq!(s.stats(GL_ID).unwrap().delivered, 6);
}

/// An operator who empties the queue by hand (`TRUNCATE ap_intake.item`) leaves counts of
/// nothing, the deliveries kept.
#[test]
fn a_queue_emptied_by_hand_counts_nothing_pending() {
    let db = database!();
    let s = open(&db, "a", Mode::Inspect);
    queue_reject_one_deliver_the_rest(&s, 6, 3);
    assert_eq!(counted(&s), (3, 1, 0));
    sql(&db).batch_execute("TRUNCATE ap_intake.item").unwrap();
    let st = s.stats(GL_ID).unwrap();
    assert_eq!(
        (st.pending, st.rejected, st.quarantined, st.delivered),
        (0, 0, 0, 2)
    );
    s.upsert(&[record(9, 2)], 2000).unwrap();
    assert_eq!(counted(&s), items(&db), "and counting on");
}
