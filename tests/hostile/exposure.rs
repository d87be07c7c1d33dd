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

/// D47 with D44: a flood of wrong client secrets at `/oauth2/token` from one address. The
/// secrets actually checked are bounded by the per-address limit (a burst of 20, then 5 a
/// second); the rest are 429 with Retry-After before any check. The log keeps ten lines per
/// status and a count, and never the secret. Once the flood stops, the right secret gets its
/// token.
#[test]
fn a_flood_of_wrong_client_secrets_is_bounded_and_logged_as_d44_says() {
    let dir = tempfile::tempdir().unwrap();
    let secret = "the-right-client-secret";
    let tables = oauth2_client_tables(dir.path(), "erp", secret);
    let file = dir.path().join("c.toml");
    std::fs::write(&file, config_text(&dir.path().join("data"), "", &tables)).unwrap();
    let mut service = Service::start(&file, dir.path());
    let form = ("Content-Type", "application/x-www-form-urlencoded");
    let wrong = "wrong-secret-0123456789abcdef";
    let body = format!("grant_type=client_credentials&client_id=erp&client_secret={wrong}");
    let mut c = Http1::open(service.addr);
    let before = service.stderr().len();
    let started = Instant::now();
    let (mut checked, mut limited) = (0u32, 0u32);
    for _ in 0..3_000 {
        c.send(&request("POST", "/oauth2/token", &[form], &body));
        let r = c.answer();
        match r.status {
            401 => {
                assert_eq!(r.json()["error"], "invalid_client", "{}", r.text);
                checked += 1;
            }
            429 => {
                assert!(r.header("retry-after").is_some(), "{}", r.text);
                limited += 1;
            }
            other => panic!("{other}: {}", r.text),
        }
    }
    let took = started.elapsed().as_secs_f64();
    println!("3,000 wrong secrets in {took:.2} s: {checked} checked, {limited} limited");
    let bound = 20.0 + 5.0 * took + 1.0;
    assert!(
        f64::from(checked) <= bound,
        "{checked} secrets checked in {took:.2} s (at most {bound:.0})"
    );
    // The limit refills: the right secret is answered within a second.
    std::thread::sleep(std::time::Duration::from_millis(400));
    let right = format!("grant_type=client_credentials&client_id=erp&client_secret={secret}");
    c.send(&request("POST", "/oauth2/token", &[form], &right));
    let r = c.answer();
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(service.terminate().code(), Some(0));
    let log = service.stderr();
    let added = &log[before..];
    assert!(
        added.len() <= 64 * 1024,
        "the log grew by {} bytes",
        added.len()
    );
    for status in [401, 429] {
        let own = added
            .lines()
            .filter(|l| l.contains(&format!(" status={status} ")) && !l.contains("than logged"))
            .count();
        assert!(own <= 10, "{own} lines of status {status}:\n{added}");
    }
    assert!(
        added.lines().any(|l| l.contains("than logged one by one")),
        "no count line:\n{added}"
    );
    assert!(
        !log.contains(wrong) && !log.contains(secret),
        "a secret in the log:\n{log}"
    );
}
