//! `Expect: 100-continue` (RFC 9110 section 10.1.1), as Java's HttpClient sends it with
//! `expectContinue(true)`: the server answers the head at once, with `100 Continue` or with a
//! final status it can decide from the head, and never waits for a body the client holds back.
//! Over HTTP/2 (which that client speaks on https by default) the service used to say nothing
//! until the body timeout, then 408.

use super::wire::*;
use super::{GL, SECOND, app, gl_body, json_headers};
use crate::common::*;
use std::net::TcpStream;
use std::time::Duration;

/// The headers of a POST that expects 100 before it sends its `len` bytes.
fn expecting(key: &str, len: usize) -> Vec<(String, String)> {
    let mut headers: Vec<(String, String)> = json_headers(key)
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    headers.push(("expect".into(), "100-continue".into()));
    headers.push(("content-length".into(), len.to_string()));
    headers
}

fn refs(headers: &[(String, String)]) -> Vec<(&str, &str)> {
    headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// The next HEADERS frame of stream 1 and its status; no DATA of it may come first.
fn next_status(h2: &mut H2, statuses: &mut Statuses, within: Duration) -> u16 {
    let f = h2.until(within, |f| f.stream == 1);
    assert_eq!(f.kind, HEADERS, "the answer starts with its head: {f:?}");
    statuses.of(&f)
}

/// HTTP/2: a request that expects 100 gets it at once, before it has sent a byte of its body;
/// the body that follows is queued (202).
#[test]
fn http2_answers_an_expectation_with_100_continue_at_once() {
    let app = app("", "");
    let body = gl_body();
    let mut h2 = H2::preface(TcpStream::connect(app.addr).unwrap());
    let mut statuses = Statuses::default();
    h2.post_headers(1, GL, &refs(&expecting(KEY, body.len())));
    assert_eq!(next_status(&mut h2, &mut statuses, 2 * SECOND), 100);
    // Nothing more of stream 1 until the body comes.
    let until = std::time::Instant::now() + Duration::from_millis(300);
    while let Some(left) = until.checked_duration_since(std::time::Instant::now()) {
        if !readable(&h2.sock, left) {
            break;
        }
        let f = h2.next(SECOND).expect("the connection stays open");
        assert_ne!(f.stream, 1, "only the 100 before the body: {f:?}");
    }
    h2.body(1, body.as_bytes());
    assert_eq!(next_status(&mut h2, &mut statuses, 5 * SECOND), 202);
    let answer = h2.answer_json(1, 5 * SECOND);
    assert_eq!(answer["status"], "SUCCESS", "{answer}");
}

/// HTTP/2: a status decided from the head (401 for a wrong key, 413 for a declared length over
/// the limit) is the answer at once, with no 100 before it: the client never sends its body.
#[test]
fn http2_answers_an_expectation_with_a_final_status_decided_from_the_head() {
    let app = app("", "[limits]\nmax_body_bytes = 2048\n");
    for (key, len, status, says) in [
        ("wrong", 100, 401, "API key invalid"),
        (KEY, 100_000, 413, "larger than 2048 bytes"),
    ] {
        let mut h2 = H2::preface(TcpStream::connect(app.addr).unwrap());
        let mut statuses = Statuses::default();
        h2.post_headers(1, GL, &refs(&expecting(key, len)));
        assert_eq!(next_status(&mut h2, &mut statuses, 2 * SECOND), status);
        let answer = h2.answer_json(1, 2 * SECOND);
        let message = answer["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{status}: {answer}");
    }
}

/// HTTP/1.1: `100 Continue` at once for a request the service will read, a final 401 at
/// once for one it will not (it used to say 100, then wait for the body to drain it).
#[test]
fn http1_answers_an_expectation_at_once() {
    let app = app("", "");
    let body = gl_body();
    let mut c = Http1::open(app.addr);
    c.send(&head("POST", GL, &expecting(KEY, body.len())));
    let interim = c.answer();
    assert_eq!(interim.status, 100, "{interim:?}");
    c.send(body.as_bytes());
    assert_eq!(c.answer().status, 202);

    // The body it holds back is not waited for: the answer comes at once and the connection
    // closes (the client would otherwise have to send a body nobody reads).
    let mut c = Http1::open(app.addr);
    c.send(&head("POST", GL, &expecting("wrong", 100)));
    c.sock.set_read_timeout(Some(SECOND)).unwrap();
    let refused = c.answer();
    assert_eq!(refused.status, 401, "{refused:?}");
    assert_eq!(refused.header("connection"), Some("close"), "{refused:?}");
}

/// A request's head alone, ending the header block.
fn head(method: &str, path: &str, headers: &[(String, String)]) -> Vec<u8> {
    let mut r = format!("{method} {path} HTTP/1.1\r\nHost: x\r\n");
    for (k, v) in headers {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    r.push_str("\r\n");
    r.into_bytes()
}
