//! Large upserts and batches that cut across them: what a nightly load does to the queue.
//! Every record of one upsert queued at one time is one group in the line; parts of it are
//! delivered, resent, rejected and requeued independently.

use crate::common::Items;
use crate::store_suite::{AP, counts, each_backend, key, pending_keys, queue_invoices, sent};
use ap_intake::queue::{QueueKey, Sent, State, Store};

fn codes(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("N{i:05}")).collect()
}

fn keys(codes: &[String]) -> Vec<QueueKey> {
    codes.iter().map(|c| key("inv", c)).collect()
}

fn queue_codes(s: &dyn Store, codes: &[String], xml: &str, now_ms: u64) {
    let records: Vec<(&str, &str)> = codes.iter().map(|c| (c.as_str(), xml)).collect();
    queue_invoices(s, &records, now_ms);
}

/// Delivers what `take` hands out, `batch` at a time, and returns the keys in delivery order.
fn drain(s: &dyn Store, batch: usize) -> Vec<QueueKey> {
    let mut order = Vec::new();
    loop {
        let items = s.take(AP, batch).unwrap();
        if items.is_empty() {
            return order;
        }
        let sent: Vec<Sent> = items.iter().map(|(k, i)| Sent::of(k, i)).collect();
        assert_eq!(s.delivered(&sent).unwrap(), sent.len());
        order.extend(items.into_iter().map(|(k, _)| k));
    }
}

#[test]
fn a_large_upsert_is_listed_in_order_and_drains_in_batches() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        let first = codes(0..1300);
        queue_codes(&*s, &first, "<a/>", 1000);
        let later = codes(1300..1310);
        queue_codes(&*s, &later, "<b/>", 2000);
        assert_eq!(counts(&*s, AP), (1310, 0, 0), "{name}");
        assert_eq!(pending_keys(&*s, AP, 3), keys(&first[..3]), "{name}");
        assert_eq!(
            s.keys(State::Pending, Some(AP)).unwrap().len(),
            1310,
            "{name}"
        );
        let order = drain(&*s, 100);
        assert_eq!(
            order,
            keys(&[first, later].concat()),
            "{name}: oldest first"
        );
        assert_eq!(counts(&*s, AP), (0, 0, 1310), "{name}");
        assert!(s.keys(State::Pending, None).unwrap().is_empty(), "{name}");
        assert_eq!(s.stats(AP).unwrap().oldest_pending_ms, None, "{name}");
        assert!(s.items().unwrap().is_empty(), "{name}");
    });
}

#[test]
fn parts_of_one_upsert_are_resent_rejected_and_requeued_independently() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        let all = codes(0..600);
        queue_codes(&*s, &all, "<v1/>", 1000);
        queue_codes(&*s, &codes(600..601), "<late/>", 2000);
        // Resend a key near the end: it keeps its place, with the new content.
        queue_codes(&*s, &all[590..591], "<v2/>", 3000);
        // Deliver the first 100, park one of the next ones, fail the one after.
        let head = s.take(AP, 102).unwrap();
        let delivered: Vec<Sent> = head[..100].iter().map(|(k, i)| Sent::of(k, i)).collect();
        assert_eq!(s.delivered(&delivered).unwrap(), 100, "{name}");
        let parked = sent(&*s, &key("inv", &all[100]));
        assert!(s.reject(&parked, "HTTP 422: no").unwrap(), "{name}");
        s.failed(&[sent(&*s, &key("inv", &all[101]))], "timeout")
            .unwrap();
        assert_eq!(counts(&*s, AP), (500, 1, 100), "{name}");
        assert_eq!(
            pending_keys(&*s, AP, 2),
            keys(&all[101..103]),
            "{name}: the rest of the group is still first in line"
        );
        assert_eq!(
            s.get(&key("inv", &all[101])).unwrap().unwrap().attempts,
            1,
            "{name}"
        );
        let resent = key("inv", &all[590]);
        assert_eq!(s.get(&resent).unwrap().unwrap().xml, "<v2/>", "{name}");
        // Requeued, the parked key rejoins the group it was queued with, ahead of later ones.
        assert!(s.requeue(&parked.key).unwrap(), "{name}");
        let order = drain(&*s, 100);
        assert_eq!(order.len(), 501, "{name}");
        assert_eq!(
            order.last(),
            Some(&key("inv", "N00600")),
            "{name}: the later upsert comes last"
        );
        let at = |k: &QueueKey| order.iter().position(|o| o == k);
        assert!(at(&parked.key) < at(&key("inv", "N00600")), "{name}");
        assert!(
            at(&resent) < at(&key("inv", "N00600")),
            "{name}: in its place"
        );
        assert_eq!(counts(&*s, AP), (0, 0, 601), "{name}");
        assert!(s.items().unwrap().is_empty(), "{name}");
    });
}
