//! `upsert`: what it stores, how a second one replaces the first, how keys stay apart, and how a
//! key moves to the interface it was last sent through.

use crate::common::Items;
use crate::store_suite::{
    counts, each_backend, key, pending_keys, queue, queue_gl_codes, rec, sent, stored,
};
use ap_intake::queue::State;

const PO1: &str = "purchase-orders-v1";
const PO2: &str = "purchase-orders-v2";
const GL: &str = crate::store_suite::GL_CODES;

#[test]
fn upsert_then_get() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        queue_gl_codes(&*s, &[("A", "<a/>")], 1000);
        let item = stored(&*s, &key("gl-code", "A"));
        assert_eq!(item.xml, "<a/>", "{name}");
        assert_eq!(item.state, State::Pending);
        assert_eq!(
            (item.queued_at_ms, item.updated_at_ms, item.attempts),
            (1000, 1000, 0)
        );
        assert!(s.get(&key("gl-code", "B")).unwrap().is_none());
    });
}

#[test]
fn a_second_upsert_replaces_and_bumps_the_version() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        queue_gl_codes(&*s, &[("A", "<v1/>")], 1000);
        let v1 = s.items().unwrap()[0].1.clone();
        queue_gl_codes(&*s, &[("A", "<v2/>")], 2000);
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
        queue_gl_codes(&*s, &[("A", "<first/>"), ("A", "<second/>")], 1);
        let items = s.items().unwrap();
        assert_eq!(items.len(), 1, "{name}");
        assert_eq!(items[0].1.xml, "<second/>");
    });
}

#[test]
fn runs_of_new_and_resent_keys_in_one_call_are_all_stored() {
    // The SQLite writer guesses per record whether its key is new (D16 either way): new keys
    // after resent ones, resent ones after new ones, in one transaction.
    each_backend(|name, dir, open| {
        let s = open(dir);
        queue_gl_codes(&*s, &[("A", "<a1/>"), ("B", "<b1/>")], 1000);
        queue_gl_codes(
            &*s,
            &[
                ("A", "<a2/>"),
                ("B", "<b2/>"),
                ("C", "<c1/>"),
                ("D", "<d1/>"),
                ("A", "<a3/>"),
                ("E", "<e1/>"),
            ],
            2000,
        );
        let line: Vec<String> = pending_keys(&*s, GL, 10)
            .iter()
            .map(|k| stored(&*s, k).xml)
            .collect();
        assert_eq!(
            line,
            ["<a3/>", "<b2/>", "<c1/>", "<d1/>", "<e1/>"],
            "{name}: resent keys keep their places, new ones follow in order"
        );
        assert_eq!(counts(&*s, GL), (5, 0, 0), "{name}");
        let a = stored(&*s, &key("gl-code", "A"));
        assert_eq!((a.queued_at_ms, a.updated_at_ms), (1000, 2000), "{name}");
    });
}

#[test]
fn key_spaces_and_parts_keep_keys_apart() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        let records = [
            rec("gl-code", "A", "1"),
            rec("vendor", "A", "2"),
            rec("gl-code", "AB", "3"),
        ];
        s.upsert(&records, 1).unwrap();
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
fn an_upsert_through_another_interface_moves_the_pending_key() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        queue(&*s, PO1, "purchase-order", &[("PO-1", "<v1/>")], 1000);
        queue(&*s, PO1, "purchase-order", &[("PO-2", "<other/>")], 1500);
        queue(&*s, PO2, "purchase-order", &[("PO-1", "<v2/>")], 2000);
        let po = key("purchase-order", "PO-1");
        let item = stored(&*s, &po);
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
        queue(&*s, PO1, "purchase-order", &[("PO-1", "<v1/>")], 1000);
        assert!(s.reject(&sent(&*s, &po), "refused").unwrap());
        queue(&*s, PO2, "purchase-order", &[("PO-1", "<v2/>")], 2000);
        assert_eq!(counts(&*s, PO1), (0, 0, 0), "{name}: nothing left in v1");
        assert_eq!(counts(&*s, PO2), (1, 0, 0), "{name}");
        assert!(s.keys(State::Rejected, None).unwrap().is_empty(), "{name}");
        assert_eq!(pending_keys(&*s, PO2, 10), [po], "{name}");
    });
}
