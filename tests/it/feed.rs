//! The outcome feed (D48), `GET /requests`, against the real service delivering to a real
//! HTTP listener standing in for the platform, on SQLite and (with `AP_INTAKE_TEST_PG`) on
//! PostgreSQL:
//!
//! - an ERP polls what the platform refused and took, a page at a time, and goes on from its
//!   cursor after the service restarts, seeing every change once, in order: delivered,
//!   rejected with the platform's reason, superseded by a resend, rejected again;
//! - a key never sees another key's records;
//! - a bad limit, cursor, state, interface or parameter gets 400 with its documented text;
//!   no credential 401; a method other than GET or HEAD 405.

use crate::common;
use ap_intake::config::Config;
use common::receiver::{Receiver, ok};
use common::*;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

const GL: &str = "/general-ledger-codes/v1";
/// Quick retries, so a platform is asked again within a fraction of a second.
const FAST: &str = "[delivery]\nbackoff_base_ms = 20\nbackoff_cap_ms = 100\ntimeout_secs = 5\n";
const WAIT: Duration = Duration::from_secs(20);

/// `GET /requests?<query>` with `key`.
fn feed(app: &TestApp, key: Option<&str>, query: &str) -> Reply {
    let mut req = agent().get(&app.url(&format!("/requests?{query}")));
    if let Some(k) = key {
        req = req.header("x-api-key", k);
    }
    let mut resp = req.call().unwrap();
    reply_of(&mut resp)
}

/// `(request id, index, code, state, reason)` of a listed record.
type Seen = (String, u64, String, String, Option<String>);

fn seen_of(r: &Value) -> Seen {
    let key = r["key"].as_str().unwrap();
    (
        r["request_id"].as_str().unwrap().to_string(),
        r["index"].as_u64().unwrap(),
        key.rsplit('/').next().unwrap().to_string(),
        r["state"].as_str().unwrap().to_string(),
        r["reason"].as_str().map(str::to_string),
    )
}

/// Pages through `key`'s feed from `after` with `limit`, until `n` records have come (or
/// [`WAIT`] has passed); what came and the cursor to go on from. Every record has exactly
/// the fields D48 names.
fn poll(app: &TestApp, key: &str, after: &str, limit: usize, n: usize) -> (Vec<Seen>, String) {
    let mut cursor = after.to_string();
    let mut all = Vec::new();
    let until = std::time::Instant::now() + WAIT;
    loop {
        let query = match cursor.as_str() {
            "" => format!("limit={limit}"),
            c => format!("limit={limit}&after={c}"),
        };
        let r = feed(app, Some(key), &query);
        assert_eq!(r.status, 200, "{}", r.text);
        let body = r.json();
        let records = body["records"].as_array().unwrap();
        assert!(records.len() <= limit, "{body:#}");
        for rec in records {
            let mut fields: Vec<&str> = rec
                .as_object()
                .unwrap()
                .keys()
                .map(|k| k.as_str())
                .collect();
            fields.sort_unstable();
            assert_eq!(
                fields,
                [
                    "index",
                    "interface",
                    "key",
                    "reason",
                    "request_id",
                    "state",
                    "updated_at"
                ],
                "{body:#}"
            );
            assert_eq!(rec["interface"], GL, "{body:#}");
            all.push(seen_of(rec));
        }
        cursor = body["next"]
            .as_str()
            .expect("next on every page")
            .to_string();
        if records.is_empty() && (all.len() >= n || std::time::Instant::now() > until) {
            return (all, cursor);
        }
        if records.is_empty() {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn seen(id: &str, index: u64, code: &str, state: &str, reason: Option<&str>) -> Seen {
    (
        id.to_string(),
        index,
        code.to_string(),
        state.to_string(),
        reason.map(str::to_string),
    )
}

/// POSTs GL codes with `key` and the request id `id`; they must all be accepted.
fn send(app: &TestApp, key: &str, id: &str, codes: &[&str]) {
    let records: Vec<Value> = codes.iter().map(|c| gl(c)).collect();
    let r = app.post_with(
        GL,
        &envelope(&records).to_string(),
        &[
            ("x-api-key", key),
            ("Content-Type", "application/json"),
            ("x-request-id", id),
        ],
    );
    assert_eq!(r.status, 202, "{}", r.text);
}

/// A platform that refuses every GL code starting `BAD` with 422 and takes the rest.
fn refusing_bad() -> Receiver {
    let platform = Receiver::start();
    platform.answer(|r| {
        if r.body.contains("<code>BAD") {
            (422, vec![], "unknown cost centre".into())
        } else {
            ok()
        }
    });
    platform
}

/// The engines to run on: SQLite, and PostgreSQL when the tests have one.
fn engines() -> Vec<(&'static str, Option<pg::TestDb>)> {
    let mut out = vec![("sqlite", None)];
    match pg::TestDb::create() {
        Some(db) => out.push(("postgres", Some(db))),
        None => pg::skipped(),
    }
    out
}

/// The config of a service with its data in `dir`, on `db` (SQLite without one),
/// delivering to `platform`.
fn config(dir: &Path, db: Option<&pg::TestDb>, platform: &str) -> Config {
    let data = dir.join("data");
    let text = match db {
        None => config_for(&data, "", platform, FAST),
        Some(db) => pg::TestDb::config_text(&db.url, &data, platform, FAST, "feed", 30),
    };
    Config::parse(&text, Path::new("feed.toml")).unwrap()
}

/// D48: an ERP learns what the platform did with its records from its cursor, across a
/// restart, each change once and in order, and only of its own requests.
#[test]
fn d48_an_erp_polls_its_outcomes_from_a_cursor_across_a_restart() {
    let platform = refusing_bad();
    for (engine, db) in engines() {
        let dir = tempfile::tempdir().unwrap();
        let config = || config(dir.path(), db.as_ref(), &platform.url());
        let app = TestApp::start_config(tempfile::tempdir().unwrap(), config());
        send(&app, KEY, "feed-1", &["A1", "BAD1", "A2"]);
        send(&app, GL_ONLY_KEY, "feed-2", &["BAD2", "B1"]);
        let (first, cursor) = poll(&app, KEY, "", 1, 3);
        let reason = "HTTP 422: unknown cost centre";
        assert_eq!(
            first.iter().cloned().collect::<BTreeSet<_>>(),
            BTreeSet::from([
                seen("feed-1", 0, "A1", "delivered", None),
                seen("feed-1", 1, "BAD1", "rejected", Some(reason)),
                seen("feed-1", 2, "A2", "delivered", None),
            ]),
            "{engine}: once each, and nothing of the other key's"
        );
        assert_eq!(first.len(), 3, "{engine}: {first:?}");
        let (theirs, _) = poll(&app, GL_ONLY_KEY, "", 500, 2);
        assert!(
            theirs.iter().all(|s| s.0 == "feed-2") && theirs.len() == 2,
            "{engine}: {theirs:?}"
        );

        let kept = app.stop();
        let app = TestApp::start_config(kept, config());
        // The ERP fixes BAD1 and sends it again with one more.
        send(&app, KEY, "feed-3", &["BAD1", "A3"]);
        let (rest, end) = poll(&app, KEY, &cursor, 2, 3);
        assert_eq!(
            rest[0],
            seen("feed-1", 1, "BAD1", "superseded", None),
            "{engine}: the resend replaced the parked version first: {rest:?}"
        );
        assert_eq!(
            rest[1..].iter().cloned().collect::<BTreeSet<_>>(),
            BTreeSet::from([
                seen("feed-3", 0, "BAD1", "rejected", Some(reason)),
                seen("feed-3", 1, "A3", "delivered", None),
            ]),
            "{engine}"
        );
        assert_eq!(rest.len(), 3, "{engine}: {rest:?}");
        // The end is an empty page whose next is where it was asked from.
        let r = feed(&app, Some(KEY), &format!("after={end}"));
        assert_eq!(r.json(), json!({"records": [], "next": end}), "{engine}");
        // One state at a time, and one interface.
        let r = feed(
            &app,
            Some(KEY),
            "state=rejected&interface=%2Fgeneral-ledger-codes%2Fv1",
        );
        let ids: Vec<Seen> = r.json()["records"]
            .as_array()
            .unwrap()
            .iter()
            .map(seen_of)
            .collect();
        assert_eq!(ids.len(), 2, "{engine}: {ids:?}");
        assert!(ids.iter().all(|s| s.3 == "rejected"), "{engine}: {ids:?}");
        let r = feed(&app, Some(KEY), "interface=%2Fvendor-data%2Fv1");
        assert_eq!(r.json()["records"], json!([]), "{engine}");
    }
}

/// D48: each refusal names the parameter and the rule, in the D5 short body.
#[test]
fn d48_a_bad_query_gets_400_naming_the_parameter_and_the_rule() {
    let app = TestApp::start();
    let cases = [
        (
            "limit=0",
            "limit: \"0\" is not a whole number from 1 to 500",
        ),
        (
            "limit=501",
            "limit: \"501\" is not a whole number from 1 to 500",
        ),
        (
            "limit=ten",
            "limit: \"ten\" is not a whole number from 1 to 500",
        ),
        (
            "after=p12.3",
            "after: \"p12.3\" is not a cursor this feed gave; pass back the next of an earlier \
             page, or leave after out to start from the oldest change",
        ),
        (
            "after=%3Cscript%3E",
            "after: \"<script>\" is not a cursor this feed gave; pass back the next of an \
             earlier page, or leave after out to start from the oldest change",
        ),
        (
            "state=pending",
            "state: \"pending\" is not a state the feed lists; use rejected, quarantined, \
             delivered or superseded (several separated by commas)",
        ),
        (
            "interface=%2Fx",
            "interface: no interface \"/x\"; use an interface's path, such as /vendor-data/v1",
        ),
        (
            "x=1",
            "unknown query parameter \"x\"; the feed takes state, interface, limit and after",
        ),
        (
            "after=x",
            "after: \"x\" is not a cursor this feed gave; pass back the next of an earlier page, \
             or leave after out to start from the oldest change",
        ),
        (
            "limit=5&limit=6",
            "query parameter limit is given more than once",
        ),
    ];
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .unwrap()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for (query, message) in cases {
        // README gives one refusal of each kind.
        let in_readme = [
            "limit=0",
            "after=x",
            "state=pending",
            "interface=%2Fx",
            "x=1",
            "limit=5&limit=6",
        ];
        if in_readme.contains(&query) {
            assert!(
                readme.contains(message),
                "README's Integrator's guide does not give: {message}"
            );
        }
        let r = feed(&app, Some(KEY), query);
        assert_eq!(r.status, 400, "{query}: {}", r.text);
        let id = r.header("x-request-id").unwrap().to_string();
        assert_eq!(
            r.json(),
            json!({"status": "FAILED", "message": message, "request_id": id}),
            "{query}"
        );
    }
    let r = feed(&app, None, "limit=0");
    assert_eq!(r.status, 401, "credentials before the query: {}", r.text);
    let r = app.post_with("/requests", "{}", &[("x-api-key", KEY)]);
    assert_eq!(r.status, 405, "{}", r.text);
    assert_eq!(r.header("allow"), Some("GET, HEAD"), "{r:?}");
}
