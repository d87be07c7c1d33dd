//! Memory and CPU budgets (D27): what parsing and checking a body takes stays within what it
//! is charged, whatever its shape.

use super::common::fixture;
use super::meter;
use ap_intake::budget::Budget;
use ap_intake::delivery::Waker;
use ap_intake::intake::{Intake, Limits};
use ap_intake::interfaces::{self, Interface};
use ap_intake::queue::{Mode, SqliteStore, Store, Writer};
use ap_intake::validate::{Validator, cost};
use serde_json::Value;
use std::sync::Arc;

/// An intake without HTTP over a real queue in `dir`.
pub(super) fn intake(dir: &std::path::Path) -> (Intake, Writer) {
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir, Mode::Serve, 0).unwrap());
    let writer = Writer::start(store).unwrap();
    let intake = Intake::new(
        Validator::load(None).unwrap(),
        writer.clone(),
        vec!["PROJECT".into()],
        Limits {
            max_records: 10_000,
            budget: Arc::new(Budget::new(256 << 20)),
        },
        Waker::none(),
    );
    (intake, writer)
}

fn envelope_text(records: &str) -> String {
    format!(r#"{{"objects":{{"object":{{"record":[{records}]}}}}}}"#)
}

fn repeat(item: &str, n: usize) -> String {
    let mut s = String::with_capacity((item.len() + 1) * n);
    for i in 0..n {
        if i > 0 {
            s.push(',');
        }
        s.push_str(item);
    }
    s
}

/// Bodies of the worst shapes D27 names, about `size` bytes each.
fn worst_shapes(size: usize) -> Vec<(&'static str, &'static str, String)> {
    let gl = fixture("general-ledger-codes", "full").to_string();
    let gl_n = size / (gl.len() + 1);
    let po = fixture("purchase-orders-v2", "full");
    let bad_po = {
        let mut p = po.clone();
        for (_, v) in p.as_object_mut().unwrap().iter_mut() {
            *v = Value::Bool(true); // every field the wrong type
        }
        p.to_string()
    };
    let gl_path = "/general-ledger-codes/v1";
    let po_path = "/purchase-orders/v2";
    let n = size / 2;
    let nest = 58; // with the envelope's five levels, just within the 64 of D27
    let deep = format!("{}1{}", "[".repeat(nest), "]".repeat(nest));
    vec![
        ("valid GL codes", gl_path, envelope_text(&repeat(&gl, gl_n))),
        (
            "invalid PO v2 records",
            po_path,
            envelope_text(&repeat(&bad_po, size / (bad_po.len() + 1))),
        ),
        (
            "array of numbers in an unknown field",
            gl_path,
            envelope_text(&format!(r#"{{"code":"1","x":[{}]}}"#, repeat("1", n))),
        ),
        (
            "array of numbers where rows go",
            po_path,
            envelope_text(&format!(
                r#"{{"po_number":"1","rows":[{}]}}"#,
                repeat("1", n)
            )),
        ),
        (
            "many unknown fields",
            gl_path,
            envelope_text(&format!(
                "{{{}}}",
                (0..size / 12)
                    .map(|i| format!(r#""k{i}":1"#))
                    .collect::<Vec<_>>()
                    .join(",")
            )),
        ),
        (
            "duplicate keys",
            gl_path,
            envelope_text(&format!("{{{}}}", repeat(r#""code":"1""#, size / 11))),
        ),
        (
            "records of empty objects",
            gl_path,
            envelope_text(&repeat("{}", 10_000)),
        ),
        (
            "deep nesting in an unknown field",
            gl_path,
            envelope_text(&repeat(
                &format!(r#"{{"code":"1","x":{deep}}}"#),
                size / (deep.len() + 12),
            )),
        ),
        (
            "empty rows, each missing every required field",
            po_path,
            envelope_text(&format!(
                r#"{{"po_number":"1","rows":[{}]}}"#,
                repeat("{}", size / 3)
            )),
        ),
        (
            "empty coding rows",
            po_path,
            envelope_text(&format!(
                r#"{{"po_number":"1","rows":[{{"coding":[{}]}}]}}"#,
                repeat("{}", size / 3)
            )),
        ),
        (
            "exponent bombs",
            po_path,
            envelope_text(&format!(
                r#"{{"po_number":"1","rows":[{}]}}"#,
                repeat(
                    r#"{"line_number":1e99999999999,"unit_price":-1e-99999999999}"#,
                    size / 60
                )
            )),
        ),
    ]
}

/// D27: what checking a body of any shape takes stays within its estimated cost, which is what
/// the budget is charged (a quarter of it, for the "about 4x the budget" bound).
#[test]
fn checking_a_body_stays_within_its_estimated_cost() {
    let dir = tempfile::tempdir().unwrap();
    let (intake, writer) = intake(dir.path());
    let mut over = Vec::new();
    for (shape, path, body) in worst_shapes(512 << 10) {
        let iface: &Interface = interfaces::by_path(path).unwrap();
        let cost = cost::cost(body.as_bytes());
        let estimate = cost.peak(body.len()) - body.len();
        let (result, peak) = meter::peak_during(|| {
            intake
                .checker()
                .check_records(iface, None, body.as_bytes())
                .map(|_| ())
        });
        println!(
            "{shape}: {} bytes, {} items, largest record {}, peak {} ({:.1} per item), estimate {}",
            body.len(),
            cost.items,
            cost.largest_record,
            peak,
            peak as f64 / cost.items as f64,
            estimate
        );
        let _ = result;
        if peak > estimate {
            over.push(format!("{shape}: peak {peak} > estimate {estimate}"));
        }
    }
    assert!(over.is_empty(), "{over:#?}");
    writer.stop();
}

/// D27: requests are admitted whole, before their bodies are read, and never wait on each
/// other while holding part of the budget. Sixteen concurrent valid bodies, which together
/// need several times the budget, are all queued: before, bodies charged as their bytes
/// arrived held the whole budget half-received, each waiting for the others until the body
/// timeout (503).
#[test]
fn concurrent_bodies_larger_than_the_budget_together_are_all_queued_in_turn() {
    let _machine = crate::heavy();
    use super::common::*;
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(
        &dir.path().join("data"),
        "",
        "[limits]\nmax_body_bytes = 4194304\ninflight_bytes = 33554432\n",
    )
    .replace("body_timeout_secs = 2", "body_timeout_secs = 120");
    let config = ap_intake::config::Config::parse(&text, std::path::Path::new("t.toml")).unwrap();
    let app = TestApp::start_config(dir, config);
    let (head, tail) = {
        let mut gl = fixture("general-ledger-codes", "full");
        gl["code"] = Value::String("@@".into());
        let text = gl.to_string();
        let (a, b) = text.split_once("\"@@\"").unwrap();
        (a.to_string(), b.to_string())
    };
    // 16 bodies of 1.5 MiB: each admitted with about 6 MiB of the 32 MiB budget.
    let body = |client: usize| {
        let records: Vec<String> = (0..4500)
            .map(|i| format!("{head}\"C{client}-{i}\"{tail}"))
            .collect();
        envelope_text(&records.join(","))
    };
    let statuses: Vec<u16> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|c| {
                let (app, body) = (&app, body(c));
                s.spawn(move || app.post("/general-ledger-codes/v1", &body).status)
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(statuses, vec![202; 16]);
    let org = fixture("general-ledger-codes", "full")["organization"]
        .as_str()
        .unwrap()
        .to_string();
    for key in ["C0-0", "C15-4499"] {
        assert!(app.item(&format!("gl-code:{org}/{key}")).is_some(), "{key}");
    }
}
