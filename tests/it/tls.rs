//! HTTPS on the intake listener (`[server.tls]`): serving the interfaces over TLS, ALPN and
//! protocol versions, mutual TLS (required / optional), the handshake timeout, and
//! `check-config` reading the certificate files. Certificates are made per test with rcgen.

use crate::common;
use common::*;

use ap_intake::config::Config;
use rcgen::ExtendedKeyUsagePurpose;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

const GL: &str = "/general-ledger-codes/v1";

// ---------------------------------------------------------------------------------------------
// Certificates

use common::certs::{Ca, Leaf};

/// The leaves these tests use.
trait Leaves {
    fn server_leaf(&self) -> Leaf;
    fn client_leaf(&self, name: &str) -> Leaf;
}

impl Leaves for Ca {
    /// The server's certificate: localhost and 127.0.0.1, not a CA.
    fn server_leaf(&self) -> Leaf {
        self.leaf(
            "localhost",
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    /// A client certificate (ExtendedKeyUsage ClientAuth).
    fn client_leaf(&self, name: &str) -> Leaf {
        self.leaf(name, &[name], ExtendedKeyUsagePurpose::ClientAuth)
    }
}

impl Leaf {
    fn ureq_cert(&self) -> ureq::tls::ClientCert {
        ureq::tls::ClientCert::new_with_certs(
            &[ureq::tls::Certificate::from_pem(self.cert_pem.as_bytes()).unwrap()],
            ureq::tls::PrivateKey::from_pem(self.key_pem.as_bytes()).unwrap(),
        )
    }

    fn rustls_chain(&self) -> Vec<CertificateDer<'static>> {
        vec![CertificateDer::from_pem_slice(self.cert_pem.as_bytes()).unwrap()]
    }

    fn rustls_key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).unwrap()
    }
}

/// Everything a test needs: the server CA and its leaf, two client CAs (CA1 trusted by the
/// server when mutual TLS is on, CA2 not) each with a client certificate, and the PEM files.
struct Pki {
    server_ca: Ca,
    client1: Leaf,
    client2: Leaf,
    files: tempfile::TempDir,
}

impl Pki {
    fn new() -> Self {
        let server_ca = Ca::new("ap-intake test server CA");
        let ca1 = Ca::new("ap-intake test client CA1");
        let ca2 = Ca::new("ap-intake test client CA2");
        let server = server_ca.server_leaf();
        let client1 = ca1.client_leaf("erp-one");
        let client2 = ca2.client_leaf("erp-two");
        let files = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(files.path().join(name), text).unwrap();
        write("server.crt", &server.cert_pem);
        write("server.key", &server.key_pem);
        write("server-ca.crt", &server_ca.pem());
        write("ca1.crt", &ca1.pem());
        write("ca2.crt", &ca2.pem());
        Self {
            server_ca,
            client1,
            client2,
            files,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.files.path().join(name)
    }

    /// `[server.tls]` with the server's cert and key, plus `extra` lines.
    fn tls_table(&self, extra: &str) -> String {
        tls_table(&self.path("server.crt"), &self.path("server.key"), extra)
    }

    /// `[server.tls]` with mutual TLS against CA1.
    fn mtls_table(&self, client_auth: &str) -> String {
        let extra = format!(
            "client_ca = '{}'\nclient_auth = \"{client_auth}\"\n",
            self.path("ca1.crt").display()
        );
        self.tls_table(&extra)
    }
}

pub(crate) fn tls_table(cert: &Path, key: &Path, extra: &str) -> String {
    format!(
        "[server.tls]\ncert = '{}'\nkey = '{}'\n{extra}",
        cert.display(),
        key.display()
    )
}

// ---------------------------------------------------------------------------------------------
// Config and service

/// The test config with `plain_http = true` taken out of `[server]`, `server_keys` added to
/// `[server]`, and `tls` (a `[server.tls]` table, or nothing) appended at the end.
fn tls_config_text(data_dir: &Path, server_keys: &str, tls: &str) -> String {
    let text = config_for(data_dir, "", NOWHERE, "");
    assert!(
        text.contains("[server]\n") && text.contains("plain_http = true\n"),
        "the shape of common::config_for changed:\n{text}"
    );
    let text = text.replacen("plain_http = true\n", "", 1).replacen(
        "[server]\n",
        &format!("[server]\n{server_keys}"),
        1,
    );
    // A `[server.tls]` header may come after other tables: it is a sub-table of [server].
    format!("{text}\n{tls}")
}

/// Starts the service in-process with `[server.tls]` = `tls` and extra `[server]` keys.
pub(crate) fn start_tls(server_keys: &str, tls: &str) -> TestApp {
    let dir = tempfile::tempdir().unwrap();
    let text = tls_config_text(&dir.path().join("data"), server_keys, tls);
    let config = Config::parse(&text, Path::new("t.toml"))
        .unwrap_or_else(|e| panic!("{e}\n--- config ---\n{text}"));
    assert!(config.server.tls.is_some(), "{text}");
    TestApp::start_config(dir, config)
}

fn gl_body(code: &str) -> String {
    let mut record = fixture("general-ledger-codes", "minimal");
    record["code"] = Value::from(code);
    envelope(&[record]).to_string()
}

// ---------------------------------------------------------------------------------------------
// Clients

/// POSTs a GL code with ureq over HTTPS to `https://localhost:<port>`, trusting `ca`,
/// presenting `client` when given. `Err` is ureq's error (handshake refused, reset, ...).
fn https_post(
    addr: SocketAddr,
    ca: &Ca,
    client: Option<&Leaf>,
    code: &str,
) -> Result<Reply, ureq::Error> {
    let roots = ureq::tls::RootCerts::Specific(Arc::new(vec![
        ureq::tls::Certificate::from_pem(ca.pem().as_bytes()).unwrap(),
    ]));
    let tls = ureq::tls::TlsConfig::builder()
        .provider(ureq::tls::TlsProvider::Rustls)
        .root_certs(roots)
        .client_cert(client.map(Leaf::ureq_cert))
        .build();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .tls_config(tls)
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into();
    let url = format!("https://localhost:{}{GL}", addr.port());
    let mut resp = agent
        .post(&url)
        .header("x-api-key", KEY)
        .header("Content-Type", "application/json")
        .send(gl_body(code))?;
    Ok(reply_of(&mut resp))
}

/// Asserts the documented 202 answer for one queued record.
fn assert_accepted(r: &Reply) {
    assert_eq!(r.status, 202, "{}", r.text);
    let b = r.json();
    assert_eq!(b["status"], "SUCCESS", "{}", r.text);
    assert_eq!(b["total"], 1, "{}", r.text);
    assert_eq!(b["succeeded"], 1, "{}", r.text);
    assert_eq!(b["failed"], 0, "{}", r.text);
    assert_eq!(b["errors"], serde_json::json!([]), "{}", r.text);
    assert_eq!(b["message"], "1 record(s) queued", "{}", r.text);
    assert!(b["request_id"].is_string(), "{}", r.text);
    assert_eq!(b["request_id"].as_str(), r.header("x-request-id"));
}

/// A rustls client config trusting `ca`, with these versions and ALPN protocols.
fn rustls_client(
    ca: &Ca,
    versions: &[&'static rustls::SupportedProtocolVersion],
    alpn: &[&[u8]],
    client: Option<&Leaf>,
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.pem().as_bytes()).unwrap())
        .unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(versions)
    .unwrap()
    .with_root_certificates(roots);
    let mut config = match client {
        Some(leaf) => builder
            .with_client_auth_cert(leaf.rustls_chain(), leaf.rustls_key())
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// A completed TLS handshake with `addr` as "localhost".
struct Session {
    conn: rustls::ClientConnection,
    sock: TcpStream,
}

impl Session {
    fn connect(addr: SocketAddr, config: Arc<rustls::ClientConfig>) -> Result<Self, String> {
        let name = ServerName::try_from("localhost").unwrap();
        let mut conn = rustls::ClientConnection::new(config, name).map_err(|e| e.to_string())?;
        let mut sock = TcpStream::connect(addr).map_err(|e| e.to_string())?;
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        while conn.is_handshaking() {
            conn.complete_io(&mut sock)
                .map_err(|e| format!("handshake: {e}"))?;
        }
        Ok(Self { conn, sock })
    }

    fn alpn(&self) -> Option<String> {
        self.conn
            .alpn_protocol()
            .map(|p| String::from_utf8_lossy(p).to_string())
    }

    /// Sends one HTTP/1.1 POST of a GL code and reads the answer to the end.
    fn post_http1(mut self, code: &str) -> Reply {
        let body = gl_body(code);
        let request = format!(
            "POST {GL} HTTP/1.1\r\nHost: localhost\r\nx-api-key: {KEY}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let mut stream = rustls::Stream::new(&mut self.conn, &mut self.sock);
        stream.write_all(request.as_bytes()).unwrap();
        stream.flush().unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            match stream.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                // A peer that closes without close_notify: keep what arrived.
                Err(_) => break,
            }
        }
        parse_raw(&buf)
    }
}

// ---------------------------------------------------------------------------------------------
// Tests

#[test]
fn https_serves_the_interfaces() {
    let pki = Pki::new();
    let app = start_tls("", &pki.tls_table(""));

    let r = https_post(app.addr, &pki.server_ca, None, "4000").expect("HTTPS request");
    assert_accepted(&r);
    assert!(app.item("gl-code:main/4000").is_some(), "queued over HTTPS");

    // Plain HTTP to the TLS port is not served.
    let body = gl_body("4001");
    let raw = format!(
        "POST {GL} HTTP/1.1\r\nHost: 127.0.0.1\r\nx-api-key: {KEY}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut s = TcpStream::connect(app.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let _ = s.write_all(raw.as_bytes());
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let r = parse_raw(&buf);
    assert!(
        !(200..300).contains(&r.status),
        "plain HTTP on the TLS port was answered {}: {}",
        r.status,
        String::from_utf8_lossy(&buf)
    );
    assert!(
        app.item("gl-code:main/4001").is_none(),
        "a plain-HTTP request to the TLS port queued its record"
    );

    // ureq speaking http:// to the TLS port fails or gets no success either.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(15)))
        .build()
        .into();
    let plain = agent
        .post(&format!("http://{}{GL}", app.addr))
        .header("x-api-key", KEY)
        .header("Content-Type", "application/json")
        .send(gl_body("4002"));
    if let Ok(resp) = plain {
        assert!(
            !resp.status().is_success(),
            "plain HTTP on the TLS port: {}",
            resp.status()
        );
    }
    assert!(app.item("gl-code:main/4002").is_none());

    // And the listener still serves HTTPS afterwards.
    let r = https_post(app.addr, &pki.server_ca, None, "4003").expect("HTTPS request");
    assert_accepted(&r);
}

#[test]
fn alpn_offers_h2_and_http11() {
    let pki = Pki::new();
    let app = start_tls("", &pki.tls_table(""));
    let both = &[&rustls::version::TLS13, &rustls::version::TLS12][..];

    let s = Session::connect(
        app.addr,
        rustls_client(&pki.server_ca, both, &[b"h2", b"http/1.1"], None),
    )
    .unwrap();
    assert_eq!(s.alpn().as_deref(), Some("h2"), "h2 is preferred");
    assert_eq!(
        s.conn.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_3),
        "TLS 1.3 when the client offers it"
    );

    let s = Session::connect(
        app.addr,
        rustls_client(&pki.server_ca, both, &[b"http/1.1"], None),
    )
    .unwrap();
    assert_eq!(s.alpn().as_deref(), Some("http/1.1"));
    assert_accepted(&s.post_http1("4000"));

    // A client that does not speak either protocol gets no agreement (or no connection).
    if let Ok(s) = Session::connect(
        app.addr,
        rustls_client(&pki.server_ca, both, &[b"spdy/3"], None),
    ) {
        assert_eq!(
            s.alpn(),
            None,
            "the server must not pick an unoffered protocol"
        );
    }

    // TLS 1.2 is allowed.
    let s = Session::connect(
        app.addr,
        rustls_client(
            &pki.server_ca,
            &[&rustls::version::TLS12],
            &[b"h2", b"http/1.1"],
            None,
        ),
    )
    .expect("a TLS 1.2-only client connects");
    assert_eq!(
        s.conn.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_2)
    );
    assert_eq!(s.alpn().as_deref(), Some("h2"));
    let s = Session::connect(
        app.addr,
        rustls_client(
            &pki.server_ca,
            &[&rustls::version::TLS12],
            &[b"http/1.1"],
            None,
        ),
    )
    .unwrap();
    assert_accepted(&s.post_http1("4001"));
}

#[test]
fn mutual_tls_required() {
    let pki = Pki::new();
    let app = start_tls("", &pki.mtls_table("required"));

    let r = https_post(app.addr, &pki.server_ca, Some(&pki.client1), "4000")
        .expect("a CA1 client certificate is accepted");
    assert_accepted(&r);

    match https_post(app.addr, &pki.server_ca, Some(&pki.client2), "4001") {
        Err(_) => {}
        Ok(r) => panic!(
            "a certificate from another CA must be refused; got {}: {}",
            r.status, r.text
        ),
    }
    match https_post(app.addr, &pki.server_ca, None, "4002") {
        Err(_) => {}
        Ok(r) => panic!(
            "no client certificate must be refused; got {}: {}",
            r.status, r.text
        ),
    }
    assert!(app.item("gl-code:main/4001").is_none());
    assert!(app.item("gl-code:main/4002").is_none());

    // The same at the TLS level, over TLS 1.2 (where the server decides inside the handshake).
    let tls12 = &[&rustls::version::TLS12][..];
    let alpn: &[&[u8]] = &[b"http/1.1"];
    assert!(
        Session::connect(app.addr, rustls_client(&pki.server_ca, tls12, alpn, None)).is_err(),
        "TLS 1.2 handshake without a client certificate must be refused"
    );
    assert!(
        Session::connect(
            app.addr,
            rustls_client(&pki.server_ca, tls12, alpn, Some(&pki.client2))
        )
        .is_err(),
        "TLS 1.2 handshake with a CA2 certificate must be refused"
    );
    let s = Session::connect(
        app.addr,
        rustls_client(&pki.server_ca, tls12, alpn, Some(&pki.client1)),
    )
    .expect("TLS 1.2 handshake with a CA1 certificate");
    assert_accepted(&s.post_http1("4003"));
}

#[test]
fn mutual_tls_optional() {
    let pki = Pki::new();
    let app = start_tls("", &pki.mtls_table("optional"));

    let r = https_post(app.addr, &pki.server_ca, None, "4000")
        .expect("no client certificate is fine when optional");
    assert_accepted(&r);

    let r = https_post(app.addr, &pki.server_ca, Some(&pki.client1), "4001")
        .expect("a CA1 client certificate is accepted");
    assert_accepted(&r);

    match https_post(app.addr, &pki.server_ca, Some(&pki.client2), "4002") {
        Err(_) => {}
        Ok(r) => panic!(
            "a certificate from another CA must be refused even when optional; got {}: {}",
            r.status, r.text
        ),
    }
    assert!(app.item("gl-code:main/4002").is_none());

    let tls12 = &[&rustls::version::TLS12][..];
    assert!(
        Session::connect(
            app.addr,
            rustls_client(&pki.server_ca, tls12, &[b"http/1.1"], Some(&pki.client2))
        )
        .is_err(),
        "TLS 1.2 handshake with a CA2 certificate must be refused"
    );
}

#[test]
fn a_stalled_handshake_times_out() {
    let pki = Pki::new();
    let app = start_tls("handshake_timeout_secs = 1\n", &pki.tls_table(""));

    let mut s = TcpStream::connect(app.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(6))).unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 64];
    let outcome = s.read(&mut buf);
    let waited = started.elapsed();
    match &outcome {
        Ok(0) => {}
        Err(e)
            if !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) => {}
        other => panic!("the server did not close a silent connection: {other:?} after {waited:?}"),
    }
    assert!(
        waited < Duration::from_secs(3),
        "closed only after {waited:?} (handshake_timeout_secs = 1)"
    );
    assert!(
        waited >= Duration::from_millis(800),
        "closed after {waited:?}, before the handshake timeout"
    );

    // A handshake that starts but stalls halfway (ClientHello sent, nothing more) is bounded
    // the same way: the server's flight arrives, then the connection is closed.
    let mut s = TcpStream::connect(app.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(6))).unwrap();
    let mut conn = rustls::ClientConnection::new(
        rustls_client(
            &pki.server_ca,
            &[&rustls::version::TLS13],
            &[b"http/1.1"],
            None,
        ),
        ServerName::try_from("localhost").unwrap(),
    )
    .unwrap();
    conn.write_tls(&mut s).unwrap(); // the ClientHello
    let started = Instant::now();
    let mut sink = Vec::new();
    let _ = s.read_to_end(&mut sink);
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(3),
        "a half-done handshake was kept {waited:?}"
    );

    // The service still serves.
    let r = https_post(app.addr, &pki.server_ca, None, "4000").expect("HTTPS request");
    assert_accepted(&r);
}

/// Runs `check-config --config FILE` on `text`: (success, stdout, stderr).
fn check_config(dir: &Path, name: &str, text: &str) -> (bool, String, String) {
    let file = dir.join(name);
    std::fs::write(&file, text).unwrap();
    let out = process::bin()
        .args(["check-config", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn check_config_verifies_the_certificates() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let text = |tls: &str| tls_config_text(&data, "", tls);

    let (ok, out, err) = check_config(dir.path(), "good.toml", &text(&pki.tls_table("")));
    assert!(ok, "stdout: {out}\nstderr: {err}");
    assert!(out.contains("OK"), "{out}");
    assert!(
        out.contains("https"),
        "the listener is reported as HTTPS: {out}"
    );

    let (ok, out, err) = check_config(dir.path(), "mtls.toml", &text(&pki.mtls_table("optional")));
    assert!(ok, "stdout: {out}\nstderr: {err}");
    assert!(out.contains("OK"), "{out}");

    // The key file does not exist.
    let missing = tls_table(&pki.path("server.crt"), &pki.path("no-such-file.key"), "");
    let (ok, out, err) = check_config(dir.path(), "missing-key.toml", &text(&missing));
    assert!(!ok, "a missing key file passed: {out}");
    assert!(err.contains("server.tls.key"), "stderr: {err}");

    // The cert file is not PEM.
    std::fs::write(pki.path("garbage.crt"), "this is not a certificate\n").unwrap();
    let garbage = tls_table(&pki.path("garbage.crt"), &pki.path("server.key"), "");
    let (ok, out, err) = check_config(dir.path(), "garbage-cert.toml", &text(&garbage));
    assert!(!ok, "a non-PEM cert passed: {out}");
    assert!(err.contains("server.tls.cert"), "stderr: {err}");

    // The key belongs to another certificate.
    let other = pki.server_ca.server_leaf();
    std::fs::write(pki.path("other.key"), &other.key_pem).unwrap();
    let mismatch = tls_table(&pki.path("server.crt"), &pki.path("other.key"), "");
    let (ok, out, err) = check_config(dir.path(), "mismatch.toml", &text(&mismatch));
    assert!(!ok, "a key that does not fit the certificate passed: {out}");
    assert!(err.contains("server.tls.key"), "stderr: {err}");

    // The client CA file does not exist.
    let no_ca = pki.tls_table(&format!(
        "client_ca = '{}'\n",
        pki.path("no-such-ca.crt").display()
    ));
    let (ok, out, err) = check_config(dir.path(), "missing-ca.toml", &text(&no_ca));
    assert!(!ok, "a missing client_ca passed: {out}");
    assert!(err.contains("server.tls.client_ca"), "stderr: {err}");

    // Neither [server.tls] nor plain_http, outside sandbox.
    let (ok, out, err) = check_config(dir.path(), "no-tls.toml", &text(""));
    assert!(
        !ok,
        "a production config without TLS or plain_http passed: {out}"
    );
    assert!(err.contains("server.tls"), "stderr: {err}");
}
