//! Receipts (D38): lines written with the records by `upsert`, each record's state read from
//! the queue (pending, delivered, rejected, superseded, dropped), pruning by age, and a
//! reused request id replacing its older receipt.

use crate::store_suite::{GL_CODES, before_reopening, each_backend, key, sent};
use ap_intake::queue::receipt::{ReceiptLine, ReceiptRecord, ReceiptState, RequestInfo};
use ap_intake::queue::{NewRecord, Store};
use std::sync::Arc;

/// A request of `api_key` with `id`, received at `received_at_ms`.
fn request(id: &str, api_key: &str, received_at_ms: u64, nonce: u64) -> Arc<RequestInfo> {
    Arc::new(RequestInfo {
        request_id: id.to_string(),
        api_key: api_key.to_string(),
        interface: GL_CODES,
        received_at_ms,
        nonce,
    })
}

/// The GL codes `codes` of `request`, indexed in order, keyed `gl-code:main/code`.
fn records_of(request: &Arc<RequestInfo>, codes: &[&str]) -> Vec<NewRecord> {
    codes
        .iter()
        .enumerate()
        .map(|(i, code)| NewRecord {
            key: key("gl-code", code),
            interface: GL_CODES,
            xml: format!("<gl_code><code>{code}</code></gl_code>"),
            receipt: Some(ReceiptLine {
                request: Arc::clone(request),
                index: u32::try_from(i).unwrap(),
            }),
        })
        .collect()
}

/// `(index, key, state)` of every record of the one receipt of `id` for `api_key`.
fn lines(s: &dyn Store, id: &str, api_key: &str) -> Vec<(u32, String, ReceiptState)> {
    let found = s.receipts(id, Some(api_key)).unwrap();
    assert_eq!(
        found.len(),
        1,
        "one receipt of {id} for {api_key}: {found:?}"
    );
    found[0]
        .records
        .iter()
        .map(|r| (r.index, r.key.clone(), r.state))
        .collect()
}

/// The record of the receipt of `id` for `api_key` with the GL code `code`.
fn line(s: &dyn Store, id: &str, api_key: &str, code: &str) -> ReceiptRecord {
    let k = key("gl-code", code).to_string();
    s.receipts(id, Some(api_key)).unwrap()[0]
        .records
        .iter()
        .find(|r| r.key == k)
        .unwrap_or_else(|| panic!("no {k} in the receipt of {id}"))
        .clone()
}

fn gl(code: &str) -> String {
    key("gl-code", code).to_string()
}

#[test]
fn d38_upsert_writes_a_receipt_line_per_record_and_they_survive_reopening() {
    each_backend(|name, dir, open| {
        before_reopening(dir, open, |s| {
            let req = request("req-1", "erp", 1_000, 7);
            let mut records = records_of(&req, &["A", "B"]);
            // A record without a receipt line is queued, and in no receipt.
            records.push(NewRecord {
                key: key("gl-code", "C"),
                interface: GL_CODES,
                xml: "<c/>".into(),
                receipt: None,
            });
            s.upsert(&records, 2_000).unwrap();
        });
        let s = open(dir);
        let found = s.receipts("req-1", Some("erp")).unwrap();
        assert_eq!(found.len(), 1, "{name}: {found:?}");
        let r = &found[0];
        assert_eq!(
            (
                r.request_id.as_str(),
                r.api_key.as_str(),
                r.received_at_ms,
                r.interface.as_str()
            ),
            ("req-1", "erp", 1_000, GL_CODES),
            "{name}"
        );
        assert_eq!(
            r.records,
            [
                ReceiptRecord {
                    index: 0,
                    key: gl("A"),
                    state: ReceiptState::Pending,
                    updated_at_ms: Some(2_000),
                    reason: None,
                },
                ReceiptRecord {
                    index: 1,
                    key: gl("B"),
                    state: ReceiptState::Pending,
                    updated_at_ms: Some(2_000),
                    reason: None,
                },
            ],
            "{name}"
        );
        assert_eq!(s.receipts("req-1", None).unwrap(), found, "{name}: any key");
        assert!(
            s.receipts("req-1", Some("other")).unwrap().is_empty(),
            "{name}: another key finds none"
        );
        assert!(
            s.receipts("req-2", None).unwrap().is_empty(),
            "{name}: an unknown id"
        );
        assert!(s.get(&key("gl-code", "C")).unwrap().is_some(), "{name}");
    });
}

#[test]
fn d38_states_follow_delivery_rejection_drop_and_replacement() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        let req = request("req-1", "erp", 1_000, 1);
        s.upsert(
            &records_of(
                &req,
                &["DELIVERED", "REJECTED", "DROPPED", "REPLACED", "PENDING"],
            ),
            1_000,
        )
        .unwrap();
        let delivered = sent(&*s, &key("gl-code", "DELIVERED"));
        assert_eq!(s.delivered(&[delivered]).unwrap(), 1, "{name}");
        assert!(
            s.reject(&sent(&*s, &key("gl-code", "REJECTED")), "HTTP 422: no")
                .unwrap(),
            "{name}"
        );
        assert!(
            s.reject(&sent(&*s, &key("gl-code", "DROPPED")), "HTTP 422: gone")
                .unwrap(),
            "{name}"
        );
        assert!(s.discard(&key("gl-code", "DROPPED")).unwrap(), "{name}");
        let later = request("req-2", "erp", 3_000, 2);
        s.upsert(&records_of(&later, &["REPLACED"]), 3_000).unwrap();

        assert_eq!(
            lines(&*s, "req-1", "erp"),
            [
                (0, gl("DELIVERED"), ReceiptState::Delivered),
                (1, gl("REJECTED"), ReceiptState::Rejected),
                (2, gl("DROPPED"), ReceiptState::Rejected),
                (3, gl("REPLACED"), ReceiptState::Superseded),
                (4, gl("PENDING"), ReceiptState::Pending),
            ],
            "{name}"
        );
        assert_eq!(
            line(&*s, "req-1", "erp", "REJECTED").reason.as_deref(),
            Some("HTTP 422: no"),
            "{name}"
        );
        assert_eq!(
            line(&*s, "req-1", "erp", "DROPPED").reason.as_deref(),
            Some("HTTP 422: gone; dropped by an operator"),
            "{name}"
        );
        for code in ["DELIVERED", "REPLACED", "PENDING"] {
            assert_eq!(
                line(&*s, "req-1", "erp", code).reason,
                None,
                "{name}: {code}"
            );
        }
        assert_eq!(
            line(&*s, "req-1", "erp", "REPLACED").updated_at_ms,
            Some(3_000),
            "{name}: superseded when the later version was stored"
        );
        assert!(
            line(&*s, "req-1", "erp", "DELIVERED")
                .updated_at_ms
                .is_some(),
            "{name}"
        );
        assert_eq!(
            lines(&*s, "req-2", "erp"),
            [(0, gl("REPLACED"), ReceiptState::Pending)],
            "{name}"
        );

        // The later version delivered: the earlier stays superseded.
        let replaced = sent(&*s, &key("gl-code", "REPLACED"));
        assert_eq!(s.delivered(&[replaced]).unwrap(), 1, "{name}");
        assert_eq!(
            line(&*s, "req-1", "erp", "REPLACED").state,
            ReceiptState::Superseded,
            "{name}"
        );
        assert_eq!(
            line(&*s, "req-2", "erp", "REPLACED").state,
            ReceiptState::Delivered,
            "{name}"
        );
    });
}

#[test]
fn d38_a_version_replaced_while_on_its_way_is_delivered() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        let first = request("req-1", "erp", 1_000, 1);
        s.upsert(&records_of(&first, &["A"]), 1_000).unwrap();
        let on_its_way = sent(&*s, &key("gl-code", "A"));
        let second = request("req-2", "erp", 2_000, 2);
        s.upsert(&records_of(&second, &["A"]), 2_000).unwrap();
        assert_eq!(
            lines(&*s, "req-1", "erp"),
            [(0, gl("A"), ReceiptState::Superseded)],
            "{name}: replaced, not yet taken"
        );
        assert_eq!(
            s.delivered(&[on_its_way]).unwrap(),
            0,
            "{name}: the newer version stays"
        );
        assert_eq!(
            lines(&*s, "req-1", "erp"),
            [(0, gl("A"), ReceiptState::Delivered)],
            "{name}: the platform took that version"
        );
        assert_eq!(
            lines(&*s, "req-2", "erp"),
            [(0, gl("A"), ReceiptState::Pending)],
            "{name}"
        );
    });
}

#[test]
fn d38_prune_receipts_removes_old_ones_and_keeps_new_ones() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        let old = request("old", "erp", 1_000, 1);
        let also_old = request("also-old", "erp", 2_999, 2);
        let new = request("new", "erp", 3_000, 3);
        s.upsert(&records_of(&old, &["A", "B"]), 1_000).unwrap();
        s.upsert(&records_of(&also_old, &["C"]), 2_999).unwrap();
        s.upsert(&records_of(&new, &["D"]), 3_000).unwrap();
        let removed = ap_intake::queue::receipt::prune(&*s, 3_000).unwrap();
        assert!(removed >= 2, "{name}: {removed} rows removed");
        assert!(s.receipts("old", None).unwrap().is_empty(), "{name}");
        assert!(s.receipts("also-old", None).unwrap().is_empty(), "{name}");
        assert_eq!(
            lines(&*s, "new", "erp"),
            [(0, gl("D"), ReceiptState::Pending)],
            "{name}: received at the limit, kept"
        );
        for code in ["A", "B", "C", "D"] {
            assert!(
                s.get(&key("gl-code", code)).unwrap().is_some(),
                "{name}: {code} is still queued"
            );
        }
        assert_eq!(
            ap_intake::queue::receipt::prune(&*s, 3_000).unwrap(),
            0,
            "{name}: nothing left"
        );
        // A line written later for a pruned id starts a receipt of its own.
        let again = request("old", "erp", 4_000, 4);
        s.upsert(&records_of(&again, &["E"]), 4_000).unwrap();
        assert_eq!(
            lines(&*s, "old", "erp"),
            [(0, gl("E"), ReceiptState::Pending)],
            "{name}"
        );
    });
}

#[test]
fn d38_a_reused_id_with_another_nonce_replaces_the_old_lines() {
    each_backend(|name, dir, open| {
        let s = open(dir);
        let first = request("reused", "erp", 1_000, 1);
        s.upsert(&records_of(&first, &["A", "B"]), 1_000).unwrap();
        // The same request's later part (same nonce) adds to its receipt.
        let rest = vec![NewRecord {
            key: key("gl-code", "C"),
            interface: GL_CODES,
            xml: "<c/>".into(),
            receipt: Some(ReceiptLine {
                request: request("reused", "erp", 1_000, 1),
                index: 2,
            }),
        }];
        s.upsert_continued(&rest, 1_000).unwrap();
        assert_eq!(
            lines(&*s, "reused", "erp"),
            [
                (0, gl("A"), ReceiptState::Pending),
                (1, gl("B"), ReceiptState::Pending),
                (2, gl("C"), ReceiptState::Pending),
            ],
            "{name}"
        );
        // Another key with the same id: a receipt of its own.
        let theirs = request("reused", "other", 1_500, 9);
        s.upsert(&records_of(&theirs, &["X"]), 1_500).unwrap();

        let second = request("reused", "erp", 2_000, 2);
        s.upsert(&records_of(&second, &["D"]), 2_000).unwrap();
        let found = s.receipts("reused", Some("erp")).unwrap();
        assert_eq!(found.len(), 1, "{name}: {found:?}");
        assert_eq!(found[0].received_at_ms, 2_000, "{name}");
        assert_eq!(
            lines(&*s, "reused", "erp"),
            [(0, gl("D"), ReceiptState::Pending)],
            "{name}: only the latest request's lines"
        );
        assert_eq!(
            lines(&*s, "reused", "other"),
            [(0, gl("X"), ReceiptState::Pending)],
            "{name}: the other key's receipt is untouched"
        );
        let all = s.receipts("reused", None).unwrap();
        let keys: Vec<&str> = all.iter().map(|r| r.api_key.as_str()).collect();
        assert_eq!(keys, ["other", "erp"], "{name}: by received_at");
        for code in ["A", "B", "C", "D", "X"] {
            assert!(
                s.get(&key("gl-code", code)).unwrap().is_some(),
                "{name}: {code} is still queued"
            );
        }
    });
}
