//! Receipts of requests (D38): `GET /requests/<id>` on the intake listener and
//! `ap-intake status request <id>`, against the real service, a real SQLite queue and a real
//! HTTP listener standing in for the platform.
//!
//! - Every state a record of a receipt can be in: pending (the platform down), delivered
//!   (also a version replaced while on its way, D18), rejected with the platform's reason,
//!   superseded by a resend before delivery (D16), quarantined (a row that cannot be read
//!   back, D29), and a parked record dropped by an operator.
//! - Only the key that sent a request finds its receipt (another key and an unknown id: 404
//!   with the D5 short body); the path takes GET only (405); a reused `x-request-id` shows the
//!   latest request; a dry run leaves none.
//! - `[receipts] retention_days`: old receipts are pruned at start, fresh ones stay; zero
//!   keeps none.
//! - `ap-intake status request <id>` (text and `--json`) from a running service and from the
//!   data directory of a stopped one.

use crate::common;
use ap_intake::admin::{self, Request, Response};
use ap_intake::config::Config;
use ap_intake::queue::receipt::{ReceiptLine, RequestInfo};
use ap_intake::queue::sqlite::FILE_NAME;
use ap_intake::queue::{Mode, NewRecord, QueueKey, SqliteStore, State, Store, now_ms};
use common::receiver::{Receiver, gl_records, ok};
use common::setup::{PATIENCE, Setup};
use common::*;
use rusqlite::{Connection, params};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

const GL: &str = "/general-ledger-codes/v1";
const GL_ID: &str = "general-ledger-codes-v1";
/// Quick retries, so a platform is asked again within a fraction of a second.
const FAST: &str = "[delivery]\nbackoff_base_ms = 20\nbackoff_cap_ms = 100\ntimeout_secs = 5\n";
const WAIT: Duration = Duration::from_secs(20);
/// The name of [`KEY`] in the test config.
const KEY_NAME: &str = "all";
const DAY_MS: u64 = 24 * 3600 * 1000;

// ---------------------------------------------------------------------------------------
// Helpers

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into()
}

/// `GET http://addr/requests/<id>` with `key` as `x-api-key` (none when `None`).
fn receipt_at(addr: SocketAddr, id: &str, key: Option<&str>) -> Reply {
    let mut req = agent().get(&format!("http://{addr}/requests/{id}"));
    if let Some(k) = key {
        req = req.header("x-api-key", k);
    }
    let mut resp = req.call().unwrap();
    reply_of(&mut resp)
}

/// POSTs the envelope around `records` to `addr` with `key`, and `x-request-id` when given.
fn post_at(
    addr: SocketAddr,
    path: &str,
    records: &[Value],
    key: &str,
    request_id: Option<&str>,
) -> Reply {
    let mut req = agent()
        .post(&format!("http://{addr}{path}"))
        .header("Content-Type", "application/json")
        .header("x-api-key", key);
    if let Some(id) = request_id {
        req = req.header("x-request-id", id);
    }
    let mut resp = req.send(envelope(records).to_string()).unwrap();
    reply_of(&mut resp)
}

/// POSTs `records` as GL codes with [`KEY`], which must be accepted whole; the request id.
fn accepted(app: &TestApp, records: &[Value]) -> String {
    let r = app.post_records(GL, records);
    assert_eq!(r.status, 202, "{}", r.text);
    let id = r.json()["request_id"].as_str().unwrap().to_string();
    assert_eq!(r.header("x-request-id"), Some(id.as_str()), "{r:?}");
    id
}

/// The receipt of `id` for [`KEY`], which must be found.
fn receipt(app: &TestApp, id: &str) -> Value {
    let r = receipt_at(app.addr, id, Some(KEY));
    assert_eq!(r.status, 200, "GET /requests/{id}: {}", r.text);
    r.json()
}

/// Polls the receipt of `id` for [`KEY`] until `done` holds for it; fails naming `what` and
/// showing the last receipt.
fn receipt_until(app: &TestApp, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    let reached = wait_for(WAIT, || {
        last = receipt(app, id);
        done(&last)
    });
    assert!(reached, "within {WAIT:?}: {what}; last receipt:\n{last:#}");
    last
}

/// `(key, state)` of every record of a receipt, by index.
fn states(receipt: &Value) -> Vec<(String, String)> {
    records(receipt)
        .iter()
        .map(|r| {
            (
                r["key"].as_str().unwrap().to_string(),
                r["state"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn records(receipt: &Value) -> &Vec<Value> {
    receipt["records"]
        .as_array()
        .unwrap_or_else(|| panic!("no records in {receipt:#}"))
}

/// The record of a receipt with the queue key `key`.
fn record<'a>(receipt: &'a Value, key: &str) -> &'a Value {
    records(receipt)
        .iter()
        .find(|r| r["key"] == key)
        .unwrap_or_else(|| panic!("no {key} in {receipt:#}"))
}

/// `(key, state)` pairs for assertions.
fn expect(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, s)| (gl_key(k), (*s).to_string()))
        .collect()
}

/// An RFC 3339 time of a receipt as unix ms.
fn ms(v: &Value) -> u64 {
    let text = v
        .as_str()
        .unwrap_or_else(|| panic!("not an RFC 3339 time: {v}"));
    assert!(text.ends_with('Z'), "not in UTC: {text}");
    let t = humantime::parse_rfc3339(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    u64::try_from(t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

/// Asserts the body is a receipt of `id` through GL codes, with exactly the fields D38
/// names, received between `from` and `to` (unix ms).
fn assert_head(receipt: &Value, id: &str, from: u64, to: u64) {
    let mut fields: Vec<&str> = receipt
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {receipt}"))
        .keys()
        .map(String::as_str)
        .collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        ["interface", "received_at", "records", "request_id"],
        "{receipt:#}"
    );
    assert_eq!(receipt["request_id"], id, "{receipt:#}");
    assert_eq!(receipt["interface"], GL, "{receipt:#}");
    let at = ms(&receipt["received_at"]);
    assert!(
        (from..=to).contains(&at),
        "received_at {at} not within {from}..={to}: {receipt:#}"
    );
    for r in records(receipt) {
        let mut fields: Vec<&str> = r.as_object().unwrap().keys().map(String::as_str).collect();
        fields.sort_unstable();
        assert_eq!(
            fields,
            ["index", "key", "reason", "state", "updated_at"],
            "{receipt:#}"
        );
    }
}

/// The queue is empty of pending records.
fn nothing_pending(app: &TestApp) -> bool {
    app.store().keys(State::Pending, None).unwrap().is_empty()
}

/// A platform that refuses the GL code `BAD` with 422 and takes everything else.
fn refusing_bad() -> Receiver {
    let platform = Receiver::start();
    platform.answer(|r| {
        if r.body.contains("<code>BAD</code>") {
            (422, vec![], "unknown cost centre".into())
        } else {
            ok()
        }
    });
    platform
}

/// An operator command over the running service's admin socket.
fn operator(app: &TestApp, req: &Request) -> Response {
    admin::query(&app.locations(), req).unwrap()
}

/// Waits (a few ms at most) until the wall clock has passed `t`: times taken after this are
/// later than `t`, not equal to it.
fn past(t: u64) {
    eventually("the clock moves on", Duration::from_secs(1), || {
        now_ms() > t
    });
}

/// The D5 short failure body: exactly `status`, `message` and the request's own id.
fn assert_short_failure(r: &Reply, status: u16, message: &str) {
    assert_eq!(r.status, status, "{}", r.text);
    assert_eq!(r.header("content-type"), Some("application/json"), "{r:?}");
    let id = r
        .header("x-request-id")
        .unwrap_or_else(|| panic!("no x-request-id: {r:?}"));
    assert_eq!(
        r.json(),
        json!({"status": "FAILED", "message": message, "request_id": id}),
        "{r:?}"
    );
}

fn no_receipt_message(id: &str) -> String {
    format!(
        "no receipt of request {id} for this API key (unknown id, sent with another key, or \
         older than the retention)"
    )
}

// ---------------------------------------------------------------------------------------
// States

/// D38: a record queued while the platform is down is `pending`, with the time it was
/// stored and no reason (not even after failed attempts, which are the platform's fault,
/// not the record's).
#[test]
fn d38_a_record_is_pending_while_the_platform_is_down() {
    let app = TestApp::start(); // delivers to a closed port
    let from = now_ms();
    let id = accepted(&app, &[gl("4000"), gl("4010")]);
    let to = now_ms();
    let r = receipt_at(app.addr, &id, Some(KEY));
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("content-type"), Some("application/json"), "{r:?}");
    let body = r.json();
    assert_head(&body, &id, from, to);
    assert_eq!(
        states(&body),
        expect(&[("4000", "pending"), ("4010", "pending")])
    );
    for (i, rec) in records(&body).iter().enumerate() {
        assert_eq!(rec["index"], i, "{body:#}");
        assert!(rec["reason"].is_null(), "{body:#}");
        let at = ms(&rec["updated_at"]);
        assert!((from..=to).contains(&at), "updated_at {at}: {body:#}");
    }

    // Attempts fail (connection refused): still pending, still no reason.
    eventually("a failed delivery attempt", WAIT, || {
        app.item(&gl_key("4000")).is_some_and(|i| i.attempts >= 1)
    });
    let body = receipt(&app, &id);
    assert_eq!(
        states(&body),
        expect(&[("4000", "pending"), ("4010", "pending")])
    );
    assert!(
        records(&body).iter().all(|r| r["reason"].is_null()),
        "{body:#}"
    );
}

/// D38, D18: records the platform took are `delivered`, at the time it took them.
#[test]
fn d38_records_the_platform_took_are_delivered() {
    let platform = Receiver::start();
    let app = TestApp::delivering_to(&platform.url(), FAST);
    let from = now_ms();
    let id = accepted(&app, &[gl("5000"), gl("5010"), gl("5020")]);
    let body = receipt_until(&app, &id, "all three delivered", |b| {
        states(b).iter().all(|(_, s)| s == "delivered")
    });
    let to = now_ms();
    assert_eq!(
        states(&body),
        expect(&[
            ("5000", "delivered"),
            ("5010", "delivered"),
            ("5020", "delivered")
        ])
    );
    assert_head(&body, &id, from, to);
    let received = ms(&body["received_at"]);
    for rec in records(&body) {
        assert!(rec["reason"].is_null(), "{body:#}");
        let at = ms(&rec["updated_at"]);
        assert!((received..=to).contains(&at), "updated_at {at}: {body:#}");
    }
    let delivered: Vec<String> = platform
        .delivered()
        .iter()
        .flat_map(|d| gl_records(&d.body))
        .map(|(code, _)| code)
        .collect();
    assert_eq!(delivered, ["5000", "5010", "5020"]);
    assert!(nothing_pending(&app));
}

/// D38, D18: a version replaced while it was on its way to the platform was still taken by
/// it: its receipt says `delivered`, and the newer version's receipt says `delivered` once
/// that one is delivered too.
#[test]
fn d38_a_version_replaced_while_on_its_way_is_delivered() {
    let platform = Receiver::start();
    let held = platform.hold();
    let app = TestApp::delivering_to(&platform.url(), FAST);
    let first = accepted(&app, &[gl("V")]);
    eventually("version 1 is on the wire", WAIT, || held.arrived() == 1);
    let second = accepted(&app, &[gl("V")]);
    held.release();
    eventually("both versions delivered", WAIT, || {
        nothing_pending(&app) && held.arrived() >= 2
    });
    assert_eq!(
        states(&receipt(&app, &first)),
        expect(&[("V", "delivered")])
    );
    assert_eq!(
        states(&receipt(&app, &second)),
        expect(&[("V", "delivered")])
    );
}

/// D38, D18: a record the platform refused (422) is `rejected` with the platform's reason;
/// the others of the request are delivered.
#[test]
fn d38_a_record_the_platform_refused_is_rejected_with_its_reason() {
    let platform = refusing_bad();
    let app = TestApp::delivering_to(&platform.url(), FAST);
    let id = accepted(&app, &[gl("G1"), gl("BAD"), gl("G2")]);
    let body = receipt_until(&app, &id, "G1 and G2 delivered, BAD rejected", |b| {
        states(b)
            == expect(&[
                ("G1", "delivered"),
                ("BAD", "rejected"),
                ("G2", "delivered"),
            ])
    });
    let bad = record(&body, &gl_key("BAD"));
    assert_eq!(bad["index"], 1, "{body:#}");
    assert_eq!(bad["reason"], "HTTP 422: unknown cost centre", "{body:#}");
    assert!(
        ms(&bad["updated_at"]) >= ms(&body["received_at"]),
        "{body:#}"
    );
    for good in ["G1", "G2"] {
        assert!(record(&body, &gl_key(good))["reason"].is_null(), "{body:#}");
    }
    assert_eq!(
        app.item(&gl_key("BAD")).map(|i| i.state),
        Some(State::Rejected)
    );
}

/// D38: `updated_at` is when the record reached its state. A record rejected well after it
/// was stored (the platform first answered 503) shows the time of the rejection, as a
/// delivered or dropped one shows the time of its delivery or drop.
#[test]
fn d38_a_rejected_record_shows_when_it_was_rejected() {
    let platform = Receiver::start();
    let refused_at = Arc::new(AtomicU64::new(0));
    let calls = Arc::new(AtomicUsize::new(0));
    let (at, n) = (Arc::clone(&refused_at), Arc::clone(&calls));
    platform.answer(move |_| {
        if n.fetch_add(1, Ordering::Relaxed) == 0 {
            return (503, vec![], "busy".into());
        }
        at.store(now_ms(), Ordering::Relaxed);
        (422, vec![], "unknown cost centre".into())
    });
    let app = TestApp::delivering_to(&platform.url(), FAST);
    let id = accepted(&app, &[gl("LATE")]);
    let body = receipt_until(&app, &id, "LATE rejected", |b| {
        states(b) == expect(&[("LATE", "rejected")])
    });
    let refused = refused_at.load(Ordering::Relaxed);
    let received = ms(&body["received_at"]);
    assert!(refused > received, "the refusal came after the request");
    let at = ms(&record(&body, &gl_key("LATE"))["updated_at"]);
    assert!(
        at >= refused,
        "updated_at {at} is before the platform refused the record at {refused} (the request \
         was received at {received}): {body:#}"
    );
}

/// D38, D16: a resend of the same key before delivery replaces the record: the first
/// request's receipt says `superseded` (and keeps saying it once the newer version is
/// delivered), the second's `pending` and then `delivered`.
///
/// The platform refuses (503) every document that holds S1's first version, also once it
/// is open: the lane may have taken that version before the resend replaced it, and a
/// document taken then and answered 200 after the opening was really delivered (D18; the
/// receipt then says so, `d38_a_version_replaced_while_on_its_way_is_delivered`). Without
/// this the test raced the lane: about 1 run in 30 under load, and every run with a platform
/// that takes 40 ms to answer, read S1 `delivered`, rightly.
#[test]
fn d38_a_record_replaced_before_delivery_is_superseded() {
    let platform = Receiver::start();
    let open = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&open);
    platform.answer(move |r| {
        let old_s1 = gl_records(&r.body)
            .iter()
            .any(|(code, text)| code == "S1" && text != "v2");
        if flag.load(Ordering::Relaxed) && !old_s1 {
            ok()
        } else {
            (503, vec![], "platform busy".into())
        }
    });
    let app = TestApp::delivering_to(&platform.url(), FAST);
    let first = accepted(&app, &[gl("S1"), gl("S2")]);
    past(app.item(&gl_key("S1")).unwrap().updated_at_ms);
    let replaced_from = now_ms();
    let second = accepted(
        &app,
        &[json!({"code": "S1", "type": "VAT", "description_en": "v2"})],
    );
    let replaced_to = now_ms();

    let body = receipt(&app, &first);
    assert_eq!(
        states(&body),
        expect(&[("S1", "superseded"), ("S2", "pending")])
    );
    let s1 = record(&body, &gl_key("S1"));
    assert!(s1["reason"].is_null(), "{body:#}");
    let at = ms(&s1["updated_at"]);
    assert!(
        (replaced_from..=replaced_to).contains(&at),
        "superseded at {at}, replaced within {replaced_from}..={replaced_to}: {body:#}"
    );
    assert_eq!(
        states(&receipt(&app, &second)),
        expect(&[("S1", "pending")])
    );

    open.store(true, Ordering::Relaxed);
    receipt_until(&app, &second, "the newer version delivered", |b| {
        states(b) == expect(&[("S1", "delivered")])
    });
    receipt_until(&app, &first, "S2 delivered, S1 still superseded", |b| {
        states(b) == expect(&[("S1", "superseded"), ("S2", "delivered")])
    });
    let accepted_s1: Vec<(String, String)> = platform
        .delivered()
        .iter()
        .flat_map(|d| gl_records(&d.body))
        .filter(|(code, _)| code == "S1")
        .collect();
    assert_eq!(
        accepted_s1,
        [("S1".to_string(), "v2".to_string())],
        "the platform took S1 once, in its newer version"
    );
}

/// D38, D29: a row made unreadable on the stopped service's file (its XML no longer UTF-8)
/// is quarantined when the service meets it: its receipt says `quarantined` with the
/// queue's reason; the request's other records are delivered. Dropped by an operator, it
/// keeps saying `quarantined`, its reason ending "; dropped by an operator".
#[test]
fn d38_an_unreadable_record_is_quarantined_with_the_reason() {
    let app = TestApp::start(); // the platform down: everything stays pending
    let id = accepted(&app, &[gl("Q1"), gl("Q2"), gl("Q3")]);
    let dir = app.stop();
    // As in `durability::damage`: on the stopped service's file, the row's XML keeps its
    // text but ends in a byte that is not UTF-8.
    let data = dir.path().join("data");
    let conn = Connection::open(data.join(FILE_NAME)).unwrap();
    let changed = conn
        .execute(
            "UPDATE item SET xml = CAST(xml || X'FF' AS TEXT) WHERE key = ?1",
            params![QueueKey::parse(&gl_key("Q2")).unwrap().as_bytes()],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(conn);

    let platform = Receiver::start();
    let app = TestApp::start_config(dir, config_in(&data, &platform.url(), FAST));
    let body = receipt_until(&app, &id, "Q1 and Q3 delivered, Q2 quarantined", |b| {
        states(b)
            == expect(&[
                ("Q1", "delivered"),
                ("Q2", "quarantined"),
                ("Q3", "delivered"),
            ])
    });
    let q2 = record(&body, &gl_key("Q2"));
    let reason = q2["reason"]
        .as_str()
        .unwrap_or_else(|| panic!("a quarantined record has a reason: {body:#}"))
        .to_string();
    assert!(
        reason.starts_with("quarantined: ") && reason.len() > "quarantined: ".len(),
        "{body:#}"
    );
    assert!(q2["updated_at"].is_string(), "{body:#}");
    assert!(
        !platform
            .received()
            .iter()
            .flat_map(|(r, _)| gl_records(&r.body))
            .any(|(code, _)| code == "Q2"),
        "the unreadable record reached the platform"
    );

    // Dropped by an operator: still quarantined, the reason says who removed it.
    let from = now_ms();
    let dropped = operator(&app, &Request::Drop { key: gl_key("Q2") });
    let to = now_ms();
    assert_eq!(dropped, Response::Dropped(true));
    assert!(app.item(&gl_key("Q2")).is_none());
    let body = receipt(&app, &id);
    assert_eq!(
        states(&body),
        expect(&[
            ("Q1", "delivered"),
            ("Q2", "quarantined"),
            ("Q3", "delivered"),
        ])
    );
    let q2 = record(&body, &gl_key("Q2"));
    assert_eq!(
        q2["reason"],
        format!("{reason}; dropped by an operator"),
        "{body:#}"
    );
    let at = ms(&q2["updated_at"]);
    assert!((from..=to).contains(&at), "dropped at {at}: {body:#}");
}

/// D38, D18: a rejected record an operator drops (`ap-intake drop KEY`, over the admin
/// socket) keeps the state it was dropped from, `rejected`, with the platform's reason and
/// "; dropped by an operator", at the time of the drop.
#[test]
fn d38_a_record_dropped_by_an_operator_says_so() {
    let platform = refusing_bad();
    let app = TestApp::delivering_to(&platform.url(), FAST);
    let id = accepted(&app, &[gl("BAD"), gl("G1")]);
    receipt_until(&app, &id, "BAD rejected, G1 delivered", |b| {
        states(b) == expect(&[("BAD", "rejected"), ("G1", "delivered")])
    });
    let from = now_ms();
    let dropped = operator(&app, &Request::Drop { key: gl_key("BAD") });
    let to = now_ms();
    assert_eq!(dropped, Response::Dropped(true));
    assert!(app.item(&gl_key("BAD")).is_none(), "dropped for good");
    let body = receipt(&app, &id);
    assert_eq!(
        states(&body),
        expect(&[("BAD", "rejected"), ("G1", "delivered")])
    );
    let bad = record(&body, &gl_key("BAD"));
    assert_eq!(
        bad["reason"], "HTTP 422: unknown cost centre; dropped by an operator",
        "{body:#}"
    );
    let at = ms(&bad["updated_at"]);
    assert!((from..=to).contains(&at), "dropped at {at}: {body:#}");
    assert!(record(&body, &gl_key("G1"))["reason"].is_null(), "{body:#}");
}

// ---------------------------------------------------------------------------------------
// Who may read a receipt, and how

/// D38, D20, D5: only the key that sent the request finds its receipt. Another valid key
/// gets 404 with the short body, as for an id never sent; no key at all is 401.
#[test]
fn d38_another_key_gets_404() {
    let app = TestApp::start();
    let id = accepted(&app, &[gl("K1")]);
    assert_eq!(receipt_at(app.addr, &id, Some(KEY)).status, 200);
    let other = receipt_at(app.addr, &id, Some(GL_ONLY_KEY));
    assert_short_failure(&other, 404, &no_receipt_message(&id));
    assert_ne!(
        other.header("x-request-id"),
        Some(id.as_str()),
        "the 404 carries the id of the GET, not of the request asked about"
    );
    let anonymous = receipt_at(app.addr, &id, None);
    assert_eq!(anonymous.status, 401, "{}", anonymous.text);
    assert!(!anonymous.text.contains("K1"), "{}", anonymous.text);
    let wrong = receipt_at(app.addr, &id, Some("not-a-configured-key"));
    assert_eq!(wrong.status, 401, "{}", wrong.text);
}

/// D38, D5: an id that was never sent is 404 with the short body naming it.
#[test]
fn d38_an_unknown_id_gets_404() {
    let app = TestApp::start();
    accepted(&app, &[gl("U1")]);
    let r = receipt_at(app.addr, "never-sent-4711", Some(KEY));
    assert_short_failure(&r, 404, &no_receipt_message("never-sent-4711"));
    // An id no request can have (D4: at most 64 characters) is not looked up either.
    let long = "x".repeat(80);
    let r = receipt_at(app.addr, &long, Some(KEY));
    assert_short_failure(&r, 404, &no_receipt_message(&"x".repeat(64)));
}

/// D38, D5: `/requests/<id>` takes GET and HEAD: POST (and DELETE) are 405 with
/// `Allow: GET, HEAD` and the short body, and leave the receipt as it was; HEAD answers as GET
/// does, without the body.
#[test]
fn d38_post_to_a_receipt_is_405() {
    let app = TestApp::start();
    let id = accepted(&app, &[gl("M1")]);
    let r = app.post_with(
        &format!("/requests/{id}"),
        "{}",
        &[("x-api-key", KEY), ("Content-Type", "application/json")],
    );
    assert_short_failure(&r, 405, "method POST is not allowed; use GET, HEAD");
    assert_eq!(r.header("allow"), Some("GET, HEAD"), "{r:?}");
    let mut resp = agent()
        .delete(&app.url(&format!("/requests/{id}")))
        .header("x-api-key", KEY)
        .call()
        .unwrap();
    let r = reply_of(&mut resp);
    assert_short_failure(&r, 405, "method DELETE is not allowed; use GET, HEAD");
    assert_eq!(r.header("allow"), Some("GET, HEAD"), "{r:?}");
    let mut resp = agent()
        .head(&app.url(&format!("/requests/{id}")))
        .header("x-api-key", KEY)
        .call()
        .unwrap();
    let r = reply_of(&mut resp);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.text, "", "HEAD has no body");
    assert_eq!(states(&receipt(&app, &id)), expect(&[("M1", "pending")]));
}

/// D38, D4: a client-supplied `x-request-id` is the request's id; a client that reuses it
/// with the same key gets the receipt of its latest request only, never a mixture. Another
/// key using the same id has a receipt of its own.
#[test]
fn d38_a_reused_request_id_shows_the_latest_request_only() {
    let app = TestApp::start();
    let id = "erp-batch-42";
    let first = post_at(app.addr, GL, &[gl("R1"), gl("R2")], KEY, Some(id));
    assert_eq!(first.status, 202, "{}", first.text);
    assert_eq!(first.json()["request_id"], id);
    assert_eq!(first.header("x-request-id"), Some(id));
    assert_eq!(
        states(&receipt(&app, id)),
        expect(&[("R1", "pending"), ("R2", "pending")])
    );

    let second = post_at(app.addr, GL, &[gl("R3")], KEY, Some(id));
    assert_eq!(second.status, 202, "{}", second.text);
    assert_eq!(second.json()["request_id"], id);
    let body = receipt(&app, id);
    assert_eq!(states(&body), expect(&[("R3", "pending")]));
    assert_eq!(records(&body)[0]["index"], 0, "{body:#}");

    // The other key's request with the same id: its own receipt, the first key's unchanged.
    let other = post_at(app.addr, GL, &[gl("R4")], GL_ONLY_KEY, Some(id));
    assert_eq!(other.status, 202, "{}", other.text);
    let r = receipt_at(app.addr, id, Some(GL_ONLY_KEY));
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(states(&r.json()), expect(&[("R4", "pending")]));
    assert_eq!(states(&receipt(&app, id)), expect(&[("R3", "pending")]));
    let all = app.store().receipts(id, None).unwrap();
    let mut keys: Vec<&str> = all.iter().map(|r| r.api_key.as_str()).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["all", "gl-only"]);
}

/// D38: a receipt belongs to a request that queued records. A later request with the same
/// id that queued none (400) has no receipt of its own and leaves the earlier one, whose
/// records are queued all the same.
#[test]
fn d38_a_refused_request_leaves_the_earlier_receipt_of_its_id() {
    let app = TestApp::start();
    let id = "erp-batch-43";
    let first = post_at(app.addr, GL, &[gl("E1")], KEY, Some(id));
    assert_eq!(first.status, 202, "{}", first.text);
    let received = ms(&receipt_at(app.addr, id, Some(KEY)).json()["received_at"]);
    let invalid = json!({"code": "E2"}); // type and description missing
    let second = post_at(app.addr, GL, &[invalid], KEY, Some(id));
    assert_eq!(second.status, 400, "{}", second.text);
    assert_eq!(second.json()["request_id"], id);
    let r = receipt_at(app.addr, id, Some(KEY));
    assert_eq!(r.status, 200, "{}", r.text);
    let body = r.json();
    assert_eq!(ms(&body["received_at"]), received, "{body:#}");
    assert_eq!(states(&body), expect(&[("E1", "pending")]), "{body:#}");
}

/// D38: a dry run (`POST /validate/<path>`) queues nothing and leaves no receipt, under the
/// id the service made nor under one the client gave.
#[test]
fn d38_a_dry_run_leaves_no_receipt() {
    let app = TestApp::start();
    let body = envelope(&[gl("D1"), gl("D2")]).to_string();
    let made = app.post(&format!("/validate{GL}"), &body);
    assert_eq!(made.status, 200, "{}", made.text);
    let made_id = made.json()["request_id"].as_str().unwrap().to_string();
    let given = app.post_with(
        &format!("/validate{GL}"),
        &body,
        &[
            ("x-api-key", KEY),
            ("Content-Type", "application/json"),
            ("x-request-id", "dry-run-1"),
        ],
    );
    assert_eq!(given.status, 200, "{}", given.text);
    assert_eq!(given.json()["request_id"], "dry-run-1");
    for id in [made_id.as_str(), "dry-run-1"] {
        let r = receipt_at(app.addr, id, Some(KEY));
        assert_short_failure(&r, 404, &no_receipt_message(id));
        assert!(app.store().receipts(id, None).unwrap().is_empty(), "{id}");
    }
    assert!(app.store().items().unwrap().is_empty(), "nothing queued");
    // The same records sent for real do get one.
    let id = accepted(&app, &[gl("D1"), gl("D2")]);
    assert_eq!(
        states(&receipt(&app, &id)),
        expect(&[("D1", "pending"), ("D2", "pending")])
    );
}

// ---------------------------------------------------------------------------------------
// Retention

/// Writes, on a stopped queue in `data`, a receipt of `id` sent by [`KEY`] at
/// `received_at_ms` for the GL code `code` (queued as pending).
fn write_receipt(data: &Path, id: &str, code: &str, received_at_ms: u64) {
    let store = SqliteStore::open(data, Mode::Serve, 0).unwrap();
    let request = Arc::new(RequestInfo {
        request_id: id.to_string(),
        api_key: KEY_NAME.to_string(),
        interface: GL_ID,
        received_at_ms,
        nonce: received_at_ms,
    });
    let record = NewRecord {
        key: QueueKey::parse(&gl_key(code)).unwrap(),
        interface: GL_ID,
        xml: format!(
            "<gl_code><code>{code}</code><type>VAT</type><description_en>x</description_en>\
             </gl_code>"
        ),
        receipt: Some(ReceiptLine { request, index: 0 }),
    };
    store.upsert(&[record], received_at_ms).unwrap();
    store.close().unwrap();
}

/// A config delivering to `platform_url` with `extra_tables`, its data directory `data`.
fn config_in(data: &Path, platform_url: &str, extra_tables: &str) -> Config {
    let text = config_for(data, "", platform_url, extra_tables);
    Config::parse(&text, Path::new("test.toml")).unwrap()
}

/// D38: with `retention_days = 7`, a receipt of a request received 8 days ago is removed
/// when the service starts; one of 6 days ago and a new one stay. The queued records
/// themselves stay queued: pruning forgets receipts, not records.
#[test]
fn d38_receipts_older_than_the_retention_are_pruned_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let now = now_ms();
    write_receipt(&data, "eight-days-old", "OLD", now - 8 * DAY_MS);
    write_receipt(&data, "six-days-old", "RECENT", now - 6 * DAY_MS);
    let app = TestApp::start_config(
        dir,
        config_in(&data, NOWHERE, "[receipts]\nretention_days = 7\n"),
    );
    eventually(
        "the receipt of 8 days ago is pruned (GET answers 404)",
        WAIT,
        || receipt_at(app.addr, "eight-days-old", Some(KEY)).status == 404,
    );
    assert_short_failure(
        &receipt_at(app.addr, "eight-days-old", Some(KEY)),
        404,
        &no_receipt_message("eight-days-old"),
    );
    let recent = receipt(&app, "six-days-old");
    assert_eq!(states(&recent), expect(&[("RECENT", "pending")]));
    let received = ms(&recent["received_at"]);
    assert_eq!(received, now - 6 * DAY_MS, "{recent:#}");
    let id = accepted(&app, &[gl("NEW")]);
    assert_eq!(states(&receipt(&app, &id)), expect(&[("NEW", "pending")]));
    for code in ["OLD", "RECENT", "NEW"] {
        assert_eq!(
            app.item(&gl_key(code)).map(|i| i.state),
            Some(State::Pending),
            "{code} is still queued"
        );
    }
}

/// D38: `retention_days = 0` keeps no receipt: one already in the queue is removed at
/// start, and a new request gets none (404 at once), while its records are queued.
#[test]
fn d38_retention_zero_keeps_no_receipt() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    write_receipt(&data, "a-minute-old", "MIN", now_ms() - 60_000);
    let app = TestApp::start_config(
        dir,
        config_in(&data, NOWHERE, "[receipts]\nretention_days = 0\n"),
    );
    eventually(
        "the existing receipt is pruned (GET answers 404)",
        WAIT,
        || receipt_at(app.addr, "a-minute-old", Some(KEY)).status == 404,
    );
    let id = accepted(&app, &[gl("Z1")]);
    assert_short_failure(
        &receipt_at(app.addr, &id, Some(KEY)),
        404,
        &no_receipt_message(&id),
    );
    assert!(app.store().receipts(&id, None).unwrap().is_empty());
    assert_eq!(
        app.item(&gl_key("Z1")).map(|i| i.state),
        Some(State::Pending),
        "the record itself is queued"
    );
}

// ---------------------------------------------------------------------------------------
// `ap-intake status request <id>`

/// The whitespace-separated columns of the text receipt's row of `key`.
fn row(text: &str, key: &str) -> Vec<String> {
    text.lines()
        .find(|l| l.split_whitespace().nth(3) == Some(key))
        .unwrap_or_else(|| panic!("no row for {key} in:\n{text}"))
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Checks the text of `status request` against the receipts the HTTP endpoint shows: a
/// head per receipt (id, received_at, path, key name), then a row per record.
fn assert_text_matches(text: &str, id: &str, shown: &[(&str, &Value)]) {
    let heads: Vec<&str> = text.lines().filter(|l| l.starts_with("request ")).collect();
    assert_eq!(heads.len(), shown.len(), "{text}");
    for ((key_name, body), head) in shown.iter().zip(&heads) {
        let words: Vec<&str> = head.split_whitespace().collect();
        assert_eq!(
            words,
            [
                "request",
                id,
                "received",
                body["received_at"].as_str().unwrap(),
                GL,
                "API",
                "key",
                key_name
            ],
            "{text}"
        );
        for rec in records(body) {
            let key = rec["key"].as_str().unwrap();
            let cols = row(text, key);
            assert_eq!(cols[0], rec["index"].to_string(), "{text}");
            assert_eq!(cols[1], rec["state"].as_str().unwrap(), "{text}");
            assert_eq!(cols[2], rec["updated_at"].as_str().unwrap_or("-"), "{text}");
            match rec["reason"].as_str() {
                Some(reason) => assert!(
                    text.lines()
                        .any(|l| l.contains(key) && l.ends_with(&format!("({reason})"))),
                    "no reason {reason:?} for {key}:\n{text}"
                ),
                None => assert_eq!(cols.len(), 4, "{text}"),
            }
        }
    }
}

/// D38, D22: `ap-intake status request <id>` shows, from the running service and from the
/// data directory of a stopped one, the receipts GET /requests/<id> shows: as text, and with
/// `--json` as an array of the same bodies, one per key that used the id. An id without a
/// receipt exits 1 with a message.
#[test]
fn d38_status_request_shows_the_receipts_running_and_stopped() {
    let platform = refusing_bad();
    let setup = Setup::new("", &platform.url());
    let mut service = setup.serve();
    let id = "erp-order-7";
    let r = post_at(service.addr, GL, &[gl("T1"), gl("BAD")], KEY, Some(id));
    assert_eq!(r.status, 202, "{}", r.text);
    let r = post_at(service.addr, GL, &[gl("T2")], GL_ONLY_KEY, Some(id));
    assert_eq!(r.status, 202, "{}", r.text);

    let settled = |key: &str, want: &[(&str, &str)]| -> Value {
        let mut last = Value::Null;
        let reached = wait_for(PATIENCE, || {
            let r = receipt_at(service.addr, id, Some(key));
            if r.status != 200 {
                return false;
            }
            last = r.json();
            states(&last) == expect(want)
        });
        assert!(reached, "receipt for {key}: want {want:?}, last:\n{last:#}");
        last
    };
    let mine = settled(KEY, &[("T1", "delivered"), ("BAD", "rejected")]);
    let theirs = settled(GL_ONLY_KEY, &[("T2", "delivered")]);
    assert_eq!(
        record(&mine, &gl_key("BAD"))["reason"],
        "HTTP 422: unknown cost centre"
    );

    let text = setup.ok("status", &["request", id]);
    assert_text_matches(&text, id, &[("all", &mine), ("gl-only", &theirs)]);
    let json = setup.ok("status", &["request", id, "--json"]);
    let array: Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    assert_eq!(array, json!([mine, theirs]), "{json}");

    let unknown = setup.run("status", &["request", "never-sent"]);
    assert_eq!(unknown.status.code(), Some(1), "{unknown:?}");
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(stderr.contains("no receipt of that request"), "{stderr}");
    let unknown = setup.run("status", &["request", "never-sent", "--json"]);
    assert_eq!(unknown.status.code(), Some(1), "{unknown:?}");

    // Stopped: the same from the data directory.
    let status = service.terminate();
    assert!(status.success(), "{status:?}\n{}", service.stderr());
    assert!(!setup.data_dir().join("admin.sock").exists());
    assert_eq!(setup.ok("status", &["request", id]), text);
    let json_stopped = setup.ok("status", &["request", id, "--json"]);
    let array_stopped: Value = serde_json::from_str(&json_stopped).unwrap();
    assert_eq!(array_stopped, array, "{json_stopped}");
    let unknown = setup.run("status", &["request", "never-sent"]);
    assert_eq!(unknown.status.code(), Some(1), "{unknown:?}");
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(stderr.contains("no receipt of that request"), "{stderr}");
}
