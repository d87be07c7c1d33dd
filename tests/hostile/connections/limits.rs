//! Connection slots (D26): per client address, against a preface flood, during the TLS
//! handshake, and the `[server]` keys that bound them.

use super::wire::*;
use super::{GL, SECOND, app, gl_body, valid_post};
use crate::common::*;
use ap_intake::config::Config;
use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const FROM_A: [u8; 4] = [127, 0, 0, 1];
const FROM_B: [u8; 4] = [127, 0, 0, 2];

/// D26: 64 connections (the default `max_connections_per_ip`) from one address are served; the
/// 65th from it is closed at once, while another address is still served; once one of the 64
/// ends, the address may connect again.
#[test]
fn connections_per_client_address_are_capped_d26() {
    let app = app("", "");
    let mut held: Vec<TcpStream> = (0..64).map(|_| connect_from(FROM_A, app.addr)).collect();
    let mut over = connect_from(FROM_A, app.addr);
    assert!(closed_within(&mut over, 3 * SECOND), "the 65th is closed");
    let mut other = Http1::new(connect_from(FROM_B, app.addr));
    other.send(&valid_post());
    assert_eq!(other.answer().status, 202, "another address is served");
    // A held connection that sends a request is served as usual.
    let mut first = Http1::new(held.remove(0));
    first.send(&valid_post());
    assert_eq!(first.answer().status, 202);
    drop(first);
    let deadline = Instant::now() + 5 * SECOND;
    loop {
        let mut again = Http1::new(connect_from(FROM_A, app.addr));
        again.try_send(&valid_post());
        if again.try_answer().is_ok_and(|r| r.status == 202) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a freed place is never given again"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// D26: a flood of HTTP/2 prefaces from one address takes at most its own share of the slots:
/// another address's request is answered at once, although the header timeout (10 s) would
/// not free the flood's connections before the client gave up.
#[test]
fn a_preface_flood_from_one_address_does_not_stop_another_address_d26() {
    let app = app("max_connections = 8\nmax_connections_per_ip = 4", "");
    let flood: Vec<H2> = (0..30)
        .map(|_| H2::preface(connect_from(FROM_A, app.addr)))
        .collect();
    let started = Instant::now();
    let mut other = Http1::new(connect_from(FROM_B, app.addr));
    other.sock.set_read_timeout(Some(3 * SECOND)).unwrap();
    other.send(&valid_post());
    assert_eq!(other.answer().status, 202);
    assert!(started.elapsed() < 3 * SECOND);
    drop(flood);
}

/// D26: `max_connections` counts a connection during its TLS handshake: one client that
/// connects and never completes the handshake keeps the next one's handshake waiting while
/// it holds the only slot.
#[test]
fn the_connection_cap_counts_connections_in_their_tls_handshake_d26() {
    let (files, client) = tls_files();
    let tables = format!(
        "[server.tls]\ncert = \"{}\"\nkey = \"{}\"\n",
        files.path().join("cert.pem").display(),
        files.path().join("key.pem").display()
    );
    let dir = tempfile::tempdir().unwrap();
    let text = config_for(&dir.path().join("data"), "", NOWHERE, &tables)
        .replace("plain_http = true", "max_connections = 1");
    let app = TestApp::start_config(dir, Config::parse(&text, Path::new("t.toml")).unwrap());
    let stuck = TcpStream::connect(app.addr).unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = rustls::ClientConnection::new(client, name).unwrap();
    let mut sock = TcpStream::connect(app.addr).unwrap();
    tls.write_tls(&mut sock).unwrap(); // the ClientHello
    assert!(
        !readable(&sock, Duration::from_millis(700)),
        "no ServerHello while the stuck client holds the slot"
    );
    drop(stuck);
    sock.set_read_timeout(Some(10 * SECOND)).unwrap();
    while tls.is_handshaking() {
        tls.complete_io(&mut sock).unwrap();
    }
    let body = gl_body();
    let mut stream = rustls::Stream::new(&mut tls, &mut sock);
    stream
        .write_all(&request(
            "POST",
            GL,
            &[
                ("x-api-key", KEY),
                ("Content-Type", "application/json"),
                ("Connection", "close"),
            ],
            &body,
        ))
        .unwrap();
    let mut answer = Vec::new();
    let _ = std::io::Read::read_to_end(&mut stream, &mut answer);
    assert_eq!(parse_raw(&answer).status, 202);
}

/// A self-signed certificate for localhost as PEM files (`cert.pem`, `key.pem`), and a client
/// config trusting it.
fn tls_files() -> (tempfile::TempDir, Arc<rustls::ClientConfig>) {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    let files = tempfile::tempdir().unwrap();
    std::fs::write(files.path().join("cert.pem"), cert.pem()).unwrap();
    std::fs::write(files.path().join("key.pem"), key.serialize_pem()).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.der().clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    (files, Arc::new(config))
}

/// D26: the new `[server]` keys are checked like the others (0 refused naming the key; a
/// per-address cap above `max_connections` refused), documented in config.example.toml with
/// their defaults, and default to 16 streams and 64 connections per address.
#[test]
fn the_connection_keys_are_checked_documented_and_defaulted_d26() {
    let parse = |server: &str| {
        Config::parse(
            &format!("sandbox = true\n[server]\n{server}\n"),
            Path::new("c.toml"),
        )
        .map_err(|e| e.to_string())
    };
    for key in ["max_streams_per_connection", "max_connections_per_ip"] {
        let e = parse(&format!("{key} = 0")).unwrap_err();
        assert!(
            e.contains(&format!("server.{key}")) && e.contains("at least 1"),
            "{e}"
        );
    }
    let e = parse("max_connections = 10\nmax_connections_per_ip = 11").unwrap_err();
    assert!(
        e.contains("server.max_connections_per_ip") && e.contains("max_connections (10)"),
        "{e}"
    );
    let c = parse("").unwrap();
    assert_eq!(
        (
            c.server.max_streams_per_connection,
            c.server.max_connections_per_ip
        ),
        (16, 64)
    );
    let sandbox = Config::sandbox_default();
    assert_eq!(
        (
            sandbox.server.max_streams_per_connection,
            sandbox.server.max_connections_per_ip
        ),
        (16, 64)
    );
    let c = parse("max_connections = 10").unwrap();
    assert_eq!(
        c.server.max_connections_per_ip, 10,
        "the default fits max_connections"
    );
    let c =
        parse("max_connections = 10\nmax_connections_per_ip = 10\nmax_streams_per_connection = 3")
            .unwrap();
    assert_eq!(
        (
            c.server.max_connections_per_ip,
            c.server.max_streams_per_connection
        ),
        (10, 3)
    );
    let example = ap_intake::config::EXAMPLE;
    for line in [
        "max_connections_per_ip = 64\n",
        "max_streams_per_connection = 16\n",
    ] {
        assert!(example.contains(line), "config.example.toml lacks {line:?}");
    }
}
