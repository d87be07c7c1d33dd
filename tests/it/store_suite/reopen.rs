//! Persistence: what a synced store holds after it is closed and opened again, and that a
//! queue is held by one opener at a time.

use crate::common::Items;
use crate::store_suite::{
    AP, backoff, before_reopening, counts, each_backend, key, pending_keys, queue_each,
    queue_gl_codes, queue_invoices, sent, stored,
};
use ap_intake::queue::State;

#[test]
fn synced_items_survive_reopening() {
    each_backend(|name, dir, open| {
        before_reopening(dir, open, |s| {
            let big = "x".repeat(300 * 1024); // over sled's blob threshold: stored as a file
            queue_gl_codes(s, &[("A", "<a/>"), ("BIG", &big)], 1);
        });
        let s = open(dir);
        let items = s.items().unwrap();
        assert_eq!(items.len(), 2, "{name}");
        assert_eq!(items[0].1.xml, "<a/>");
        assert_eq!(items[1].1.xml.len(), 300 * 1024);
    });
}

#[test]
fn a_second_open_of_a_held_queue_fails() {
    each_backend(|name, dir, open| {
        if name == "postgres" {
            return; // D39: several nodes share one database by design.
        }
        let _held = open(dir);
        let second = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| open(dir)));
        assert!(
            second.is_err(),
            "{name}: the directory is locked while open"
        );
    });
}

#[test]
fn backoff_survives_reopening() {
    each_backend(|name, dir, open| {
        before_reopening(dir, open, |s| {
            s.set_backoff(AP, &backoff(3, "connection refused"))
                .unwrap();
            s.set_backoff("vendors-v1", &backoff(1, "timeout")).unwrap();
        });
        let s = open(dir);
        assert_eq!(
            s.stats(AP).unwrap().backoff,
            backoff(3, "connection refused"),
            "{name}"
        );
        assert_eq!(
            s.stats("vendors-v1").unwrap().backoff,
            backoff(1, "timeout"),
            "{name}"
        );
    });
}

#[test]
fn counters_and_indexes_survive_reopening() {
    each_backend(|name, dir, open| {
        before_reopening(dir, open, |s| {
            queue_each(
                s,
                AP,
                "inv",
                &[
                    ("A", "<a/>", 1000),
                    ("B", "<b/>", 2000),
                    ("C", "<c/>", 3000),
                    ("D", "<d/>", 4000),
                ],
            );
            assert_eq!(s.delivered(&[sent(s, &key("inv", "A"))]).unwrap(), 1);
            assert!(s.reject(&sent(s, &key("inv", "B")), "refused").unwrap());
        });
        let s = open(dir);
        let st = s.stats(AP).unwrap();
        assert_eq!(
            (st.pending, st.rejected, st.delivered, st.oldest_pending_ms),
            (2, 1, 1, Some(3000)),
            "{name}: (pending, rejected, delivered, oldest)"
        );
        assert_eq!(
            pending_keys(&*s, AP, 10),
            [key("inv", "C"), key("inv", "D")],
            "{name}: the pending index, in order"
        );
        assert_eq!(
            s.keys(State::Rejected, Some(AP)).unwrap(),
            [key("inv", "B")],
            "{name}: the rejected index"
        );
        let b = stored(&*s, &key("inv", "B"));
        assert_eq!(
            (b.state, b.last_error.as_deref()),
            (State::Rejected, Some("refused")),
            "{name}"
        );
        // The counters go on from where they were.
        assert!(s.requeue(&key("inv", "B")).unwrap(), "{name}");
        assert_eq!(s.delivered(&[sent(&*s, &key("inv", "C"))]).unwrap(), 1);
        assert_eq!(counts(&*s, AP), (2, 0, 2), "{name}");
    });
}

#[test]
fn versions_keep_growing_after_reopening() {
    each_backend(|name, dir, open| {
        let before = before_reopening(dir, open, |s| {
            queue_invoices(s, &[("A", "<a1/>")], 1000);
            stored(s, &key("inv", "A")).version
        });
        let s = open(dir);
        queue_invoices(&*s, &[("A", "<a2/>")], 2000);
        let after = stored(&*s, &key("inv", "A")).version;
        assert!(after > before, "{name}: {after} > {before}");
    });
}
