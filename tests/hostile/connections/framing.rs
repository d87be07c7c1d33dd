//! HTTP/1.1 framing (D42), raw bytes over real sockets: every head the early look refuses gets
//! its status with the JSON failure body (D5) and a closed connection, on a first request and
//! on a later one of a kept connection alike; the shapes RFC 9112 allows are served; any method
//! a path does not serve gets 405 with `Allow`; bare LF line ends are served at once.

use super::wire::*;
use super::{GL, SECOND, app, gl_body, says_close, valid_post};
use crate::common::*;
use std::time::{Duration, Instant};

/// A GL POST whose head lines are `lines` (request line first), CRLF line ends, then the body.
fn post_with_lines(lines: &[&str]) -> Vec<u8> {
    let body = gl_body();
    let mut head = lines.join("\r\n");
    head.push_str("\r\n\r\n");
    head.push_str(&body);
    head.into_bytes()
}

/// The usual head lines of a valid GL POST, with `Host` and `Content-Length`.
fn usual(extra: &[&str]) -> Vec<String> {
    let mut lines = vec![
        format!("POST {GL} HTTP/1.1"),
        "Host: x".into(),
        format!("x-api-key: {KEY}"),
        "Content-Type: application/json".into(),
        format!("Content-Length: {}", gl_body().len()),
    ];
    lines.extend(extra.iter().map(|l| l.to_string()));
    lines
}

fn refs(lines: &[String]) -> Vec<&str> {
    lines.iter().map(String::as_str).collect()
}

/// The heads D42 refuses, with their status and a word of the message.
fn refused_heads() -> Vec<(&'static str, u16, &'static str, Vec<u8>)> {
    let n = gl_body().len().to_string();
    let no_host: Vec<String> = usual(&[]).into_iter().filter(|l| l != "Host: x").collect();
    let long_target = format!("POST /{} HTTP/1.1", "a".repeat(9000));
    let big_field = format!("x-pad: {}", "a".repeat(70 * 1024));
    let many: Vec<String> = (0..101).map(|i| format!("x-f{i}: {i}")).collect();
    let many_refs: Vec<&str> = many.iter().map(String::as_str).collect();
    vec![
        ("no Host", 400, "no Host", post_with_lines(&refs(&no_host))),
        ("two Hosts", 400, "2 Host", post_with_lines(&refs(&usual(&["Host: y"])))),
        ("the same Host twice", 400, "2 Host", post_with_lines(&refs(&usual(&["Host: x"])))),
        (
            "Content-Length and Transfer-Encoding",
            400,
            "both Content-Length and Transfer-Encoding",
            post_with_lines(&refs(&usual(&["Transfer-Encoding: chunked"]))),
        ),
        (
            "two different Content-Length values",
            400,
            "two different Content-Length",
            post_with_lines(&refs(&usual(&["Content-Length: 3"]))),
        ),
        (
            "a Content-Length that is no number",
            400,
            "is not a number",
            post_with_lines(&refs(&usual(&[&format!("Content-Length: {n}, {n}")]))),
        ),
        (
            "whitespace before a header name's colon",
            400,
            "invalid header name",
            post_with_lines(&refs(&usual(&["x-api-key : k"]))),
        ),
        (
            "a tab in a header name",
            400,
            "invalid header name",
            post_with_lines(&refs(&usual(&["x-a\tb: k"]))),
        ),
        (
            "an obs-fold continuation line",
            400,
            "not valid HTTP/1.1",
            post_with_lines(&refs(&usual(&["x-a: 1", " folded"]))),
        ),
        (
            "Transfer-Encoding in HTTP/1.0",
            400,
            "HTTP/1.0",
            b"POST /general-ledger-codes/v1 HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
                .to_vec(),
        ),
        (
            "a request line over 8 KiB",
            414,
            "request line is longer than 8192 bytes",
            post_with_lines(&[&long_target, "Host: x"]),
        ),
        (
            "a header block over 64 KiB",
            431,
            "larger than 65536 bytes",
            post_with_lines(&refs(&usual(&[&big_field]))),
        ),
        (
            "101 header fields",
            431,
            "more than 100 header fields",
            post_with_lines(&[&[&*format!("POST {GL} HTTP/1.1"), "Host: x"], &many_refs[..]].concat()),
        ),
    ]
}

/// Reads the refusal of `what` on `c` and checks its shape: status, JSON failure body whose
/// request id is the header's, `Connection: close`, and a connection the server closes.
fn expect_refusal(c: &mut Http1, what: &str, status: u16, says: &str) {
    let r = c.answer();
    assert_eq!(r.status, status, "{what}: {}", r.text);
    let b = r.json();
    assert_eq!(b["status"], "FAILED", "{what}");
    let message = b["message"].as_str().unwrap();
    assert!(message.contains(says), "{what}: {message}");
    assert_eq!(b["request_id"].as_str(), r.header("x-request-id"), "{what}");
    assert!(says_close(&r), "{what}: {:?}", r.headers);
    assert!(c.closed_within(8 * SECOND), "{what}: the server closes");
}

/// D42: each refused shape gets its status and a closed connection, as a first request and as
/// a later one on a kept connection (where hyper alone served or answered them bare).
#[test]
fn heads_rfc_9112_refuses_get_their_status_and_close_the_connection_d42() {
    let app = app("", "");
    for (what, status, says, bytes) in refused_heads() {
        for later in [false, true] {
            let mut c = Http1::open(app.addr);
            if later {
                c.send(&valid_post());
                assert_eq!(c.answer().status, 202, "{what}");
            }
            c.try_send(&bytes);
            expect_refusal(&mut c, what, status, says);
        }
    }
    assert_eq!(
        app.post(GL, &gl_body()).status,
        202,
        "others are unaffected"
    );
}

/// D42: what RFC 9112 allows is served: HTTP/1.0 without Host, one Content-Length given twice,
/// 100 header fields, a header block and a request line just under their limits.
#[test]
fn heads_within_the_rules_are_served_d42() {
    let app = app("", "");
    let n = gl_body().len();
    let http10: Vec<String> = usual(&[])
        .into_iter()
        .filter(|l| l != "Host: x")
        .map(|l| l.replace("HTTP/1.1", "HTTP/1.0"))
        .collect();
    // The usual head has 4 fields.
    let hundred: Vec<String> = (0..96).map(|i| format!("x-f{i}: {i}")).collect();
    let under = format!("x-pad: {}", "a".repeat(60 * 1024));
    let cases: Vec<(&str, u16, Vec<String>)> = vec![
        ("HTTP/1.0 without Host", 202, http10),
        (
            "one Content-Length twice",
            202,
            usual(&[&format!("Content-Length: {n}")]),
        ),
        ("100 fields", 202, usual(&refs(&hundred))),
        ("a 60 KiB header block", 202, usual(&[&under])),
        (
            "an 8,000-byte request line",
            404,
            vec![
                format!("GET /{} HTTP/1.1", "a".repeat(8000)),
                "Host: x".into(),
                format!("Content-Length: {n}"),
            ],
        ),
    ];
    for (what, status, lines) in cases {
        let mut c = Http1::open(app.addr);
        c.send(&post_with_lines(&refs(&lines)));
        let r = c.answer();
        assert_eq!(r.status, status, "{what}: {}", r.text);
        if !what.starts_with("HTTP/1.0") {
            c.send(&valid_post());
            assert_eq!(c.answer().status, 202, "{what}: the connection is kept");
        }
    }
}

/// D42: bare LF line ends are served at once (not after the header timeout), first and later
/// on a kept connection; the connection is kept.
#[test]
fn bare_lf_line_ends_are_served_at_once_d42() {
    let app = app("", "");
    let body = gl_body();
    let bare = format!(
        "POST {GL} HTTP/1.1\nHost: x\nx-api-key: {KEY}\nContent-Type: application/json\nContent-Length: {}\n\n{body}",
        body.len()
    );
    let mut c = Http1::open(app.addr);
    for _ in 0..2 {
        let started = Instant::now();
        c.send(bare.as_bytes());
        let r = c.answer();
        assert_eq!(r.status, 202, "{}", r.text);
        assert!(started.elapsed() < 2 * SECOND, "{:?}", started.elapsed());
    }
    c.send(&valid_post());
    assert_eq!(c.answer().status, 202, "CRLF after bare LF");
}

/// D42: any method a path does not serve gets 405 with `Allow`, `CONNECT`, `TRACE` and
/// `OPTIONS` included, whatever the form of the target, and the connection is kept; a target
/// that is no path is 400 for other methods. Before, `CONNECT host:port` panicked in warp.
#[test]
fn methods_a_path_does_not_serve_get_405_with_allow_d42() {
    let app = app("", "");
    let any = "GET, HEAD, POST";
    let cases: [(&str, &str, u16, Option<&str>); 10] = [
        ("CONNECT", "127.0.0.1:22", 405, Some(any)),
        ("OPTIONS", "*", 405, Some(any)),
        ("CONNECT", GL, 405, Some("POST")),
        ("TRACE", GL, 405, Some("POST")),
        ("OPTIONS", GL, 405, Some("POST")),
        (
            "DELETE",
            "/validate/general-ledger-codes/v1",
            405,
            Some("POST"),
        ),
        ("POST", "/openapi.json", 405, Some("GET, HEAD")),
        ("TRACE", "/docs/", 405, Some("GET, HEAD")),
        ("GET", "127.0.0.1:22", 400, None),
        ("GET", "http://x", 404, None),
    ];
    for (method, target, status, allow) in cases {
        let mut c = Http1::open(app.addr);
        c.send(format!("{method} {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        let r = c.answer();
        let what = format!("{method} {target}");
        assert_eq!(r.status, status, "{what}: {}", r.text);
        assert_eq!(r.header("allow"), allow, "{what}");
        let b = r.json();
        assert_eq!(b["status"], "FAILED", "{what}");
        assert_eq!(b["request_id"].as_str(), r.header("x-request-id"), "{what}");
        if status == 405 {
            let message = b["message"].as_str().unwrap();
            assert!(
                message.starts_with(&format!("method {method} is not allowed")),
                "{message}"
            );
        }
        c.send(&valid_post());
        assert_eq!(c.answer().status, 202, "{what}: the connection is kept");
    }
}

/// D26, D42: the admin listener keeps the intake listener's rules: the early look, 405 with
/// `Allow`, the header timeout (408) and a cap on connections (32) whose waiting connection is
/// served once the timeout frees a slot.
#[test]
fn the_admin_listener_follows_the_same_connection_rules_d26_d42() {
    let app = app("header_timeout_secs = 1", "");
    let ops = app.ops_addr();
    let ask = |bytes: &[u8]| {
        let mut c = Http1::open(ops);
        c.send(bytes);
        c.answer()
    };
    let r = ask(b"GET /healthz HTTP/1.1\r\n\r\n");
    assert_eq!(
        (r.status, says_close(&r)),
        (400, true),
        "no Host: {}",
        r.text
    );
    let r = ask(b"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n");
    assert_eq!(r.status, 400, "{}", r.text);
    let r = ask(b"GET /healthz HTTP/1.1\nHost: a\n\n");
    assert_eq!(r.status, 200, "bare LF: {}", r.text);
    for (method, target) in [
        ("CONNECT", "127.0.0.1:22"),
        ("POST", "/healthz"),
        ("TRACE", "/metrics"),
    ] {
        let r = ask(format!("{method} {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        assert_eq!(r.status, 405, "{method} {target}: {}", r.text);
        assert_eq!(r.header("allow"), Some("GET, HEAD"));
    }
    let started = Instant::now();
    let r = ask(b"GET /healthz HTTP/1.1\r\nHost: x\r\n");
    assert_eq!(r.status, 408, "{}", r.text);
    assert!(started.elapsed() < 5 * SECOND);
    // 32 idle connections hold every slot; the 33rd waits until the timeout frees them.
    let held: Vec<_> = (0..32)
        .map(|_| std::net::TcpStream::connect(ops).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut waiting = Http1::open(ops);
    waiting.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(
        !readable(&waiting.sock, Duration::from_millis(500)),
        "not served while the slots are taken"
    );
    assert_eq!(waiting.answer().status, 200);
    drop(held);
}

/// D42: the early look's verdict depends on the bytes, not on how they arrive: heads sent a
/// byte at a time are answered as when sent at once.
#[test]
fn a_head_sent_a_byte_at_a_time_is_judged_as_one_sent_at_once_d42() {
    let app = app("", "");
    let two_hosts = post_with_lines(&refs(&usual(&["Host: y"])));
    let bare = valid_post()
        .split(|&b| b == b'\r')
        .flatten()
        .copied()
        .collect::<Vec<u8>>();
    for (bytes, status) in [(valid_post(), 202), (bare, 202), (two_hosts, 400)] {
        let mut c = Http1::open(app.addr);
        c.sock.set_nodelay(true).unwrap();
        for b in &bytes {
            c.try_send(std::slice::from_ref(b));
        }
        let r = c.answer();
        assert_eq!(r.status, status, "{}", r.text);
    }
}

/// A GL POST with a chunked body made of `chunks` (each `(size line, data)`), then `tail`.
fn chunked_post(chunks: &[(&str, &str)], tail: &str) -> Vec<u8> {
    let mut r = format!(
        "POST {GL} HTTP/1.1\r\nHost: x\r\nx-api-key: {KEY}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    for (size, data) in chunks {
        r.push_str(&format!("{size}\r\n{data}\r\n"));
    }
    r.push_str(tail);
    r.into_bytes()
}

/// D42: a chunked body is read to its end, extensions and trailers included, and the
/// connection goes on with the next request; one that is not well formed gets 400 and the
/// connection is closed.
#[test]
fn chunked_bodies_end_where_hyper_ends_them_d42() {
    let app = app("", "");
    let body = gl_body();
    let (a, b) = body.split_at(body.len() / 2);
    let sizes = (format!("{:x}", a.len()), format!("{:X};ext=1", b.len()));
    for tail in ["0\r\n\r\n", "0\r\nx-trailer: 1\r\n\r\n"] {
        let mut c = Http1::open(app.addr);
        c.send(&chunked_post(&[(&sizes.0, a), (&sizes.1, b)], tail));
        assert_eq!(c.answer().status, 202, "{tail:?}");
        c.send(&valid_post());
        assert_eq!(c.answer().status, 202, "{tail:?}: the next request");
    }
    let mut c = Http1::open(app.addr);
    c.send(&chunked_post(&[("zz", a)], "0\r\n\r\n"));
    let r = c.answer();
    assert_eq!(r.status, 400, "{}", r.text);
    let message = r.json()["message"].as_str().unwrap().to_string();
    assert!(
        message.starts_with("the request body could not be read"),
        "{message}"
    );
    assert!(c.closed_within(5 * SECOND));
}
