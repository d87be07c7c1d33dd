//! The early look and hyper agree (D42): for generated request heads (line ends, field counts
//! and sizes, absent or repeated Host and Content-Length, Transfer-Encoding with or without
//! Content-Length, whitespace in names, obs-fold, long request lines), the service's early look
//! (`ap_intake::http::head::look`) and hyper's HTTP/1 server, reading the same bytes over an
//! in-memory stream, agree on where the head ends, where its body ends, and what it declares.
//! The early look may refuse more than hyper, but only for a rule of D42 and on facts hyper saw
//! alike; whatever hyper refuses, the early look refuses too.

use ap_intake::http::head::{self, Framing, Look};
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use proptest::prelude::*;
use proptest::sample::select;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What hyper's service saw of one request.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    target: String,
    hosts: Vec<Vec<u8>>,
    chunked: bool,
    body: Vec<u8>,
}

/// One header field of a generated head.
#[derive(Debug, Clone)]
enum Field {
    Host(&'static str),
    Length(&'static str),
    Coding(&'static str),
    Connection(&'static str),
    Filler(usize),
    SpaceInName,
    ObsFold,
}

fn field() -> impl Strategy<Value = Field> {
    prop_oneof![
        4 => select(vec!["x", "example.com:8080", ""]).prop_map(Field::Host),
        3 => select(vec!["0", "5", "12", "5, 5", "abc", "-1", "+5"]).prop_map(Field::Length),
        2 => select(vec!["chunked", "chunked", "chunked", "gzip", "gzip, chunked", "chunked, chunked", "", "Chunked", "chunked, "])
            .prop_map(Field::Coding),
        1 => select(vec!["close", "keep-alive", "Keep-Alive, x"]).prop_map(Field::Connection),
        8 => prop_oneof![6 => 0usize..64, 3 => 0usize..3000, 1 => 62_000usize..68_000]
            .prop_map(Field::Filler),
        1 => Just(Field::SpaceInName),
        1 => Just(Field::ObsFold),
    ]
}

fn line(f: &Field, i: usize) -> String {
    match f {
        Field::Host(v) => format!("Host: {v}"),
        Field::Length(v) => format!("Content-Length: {v}"),
        Field::Coding(v) => format!("Transfer-Encoding: {v}"),
        Field::Connection(v) => format!("Connection: {v}"),
        Field::Filler(n) => format!("x-f{i}: {}", "a".repeat(*n)),
        Field::SpaceInName => "x-bad : 1".into(),
        Field::ObsFold => format!("x-o{i}: 1\r\n  more"),
    }
}

prop_compose! {
    /// A request head: request line, fields, blank line; each line ends in CRLF or bare LF.
    fn a_head()(
        method in select(vec!["GET", "POST", "PUT", "CONNECT", "OPTIONS", "TRACE"]),
        target in prop_oneof![
            6 => select(vec!["/general-ledger-codes/v1", "/x?y=1", "*", "127.0.0.1:22", "http://h/p"])
                .prop_map(str::to_string),
            1 => (8100usize..8250).prop_map(|n| format!("/{}", "a".repeat(n))),
        ],
        version in select(vec!["HTTP/1.1", "HTTP/1.0"]),
        fields in prop_oneof![
            6 => proptest::collection::vec(field(), 0..6),
            1 => proptest::collection::vec((0usize..20).prop_map(Field::Filler), 97..102),
        ],
        host_first in any::<bool>(),
        bare in proptest::collection::vec(any::<bool>(), 110),
    ) -> Vec<u8> {
        let mut lines = vec![format!("{method} {target} {version}")];
        if host_first {
            lines.push("Host: x".into());
        }
        lines.extend(fields.iter().enumerate().map(|(i, f)| line(f, i)));
        let mut head = String::new();
        for (i, l) in lines.iter().chain([&String::new()]).enumerate() {
            head.push_str(l);
            head.push_str(if bare[i % bare.len()] { "\n" } else { "\r\n" });
        }
        head.into_bytes()
    }
}

/// The body the head frames, as bytes on the wire, and as hyper hands it on.
fn body_for(framing: Framing) -> (Vec<u8>, Vec<u8>) {
    match framing {
        Framing::Empty => (Vec::new(), Vec::new()),
        Framing::Length(n) => {
            let body = vec![b'b'; usize::try_from(n).unwrap()];
            (body.clone(), body)
        }
        Framing::Chunked => (b"3\r\nabc\r\n0\r\n\r\n".to_vec(), b"abc".to_vec()),
    }
}

/// A second request after the first: hyper serves it only if it found the first one's end
/// where the early look did.
const SECOND: &[u8] = b"GET /second HTTP/1.1\r\nHost: y\r\n\r\n";

/// Serves `bytes` with hyper's HTTP/1 server over an in-memory stream (the client half-closes
/// after them); what the service saw, and what hyper wrote back.
fn hyper_reads(bytes: &[u8]) -> (Vec<Seen>, Vec<u8>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let service =
            hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                let log = Arc::clone(&log);
                async move {
                    let mut s = Seen {
                        method: req.method().to_string(),
                        target: req.uri().to_string(),
                        hosts: req
                            .headers()
                            .get_all("host")
                            .iter()
                            .map(|v| v.as_bytes().to_vec())
                            .collect(),
                        chunked: req.headers().contains_key("transfer-encoding"),
                        body: Vec::new(),
                    };
                    if let Ok(body) = req.into_body().collect().await {
                        s.body = body.to_bytes().to_vec();
                    }
                    log.lock().unwrap().push(s);
                    let mut r = http::Response::new(http_body_util::Empty::<bytes::Bytes>::new());
                    *r.status_mut() = http::StatusCode::NOT_FOUND; // never an upgrade
                    Ok::<_, std::convert::Infallible>(r)
                }
            });
        let conn = hyper::server::conn::http1::Builder::new()
            .half_close(true)
            .serve_connection(TokioIo::new(server), service);
        let served = tokio::spawn(conn);
        // hyper may refuse and close before it has read everything.
        let _ = client.write_all(bytes).await;
        let _ = client.shutdown().await;
        let mut answer = Vec::new();
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            client.read_to_end(&mut answer),
        );
        let _ = read.await;
        let _ = served.await;
        let seen = seen.lock().unwrap().clone();
        (seen, answer)
    })
}

/// Refusals of a D42 rule that hyper itself lets through.
const STRICTER_THAN_HYPER: &[&str] = &[
    "Host header count",
    "Content-Length with Transfer-Encoding",
    "transfer coding",
    "request line too long",
    "header block too large",
];

fn check(head_bytes: &[u8]) -> Result<(), TestCaseError> {
    match head::look(head_bytes) {
        Look::Head(h) => {
            let (on_wire, handed_on) = body_for(h.framing);
            let bytes = [head_bytes, &on_wire, SECOND].concat();
            let (seen, answer) = hyper_reads(&bytes);
            let expected = 1 + usize::from(h.keep_alive);
            prop_assert_eq!(
                seen.len(),
                expected,
                "hyper answered {:?}",
                String::from_utf8_lossy(&answer)
            );
            let first = &seen[0];
            prop_assert_eq!(&first.method, h.method);
            prop_assert_eq!(&first.target, h.target);
            let hosts: Vec<Vec<u8>> = h.hosts.iter().map(|v| v.to_vec()).collect();
            prop_assert_eq!(&first.hosts, &hosts);
            prop_assert_eq!(first.chunked, h.framing == Framing::Chunked);
            prop_assert_eq!(&first.body, &handed_on, "where the body ends");
            if h.keep_alive {
                prop_assert_eq!(&seen[1].target, "/second", "where the head ends");
            }
        }
        Look::Refused(r) => {
            let bytes = [head_bytes, SECOND].concat();
            let (seen, _) = hyper_reads(&bytes);
            if let Some(first) = seen.first() {
                prop_assert!(
                    STRICTER_THAN_HYPER.contains(&r.reason),
                    "hyper served what the early look refused for {:?}: {:?}",
                    r.reason,
                    first
                );
                if r.reason == "Host header count" {
                    prop_assert!(first.hosts.len() != 1, "{:?}", first);
                }
                if r.reason == "Content-Length with Transfer-Encoding" {
                    prop_assert!(first.chunked, "{:?}", first);
                }
            }
        }
        Look::Partial => {
            let (seen, _) = hyper_reads(head_bytes);
            prop_assert!(
                seen.is_empty(),
                "hyper served a head the early look found incomplete"
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_early_look_and_hyper_agree_on_generated_heads_d42(head in a_head()) {
        check(&head)?;
    }
}

/// The shapes of the issue, each looked at as hyper would read it.
#[test]
fn the_early_look_and_hyper_agree_on_the_shapes_of_d42() {
    let shapes: [&[u8]; 8] = [
        b"GET / HTTP/1.1\nHost: x\n\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost : x\r\n\r\n",
        b"GET / HTTP/1.1\r\n\r\n",
        b"CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: x\r\n\r\n",
        // hyper reads only the last coding of the last line (found by the generated heads).
        b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, chunked\r\nTransfer-Encoding: \r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked,\r\n\r\n",
    ];
    for shape in shapes {
        check(shape).unwrap_or_else(|e| panic!("{:?}: {e}", String::from_utf8_lossy(shape)));
    }
}
