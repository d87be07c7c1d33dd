//! The suite every queue storage backend must pass. It runs against [`SledStore`]; a new
//! backend adds one line to `backends()`.

use ap_intake::queue::{NewRecord, QueueKey, SledStore, State, Store};
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
