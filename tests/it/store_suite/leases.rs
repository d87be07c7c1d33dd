//! The lease contract (`Store::take`, D39, D41): the items a store takes for delivery are
//! its own until it settles them, its lease lapses, or it is dropped; no other store on the
//! same queue gets them meanwhile, whatever its node name. One process holds an SQLite queue
//! (a second open fails, `reopen.rs`), so there the contract is the lease ending with the
//! store; on PostgreSQL two stores opened with one node name are two processes sharing a
//! name (two on one host, cloned machines) and must never hand out one item to both.

use crate::store_suite::{AP, each_backend, key, pending_keys, queue_invoices};
use ap_intake::queue::{QueueKey, Sent, Store, StoreError};
use std::collections::HashSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Queues the invoices `I000`, `I001`, ... in one upsert, in that order.
fn queue_numbered(s: &dyn Store, n: usize) -> Vec<QueueKey> {
    let codes: Vec<String> = (0..n).map(|i| format!("I{i:03}")).collect();
    let records: Vec<(&str, &str)> = codes.iter().map(|c| (c.as_str(), "<i/>")).collect();
    queue_invoices(s, &records, 1000);
    codes.iter().map(|c| key("inv", c)).collect()
}

/// D41: a store dropped cleanly leaves nothing leased: the next store (the node restarted,
/// or a namesake) takes the same batch at once, not after the lease (30 s in the suite).
#[test]
fn a_dropped_stores_batch_is_taken_at_once_by_the_next() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        let keys = queue_numbered(&*s, 6);
        assert_eq!(pending_keys(&*s, AP, 3), keys[..3], "{name}");
        drop(s);
        let t = open(dir);
        assert_eq!(
            pending_keys(&*t, AP, 3),
            keys[..3],
            "{name}: the dropped store's lease ended with it"
        );
    });
}

/// D41: a store closed at the stop leaves nothing leased, and refuses every call after it,
/// while it is still held: the next store takes the same batch at once.
#[test]
fn a_closed_stores_batch_is_taken_at_once_by_the_next() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        let keys = queue_numbered(&*s, 6);
        assert_eq!(pending_keys(&*s, AP, 3), keys[..3], "{name}");
        s.close().unwrap();
        assert!(
            matches!(s.take(AP, 3), Err(StoreError::Stopping)),
            "{name}: closed"
        );
        assert!(matches!(s.stats(AP), Err(StoreError::Stopping)), "{name}");
        let t = open(dir);
        assert_eq!(
            pending_keys(&*t, AP, 3),
            keys[..3],
            "{name}: the closed store's lease ended with it"
        );
        s.close().unwrap();
        drop(s);
        assert_eq!(pending_keys(&*t, AP, 6), keys, "{name}: all still queued");
    });
}

/// D41: two stores with one node name take disjoint batches, each the oldest it may take;
/// the first store's batch stays its own until it settles it.
#[test]
fn two_stores_with_one_name_take_disjoint_batches() {
    each_backend(|name, dir, open| {
        if name == "sqlite" {
            return; // one process holds an SQLite queue
        }
        let (a, b) = (open(dir), open(dir));
        let keys = queue_numbered(&*a, 30);
        assert_eq!(pending_keys(&*a, AP, 10), keys[..10], "{name}");
        assert_eq!(
            pending_keys(&*b, AP, 10),
            keys[10..20],
            "{name}: b skips what a holds"
        );
        assert_eq!(
            pending_keys(&*a, AP, 10),
            keys[..10],
            "{name}: a takes its own batch again (a retry), not b's"
        );
        let batch: Vec<Sent> = keys[..10]
            .iter()
            .map(|k| Sent::of(k, &a.get(k).unwrap().unwrap()))
            .collect();
        assert_eq!(a.delivered(&batch).unwrap(), 10);
        assert_eq!(pending_keys(&*b, AP, 20), keys[10..], "{name}");
    });
}

/// D41: two stores with one node name deliver one queue at once, each taking small batches
/// and settling them a moment later: no key is ever held by both, and each is in exactly one
/// batch.
#[test]
fn two_stores_with_one_name_never_hold_the_same_item() {
    each_backend(|name, dir, open| {
        if name == "sqlite" {
            return; // one process holds an SQLite queue
        }
        let (a, b) = (open(dir), open(dir));
        let keys = queue_numbered(&*a, 300);
        let held: Mutex<HashSet<QueueKey>> = Mutex::default();
        let taken: Mutex<Vec<(usize, QueueKey)>> = Mutex::default();
        let deadline = Instant::now() + Duration::from_secs(60);
        std::thread::scope(|scope| {
            for (who, store) in [&a, &b].into_iter().enumerate() {
                let (held, taken) = (&held, &taken);
                scope.spawn(move || {
                    while store.stats(AP).unwrap().pending > 0 {
                        assert!(Instant::now() < deadline, "{name}: the queue never drained");
                        deliver_one_batch(&**store, who, held, taken);
                    }
                });
            }
        });
        let taken = taken.into_inner().unwrap();
        let distinct: HashSet<&QueueKey> = taken.iter().map(|(_, k)| k).collect();
        assert_eq!(
            (taken.len(), distinct.len()),
            (keys.len(), keys.len()),
            "{name}: every key in exactly one batch"
        );
        for who in 0..2 {
            assert!(
                taken.iter().any(|(w, _)| *w == who),
                "{name}: store {who} delivered some (the batches overlapped)"
            );
        }
    });
}

/// Takes a batch of up to 7, notes each key as held (failing if another store holds it),
/// waits a moment (the document on the wire), then settles it as delivered.
fn deliver_one_batch(
    store: &dyn Store,
    who: usize,
    held: &Mutex<HashSet<QueueKey>>,
    taken: &Mutex<Vec<(usize, QueueKey)>>,
) {
    let batch = store.take(AP, 7).unwrap();
    if batch.is_empty() {
        std::thread::sleep(Duration::from_millis(2));
        return;
    }
    {
        let mut held = held.lock().unwrap();
        for (k, _) in &batch {
            assert!(held.insert(k.clone()), "{k} handed to both stores");
        }
    }
    std::thread::sleep(Duration::from_millis(3));
    let sent: Vec<Sent> = batch.iter().map(|(k, i)| Sent::of(k, i)).collect();
    store.delivered(&sent).unwrap();
    let mut held = held.lock().unwrap();
    let mut taken = taken.lock().unwrap();
    for (k, _) in batch {
        held.remove(&k);
        taken.push((who, k));
    }
}
