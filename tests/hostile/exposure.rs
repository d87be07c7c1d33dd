//! What a client learns and what the log keeps, over raw sockets against the real service: a
//! request id the service makes reveals nothing (D43); refused requests cannot fill the log,
//! and no key is ever written to it (D44).

use crate::common::process::Service;
use crate::common::*;
use crate::connections::wire::{Http1, request};
use std::collections::HashSet;
use std::time::Instant;

const GL: &str = "/general-ledger-codes/v1";

/// D43: ids the service makes are the millisecond and 96 random bits: no counter between
/// consecutive requests, whether the routes answered or the early look refused.
#[test]
fn request_ids_the_service_makes_reveal_nothing_d43() {
    let app = TestApp::start();
    let mut c = Http1::open(app.addr);
    let mut ids = Vec::new();
    for i in 0..200 {
        let key = if i % 2 == 0 { KEY } else { "wrong" };
        c.send(&request("POST", GL, &[("x-api-key", key)], "{}"));
        let r = c.answer();
        assert!([401, 415].contains(&r.status), "{}", r.text);
        ids.push(r.header("x-request-id").unwrap().to_string());
    }
    // An answer of the early look (431) has such an id too.
    let mut early = Http1::open(app.addr);
    early.send(&request("GET", "/", &[("x-pad", &"a".repeat(70_000))], ""));
    let r = early.answer();
    assert_eq!(r.status, 431, "{}", r.text);
    ids.push(r.header("x-request-id").unwrap().to_string());
    let hex = |id: &String| id.len() == 36 && id.bytes().all(|b| b.is_ascii_hexdigit());
    assert!(ids.iter().all(hex), "{ids:?}");
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), ids.len());
    // The first 12 digits are the millisecond; the 24 after them are random.
    let random = |id: &str| u128::from_str_radix(&id[12..], 16).unwrap();
    let first_two: HashSet<&str> = ids.iter().map(|id| &id[12..14]).collect();
    assert!(first_two.len() > 50, "ids share their start: {first_two:?}");
    let near = ids
        .windows(2)
        .filter(|w| random(&w[0]).abs_diff(random(&w[1])) < 1 << 64)
        .count();
    assert!(near < 3, "{near} consecutive ids are close: a counter?");
}

/// D44: 10,000 requests refused with a wrong key from one address add at most 64 KiB to the
/// log: ten lines of their own, then one line with the count of the rest; neither the wrong
/// key nor a valid one is ever written to it.
#[test]
fn ten_thousand_refusals_from_one_address_add_at_most_64_kib_to_the_log_d44() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    std::fs::write(&file, config_text(&dir.path().join("data"), "", "")).unwrap();
    let mut service = Service::start(&file, dir.path());
    let mut c = Http1::open(service.addr);
    let body = envelope(&[gl("4000")]).to_string();
    let json = ("Content-Type", "application/json");
    c.send(&request("POST", GL, &[("x-api-key", KEY), json], &body));
    assert_eq!(c.answer().status, 202);
    let before = service.stderr().len();
    let wrong = "wrong-key-0123456789abcdef";
    let started = Instant::now();
    for _ in 0..10_000 {
        c.send(&request("POST", GL, &[("x-api-key", wrong), json], &body));
        assert_eq!(c.answer().status, 401);
    }
    println!("10,000 refusals took {:?}", started.elapsed());
    assert_eq!(service.terminate().code(), Some(0));
    let log = service.stderr();
    let added = &log[before..];
    println!("the log grew by {} bytes:\n{added}", added.len());
    assert!(
        added.len() <= 64 * 1024,
        "the log grew by {} bytes",
        added.len()
    );
    let own_lines = added.lines().filter(|l| l.contains(" status=401 ")).count();
    let count_line = added
        .lines()
        .find(|l| l.contains("than logged one by one"))
        .unwrap_or_else(|| panic!("no count line in\n{added}"));
    assert!(
        count_line.contains("status=401") && count_line.contains("not_logged=9990"),
        "{count_line}"
    );
    assert_eq!(
        own_lines, 11,
        "ten lines of their own and the count line:\n{added}"
    );
    assert!(
        !log.contains(wrong) && !log.contains(KEY),
        "a key in the log:\n{log}"
    );
}
