//! Points of the store contract where an engine once did otherwise (issue 46): `take` hands
//! out the oldest pending items first, a requeued one included, however much arrives after
//! it; only the store that holds an item's lease settles it (D41); pruning forgets the
//! oldest receipts first.

use crate::store_suite::{AP, each_backend, key, pending_keys, queue_invoices, sent};
use ap_intake::queue::receipt::{ReceiptLine, RequestInfo};
use ap_intake::queue::{Mode, NewRecord, PostgresStore, Sent, State, Store};
use std::sync::Arc;

/// A requeued item goes back to the place it had, before everything queued after it: under
/// steady intake it is taken by the next `take`, not after the newer records (PostgreSQL
/// read from where this process's last batch ended first, and a requeued item waited
/// behind every record queued meanwhile).
#[test]
fn a_requeued_item_is_taken_before_newer_records_under_steady_intake() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        queue_invoices(&*s, &[("A", "<a/>"), ("B", "<b/>")], 1000);
        assert_eq!(pending_keys(&*s, AP, 2), [key("inv", "A"), key("inv", "B")]);
        let (a, b) = (sent(&*s, &key("inv", "A")), sent(&*s, &key("inv", "B")));
        assert_eq!(s.delivered(&[a]).unwrap(), 1, "{name}");
        assert!(s.reject(&b, "422 refused").unwrap(), "{name}");
        // Intake goes on while B is parked, and the lane keeps delivering.
        for round in 0..5u64 {
            let code = format!("N{round}");
            queue_invoices(&*s, &[(&code, "<n/>")], 2000 + round);
            let taken = s.take(AP, 1).unwrap();
            let batch: Vec<Sent> = taken.iter().map(|(k, i)| Sent::of(k, i)).collect();
            assert_eq!(s.delivered(&batch).unwrap(), 1, "{name}");
        }
        assert!(s.requeue(&key("inv", "B")).unwrap(), "{name}");
        for round in 5..8u64 {
            let code = format!("N{round}");
            queue_invoices(&*s, &[(&code, "<n/>")], 2000 + round);
        }
        assert_eq!(
            pending_keys(&*s, AP, 1),
            [key("inv", "B")],
            "{name}: the requeued item is the oldest pending one"
        );
    });
}

/// D41: a node whose lease lapsed while its document was on the wire does not settle the
/// item another node has taken since: not as rejected (the platform refused its copy), nor
/// as delivered, nor as a failed attempt. The holder's outcome is the item's, so its receipt
/// and `status` agree with what the holder's platform said. (PostgreSQL only: one process
/// holds an SQLite queue, so its lease cannot pass to another.)
#[test]
fn a_node_whose_lease_lapsed_cannot_settle_what_another_holds() {
    let Some(db) = crate::common::pg::TestDb::create() else {
        return crate::common::pg::skipped();
    };
    let open = |node: &str| PostgresStore::open(&db.settings(node, 30), Mode::Inspect).unwrap();
    let a = open("a");
    queue_invoices(&a, &[("X", "<x/>"), ("Y", "<y/>")], 1000);
    let batch = a.take(AP, 2).unwrap();
    let (x, y) = (
        Sent::of(&batch[0].0, &batch[0].1),
        Sent::of(&batch[1].0, &batch[1].1),
    );
    // a is cut off for longer than its lease.
    let mut c = postgres::Client::connect(&db.url, postgres::NoTls).unwrap();
    c.execute(
        "UPDATE ap_intake.item SET lease_until = now() - interval '1 second'",
        &[],
    )
    .unwrap();
    let b = open("b");
    assert_eq!(
        pending_keys(&b, AP, 2),
        [key("inv", "X"), key("inv", "Y")],
        "b takes what a's lapsed lease let go"
    );
    // a's platform answers late: it refused X, took Y, and a retry of X failed.
    assert!(
        !a.reject(&x, "422 from a's attempt").unwrap(),
        "a parks nothing"
    );
    assert_eq!(a.delivered(std::slice::from_ref(&y)).unwrap(), 0);
    a.failed(std::slice::from_ref(&x), "503 from a's attempt")
        .unwrap();
    let (xi, yi) = (
        b.get(&x.key).unwrap().unwrap(),
        b.get(&y.key).unwrap().unwrap(),
    );
    assert_eq!((xi.state, yi.state), (State::Pending, State::Pending));
    assert_eq!((xi.attempts, xi.last_error.as_deref()), (0, None));
    let mut settled = |v: &Sent| -> i64 {
        c.query_one(
            "SELECT count(*) FROM ap_intake.settled WHERE key = $1 AND version = $2",
            &[&v.key.as_bytes(), &i64::try_from(v.version).unwrap()],
        )
        .unwrap()
        .get(0)
    };
    assert_eq!((settled(&x), settled(&y)), (0, 0), "no receipt fact from a");
    // b's platform takes both: they are delivered, once.
    assert_eq!(b.delivered(&[x, y]).unwrap(), 2);
    assert_eq!(b.stats(AP).unwrap().pending, 0);
}

/// A request received at `at`, one record, its code its id.
fn receipt_of(id: &str, at: u64) -> NewRecord {
    NewRecord {
        key: key("gl-code", id),
        interface: "general-ledger-codes-v1",
        xml: format!("<gl_code><code>{id}</code></gl_code>"),
        receipt: Some(ReceiptLine {
            request: Arc::new(RequestInfo {
                request_id: id.to_string(),
                api_key: "erp".into(),
                interface: "general-ledger-codes-v1",
                received_at_ms: at,
                nonce: at,
            }),
            index: 0,
        }),
    }
}

/// One pruning step forgets the oldest receipts first, by when their requests were received,
/// whatever order they were written in.
#[test]
fn pruning_forgets_the_oldest_receipts_first() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        let n = usize::try_from(ap_intake::queue::codes::PRUNE_REQUESTS).unwrap() + 20;
        // Written newest first: the order of writing is not the order of receiving.
        for i in (0..n).rev() {
            let at = 1_000 + u64::try_from(i).unwrap();
            s.upsert(&[receipt_of(&format!("R{i:03}"), at)], at)
                .unwrap();
        }
        let removed = s.prune_step(1_000_000).unwrap();
        assert!(removed >= 50, "{name}: {removed}");
        let kept: Vec<usize> = (0..n)
            .filter(|i| !s.receipts(&format!("R{i:03}"), None).unwrap().is_empty())
            .collect();
        assert_eq!(
            kept,
            (50..n).collect::<Vec<_>>(),
            "{name}: the newest 20 are left"
        );
    });
}

/// Issue 46: a database error is told by its cause (SQLSTATE, the types in its chain), with
/// the engine's error kept as the source: credentials refused, nothing listening.
#[test]
fn postgres_errors_are_told_by_their_cause_not_their_text() {
    use ap_intake::queue::StoreError;
    let Some(db) = crate::common::pg::TestDb::create() else {
        return crate::common::pg::skipped();
    };
    let mut settings = db.settings("a", 30);
    settings.url = settings
        .url
        .replacen("apintake:apintake@", "apintake:wrong@", 1);
    let denied = PostgresStore::open(&settings, Mode::Inspect).err().unwrap();
    assert!(matches!(denied, StoreError::Denied { .. }), "{denied:?}");
    assert!(
        std::error::Error::source(&denied).is_some(),
        "the cause is kept"
    );
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    let mut settings = db.settings("a", 30);
    let at = settings
        .url
        .split('@')
        .nth(1)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    settings.url = settings.url.replacen(&at, &format!("127.0.0.1:{port}"), 1);
    let unreachable = PostgresStore::open(&settings, Mode::Inspect).err().unwrap();
    assert!(
        matches!(unreachable, StoreError::Unreachable { .. }),
        "{unreachable:?}"
    );
}
