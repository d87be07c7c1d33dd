//! Mixed and failing batches, all-or-nothing payment confirmations, and the shape of `errors`
//! (D1, D2, D3).

use crate::common;
use common::*;
use serde_json::{Value, json};

const GL: &str = "/general-ledger-codes/v1";

#[test]
fn a_mixed_batch_is_207_and_queues_the_valid_records() {
    let app = TestApp::start();
    let mut bad = gl("B");
    bad["type"] = json!("NOPE");
    let r = app.post_records(GL, &[gl("A"), bad, gl("C")]);
    assert_eq!(r.status, 207, "{}", r.text);
    let b = r.json();
    assert_eq!(b["status"], "PARTIAL");
    assert_eq!(r.counts(), (3, 2, 1));
    assert_eq!(
        b["message"],
        "2 record(s) queued, 1 record(s) failed validation"
    );
    assert_eq!(
        r.errors(),
        vec![(
            1,
            "/type".into(),
            r#"instance value ("NOPE") not found in enum (possible values: ["DEDUCTABLE","VAT"])"#
                .into()
        )]
    );
    assert!(app.item("gl-code:main/A").is_some());
    assert!(app.item("gl-code:main/B").is_none());
    assert!(app.item("gl-code:main/C").is_some());
}

#[test]
fn an_all_invalid_batch_is_400_with_counts() {
    let app = TestApp::start();
    let r = app.post_records(
        GL,
        &[
            json!({"code": "A"}),
            json!({"type": "VAT", "description_en": "x"}),
        ],
    );
    assert_eq!(r.status, 400);
    let b = r.json();
    assert_eq!(b["status"], "FAILED");
    assert_eq!(r.counts(), (2, 0, 2));
    assert_eq!(b["message"], "2 of 2 records failed validation");
    assert_eq!(
        r.errors(),
        vec![
            (0, "/type".into(), "required key [type] not found".into()),
            (
                0,
                "/description_en".into(),
                "required key [description_en] not found".into()
            ),
            (1, "/code".into(), "required key [code] not found".into()),
        ]
    );
    assert!(app.store().items().unwrap().is_empty());
}

#[test]
fn a_single_invalid_po_is_400_with_one_of_one() {
    let app = TestApp::start();
    let mut po = fixture("purchase-orders-v1", "minimal");
    po.as_object_mut().unwrap().remove("po_number");
    let r = app.post_records("/purchase-orders/v1", &[po]);
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["message"], "1 of 1 records failed validation");
    assert_eq!(
        (r.json()["total"].as_u64(), r.json()["failed"].as_u64()),
        (Some(1), Some(1))
    );
}

#[test]
fn payment_confirmations_are_all_or_nothing() {
    let app = TestApp::start();
    let good = fixture("payment-confirmation", "minimal");
    let mut bad = good.clone();
    bad["softco_case_id"] = json!("SC-2");
    bad["payment_date"] = json!("01/02/2024");
    bad["voucher_number"] = json!("");
    let r = app.post_records("/payment-confirmation/v1", &[good.clone(), bad]);
    assert_eq!(r.status, 400, "{}", r.text);
    let b = r.json();
    assert_eq!(b["status"], "FAILED");
    assert_eq!(r.counts(), (0, 0, 0));
    assert_eq!(
        b["message"],
        "No items could be processed as the structure was invalid."
    );
    assert_eq!(
        r.errors(),
        vec![
            (
                1,
                "/voucher_number".into(),
                r#"string "" is too short (length: 0, required minimum: 1)"#.into()
            ),
            (
                1,
                "/payment_date".into(),
                r#"string "01/02/2024" does not match pattern "^\d{4}-\d{2}-\d{2}$""#.into()
            ),
        ]
    );
    assert!(
        app.store().items().unwrap().is_empty(),
        "nothing of the batch is queued"
    );
    let r = app.post_records("/payment-confirmation/v1", &[good]);
    assert_eq!(r.status, 202);
}

#[test]
fn errors_are_ordered_by_index_then_document_order() {
    let app = TestApp::start();
    let rec: Value = serde_json::from_str(
        r#"{"end_date":"2024-13-01","zzz":1,"code":5,"description_en":"","type":"X","start_date":null}"#,
    )
    .unwrap();
    let r = app.post_records(GL, &[gl("OK"), rec]);
    assert_eq!(r.status, 207);
    let paths: Vec<String> = r
        .errors()
        .into_iter()
        .map(|(i, p, _)| format!("{i}{p}"))
        .collect();
    assert_eq!(
        paths,
        [
            "1/end_date",
            "1/zzz",
            "1/code",
            "1/description_en",
            "1/type",
            "1/start_date"
        ]
    );
}

#[test]
fn at_most_1000_error_entries_and_a_last_one_saying_how_many_were_left_out() {
    let app = TestApp::start();
    let records: Vec<Value> = (0..1200)
        .map(|i| json!({"code": format!("C{i}"), "type": "VAT"}))
        .collect();
    let r = app.post_records(GL, &records);
    assert_eq!(r.status, 400);
    let errors = r.errors();
    assert_eq!(errors.len(), 1001);
    assert_eq!(
        errors[999],
        (
            999,
            "/description_en".into(),
            "required key [description_en] not found".into()
        )
    );
    assert_eq!(errors[1000].2, "200 more error(s) not shown");
    assert_eq!(
        r.json()["failed"],
        1200,
        "failed counts every failing record"
    );
}

#[test]
fn two_records_with_one_key_in_a_batch_both_succeed_and_the_later_wins() {
    let app = TestApp::start();
    let mut later = gl("DUP");
    later["description_en"] = json!("the later one");
    let r = app.post_records(GL, &[gl("DUP"), later]);
    assert_eq!(r.status, 202);
    assert_eq!(r.json()["succeeded"], 2);
    let items = app.store().items().unwrap();
    assert_eq!(items.len(), 1, "D16");
    assert!(
        items[0]
            .1
            .xml
            .contains("<description_en>the later one</description_en>")
    );
}
