//! Parking: `reject` sets an item aside, `requeue` or a new upsert puts it back in line.

use crate::store_suite::{
    AP, counts, each_backend, key, pending_keys, queue_invoices, sent, stored,
};
use ap_intake::queue::{Sent, State};

#[test]
fn reject_parks_the_item() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        queue_invoices(&*s, &[("A", "<a/>"), ("B", "<b/>")], 1000);
        let a = sent(&*s, &key("inv", "A"));
        assert!(s.reject(&a, "unknown vendor").unwrap(), "{name}");
        let item = s
            .get(&key("inv", "A"))
            .unwrap()
            .expect("a rejected item stays");
        assert_eq!(item.state, State::Rejected, "{name}");
        assert_eq!(item.last_error.as_deref(), Some("unknown vendor"), "{name}");
        assert_eq!(
            (item.version, item.xml.as_str()),
            (a.version, "<a/>"),
            "{name}"
        );
        assert_eq!(pending_keys(&*s, AP, 10), [key("inv", "B")], "{name}");
        assert_eq!(
            s.keys(State::Rejected, Some(AP)).unwrap(),
            [key("inv", "A")],
            "{name}"
        );
        assert_eq!(
            s.keys(State::Pending, Some(AP)).unwrap(),
            [key("inv", "B")],
            "{name}"
        );
        assert_eq!(
            counts(&*s, AP),
            (1, 1, 0),
            "{name}: (pending, rejected, delivered)"
        );
    });
}

#[test]
fn reject_of_a_stale_version_does_nothing() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        queue_invoices(&*s, &[("A", "<a1/>")], 1000);
        let old = sent(&*s, &key("inv", "A"));
        queue_invoices(&*s, &[("A", "<a2/>")], 2000);
        assert!(!s.reject(&old, "refused").unwrap(), "{name}");
        let a = stored(&*s, &key("inv", "A"));
        assert_eq!(
            (a.state, a.xml.as_str(), a.last_error),
            (State::Pending, "<a2/>", None),
            "{name}"
        );
        assert_eq!(pending_keys(&*s, AP, 10), [key("inv", "A")], "{name}");
        assert!(s.keys(State::Rejected, None).unwrap().is_empty(), "{name}");
        assert_eq!(counts(&*s, AP), (1, 0, 0), "{name}");
        let unknown = Sent {
            key: key("inv", "NOPE"),
            version: old.version,
        };
        assert!(
            !s.reject(&unknown, "refused").unwrap(),
            "{name}: unknown key"
        );
        assert!(s.get(&unknown.key).unwrap().is_none(), "{name}");
    });
}

#[test]
fn requeue_puts_a_rejected_item_back_in_line() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        queue_invoices(&*s, &[("A", "<a/>")], 1000);
        let a = sent(&*s, &key("inv", "A"));
        s.failed(std::slice::from_ref(&a), "timeout").unwrap();
        assert!(s.reject(&a, "refused").unwrap());
        assert!(s.get(&a.key).unwrap().unwrap().attempts > 0, "{name}");
        assert!(s.requeue(&a.key).unwrap(), "{name}");
        let item = stored(&*s, &a.key);
        assert_eq!((item.state, item.attempts), (State::Pending, 0), "{name}");
        assert_eq!(item.xml, "<a/>", "{name}");
        assert_eq!(pending_keys(&*s, AP, 10), [key("inv", "A")], "{name}");
        assert!(
            s.keys(State::Rejected, Some(AP)).unwrap().is_empty(),
            "{name}"
        );
        assert_eq!(
            counts(&*s, AP),
            (1, 0, 0),
            "{name}: (pending, rejected, delivered)"
        );
        // It can be delivered again at the version it now has.
        assert_eq!(s.delivered(&[sent(&*s, &a.key)]).unwrap(), 1, "{name}");
        assert_eq!(counts(&*s, AP), (0, 0, 1), "{name}");
    });
}

#[test]
fn requeue_refuses_a_pending_or_unknown_key() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        queue_invoices(&*s, &[("A", "<a/>")], 1000);
        let before = stored(&*s, &key("inv", "A"));
        assert!(!s.requeue(&key("inv", "A")).unwrap(), "{name}: pending");
        assert!(!s.requeue(&key("inv", "NOPE")).unwrap(), "{name}: unknown");
        assert_eq!(s.get(&key("inv", "A")).unwrap().unwrap(), before, "{name}");
        assert!(s.get(&key("inv", "NOPE")).unwrap().is_none(), "{name}");
        assert_eq!(counts(&*s, AP), (1, 0, 0), "{name}");
        assert_eq!(pending_keys(&*s, AP, 10), [key("inv", "A")], "{name}");
    });
}

#[test]
fn an_upsert_over_a_rejected_key_makes_it_pending_with_the_new_content() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        queue_invoices(&*s, &[("A", "<a1/>")], 1000);
        let old = sent(&*s, &key("inv", "A"));
        assert!(s.reject(&old, "refused").unwrap());
        queue_invoices(&*s, &[("A", "<a2/>")], 5000);
        let a = stored(&*s, &old.key);
        assert_eq!(
            (a.state, a.xml.as_str()),
            (State::Pending, "<a2/>"),
            "{name}"
        );
        assert!(a.version > old.version, "{name}");
        assert_eq!(a.queued_at_ms, 5000, "{name}: pending again since now");
        assert_eq!(pending_keys(&*s, AP, 10), [key("inv", "A")], "{name}");
        assert!(s.keys(State::Rejected, None).unwrap().is_empty(), "{name}");
        assert_eq!(
            counts(&*s, AP),
            (1, 0, 0),
            "{name}: (pending, rejected, delivered)"
        );
    });
}

#[test]
fn discard_removes_a_parked_item_for_good_and_nothing_else() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        queue_invoices(&*s, &[("A", "<a/>"), ("B", "<b/>")], 1000);
        assert!(
            !s.discard(&key("inv", "A")).unwrap(),
            "{name}: pending stays"
        );
        assert!(!s.discard(&key("inv", "NOPE")).unwrap(), "{name}: unknown");
        let a = sent(&*s, &key("inv", "A"));
        assert!(s.reject(&a, "unknown vendor").unwrap(), "{name}");
        assert!(
            s.discard(&key("inv", "A")).unwrap(),
            "{name}: rejected goes"
        );
        assert!(s.get(&key("inv", "A")).unwrap().is_none(), "{name}");
        assert!(s.keys(State::Rejected, None).unwrap().is_empty(), "{name}");
        assert_eq!(
            counts(&*s, AP),
            (1, 0, 0),
            "{name}: not counted as delivered"
        );
        assert!(!s.discard(&key("inv", "A")).unwrap(), "{name}: once");
        // A resend after the drop queues it afresh, at the end of the line.
        queue_invoices(&*s, &[("A", "<a2/>")], 2000);
        assert_eq!(
            pending_keys(&*s, AP, 10),
            [key("inv", "B"), key("inv", "A")],
            "{name}"
        );
    });
}
