//! The suite every queue storage backend must pass. It runs against [`SledStore`]; a new
//! backend adds one line to `backends()`.

use ap_intake::queue::{Backoff, NewRecord, QueueKey, Sent, SledStore, State, Stats, Store};
use std::path::Path;

type Open = fn(&Path) -> Box<dyn Store>;

fn backends() -> Vec<(&'static str, Open)> {
    vec![("sled", |dir| Box::new(SledStore::open(dir).unwrap()))]
}

fn rec(space: &str, code: &str, xml: &str) -> NewRecord {
    NewRecord {
        key: QueueKey::new(space, &["main", code]).unwrap(),
        interface: "general-ledger-codes-v1",
        xml: xml.to_string(),
    }
}

/// A record of `interface` with the key `space:main/code`.
fn rec_in(interface: &'static str, space: &str, code: &str, xml: &str) -> NewRecord {
    NewRecord {
        key: key(space, code),
        interface,
        xml: xml.to_string(),
    }
}

fn key(space: &str, code: &str) -> QueueKey {
    QueueKey::new(space, &["main", code]).unwrap()
}

/// What a delivery of the key's current version sends.
fn sent(s: &dyn Store, k: &QueueKey) -> Sent {
    let version = s.get(k).unwrap().expect("the key is queued").version;
    Sent {
        key: k.clone(),
        version,
    }
}

/// The keys `pending` lists, in its order.
fn pending_keys(s: &dyn Store, interface: &str, limit: usize) -> Vec<QueueKey> {
    s.pending(interface, limit)
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

fn each_backend(test: impl Fn(&str, &Path, Open)) {
    for (name, open) in backends() {
        let dir = tempfile::tempdir().unwrap();
        test(name, dir.path(), open);
    }
}

#[test]
fn upsert_then_get() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        s.upsert(&[rec("gl-code", "A", "<a/>")], 1000).unwrap();
        let item = s
            .get(&QueueKey::new("gl-code", &["main", "A"]).unwrap())
            .unwrap()
            .unwrap();
        assert_eq!(item.xml, "<a/>", "{name}");
        assert_eq!(item.state, State::Pending);
        assert_eq!(
            (item.queued_at_ms, item.updated_at_ms, item.attempts),
            (1000, 1000, 0)
        );
        assert!(
            s.get(&QueueKey::new("gl-code", &["main", "B"]).unwrap())
                .unwrap()
                .is_none()
        );
    });
}

#[test]
fn a_second_upsert_replaces_and_bumps_the_version() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        s.upsert(&[rec("gl-code", "A", "<v1/>")], 1000).unwrap();
        let v1 = s.items().unwrap()[0].1.clone();
        s.upsert(&[rec("gl-code", "A", "<v2/>")], 2000).unwrap();
        let items = s.items().unwrap();
        assert_eq!(items.len(), 1, "{name}");
        let v2 = &items[0].1;
        assert_eq!(v2.xml, "<v2/>");
        assert!(v2.version > v1.version);
        assert_eq!((v2.queued_at_ms, v2.updated_at_ms), (1000, 2000));
    });
}

#[test]
fn the_later_of_two_records_in_one_call_wins() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        s.upsert(
            &[
                rec("gl-code", "A", "<first/>"),
                rec("gl-code", "A", "<second/>"),
            ],
            1,
        )
        .unwrap();
        let items = s.items().unwrap();
        assert_eq!(items.len(), 1, "{name}");
        assert_eq!(items[0].1.xml, "<second/>");
    });
}

#[test]
fn key_spaces_and_parts_keep_keys_apart() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        s.upsert(
            &[
                rec("gl-code", "A", "1"),
                rec("vendor", "A", "2"),
                rec("gl-code", "AB", "3"),
            ],
            1,
        )
        .unwrap();
        let keys: Vec<String> = s
            .items()
            .unwrap()
            .into_iter()
            .map(|(k, _)| k.to_string())
            .collect();
        assert_eq!(
            keys,
            ["gl-code:main/A", "gl-code:main/AB", "vendor:main/A"],
            "{name}: key order"
        );
    });
}

#[test]
fn synced_items_survive_reopening() {
    each_backend(|name, dir, open| {
        {
            let s = open(dir);
            let big = "x".repeat(300 * 1024); // over sled's blob threshold: stored as a file
            s.upsert(
                &[rec("gl-code", "A", "<a/>"), rec("gl-code", "BIG", &big)],
                1,
            )
            .unwrap();
            s.sync().unwrap();
        }
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
        let _held = open(dir);
        let second = std::panic::catch_unwind(|| open(dir));
        assert!(
            second.is_err(),
            "{name}: the directory is locked while open"
        );
    });
}

const AP: &str = "ap-invoices-v1";

#[test]
fn pending_lists_one_interface_oldest_first_up_to_the_limit() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        // Insertion order (M, A, Z), key order (A, M, Z) and age order (Z, M, A) all differ.
        s.upsert(&[rec_in(AP, "inv", "M", "<m/>")], 2000).unwrap();
        s.upsert(&[rec_in(AP, "inv", "A", "<a/>")], 3000).unwrap();
        s.upsert(&[rec_in(AP, "inv", "Z", "<z/>")], 1000).unwrap();
        s.upsert(&[rec_in("vendors-v1", "vendor", "V", "<v/>")], 500)
            .unwrap();
        let all = s.pending(AP, 10).unwrap();
        let keys: Vec<QueueKey> = all.iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(
            keys,
            [key("inv", "Z"), key("inv", "M"), key("inv", "A")],
            "{name}: oldest queued_at first, only {AP}"
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
        assert!(s.pending(AP, 0).unwrap().is_empty(), "{name}: limit 0");
        assert_eq!(
            pending_keys(&*s, "vendors-v1", 10),
            [key("vendor", "V")],
            "{name}"
        );
        assert!(s.pending("no-such-interface", 10).unwrap().is_empty());
    });
}

#[test]
fn a_resend_of_a_pending_key_keeps_its_place_with_the_new_content() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        s.upsert(&[rec_in(AP, "inv", "A", "<a1/>")], 1000).unwrap();
        s.upsert(&[rec_in(AP, "inv", "B", "<b/>")], 2000).unwrap();
        let v1 = s.get(&key("inv", "A")).unwrap().unwrap().version;
        s.upsert(&[rec_in(AP, "inv", "A", "<a2/>")], 3000).unwrap();
        let pending = s.pending(AP, 10).unwrap();
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
        assert_eq!(s.stats(AP).unwrap().pending, 2, "{name}: still two");
    });
}

#[test]
fn an_interface_does_not_see_the_items_of_one_it_prefixes() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        // gl-x's items are older, so a leaky prefix scan of "gl" would list them first.
        s.upsert(
            &[
                rec_in("gl-x", "x", "X1", "<x1/>"),
                rec_in("gl-x", "x", "X2", "<x2/>"),
            ],
            100,
        )
        .unwrap();
        s.upsert(&[rec_in("gl", "g", "G1", "<g1/>")], 200).unwrap();
        assert_eq!(pending_keys(&*s, "gl", 10), [key("g", "G1")], "{name}");
        assert_eq!(
            sorted(pending_keys(&*s, "gl-x", 10)),
            [key("x", "X1"), key("x", "X2")],
            "{name}"
        );
        assert!(
            s.pending("g", 10).unwrap().is_empty(),
            "{name}: \"g\" is no interface"
        );
    });
}

#[test]
fn delivered_removes_the_sent_items_and_counts_them() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        s.upsert(
            &[
                rec_in(AP, "inv", "A", "<a/>"),
                rec_in(AP, "inv", "B", "<b/>"),
                rec_in(AP, "inv", "C", "<c/>"),
            ],
            1000,
        )
        .unwrap();
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
        s.upsert(
            &[
                rec_in(AP, "inv", "A", "<a1/>"),
                rec_in(AP, "inv", "B", "<b/>"),
            ],
            1000,
        )
        .unwrap();
        let batch = [sent(&*s, &key("inv", "A")), sent(&*s, &key("inv", "B"))];
        s.upsert(&[rec_in(AP, "inv", "A", "<a2/>")], 2000).unwrap();
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
        s.upsert(
            &[
                rec_in(AP, "inv", "A", "<a/>"),
                rec_in(AP, "inv", "B", "<b/>"),
            ],
            1000,
        )
        .unwrap();
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
        s.upsert(
            &[
                rec_in(AP, "inv", "A", "<a1/>"),
                rec_in(AP, "inv", "B", "<b/>"),
            ],
            1000,
        )
        .unwrap();
        let batch = [sent(&*s, &key("inv", "A")), sent(&*s, &key("inv", "B"))];
        s.upsert(&[rec_in(AP, "inv", "A", "<a2/>")], 2000).unwrap();
        let a_before = s.get(&key("inv", "A")).unwrap().unwrap();
        s.failed(&batch, "timeout").unwrap();
        let b = s.get(&key("inv", "B")).unwrap().unwrap();
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
        let b = s.get(&key("inv", "B")).unwrap().unwrap();
        assert_eq!(
            (b.attempts, b.last_error.as_deref()),
            (2, Some("503")),
            "{name}: attempts add up, the latest error wins"
        );
        assert_eq!(counts(&*s, AP), (2, 0, 0), "{name}: both still pending");
    });
}

#[test]
fn reject_parks_the_item() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        s.upsert(
            &[
                rec_in(AP, "inv", "A", "<a/>"),
                rec_in(AP, "inv", "B", "<b/>"),
            ],
            1000,
        )
        .unwrap();
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
        s.upsert(&[rec_in(AP, "inv", "A", "<a1/>")], 1000).unwrap();
        let old = sent(&*s, &key("inv", "A"));
        s.upsert(&[rec_in(AP, "inv", "A", "<a2/>")], 2000).unwrap();
        assert!(!s.reject(&old, "refused").unwrap(), "{name}");
        let a = s.get(&key("inv", "A")).unwrap().unwrap();
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
        s.upsert(&[rec_in(AP, "inv", "A", "<a/>")], 1000).unwrap();
        let a = sent(&*s, &key("inv", "A"));
        s.failed(std::slice::from_ref(&a), "timeout").unwrap();
        assert!(s.reject(&a, "refused").unwrap());
        assert!(s.get(&a.key).unwrap().unwrap().attempts > 0, "{name}");
        assert!(s.requeue(&a.key).unwrap(), "{name}");
        let item = s.get(&a.key).unwrap().unwrap();
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
        s.upsert(&[rec_in(AP, "inv", "A", "<a/>")], 1000).unwrap();
        let before = s.get(&key("inv", "A")).unwrap().unwrap();
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
        s.upsert(&[rec_in(AP, "inv", "A", "<a1/>")], 1000).unwrap();
        let old = sent(&*s, &key("inv", "A"));
        assert!(s.reject(&old, "refused").unwrap());
        s.upsert(&[rec_in(AP, "inv", "A", "<a2/>")], 5000).unwrap();
        let a = s.get(&old.key).unwrap().unwrap();
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
fn keys_lists_one_interface_or_all() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        s.upsert(
            &[
                rec_in("gl", "g", "G1", "<g1/>"),
                rec_in("gl", "g", "G2", "<g2/>"),
                rec_in("gl-x", "x", "X1", "<x1/>"),
                rec_in("gl-x", "x", "X2", "<x2/>"),
                rec_in("vendors-v1", "vendor", "V1", "<v1/>"),
            ],
            1000,
        )
        .unwrap();
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
        s.upsert(&[rec_in("gl-x", "x", "X", "<x/>")], 500).unwrap();
        s.upsert(&[rec_in("gl", "g", "A", "<a/>")], 3000).unwrap();
        s.upsert(&[rec_in("gl", "g", "B", "<b/>")], 1000).unwrap();
        s.upsert(&[rec_in("gl", "g", "C", "<c/>")], 2000).unwrap();
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

fn backoff(failures: u32, error: &str) -> Backoff {
    Backoff {
        failures,
        next_attempt_ms: 10_000 + u64::from(failures),
        last_error: Some(error.to_string()),
        last_error_ms: Some(9_000),
    }
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

#[test]
fn backoff_survives_reopening() {
    each_backend(|name, dir, open| {
        {
            let s = open(dir);
            s.set_backoff(AP, &backoff(3, "connection refused"))
                .unwrap();
            s.set_backoff("vendors-v1", &backoff(1, "timeout")).unwrap();
            s.sync().unwrap();
        }
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
        {
            let s = open(dir);
            s.upsert(&[rec_in(AP, "inv", "A", "<a/>")], 1000).unwrap();
            s.upsert(&[rec_in(AP, "inv", "B", "<b/>")], 2000).unwrap();
            s.upsert(&[rec_in(AP, "inv", "D", "<d/>")], 4000).unwrap();
            s.upsert(&[rec_in(AP, "inv", "C", "<c/>")], 3000).unwrap();
            assert_eq!(s.delivered(&[sent(&*s, &key("inv", "A"))]).unwrap(), 1);
            assert!(s.reject(&sent(&*s, &key("inv", "B")), "refused").unwrap());
            s.sync().unwrap();
        }
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
        let b = s.get(&key("inv", "B")).unwrap().unwrap();
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
        let before = {
            let s = open(dir);
            s.upsert(&[rec_in(AP, "inv", "A", "<a1/>")], 1000).unwrap();
            s.sync().unwrap();
            s.get(&key("inv", "A")).unwrap().unwrap().version
        };
        let s = open(dir);
        s.upsert(&[rec_in(AP, "inv", "A", "<a2/>")], 2000).unwrap();
        let after = s.get(&key("inv", "A")).unwrap().unwrap().version;
        assert!(after > before, "{name}: {after} > {before}");
    });
}

const PO1: &str = "purchase-orders-v1";
const PO2: &str = "purchase-orders-v2";

#[test]
fn an_upsert_through_another_interface_moves_the_pending_key() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        s.upsert(&[rec_in(PO1, "purchase-order", "PO-1", "<v1/>")], 1000)
            .unwrap();
        s.upsert(&[rec_in(PO1, "purchase-order", "PO-2", "<other/>")], 1500)
            .unwrap();
        s.upsert(&[rec_in(PO2, "purchase-order", "PO-1", "<v2/>")], 2000)
            .unwrap();
        let po = key("purchase-order", "PO-1");
        let item = s.get(&po).unwrap().unwrap();
        assert_eq!(
            (item.interface.as_str(), item.xml.as_str()),
            (PO2, "<v2/>"),
            "{name}"
        );
        assert_eq!(counts(&*s, PO1), (1, 0, 0), "{name}: PO-1 left v1");
        assert_eq!(counts(&*s, PO2), (1, 0, 0), "{name}: PO-1 is v2's");
        assert_eq!(
            pending_keys(&*s, PO1, 10),
            [key("purchase-order", "PO-2")],
            "{name}: v1 no longer lists PO-1"
        );
        assert_eq!(
            pending_keys(&*s, PO2, 10),
            [key("purchase-order", "PO-1")],
            "{name}"
        );
        assert_eq!(
            s.keys(State::Pending, Some(PO2)).unwrap(),
            [key("purchase-order", "PO-1")],
            "{name}"
        );
        assert_eq!(
            s.stats(PO1).unwrap().oldest_pending_ms,
            Some(1500),
            "{name}"
        );
        // Delivering it counts it for v2.
        assert_eq!(s.delivered(&[sent(&*s, &po)]).unwrap(), 1, "{name}");
        assert_eq!(counts(&*s, PO1), (1, 0, 0), "{name}");
        assert_eq!(counts(&*s, PO2), (0, 0, 1), "{name}");
    });
}

#[test]
fn an_upsert_through_another_interface_moves_a_rejected_key() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        let po = key("purchase-order", "PO-1");
        s.upsert(&[rec_in(PO1, "purchase-order", "PO-1", "<v1/>")], 1000)
            .unwrap();
        assert!(s.reject(&sent(&*s, &po), "refused").unwrap());
        s.upsert(&[rec_in(PO2, "purchase-order", "PO-1", "<v2/>")], 2000)
            .unwrap();
        assert_eq!(counts(&*s, PO1), (0, 0, 0), "{name}: nothing left in v1");
        assert_eq!(counts(&*s, PO2), (1, 0, 0), "{name}");
        assert!(s.keys(State::Rejected, None).unwrap().is_empty(), "{name}");
        assert_eq!(pending_keys(&*s, PO2, 10), [po], "{name}");
    });
}
