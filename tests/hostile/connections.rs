//! Connections (D26), over real sockets against the real service: early answers on HTTP/1.1
//! drain a small body or close saying so, a half-closed client still gets its answer, the first
//! request's unsupported transfer coding gets 501 (D25), HTTP/2 connections without a request
//! are closed after the header timeout, streams per connection and connections per address
//! are capped, and the connection cap counts connections in their TLS handshake and preface.

mod expect;
pub mod wire;

use crate::common::*;
use ap_intake::config::Config;
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};
use wire::*;

const GL: &str = "/general-ledger-codes/v1";
const LIMITED: &str = "limited-key";
const SECOND: Duration = Duration::from_secs(1);

/// A test app with `server` lines added to `[server]` and `tables` appended; a key limited to
/// one request per second without burst is configured too.
fn app(server: &str, tables: &str) -> TestApp {
    let dir = tempfile::tempdir().unwrap();
    let limited = format!(
        "[[api_keys]]\nname = \"limited\"\nsha256 = \"{}\"\ninterfaces = [\"*\"]\nrate_limit_per_second = 1\nburst = 1\n{tables}",
        sha(LIMITED)
    );
    let server = if server.contains("body_timeout_secs") {
        server.to_string()
    } else {
        format!("body_timeout_secs = 2\n{server}")
    };
    let text = config_for(&dir.path().join("data"), "", NOWHERE, &limited)
        .replace("body_timeout_secs = 2", &server);
    TestApp::start_config(dir, Config::parse(&text, Path::new("t.toml")).unwrap())
}

fn gl_body() -> String {
    envelope(&[fixture("general-ledger-codes", "minimal")]).to_string()
}

fn json_headers(key: &str) -> [(&str, &str); 2] {
    [("x-api-key", key), ("Content-Type", "application/json")]
}

/// A valid POST of one GL code.
fn valid_post() -> Vec<u8> {
    request("POST", GL, &json_headers(KEY), &gl_body())
}

fn says_close(r: &Reply) -> bool {
    r.header("connection")
        .is_some_and(|v| v.eq_ignore_ascii_case("close"))
}

/// D26: every answer decided before the body drains a small body and keeps the connection: the
/// next request on the socket gets its own answer. (A transfer coding other than chunked is
/// refused from the head with 501 and the connection closed, D25, D42: below.)
/// The body follows its head a moment later, as from a client streaming it: hyper drains only
/// what has already arrived, and closed the connection silently otherwise.
#[test]
fn early_answers_drain_a_small_body_and_keep_the_connection_d26() {
    let app = app("", "[limits]\nmax_body_bytes = 2048\n");
    let small = gl_body();
    let over_limit = format!("{{\"pad\":\"{}\"}}", "x".repeat(4000));
    let plain = [("x-api-key", KEY), ("Content-Type", "text/plain")];
    let cases: Vec<(u16, Vec<Vec<u8>>)> = vec![
        (
            401,
            vec![request(
                "POST",
                GL,
                &[("Content-Type", "application/json")],
                &small,
            )],
        ),
        (
            403,
            vec![request(
                "POST",
                "/vendor-data/v1",
                &json_headers(GL_ONLY_KEY),
                &small,
            )],
        ),
        (
            404,
            vec![request("POST", "/nope", &json_headers(KEY), &small)],
        ),
        (405, vec![request("PUT", GL, &json_headers(KEY), &small)]),
        (
            413,
            vec![request("POST", GL, &json_headers(KEY), &over_limit)],
        ),
        (415, vec![request("POST", GL, &plain, &small)]),
        (
            400,
            vec![request(
                "POST",
                "/accounting-objects/v1",
                &json_headers(KEY),
                &small,
            )],
        ),
        (
            429,
            vec![request("POST", GL, &json_headers(LIMITED), &small); 2],
        ),
    ];
    for (status, requests) in cases {
        let mut c = Http1::open(app.addr);
        let mut last = None;
        for r in &requests {
            let head = r.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            c.send(&r[..head]);
            std::thread::sleep(Duration::from_millis(100)); // a streaming client
            c.send(&r[head..]);
            last = Some(c.answer());
        }
        let r = last.unwrap();
        assert_eq!(r.status, status, "{}", r.text);
        assert!(!says_close(&r), "{status}: {:?}", r.headers);
        c.send(&valid_post());
        let next = c.answer();
        assert_eq!(next.status, 202, "after {status}: {}", next.text);
    }
}

/// D26: a body too large to drain (over 64 KiB, or over max_body_bytes) gets an early answer
/// saying `Connection: close`, and the server then closes instead of reading it.
#[test]
fn early_answers_to_a_large_body_say_close_and_close_d26() {
    let app = app("", "");
    let big = 100 * 1024;
    let over_max = 33 * 1024 * 1024;
    let cases = [
        (401, GL, "application/json", big),
        (404, "/nope", "application/json", big),
        (415, GL, "text/plain", big),
        (413, GL, "application/json", over_max),
    ];
    for (status, path, media, length) in cases {
        let mut c = Http1::open(app.addr);
        let key = if status == 401 { "" } else { KEY };
        c.send(format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nx-api-key: {key}\r\nContent-Type: {media}\r\nContent-Length: {length}\r\n\r\n"
        ).as_bytes());
        let r = c.answer();
        assert_eq!(r.status, status, "{}", r.text);
        assert!(says_close(&r), "{status}: {:?}", r.headers);
        assert!(c.closed_within(5 * SECOND), "{status}: the server closes");
    }
}

/// D26: a client that half-closes its socket after a complete request still gets the answer,
/// whether the body was read (202) or the answer came before it (401).
#[test]
fn a_half_closed_client_still_gets_its_answer_d26() {
    let app = app("", "");
    let no_key = request(
        "POST",
        GL,
        &[("Content-Type", "application/json")],
        &gl_body(),
    );
    for (status, req) in [(202, valid_post()), (401, no_key)] {
        let mut c = Http1::open(app.addr);
        c.send(&req);
        half_close(&c.sock);
        let r = c.answer();
        assert_eq!(r.status, status, "{}", r.text);
        assert!(c.closed_within(5 * SECOND));
    }
}

/// D25, D26, D42: hyper answers a bare 400 to a last transfer coding other than chunked; a
/// request gets the service's 501 with the JSON failure body instead, and the connection is
/// closed. `gzip, chunked` (hyper would pass it to the routes) gets the same, and so does a
/// later request on a kept connection.
#[test]
fn a_first_request_with_a_transfer_coding_other_than_chunked_gets_501_d25_d26() {
    let app = app("", "");
    for (coding, later) in [
        ("gzip", false),
        ("gzip, chunked", false),
        ("Chunked, identity", false),
        ("gzip, chunked", true),
    ] {
        let mut c = Http1::open(app.addr);
        if later {
            c.send(&valid_post());
            assert_eq!(c.answer().status, 202);
        }
        c.send(format!(
            "POST {GL} HTTP/1.1\r\nHost: x\r\nx-api-key: {KEY}\r\nx-request-id: te-{}\r\nContent-Type: application/json\r\nTransfer-Encoding: {coding}\r\n\r\nsome bytes",
            coding.len()
        ).as_bytes());
        let r = c.answer();
        assert_eq!(r.status, 501, "{coding}: {}", r.text);
        assert!(says_close(&r), "{coding}: {:?}", r.headers);
        let b = r.json();
        assert_eq!(b["status"], "FAILED");
        let message = b["message"].as_str().unwrap();
        assert!(
            message.contains("not supported (supported: chunked)"),
            "{message}"
        );
        let id = format!("te-{}", coding.len());
        assert_eq!(
            (b["request_id"].as_str(), r.header("x-request-id")),
            (Some(&*id), Some(&*id))
        );
        assert!(c.closed_within(5 * SECOND), "{coding}: the server closes");
    }
    assert_eq!(
        app.post(GL, &gl_body()).status,
        202,
        "others are unaffected"
    );
}

/// D26: a client that sends only the HTTP/2 preface is told to go away and closed after the
/// header timeout (hyper has no such timer: it held the connection, and its slot, forever).
#[test]
fn an_http2_preface_alone_is_closed_after_the_header_timeout_d26() {
    let app = app("header_timeout_secs = 1", "");
    let started = Instant::now();
    let mut h2 = H2::preface(TcpStream::connect(app.addr).unwrap());
    let frames = h2
        .frames_until_closed(6 * SECOND)
        .expect("closed within the header timeout and the GOAWAY grace");
    assert!(started.elapsed() >= SECOND, "{:?}", started.elapsed());
    assert!(frames.iter().any(|f| f.kind == GOAWAY), "{frames:?}");
}

/// D26: on HTTP/2 a request in flight is not idleness (a body slower than the header timeout
/// is still answered), but a connection idle between requests is closed after it.
#[test]
fn an_http2_connection_idle_between_requests_is_closed_after_the_header_timeout_d26() {
    let app = app("header_timeout_secs = 1\nbody_timeout_secs = 5", "");
    let mut h2 = H2::preface(TcpStream::connect(app.addr).unwrap());
    h2.post_headers(1, GL, &json_headers(KEY));
    std::thread::sleep(Duration::from_millis(1500)); // a slow client, not synchronisation
    h2.body(1, gl_body().as_bytes());
    let answer = h2.answer_json(1, 5 * SECOND);
    assert_eq!(answer["status"], "SUCCESS", "{answer}");
    h2.post_headers(3, GL, &[("content-type", "application/json")]);
    h2.body(3, gl_body().as_bytes());
    let answer = h2.answer_json(3, 5 * SECOND);
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .starts_with("API key missing"),
        "{answer}"
    );
    let idle = Instant::now();
    let frames = h2
        .frames_until_closed(6 * SECOND)
        .expect("closed when idle");
    assert!(idle.elapsed() >= SECOND, "{:?}", idle.elapsed());
    assert!(frames.iter().any(|f| f.kind == GOAWAY), "{frames:?}");
}

/// D26: at most `max_streams_per_connection` (default 16) streams at once: the server says so
/// in its SETTINGS and refuses a 17th concurrent stream; the others are still served.
#[test]
fn http2_streams_per_connection_are_capped_d26() {
    let app = app("", "");
    let mut h2 = H2::preface(TcpStream::connect(app.addr).unwrap());
    let settings = h2.until(5 * SECOND, |f| f.kind == SETTINGS && f.flags & ACK == 0);
    let settings = settings.settings();
    assert!(
        settings.contains(&(SETTINGS_MAX_CONCURRENT_STREAMS, 16)),
        "{settings:?}"
    );
    assert!(
        settings.contains(&(SETTINGS_MAX_HEADER_LIST_SIZE, 64 * 1024)),
        "{settings:?}"
    );
    h2.until(5 * SECOND, |f| f.kind == SETTINGS && f.flags & ACK != 0);
    let streams: Vec<u32> = (0..17).map(|i| 1 + 2 * i).collect();
    for &s in &streams {
        h2.post_headers(s, GL, &json_headers(KEY)); // bodies to follow
    }
    let refused = h2.until(5 * SECOND, |f| f.kind == RST_STREAM);
    assert_eq!((refused.stream, refused.error_code()), (33, REFUSED_STREAM));
    h2.body(1, gl_body().as_bytes());
    assert_eq!(h2.answer_json(1, 5 * SECOND)["status"], "SUCCESS");
}

/// D26: `max_connections` counts a connection from its accept: two clients holding only an
/// HTTP/2 preface keep a third waiting until the header timeout closes them.
#[test]
fn the_connection_cap_counts_connections_in_their_http2_preface_d26() {
    let app = app("header_timeout_secs = 1\nmax_connections = 2", "");
    let holders: Vec<H2> = (0..2)
        .map(|_| H2::preface(TcpStream::connect(app.addr).unwrap()))
        .collect();
    let mut third = Http1::open(app.addr); // queued by the kernel
    third.send(&valid_post());
    assert!(
        !readable(&third.sock, Duration::from_millis(500)),
        "not served while both slots are taken"
    );
    let r = third.answer(); // once the holders are closed
    assert_eq!(r.status, 202, "{}", r.text);
    drop(holders);
}

mod framing;
mod limits;
