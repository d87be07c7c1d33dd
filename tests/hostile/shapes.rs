//! No request of any shape makes a thread panic (D42): the real binary gets every odd shape of
//! request on both listeners, over HTTP/1 and HTTP/2, and its log must hold no panic line.
//! Before, `CONNECT 127.0.0.1:22` panicked in warp once per request, each with a backtrace.

use crate::common::process::Service;
use crate::common::*;
use crate::connections::wire::{END_HEADERS, END_STREAM, H2, HEADERS, literal};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

const GL: &str = "/general-ledger-codes/v1";

/// Requests of odd shapes, as raw bytes.
fn odd_shapes() -> Vec<Vec<u8>> {
    let mut shapes: Vec<Vec<u8>> = [
        &b"CONNECT 127.0.0.1:22 HTTP/1.1\r\n\r\n"[..],
        b"CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: 127.0.0.1:22\r\n\r\n",
        b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET 127.0.0.1:22 HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET http://x HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET http://x:99999/a HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET //x HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET / HTTP/1.1\nHost: x\n\n",
        b"\r\n\r\n\r\n",
        b"\x00\x01\x02\x03\r\n\r\n",
        b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03",
        b"GET / HTTP/2.0\r\nHost: x\r\n\r\n",
        b"GET / HTTP/1.2\r\nHost: x\r\n\r\n",
        b"GET /\r\n\r\n",
        b"G\x00T / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /\x7f HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /%00%ff HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /requests/%FF%FE HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /requests/ HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /docs/../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
        b"POST /validate/validate/general-ledger-codes/v1 HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /accounting-objects/v1?accountingType=%ZZ&&=x HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /general-ledger-codes/v1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"POST /general-ledger-codes/v1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffffff\r\n",
        b"POST /general-ledger-codes/v1 HTTP/1.1\r\nHost: x\r\nContent-Length: 18446744073709551615\r\n\r\n",
        b"POST /general-ledger-codes/v1 HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
        b"POST /general-ledger-codes/v1 HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nContent-Type: application/json\r\nContent-Length: 4\r\n\r\n\x1f\x8b\x00\x00",
        b"POST /general-ledger-codes/v1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json; charset\r\nContent-Length: 2\r\n\r\n{}",
        b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x09\x00\x00\x00\x00\x00",
    ]
    .iter()
    .map(|s| s.to_vec())
    .collect();
    shapes.push(format!("{} / HTTP/1.1\r\nHost: x\r\n\r\n", "A".repeat(10_000)).into_bytes());
    shapes.push(format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "%".repeat(9_000)).into_bytes());
    let methods = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "CONNECT", "OPTIONS", "TRACE", "FOO",
    ];
    let targets = [
        GL,
        "/",
        "*",
        "/openapi.json",
        "/docs/",
        "/requests/x",
        "/validate/general-ledger-codes/v1",
        "/healthz",
        "127.0.0.1:22",
        "http://x",
        "http://x/metrics",
    ];
    for method in methods {
        for target in targets {
            let head =
                format!("{method} {target} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
            shapes.push(head.into_bytes());
        }
    }
    shapes
}

/// Sends `bytes`, half-closes, and reads whatever comes back until the server closes.
fn send(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(bytes);
    let _ = s.shutdown(Shutdown::Write);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

/// HTTP/2 requests a client library would not send: CONNECT without a path, `OPTIONS *`.
fn h2_odd_requests(addr: SocketAddr) {
    let requests: [&[(&str, &str)]; 3] = [
        &[(":method", "CONNECT"), (":authority", "127.0.0.1:22")],
        &[
            (":method", "OPTIONS"),
            (":scheme", "http"),
            (":path", "*"),
            (":authority", "x"),
        ],
        &[(":method", "GET"), (":scheme", "http"), (":authority", "x")],
    ];
    for fields in requests {
        let mut h2 = H2::preface(TcpStream::connect(addr).unwrap());
        let mut block = Vec::new();
        for (name, value) in fields {
            literal(&mut block, name, value);
        }
        h2.frame(HEADERS, END_HEADERS | END_STREAM, 1, &block);
        let _ = h2.frames_until_closed(Duration::from_secs(5));
    }
}

#[test]
fn no_request_of_any_shape_makes_a_thread_panic_d42() {
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(&dir.path().join("data"), "", "").replace(
        "body_timeout_secs = 2",
        "body_timeout_secs = 1\nheader_timeout_secs = 1",
    );
    let file = dir.path().join("c.toml");
    std::fs::write(&file, text).unwrap();
    let mut service = Service::start(&file, dir.path());
    let admin = service.admin_addr().expect("the admin listener's address");
    let shapes = odd_shapes();
    for addr in [service.addr, admin] {
        for shape in &shapes {
            let answer = send(addr, shape);
            let text = String::from_utf8_lossy(&answer);
            assert!(
                answer.is_empty() || text.starts_with("HTTP/1.1 ") || text.starts_with("\0"),
                "{:?} got {text:?}",
                String::from_utf8_lossy(shape)
            );
        }
        h2_odd_requests(addr);
    }
    let ok = process::post(
        service.addr,
        GL,
        &serde_json::json!({"objects": {"object": {"record": [gl("4000")]}}}).to_string(),
        Some(KEY),
    );
    assert_eq!(ok.status, 202, "{}", ok.text);
    assert!(service.is_running());
    let log = service.stderr();
    assert!(!log.contains("panicked at"), "a thread panicked:\n{log}");
    assert_eq!(service.terminate().code(), Some(0));
}
