//! Delivery: what `take` hands out, and what `delivered` and `failed` do to a sent batch.

use crate::common::Items;
use crate::store_suite::{
    AP, a_batch_of_a_and_b_then_a_replaced, counts, each_backend, key, pending_keys, queue,
    queue_each, queue_invoices, sent, sorted, stored,
};
use ap_intake::queue::{QueueKey, State};

#[test]
fn pending_lists_one_interface_oldest_first_up_to_the_limit() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        // The order queued (Z, M, A) is not the key order (A, M, Z).
        queue_each(
            &*s,
            AP,
            "inv",
            &[
                ("Z", "<z/>", 1000),
                ("M", "<m/>", 2000),
                ("A", "<a/>", 3000),
            ],
        );
        queue(&*s, "vendors-v1", "vendor", &[("V", "<v/>")], 3500);
        let all = s.take(AP, 10).unwrap();
        let keys: Vec<QueueKey> = all.iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(
            keys,
            [key("inv", "Z"), key("inv", "M"), key("inv", "A")],
            "{name}: first queued first, only {AP}"
        );
        assert!(all.iter().all(|(_, i)| i.interface == AP));
        assert!(all.iter().all(|(_, i)| i.state == State::Pending));
        assert_eq!(
            all.iter().map(|(_, i)| i.queued_at_ms).collect::<Vec<_>>(),
            [1000, 2000, 3000],
            "{name}"
        );
        assert_eq!(
            pending_keys(&*s, AP, 2),
            [key("inv", "Z"), key("inv", "M")],
            "{name}: at most limit, the oldest"
        );
        assert!(s.take(AP, 0).unwrap().is_empty(), "{name}: limit 0");
        assert_eq!(
            pending_keys(&*s, "vendors-v1", 10),
            [key("vendor", "V")],
            "{name}"
        );
        assert!(s.take("no-such-interface", 10).unwrap().is_empty());
    });
}

/// D16: a resent pending key keeps its place in the line, its attempts and its last error.
#[test]
fn a_resend_of_a_pending_key_keeps_its_place_with_the_new_content() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        queue_each(&*s, AP, "inv", &[("A", "<a1/>", 1000), ("B", "<b/>", 2000)]);
        s.failed(&[sent(&*s, &key("inv", "A"))], "timeout").unwrap();
        let v1 = stored(&*s, &key("inv", "A")).version;
        queue_invoices(&*s, &[("A", "<a2/>")], 3000);
        let pending = s.take(AP, 10).unwrap();
        let keys: Vec<QueueKey> = pending.iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(
            keys,
            [key("inv", "A"), key("inv", "B")],
            "{name}: A keeps its place ahead of B"
        );
        let a = &pending[0].1;
        assert_eq!(a.xml, "<a2/>", "{name}: the new xml");
        assert!(a.version > v1, "{name}: the new version");
        assert_eq!(
            a,
            &s.get(&key("inv", "A")).unwrap().unwrap(),
            "{name}: pending shows the stored item"
        );
        assert_eq!((a.queued_at_ms, a.updated_at_ms), (1000, 3000), "{name}");
        assert_eq!(
            (a.attempts, a.last_error.as_deref()),
            (1, Some("timeout")),
            "{name}: the attempts and the last error stay with the key"
        );
        assert_eq!(s.stats(AP).unwrap().pending, 2, "{name}: still two");
    });
}

#[test]
fn an_interface_does_not_see_the_items_of_one_it_prefixes() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        // gl-x's items are older, so a leaky prefix scan of "gl" would list them first.
        queue(&*s, "gl-x", "x", &[("X1", "<x1/>"), ("X2", "<x2/>")], 100);
        queue(&*s, "gl", "g", &[("G1", "<g1/>")], 200);
        assert_eq!(pending_keys(&*s, "gl", 10), [key("g", "G1")], "{name}");
        assert_eq!(
            sorted(pending_keys(&*s, "gl-x", 10)),
            [key("x", "X1"), key("x", "X2")],
            "{name}"
        );
        assert!(
            s.take("g", 10).unwrap().is_empty(),
            "{name}: \"g\" is no interface"
        );
    });
}

#[test]
fn delivered_removes_the_sent_items_and_counts_them() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        queue_invoices(&*s, &[("A", "<a/>"), ("B", "<b/>"), ("C", "<c/>")], 1000);
        let batch = [sent(&*s, &key("inv", "A")), sent(&*s, &key("inv", "B"))];
        assert_eq!(s.delivered(&batch).unwrap(), 2, "{name}");
        assert!(s.get(&key("inv", "A")).unwrap().is_none(), "{name}");
        assert!(s.get(&key("inv", "B")).unwrap().is_none(), "{name}");
        assert_eq!(pending_keys(&*s, AP, 10), [key("inv", "C")], "{name}");
        assert_eq!(
            counts(&*s, AP),
            (1, 0, 2),
            "{name}: (pending, rejected, delivered)"
        );
        assert_eq!(s.items().unwrap().len(), 1, "{name}");
    });
}

#[test]
fn delivered_keeps_a_key_replaced_after_it_was_sent() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        let batch = a_batch_of_a_and_b_then_a_replaced(&*s);
        assert_eq!(s.delivered(&batch).unwrap(), 1, "{name}: only B went");
        let a = s.get(&key("inv", "A")).unwrap().expect("A stays");
        assert_eq!(
            (a.state, a.xml.as_str()),
            (State::Pending, "<a2/>"),
            "{name}"
        );
        assert!(a.version > batch[0].version, "{name}");
        assert_eq!(pending_keys(&*s, AP, 10), [key("inv", "A")], "{name}");
        assert_eq!(
            counts(&*s, AP),
            (1, 0, 1),
            "{name}: (pending, rejected, delivered)"
        );
    });
}

#[test]
fn a_second_delivered_of_the_same_sent_removes_nothing() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        queue_invoices(&*s, &[("A", "<a/>"), ("B", "<b/>")], 1000);
        let batch = [sent(&*s, &key("inv", "A"))];
        assert_eq!(s.delivered(&batch).unwrap(), 1, "{name}");
        assert_eq!(s.delivered(&batch).unwrap(), 0, "{name}: already gone");
        assert_eq!(counts(&*s, AP), (1, 0, 1), "{name}: counted once");
        assert_eq!(pending_keys(&*s, AP, 10), [key("inv", "B")], "{name}");
    });
}

#[test]
fn failed_counts_an_attempt_on_items_still_at_the_sent_version() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        let batch = a_batch_of_a_and_b_then_a_replaced(&*s);
        let a_before = stored(&*s, &key("inv", "A"));
        s.failed(&batch, "timeout").unwrap();
        let b = stored(&*s, &key("inv", "B"));
        assert_eq!(
            (b.attempts, b.last_error.as_deref(), b.state),
            (1, Some("timeout"), State::Pending),
            "{name}: B failed once"
        );
        assert_eq!(
            s.get(&key("inv", "A")).unwrap().unwrap(),
            a_before,
            "{name}: A was replaced after it was sent: untouched"
        );
        s.failed(&batch[1..], "503").unwrap();
        let b = stored(&*s, &key("inv", "B"));
        assert_eq!(
            (b.attempts, b.last_error.as_deref()),
            (2, Some("503")),
            "{name}: attempts add up, the latest error wins"
        );
        assert_eq!(counts(&*s, AP), (2, 0, 0), "{name}: both still pending");
    });
}
