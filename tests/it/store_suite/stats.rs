//! What an interface reports: its keys by state, its counters and oldest pending item, and its
//! delivery backoff.

use crate::store_suite::{
    AP, backoff, before_reopening, each_backend, key, queue, queue_each, rec_in, sent, sorted,
};
use ap_intake::queue::{Backoff, Sent, State, Stats, Store};

#[test]
fn keys_lists_one_interface_or_all() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        let records = [
            rec_in("gl", "g", "G1", "<g1/>"),
            rec_in("gl", "g", "G2", "<g2/>"),
            rec_in("gl-x", "x", "X1", "<x1/>"),
            rec_in("gl-x", "x", "X2", "<x2/>"),
            rec_in("vendors-v1", "vendor", "V1", "<v1/>"),
        ];
        s.upsert(&records, 1000).unwrap();
        assert!(s.reject(&sent(&*s, &key("x", "X2")), "no").unwrap());
        assert!(s.reject(&sent(&*s, &key("vendor", "V1")), "no").unwrap());
        assert_eq!(
            sorted(s.keys(State::Pending, None).unwrap()),
            [key("g", "G1"), key("g", "G2"), key("x", "X1")],
            "{name}: pending of all interfaces"
        );
        assert_eq!(
            sorted(s.keys(State::Rejected, None).unwrap()),
            [key("vendor", "V1"), key("x", "X2")],
            "{name}: rejected of all interfaces"
        );
        assert_eq!(
            sorted(s.keys(State::Pending, Some("gl")).unwrap()),
            [key("g", "G1"), key("g", "G2")],
            "{name}: only gl's, not gl-x's"
        );
        assert_eq!(
            s.keys(State::Pending, Some("gl-x")).unwrap(),
            [key("x", "X1")],
            "{name}"
        );
        assert!(
            s.keys(State::Rejected, Some("gl")).unwrap().is_empty(),
            "{name}"
        );
        assert_eq!(
            s.keys(State::Rejected, Some("gl-x")).unwrap(),
            [key("x", "X2")],
            "{name}"
        );
        assert!(
            s.keys(State::Pending, Some("vendors-v1"))
                .unwrap()
                .is_empty()
        );
    });
}

#[test]
fn stats_count_and_track_the_oldest_pending_item() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        assert_eq!(s.stats("gl").unwrap(), Stats::default(), "{name}: empty");
        // gl-x's item is the oldest of all, and not gl's.
        queue(&*s, "gl-x", "x", &[("X", "<x/>")], 500);
        queue_each(
            &*s,
            "gl",
            "g",
            &[
                ("B", "<b/>", 1000),
                ("C", "<c/>", 2000),
                ("A", "<a/>", 3000),
            ],
        );
        let st = s.stats("gl").unwrap();
        assert_eq!((st.pending, st.rejected, st.delivered), (3, 0, 0), "{name}");
        assert_eq!(st.oldest_pending_ms, Some(1000), "{name}");
        assert!(s.reject(&sent(&*s, &key("g", "B")), "no").unwrap());
        let st = s.stats("gl").unwrap();
        assert_eq!((st.pending, st.rejected), (2, 1), "{name}");
        assert_eq!(
            st.oldest_pending_ms,
            Some(2000),
            "{name}: B is no longer pending"
        );
        assert_eq!(s.delivered(&[sent(&*s, &key("g", "C"))]).unwrap(), 1);
        let st = s.stats("gl").unwrap();
        assert_eq!((st.pending, st.rejected, st.delivered), (1, 1, 1), "{name}");
        assert_eq!(st.oldest_pending_ms, Some(3000), "{name}");
        assert_eq!(s.delivered(&[sent(&*s, &key("g", "A"))]).unwrap(), 1);
        let st = s.stats("gl").unwrap();
        assert_eq!((st.pending, st.rejected, st.delivered), (0, 1, 2), "{name}");
        assert_eq!(st.oldest_pending_ms, None, "{name}: nothing pending");
        let x = s.stats("gl-x").unwrap();
        assert_eq!(
            (x.pending, x.rejected, x.delivered, x.oldest_pending_ms),
            (1, 0, 0, Some(500)),
            "{name}: gl-x counted apart"
        );
    });
}

#[test]
fn backoff_round_trips_through_stats() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        assert_eq!(s.stats(AP).unwrap().backoff, Backoff::default(), "{name}");
        s.set_backoff(AP, &backoff(1, "timeout")).unwrap();
        assert_eq!(
            s.stats(AP).unwrap().backoff,
            backoff(1, "timeout"),
            "{name}"
        );
        s.set_backoff(AP, &backoff(2, "503")).unwrap();
        assert_eq!(
            s.stats(AP).unwrap().backoff,
            backoff(2, "503"),
            "{name}: replaced"
        );
        assert_eq!(
            s.stats("ap-invoices").unwrap().backoff,
            Backoff::default(),
            "{name}: per interface"
        );
        s.set_backoff(AP, &Backoff::default()).unwrap();
        assert_eq!(
            s.stats(AP).unwrap().backoff,
            Backoff::default(),
            "{name}: cleared"
        );
    });
}

/// The counts `stats` reports are the items' own, after every kind of change a key goes
/// through and across a reopen: both engines keep exact counter rows in the transaction that
/// changes the items (issue 46; SQLite's writer in Rust, PostgreSQL's triggers).
#[test]
fn the_counts_are_the_items_own_after_every_kind_of_change() {
    each_backend(|name, dir, open| {
        let agree = |s: &dyn Store, step: &str, delivered: u64| {
            let st = s.stats("gl").unwrap();
            let items = |state| s.keys(state, Some("gl")).unwrap().len() as u64;
            let counted = (st.pending, st.rejected, st.quarantined, st.delivered);
            let listed = (
                items(State::Pending),
                items(State::Rejected),
                items(State::Quarantined),
                delivered,
            );
            assert_eq!(counted, listed, "{name}: after {step}");
        };
        before_reopening(dir, open, |s| {
            let codes = ["A", "B", "C", "D", "E", "F"];
            let xml: Vec<(&str, &str)> = codes.iter().map(|c| (*c, "<v1/>")).collect();
            queue(s, "gl", "g", &xml, 1000);
            agree(s, "six new keys", 0);
            queue(s, "gl", "g", &[("A", "<v2/>"), ("G", "<g/>")], 1100);
            agree(s, "a resend of a pending key and a new key", 0);
            for code in ["B", "C", "D"] {
                assert!(s.reject(&sent(s, &key("g", code)), "no").unwrap());
            }
            agree(s, "three rejections", 0);
            queue(s, "gl", "g", &[("B", "<b2/>")], 1200);
            agree(s, "a resend of a rejected key", 0);
            assert!(s.requeue(&key("g", "C")).unwrap());
            agree(s, "a requeue", 0);
            assert!(s.discard(&key("g", "D")).unwrap());
            agree(s, "a drop", 0);
            let stale = sent(s, &key("g", "E"));
            queue(s, "gl", "g", &[("E", "<e2/>")], 1300);
            assert_eq!(s.delivered(&[stale]).unwrap(), 0);
            agree(s, "a delivery of a replaced version", 0);
            let batch: Vec<Sent> = ["A", "B", "F"]
                .iter()
                .map(|c| sent(s, &key("g", c)))
                .collect();
            s.failed(&batch, "timeout").unwrap();
            agree(s, "a failed attempt", 0);
            assert_eq!(s.delivered(&batch).unwrap(), 3);
            agree(s, "three deliveries", 3);
            queue(s, "gl", "g", &[("A", "<a3/>")], 1400);
            agree(s, "a delivered key sent again", 3);
            queue(s, "gl-x", "x", &[("X", "<x/>")], 1500);
            agree(s, "another interface's record", 3);
        });
        let s = open(dir);
        agree(&*s, "a reopen", 3);
        assert_eq!(
            (
                s.stats("gl-x").unwrap().pending,
                s.stats("gl").unwrap().pending
            ),
            (1, 4),
            "{name}: C, E, G and A again pending; X apart"
        );
    });
}
