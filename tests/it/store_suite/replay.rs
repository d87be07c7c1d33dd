//! Replay (D49) on both engines: deliveries keep each key's last delivered XML when told to;
//! a replay queues those of a window again at the end of the line with new versions, leaves
//! a key with a version pending or parked alone, says which named keys it has nothing of,
//! changes nothing in a dry run; the kept versions are counted and pruned oldest first.

use crate::store_suite::{GL_CODES, each_backend, key, queue_gl_codes, sent};
use ap_intake::queue::replay::{KeptSize, Window};
use ap_intake::queue::{QueueKey, State, Store, now_ms};

fn deliver(s: &dyn Store, codes: &[&str]) {
    let batch: Vec<_> = codes.iter().map(|c| sent(s, &key("gl-code", c))).collect();
    assert_eq!(s.delivered(&batch).unwrap(), codes.len());
}

fn keys(codes: &[&str]) -> Vec<QueueKey> {
    codes.iter().map(|c| key("gl-code", c)).collect()
}

#[test]
fn a_replay_queues_each_kept_key_once_and_leaves_newer_versions_alone() {
    each_backend(|engine, dir, open| {
        let s = open(dir);
        // Not kept: delivered before deliveries kept their XML.
        queue_gl_codes(&*s, &[("Z", "<z/>")], 1000);
        deliver(&*s, &["Z"]);
        s.keep_delivered(true);
        queue_gl_codes(&*s, &[("A", "<a1/>"), ("B", "<b1/>"), ("C", "<c1/>")], 1000);
        deliver(&*s, &["A", "B", "C"]);
        // B comes again and waits; C is refused and parked.
        queue_gl_codes(&*s, &[("B", "<b2/>"), ("C", "<c2/>")], 2000);
        assert!(s.reject(&sent(&*s, &key("gl-code", "C")), "no").unwrap());
        assert_eq!(
            s.kept_size().unwrap(),
            KeptSize { keys: 3, bytes: 15 },
            "{engine}"
        );
        let all = Window {
            keys: Vec::new(),
            ..Window::default()
        };
        let dry = s.replay(&all, true).unwrap();
        assert_eq!(dry.queued, keys(&["A"]), "{engine}");
        assert!(
            s.get(&key("gl-code", "A")).unwrap().is_none(),
            "{engine}: dry"
        );

        let named = Window {
            keys: keys(&["A", "B", "C", "Z", "never"]),
            ..Window::default()
        };
        let done = s.replay(&named, false).unwrap();
        assert_eq!(done.queued, keys(&["A"]), "{engine}");
        let mut alone = done.left_alone.clone();
        alone.sort();
        assert_eq!(alone, keys(&["B", "C"]), "{engine}");
        assert_eq!(done.not_kept, keys(&["Z", "never"]), "{engine}");
        let a = s
            .get(&key("gl-code", "A"))
            .unwrap()
            .expect("A queued again");
        assert_eq!(
            (a.state, a.xml.as_str()),
            (State::Pending, "<a1/>"),
            "{engine}"
        );
        assert_eq!(
            s.get(&key("gl-code", "B")).unwrap().unwrap().xml,
            "<b2/>",
            "{engine}: the newer version stays"
        );
        // Taken like any new key: after what was pending before it.
        let line: Vec<QueueKey> = s
            .take(GL_CODES, 10)
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(line, keys(&["B", "A"]), "{engine}");
        // Once queued, a second replay leaves it alone: delivered once more, not twice.
        let again = s.replay(&all, false).unwrap();
        assert!(again.queued.is_empty(), "{engine}: {again:?}");
        // A window that ends before the deliveries finds nothing.
        let before = Window {
            until_ms: Some(1),
            ..Window::default()
        };
        assert!(s.replay(&before, true).unwrap().queued.is_empty());
        assert_eq!(
            ap_intake::queue::receipt::prune_kept(&*s, now_ms() + 60_000).unwrap(),
            3,
            "{engine}"
        );
        assert_eq!(s.kept_size().unwrap(), KeptSize::default(), "{engine}");
    });
}

/// D49 with D30: a replay grows the queue, so the free-space rule refuses it as it refuses
/// intake; a dry run still answers, and a key whose kept version was pruned is reported.
#[test]
fn the_free_space_rule_refuses_a_replay_as_it_refuses_intake() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = ap_intake::queue::SqliteStore::open(dir.path(), ap_intake::queue::Mode::Serve, 0)
            .unwrap();
        s.keep_delivered(true);
        queue_gl_codes(&s, &[("A", "<a/>"), ("B", "<b/>")], 1000);
        deliver(&s, &["A", "B"]);
        s.close().unwrap();
    }
    let full =
        ap_intake::queue::SqliteStore::open(dir.path(), ap_intake::queue::Mode::Serve, u64::MAX)
            .unwrap();
    let all = Window::default();
    let refused = full.replay(&all, false).unwrap_err();
    assert!(refused.to_string().contains("storage is full"), "{refused}");
    assert_eq!(full.replay(&all, true).unwrap().queued, keys(&["A", "B"]));
    assert!(full.get(&key("gl-code", "A")).unwrap().is_none());
    // Pruned past its retention: reported, not replayed.
    ap_intake::queue::receipt::prune_kept(&full, now_ms() + 60_000).unwrap();
    let named = Window {
        keys: keys(&["A"]),
        ..Window::default()
    };
    assert_eq!(full.replay(&named, true).unwrap().not_kept, keys(&["A"]));
}
