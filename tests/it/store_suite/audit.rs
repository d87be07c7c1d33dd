//! The audit trail (D50) on both engines: added once by id, read from a time on in the
//! order written, kept across a reopen, pruned oldest first.

use crate::store_suite::{before_reopening, each_backend};
use ap_intake::queue::audit::AuditRecord;

fn record(id: &str, at_ms: u64) -> AuditRecord {
    AuditRecord {
        id: id.into(),
        at_ms,
        actor: "alice".into(),
        uid: Some(1001),
        action: "drop".into(),
        args: r#"{"key":"gl-code:main/4000"}"#.into(),
        changed: r#"{"dropped":true}"#.into(),
    }
}

#[test]
fn the_trail_is_added_to_once_by_id_read_in_order_and_pruned_oldest_first() {
    each_backend(|engine, dir, open| {
        before_reopening(dir, open, |s| {
            for (id, at) in [("a", 1000), ("b", 3000), ("c", 2000), ("a", 9000)] {
                s.audit(&record(id, at)).unwrap();
            }
        });
        let s = open(dir);
        let ids = |since| -> Vec<String> {
            s.audit_trail(since, 100)
                .unwrap()
                .into_iter()
                .map(|r| r.id)
                .collect()
        };
        assert_eq!(
            ids(0),
            ["a", "b", "c"],
            "{engine}: in the order written, once"
        );
        assert_eq!(ids(2000), ["b", "c"], "{engine}");
        assert_eq!(
            s.audit_trail(0, 100).unwrap()[0],
            record("a", 1000),
            "{engine}"
        );
        assert_eq!(s.audit_trail(0, 2).unwrap().len(), 2, "{engine}");
        assert_eq!(
            ap_intake::queue::receipt::prune_audit(&*s, 2500).unwrap(),
            2,
            "{engine}"
        );
        assert_eq!(ids(0), ["b"], "{engine}");
    });
}
