//! Reaching the platform through a corporate network (D33): the operating system's trust
//! store plus `[platform] ca_file`, a client certificate for mutual TLS, a proxy from
//! `[platform] proxy` or the `https_proxy`/`no_proxy` environment, and OAuth2 client
//! credentials (token cached until it expires, fetched again after a 401; a refusing token
//! endpoint pauses delivery, D32). Every peer is a real listener made here: an HTTPS platform
//! with a private CA (rcgen, rustls), a tunnelling proxy that records what it was asked, and
//! a token endpoint that counts its fetches. `check-config` runs the real binary.

use crate::common;
use ap_intake::config::Config;
use ap_intake::queue::State;
use common::process::{bin, post, wait_listening};
use common::receiver::gl_records;
use common::*;
use rcgen::ExtendedKeyUsagePurpose;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::json;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const GL: &str = "/general-ledger-codes/v1";
const GL_ID: &str = "general-ledger-codes-v1";
const VENDOR: &str = "/vendor-data/v1";
const VENDOR_ID: &str = "vendor-data-v1";
const FAST: &str = "[delivery]\nbackoff_base_ms = 20\nbackoff_cap_ms = 200\ntimeout_secs = 5\n";
const WAIT: Duration = Duration::from_secs(15);
/// Every variable ureq's `Proxy::try_from_env` reads; removed from child processes before a
/// test sets the ones it means.
const PROXY_VARS: [&str; 8] = [
    "ALL_PROXY",
    "all_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "NO_PROXY",
    "no_proxy",
];

// ---------------------------------------------------------------------------------------------
// Certificates

use common::certs::{Ca, Leaf};

impl Leaf {
    fn der(&self) -> Vec<u8> {
        CertificateDer::from_pem_slice(self.cert_pem.as_bytes())
            .unwrap()
            .to_vec()
    }
}

/// The platform's private CA and server certificate (127.0.0.1 and localhost), a separate
/// client CA with one client certificate, and all of them as PEM files:
/// `ca.pem`, `client.pem`, `client.key`, `server.pem`, `server.key`.
struct Pki {
    server: Leaf,
    client: Leaf,
    client_ca_pem: String,
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Self {
        let server_ca = Ca::new("platform test CA");
        let client_ca = Ca::new("platform client CA");
        let server = server_ca.leaf(
            "localhost",
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let client = client_ca.leaf(
            "ap-intake",
            &["ap-intake.example"],
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in [
            ("ca.pem", server_ca.pem()),
            ("client.pem", client.cert_pem.clone()),
            ("client.key", client.key_pem.clone()),
            ("server.pem", server.cert_pem.clone()),
            ("server.key", server.key_pem.clone()),
        ] {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        Self {
            server,
            client,
            client_ca_pem: client_ca.pem(),
            dir,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `ca_file = "<ca.pem>"`.
    fn ca_line(&self) -> String {
        format!("ca_file = \"{}\"\n", self.path("ca.pem").display())
    }

    /// `client_cert` and `client_key`.
    fn client_lines(&self) -> String {
        format!(
            "client_cert = \"{}\"\nclient_key = \"{}\"\n",
            self.path("client.pem").display(),
            self.path("client.key").display()
        )
    }

    /// The platform's TLS settings; with `client_auth` a client certificate signed by the
    /// client CA is required.
    fn server_tls(&self, client_auth: bool) -> Arc<rustls::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .unwrap();
        let builder = if client_auth {
            let mut roots = rustls::RootCertStore::empty();
            roots
                .add(CertificateDer::from_pem_slice(self.client_ca_pem.as_bytes()).unwrap())
                .unwrap();
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let chain = vec![CertificateDer::from_pem_slice(self.server.cert_pem.as_bytes()).unwrap()];
        let key = PrivateKeyDer::from_pem_slice(self.server.key_pem.as_bytes()).unwrap();
        Arc::new(builder.with_single_cert(chain, key).unwrap())
    }
}

// ---------------------------------------------------------------------------------------------
// A platform (or token endpoint) over HTTP or HTTPS

/// One request a server received, with the status it was answered.
#[derive(Debug, Clone)]
struct Req {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: String,
    /// The client certificate presented in the TLS handshake (DER).
    client_cert: Option<Vec<u8>>,
    status: u16,
}

impl Req {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn form(&self) -> HashMap<String, String> {
        form_urlencoded::parse(self.body.as_bytes())
            .into_owned()
            .collect()
    }
}

/// `(status, body)`; the body is sent as JSON.
type Handler = Arc<dyn Fn(&Req) -> (u16, String) + Send + Sync>;

struct ServerState {
    log: Mutex<Vec<Req>>,
    handshake_errors: Mutex<Vec<String>>,
    handler: Mutex<Handler>,
}

/// A listener answering every request with its handler (200 unless told), one request per
/// connection (`Connection: close`), recording requests and failed TLS handshakes.
struct Server {
    addr: SocketAddr,
    tls: bool,
    state: Arc<ServerState>,
    stop: Arc<AtomicBool>,
}

impl Server {
    fn plain() -> Self {
        Self::start(None)
    }

    fn https(config: Arc<rustls::ServerConfig>) -> Self {
        Self::start(Some(config))
    }

    fn start(tls: Option<Arc<rustls::ServerConfig>>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let handler: Handler = Arc::new(|_: &Req| (200, "{}".to_string()));
        let state = Arc::new(ServerState {
            log: Mutex::default(),
            handshake_errors: Mutex::default(),
            handler: Mutex::new(handler),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let server = Self {
            addr,
            tls: tls.is_some(),
            state: Arc::clone(&state),
            stop: Arc::clone(&stop),
        };
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let (state, tls) = (Arc::clone(&state), tls.clone());
                std::thread::spawn(move || serve(conn, tls, &state));
            }
        });
        server
    }

    /// `http(s)://127.0.0.1:<port><path>`.
    fn url(&self, path: &str) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}{path}", self.addr.port())
    }

    fn answer(&self, f: impl Fn(&Req) -> (u16, String) + Send + Sync + 'static) {
        *self.state.handler.lock().unwrap() = Arc::new(f);
    }

    fn requests(&self) -> Vec<Req> {
        self.state.log.lock().unwrap().clone()
    }

    fn handshake_errors(&self) -> Vec<String> {
        self.state.handshake_errors.lock().unwrap().clone()
    }

    /// GL codes in the documents answered 2xx.
    fn delivered_codes(&self) -> Vec<String> {
        self.requests()
            .iter()
            .filter(|r| (200..300).contains(&r.status) && r.path.ends_with(GL_ID))
            .flat_map(|r| gl_records(&r.body))
            .map(|(code, _)| code)
            .collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr);
    }
}

fn serve(tcp: TcpStream, tls: Option<Arc<rustls::ServerConfig>>, state: &ServerState) {
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = tcp.set_write_timeout(Some(Duration::from_secs(10)));
    let Some(config) = tls else {
        let mut tcp = tcp;
        handle(&mut tcp, None, state);
        return;
    };
    let mut tcp = tcp;
    let mut conn = rustls::ServerConnection::new(config).unwrap();
    while conn.is_handshaking() {
        if let Err(e) = conn.complete_io(&mut tcp) {
            // Send the alert, if any, so the client learns why.
            let _ = conn.write_tls(&mut tcp);
            state.handshake_errors.lock().unwrap().push(e.to_string());
            return;
        }
    }
    let cert = conn
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec());
    let mut stream = rustls::StreamOwned::new(conn, tcp);
    handle(&mut stream, cert, state);
    stream.conn.send_close_notify();
    let _ = stream.flush();
}

fn handle<S: Read + Write>(stream: &mut S, client_cert: Option<Vec<u8>>, state: &ServerState) {
    let mut reader = BufReader::new(&mut *stream);
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    drop(reader);
    let mut req = Req {
        method,
        path,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
        client_cert,
        status: 0,
    };
    let handler = Arc::clone(&state.handler.lock().unwrap());
    let (status, text) = handler(&req);
    req.status = status;
    state.log.lock().unwrap().push(req);
    let out = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{text}",
        text.len()
    );
    let _ = stream.write_all(out.as_bytes());
    let _ = stream.flush();
}

// ---------------------------------------------------------------------------------------------
// A proxy

/// A forward proxy: records each request line (`CONNECT host:port HTTP/1.1`, or the
/// absolute form `POST http://host:port/path HTTP/1.1`) and tunnels or forwards it to the
/// target, or refuses everything with `refuse` (a status) when it is not 0.
struct Proxy {
    addr: SocketAddr,
    lines: Arc<Mutex<Vec<String>>>,
    refuse: Arc<AtomicU16>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let proxy = Self {
            addr: listener.local_addr().unwrap(),
            lines: Arc::default(),
            refuse: Arc::new(AtomicU16::new(0)),
            stop: Arc::new(AtomicBool::new(false)),
        };
        let (lines, refuse, stop) = (
            Arc::clone(&proxy.lines),
            Arc::clone(&proxy.refuse),
            Arc::clone(&proxy.stop),
        );
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let (lines, refuse) = (Arc::clone(&lines), Arc::clone(&refuse));
                std::thread::spawn(move || proxy_conn(conn, &lines, &refuse));
            }
        });
        proxy
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.addr.port())
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Whether a request line asked for `authority` (`127.0.0.1:<port>`), by CONNECT or in
    /// absolute form.
    fn asked_for(&self, authority: &str) -> bool {
        self.lines().iter().any(|l| {
            l.starts_with(&format!("CONNECT {authority} "))
                || l.contains(&format!(" http://{authority}/"))
        })
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr);
    }
}

/// The head of a request (up to and including the blank line), read byte by byte so nothing
/// after it is consumed.
fn read_head(s: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte).ok()? == 0 || head.len() > 64 * 1024 {
            return None;
        }
        head.push(byte[0]);
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}

fn proxy_conn(mut client: TcpStream, lines: &Mutex<Vec<String>>, refuse: &AtomicU16) {
    let _ = client.set_read_timeout(Some(Duration::from_secs(10)));
    let Some(head) = read_head(&mut client) else {
        return;
    };
    let (line, rest) = head.split_once("\r\n").unwrap_or((&head, ""));
    lines.lock().unwrap().push(line.to_string());
    let status = refuse.load(Ordering::Relaxed);
    if status != 0 {
        let _ = client.write_all(
            format!(
                "HTTP/1.1 {status} Refused\r\nProxy-Authenticate: Basic realm=\"corp\"\r\n\
                 Content-Length: 0\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
        );
        return;
    }
    let mut words = line.split(' ');
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    if method == "CONNECT" {
        let Ok(upstream) = TcpStream::connect(target) else {
            let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n");
            return;
        };
        let _ = client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
        pipe(client, upstream);
    } else {
        // Absolute form: forward to the origin in origin form.
        let Some(after) = target.strip_prefix("http://") else {
            return;
        };
        let (authority, path) = after.split_at(after.find('/').unwrap_or(after.len()));
        let Ok(mut upstream) = TcpStream::connect(authority) else {
            return;
        };
        let path = if path.is_empty() { "/" } else { path };
        let _ = upstream.write_all(format!("{method} {path} HTTP/1.1\r\n{rest}").as_bytes());
        pipe(client, upstream);
    }
}

/// Copies both ways until each side closes.
fn pipe(a: TcpStream, b: TcpStream) {
    let _ = a.set_read_timeout(Some(Duration::from_secs(20)));
    let _ = b.set_read_timeout(Some(Duration::from_secs(20)));
    let (mut a_read, mut b_write) = (a.try_clone().unwrap(), b.try_clone().unwrap());
    let forward = std::thread::spawn(move || {
        let _ = std::io::copy(&mut a_read, &mut b_write);
        let _ = b_write.shutdown(Shutdown::Write);
    });
    let (mut b_read, mut a_write) = (b, a);
    let _ = std::io::copy(&mut b_read, &mut a_write);
    let _ = a_write.shutdown(Shutdown::Write);
    let _ = forward.join();
}

// ---------------------------------------------------------------------------------------------
// The service

/// The test config delivering to `url`, with `platform_lines` added to `[platform]` and
/// `tables` (such as `[platform.oauth2]`) after the fast `[delivery]`.
fn config_text(data_dir: &Path, url: &str, platform_lines: &str, tables: &str) -> String {
    let text = config_for(data_dir, "", url, &format!("{FAST}{tables}"));
    let url_line = format!("url = \"{url}\"\n");
    assert!(
        text.contains(&url_line),
        "config_for changed shape:\n{text}"
    );
    text.replacen(&url_line, &format!("{url_line}{platform_lines}"), 1)
}

/// The service in-process, delivering to `url` with extra `[platform]` lines and tables.
fn app(url: &str, platform_lines: &str, tables: &str) -> TestApp {
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(&dir.path().join("data"), url, platform_lines, tables);
    let config = Config::parse(&text, Path::new("t.toml"))
        .unwrap_or_else(|e| panic!("{e}\n--- config ---\n{text}"));
    TestApp::start_config(dir, config)
}

fn pending(app: &TestApp, iface: &str) -> usize {
    app.store().keys(State::Pending, Some(iface)).unwrap().len()
}

fn last_error(app: &TestApp, iface: &str) -> String {
    status_of(app, iface)["last_error"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// `[platform.oauth2]` with `token_url`, client id `ap-intake`, the secret file and a scope.
fn oauth2_table(token_url: &str, secret_file: &Path) -> String {
    format!(
        "[platform.oauth2]\ntoken_url = \"{token_url}\"\nclient_id = \"ap-intake\"\n\
         client_secret_file = \"{}\"\nscope = \"ap.write invoices\"\n",
        secret_file.display()
    )
}

/// A file holding the client secret `s3cret&=+` with a trailing newline.
fn secret_file(dir: &Path) -> PathBuf {
    let path = dir.join("client-secret");
    std::fs::write(&path, "s3cret&=+\n").unwrap();
    path
}

/// A token endpoint at `/oauth2/token` answering `t1`, `t2`, ... (one per fetch) valid for
/// `expires_in` seconds, with the count of fetches.
fn token_endpoint(server: Server, expires_in: u64) -> (Server, Arc<AtomicUsize>) {
    let fetches = Arc::new(AtomicUsize::new(0));
    let f = Arc::clone(&fetches);
    server.answer(move |_| {
        let n = f.fetch_add(1, Ordering::SeqCst) + 1;
        (
            200,
            json!({"access_token": format!("t{n}"), "token_type": "Bearer", "expires_in": expires_in})
                .to_string(),
        )
    });
    (server, fetches)
}

// ---------------------------------------------------------------------------------------------
// The real binary with its own environment

/// `ap-intake serve` as a child with exactly the proxy variables in `env` (and any other
/// variable in `env`), killed when dropped.
struct ChildService {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl ChildService {
    fn start(url: &str, platform_lines: &str, env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        std::fs::write(
            &file,
            config_text(&dir.path().join("data"), url, platform_lines, ""),
        )
        .unwrap();
        let mut cmd = bin();
        for var in PROXY_VARS {
            cmd.env_remove(var);
        }
        cmd.envs(env.iter().copied())
            .args(["serve", "--config"])
            .arg(&file)
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let addr = wait_listening(&mut child);
        Self {
            child,
            addr,
            _dir: dir,
        }
    }

    fn post_gl(&self, code: &str) {
        let r = post(self.addr, GL, &envelope(&[gl(code)]).to_string(), Some(KEY));
        assert_eq!(r.status, 202, "{}", r.text);
    }
}

impl Drop for ChildService {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// 1. A platform with a private CA

/// An HTTPS platform whose certificate a private CA signed: without `ca_file` the handshake
/// fails, the records stay pending and status names a certificate problem; with `ca_file`
/// the same records are delivered.
#[test]
fn private_ca_platform_is_trusted_only_with_ca_file() {
    let pki = Pki::new();
    let platform = Server::https(pki.server_tls(false));
    let url = platform.url("/intake");

    let untrusting = app(&url, "", "");
    assert_eq!(
        untrusting.post_records(GL, &[gl("C1"), gl("C2")]).status,
        202
    );
    assert!(
        wait_for(WAIT, || !last_error(&untrusting, GL_ID).is_empty()),
        "a failure is reported: {}",
        status_of(&untrusting, GL_ID)
    );
    let s = status_of(&untrusting, GL_ID);
    let error = s["last_error"].as_str().unwrap().to_lowercase();
    assert!(
        error.contains("certificate"),
        "last_error names a certificate problem: {s}"
    );
    assert_eq!(s["delivery"], "backing off", "{s}");
    assert_eq!(pending(&untrusting, GL_ID), 2);
    assert!(
        platform.requests().is_empty(),
        "nothing sent to an untrusted platform: {:?}",
        platform.requests()
    );
    assert!(
        !platform.handshake_errors().is_empty(),
        "the client tried and gave up in the handshake"
    );
    untrusting.stop();

    let trusting = app(&url, &pki.ca_line(), "");
    assert_eq!(trusting.post_records(GL, &[gl("C1"), gl("C2")]).status, 202);
    assert!(
        wait_for(WAIT, || pending(&trusting, GL_ID) == 0),
        "delivered with ca_file: {}",
        status_of(&trusting, GL_ID)
    );
    let mut codes = platform.delivered_codes();
    codes.sort();
    assert_eq!(codes, ["C1", "C2"]);
    let r = &platform.requests()[0];
    assert_eq!(
        (r.method.as_str(), r.path.as_str()),
        ("POST", "/intake/general-ledger-codes-v1")
    );
    assert_eq!(status_of(&trusting, GL_ID)["delivered"], 2);
}

/// The operating system's trust store is read (the real binary with `SSL_CERT_FILE` naming
/// a bundle that holds the private CA, no `ca_file`): delivered.
#[test]
fn system_trust_store_from_ssl_cert_file_is_used() {
    let pki = Pki::new();
    let platform = Server::https(pki.server_tls(false));
    let ca = pki.path("ca.pem");
    let service = ChildService::start(
        &platform.url("/intake"),
        "",
        &[("SSL_CERT_FILE", ca.to_str().unwrap())],
    );
    service.post_gl("OS1");
    assert!(
        wait_for(WAIT, || platform.delivered_codes() == ["OS1"]),
        "delivered trusting the system bundle: requests {:?}, handshake errors {:?}",
        platform.requests(),
        platform.handshake_errors()
    );
}

// ---------------------------------------------------------------------------------------------
// 2. Mutual TLS

/// A platform that requires a client certificate from its client CA: without `client_cert`
/// nothing is delivered; with `client_cert`/`client_key` the records are delivered and the
/// platform saw exactly that certificate.
#[test]
fn client_certificate_is_presented_for_mutual_tls() {
    let pki = Pki::new();
    let platform = Server::https(pki.server_tls(true));
    let url = platform.url("/intake");

    let anonymous = app(&url, &pki.ca_line(), "");
    assert_eq!(anonymous.post_records(GL, &[gl("M1")]).status, 202);
    assert!(
        wait_for(WAIT, || !last_error(&anonymous, GL_ID).is_empty()
            && !platform.handshake_errors().is_empty()),
        "the platform refused the handshake and status says so: {} {:?}",
        status_of(&anonymous, GL_ID),
        platform.handshake_errors()
    );
    assert!(platform.requests().is_empty(), "{:?}", platform.requests());
    assert_eq!(pending(&anonymous, GL_ID), 1);
    assert_ne!(status_of(&anonymous, GL_ID)["delivery"], "flowing");
    anonymous.stop();

    let lines = format!("{}{}", pki.ca_line(), pki.client_lines());
    let identified = app(&url, &lines, "");
    assert_eq!(identified.post_records(GL, &[gl("M1")]).status, 202);
    assert!(
        wait_for(WAIT, || pending(&identified, GL_ID) == 0),
        "delivered with a client certificate: {} {:?}",
        status_of(&identified, GL_ID),
        platform.handshake_errors()
    );
    assert_eq!(platform.delivered_codes(), ["M1"]);
    let seen = platform.requests()[0].client_cert.clone();
    assert_eq!(
        seen,
        Some(pki.client.der()),
        "the platform saw the configured client certificate"
    );
}

// ---------------------------------------------------------------------------------------------
// 3. Proxies

/// `[platform] proxy` carries the traffic: for an http:// platform the proxy is asked for
/// the platform (CONNECT or absolute form), for an https:// one it tunnels the TLS session
/// (CONNECT); both deliver through it.
#[test]
fn configured_proxy_carries_deliveries() {
    let proxy = Proxy::start();
    let proxy_line = format!("proxy = \"{}\"\n", proxy.url());

    let plain = Server::plain();
    let via_plain = app(&plain.url("/intake"), &proxy_line, "");
    assert_eq!(via_plain.post_records(GL, &[gl("P1")]).status, 202);
    assert!(
        wait_for(WAIT, || plain.delivered_codes() == ["P1"]),
        "delivered through the proxy: proxy saw {:?}, status {}",
        proxy.lines(),
        status_of(&via_plain, GL_ID)
    );
    let authority = format!("127.0.0.1:{}", plain.addr.port());
    assert!(
        proxy.asked_for(&authority),
        "the proxy was asked for {authority}: {:?}",
        proxy.lines()
    );
    let absolute = format!("POST http://{authority}/intake/{GL_ID} HTTP/1.1");
    let connect = format!("CONNECT {authority} HTTP/1.1");
    assert!(
        proxy
            .lines()
            .iter()
            .all(|l| *l == absolute || *l == connect),
        "the proxy saw only requests for the platform's document: {:?}",
        proxy.lines()
    );
    assert!(wait_for(WAIT, || pending(&via_plain, GL_ID) == 0));

    let pki = Pki::new();
    let tls = Server::https(pki.server_tls(false));
    let via_tls = app(
        &tls.url("/intake"),
        &format!("{}{proxy_line}", pki.ca_line()),
        "",
    );
    assert_eq!(via_tls.post_records(GL, &[gl("P2")]).status, 202);
    assert!(
        wait_for(WAIT, || tls.delivered_codes() == ["P2"]),
        "delivered through the proxy: proxy saw {:?}, status {}",
        proxy.lines(),
        status_of(&via_tls, GL_ID)
    );
    let connect = format!("CONNECT 127.0.0.1:{} HTTP/1.1", tls.addr.port());
    assert!(
        proxy.lines().contains(&connect),
        "{connect:?} in {:?}",
        proxy.lines()
    );
}

/// A proxy that answers 407 (proxy authentication required) is a refusal of the
/// configuration (D32 lists 407): delivery pauses, the records stay pending with no attempt
/// counted, status names the 407; when the proxy lets the traffic through, delivery resumes
/// by itself.
#[test]
fn proxy_answering_407_pauses_delivery_until_it_lets_through() {
    let proxy = Proxy::start();
    proxy.refuse.store(407, Ordering::Relaxed);
    let platform = Server::plain();
    let app = app(
        &platform.url("/intake"),
        &format!("proxy = \"{}\"\n", proxy.url()),
        "",
    );
    assert_eq!(app.post_records(GL, &[gl("Q1"), gl("Q2")]).status, 202);
    assert!(
        wait_for(WAIT, || proxy.lines().len() >= 2),
        "the proxy was asked: {:?}",
        proxy.lines()
    );
    assert!(
        wait_for(
            Duration::from_secs(5),
            || status_of(&app, GL_ID)["delivery"] == "paused"
        ),
        "a 407 from the proxy pauses delivery (D32): {}",
        status_of(&app, GL_ID)
    );
    let s = status_of(&app, GL_ID);
    assert!(
        s["last_error"].as_str().unwrap_or("").contains("407"),
        "status names the 407: {s}"
    );
    assert_eq!(s["pending"], 2, "{s}");
    for key in ["gl-code:main/Q1", "gl-code:main/Q2"] {
        assert_eq!(
            app.item(key).unwrap().attempts,
            0,
            "{key}: a pause counts no attempt"
        );
    }
    assert!(platform.requests().is_empty());

    proxy.refuse.store(0, Ordering::Relaxed);
    assert!(
        wait_for(WAIT, || pending(&app, GL_ID) == 0),
        "delivery resumed by itself: {}",
        status_of(&app, GL_ID)
    );
    let mut codes = platform.delivered_codes();
    codes.sort();
    assert_eq!(codes, ["Q1", "Q2"]);
}

/// Without `[platform] proxy` the real binary takes the proxy from its environment:
/// `https_proxy` for an https:// platform, `HTTP_PROXY` for an http:// one; `no_proxy`
/// naming the platform's host bypasses it. Only the child processes get these variables.
#[test]
fn proxy_from_the_environment_and_no_proxy() {
    let pki = Pki::new();

    // https_proxy: the TLS session goes through the proxy.
    let proxy = Proxy::start();
    let platform = Server::https(pki.server_tls(false));
    let service = ChildService::start(
        &platform.url("/intake"),
        &pki.ca_line(),
        &[("https_proxy", proxy.url().as_str())],
    );
    service.post_gl("E1");
    assert!(
        wait_for(WAIT, || platform.delivered_codes() == ["E1"]),
        "delivered with https_proxy: proxy saw {:?}",
        proxy.lines()
    );
    let authority = format!("127.0.0.1:{}", platform.addr.port());
    assert!(
        proxy.asked_for(&authority),
        "https_proxy is used: {:?}",
        proxy.lines()
    );
    drop(service);

    // no_proxy naming the platform's host: straight to the platform.
    let bypassed = Proxy::start();
    let platform = Server::https(pki.server_tls(false));
    let service = ChildService::start(
        &platform.url("/intake"),
        &pki.ca_line(),
        &[
            ("https_proxy", bypassed.url().as_str()),
            ("no_proxy", "127.0.0.1"),
        ],
    );
    service.post_gl("E2");
    assert!(
        wait_for(WAIT, || platform.delivered_codes() == ["E2"]),
        "delivered with no_proxy: proxy saw {:?}",
        bypassed.lines()
    );
    assert!(
        bypassed.lines().is_empty(),
        "no_proxy=127.0.0.1 bypasses the proxy: {:?}",
        bypassed.lines()
    );
    drop(service);

    // HTTP_PROXY with an http:// platform.
    let proxy = Proxy::start();
    let platform = Server::plain();
    let service = ChildService::start(
        &platform.url("/intake"),
        "",
        &[("HTTP_PROXY", proxy.url().as_str())],
    );
    service.post_gl("E3");
    assert!(
        wait_for(WAIT, || platform.delivered_codes() == ["E3"]),
        "delivered with HTTP_PROXY: proxy saw {:?}",
        proxy.lines()
    );
    let authority = format!("127.0.0.1:{}", platform.addr.port());
    assert!(
        proxy.asked_for(&authority),
        "HTTP_PROXY is used: {:?}",
        proxy.lines()
    );
}

// ---------------------------------------------------------------------------------------------
// 4. OAuth2 client credentials

/// The platform gets `Authorization: Bearer t1`; documents of several interfaces, one after
/// another, share one token fetch; the token request is a form POST with grant_type,
/// client_id, the secret from the file (trailing newline dropped) and the scope.
#[test]
fn oauth2_token_is_fetched_once_and_sent_as_bearer() {
    let (tokens, fetches) = token_endpoint(Server::plain(), 3600);
    let platform = Server::plain();
    let files = tempfile::tempdir().unwrap();
    let app = app(
        &platform.url("/intake"),
        "",
        &oauth2_table(&tokens.url("/oauth2/token"), &secret_file(files.path())),
    );
    assert_eq!(app.post_records(GL, &[gl("O1")]).status, 202);
    assert!(
        wait_for(WAIT, || pending(&app, GL_ID) == 0),
        "{}",
        status_of(&app, GL_ID)
    );
    assert_eq!(
        app.post_records(VENDOR, &[fixture("vendor-data", "minimal")])
            .status,
        202
    );
    assert!(
        wait_for(WAIT, || pending(&app, VENDOR_ID) == 0),
        "{}",
        status_of(&app, VENDOR_ID)
    );
    assert_eq!(app.post_records(GL, &[gl("O2")]).status, 202);
    assert!(
        wait_for(WAIT, || pending(&app, GL_ID) == 0),
        "{}",
        status_of(&app, GL_ID)
    );

    let sent = platform.requests();
    assert_eq!(sent.len(), 3, "{sent:?}");
    for r in &sent {
        assert_eq!(r.header("authorization"), Some("Bearer t1"), "{}", r.path);
        assert_eq!(r.status, 200);
    }
    assert_eq!(
        fetches.load(Ordering::SeqCst),
        1,
        "one token for all documents while it is valid"
    );

    let fetch = &tokens.requests()[0];
    assert_eq!(
        (fetch.method.as_str(), fetch.path.as_str()),
        ("POST", "/oauth2/token")
    );
    assert!(
        fetch
            .header("content-type")
            .unwrap_or("")
            .starts_with("application/x-www-form-urlencoded"),
        "{:?}",
        fetch.headers
    );
    let form = fetch.form();
    let expected: HashMap<String, String> = [
        ("grant_type", "client_credentials"),
        ("client_id", "ap-intake"),
        ("client_secret", "s3cret&=+"),
        ("scope", "ap.write invoices"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(form, expected, "token request body {:?}", fetch.body);
}

/// A token is kept until 30 s before it expires: with `expires_in = 31` it is good for one
/// second, after which the next document fetches a new one.
#[test]
fn oauth2_token_is_fetched_again_when_it_expires() {
    let (tokens, fetches) = token_endpoint(Server::plain(), 31);
    let platform = Server::plain();
    let files = tempfile::tempdir().unwrap();
    let app = app(
        &platform.url("/intake"),
        "",
        &oauth2_table(&tokens.url("/oauth2/token"), &secret_file(files.path())),
    );
    assert_eq!(app.post_records(GL, &[gl("X1")]).status, 202);
    assert!(
        wait_for(WAIT, || pending(&app, GL_ID) == 0),
        "{}",
        status_of(&app, GL_ID)
    );
    assert_eq!(fetches.load(Ordering::SeqCst), 1);
    // Time itself is under test here: the token's usable second runs out.
    std::thread::sleep(Duration::from_millis(1300));
    assert_eq!(app.post_records(GL, &[gl("X2")]).status, 202);
    assert!(
        wait_for(WAIT, || pending(&app, GL_ID) == 0),
        "{}",
        status_of(&app, GL_ID)
    );
    let auth: Vec<_> = platform
        .requests()
        .iter()
        .map(|r| r.header("authorization").unwrap_or("").to_string())
        .collect();
    assert_eq!(auth, ["Bearer t1", "Bearer t2"]);
    assert_eq!(fetches.load(Ordering::SeqCst), 2);
}

/// The platform answers 401 to token t1 (revoked before it expired): the client forgets it,
/// fetches t2 and sends the document again at once; the delivery never counts as failed, so
/// there is no backoff (the backoff here is seconds long).
#[test]
fn oauth2_401_from_the_platform_fetches_a_new_token_and_sends_again() {
    let (tokens, fetches) = token_endpoint(Server::plain(), 3600);
    let platform = Server::plain();
    platform.answer(|r| match r.header("authorization") {
        Some("Bearer t1") => (401, "{\"error\":\"invalid_token\"}".into()),
        _ => (200, "{}".into()),
    });
    let files = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(
        &dir.path().join("data"),
        &platform.url("/intake"),
        "",
        &oauth2_table(&tokens.url("/oauth2/token"), &secret_file(files.path())),
    )
    .replace(
        "backoff_base_ms = 20\nbackoff_cap_ms = 200\n",
        "backoff_base_ms = 4000\nbackoff_cap_ms = 4000\n",
    );
    let app = TestApp::start_config(dir, Config::parse(&text, Path::new("t.toml")).unwrap());
    let started = Instant::now();
    assert_eq!(app.post_records(GL, &[gl("R1")]).status, 202);
    assert!(
        wait_for(Duration::from_secs(3), || pending(&app, GL_ID) == 0),
        "delivered with a fresh token without waiting for a backoff: {} {:?}",
        status_of(&app, GL_ID),
        platform.requests()
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    let sent: Vec<_> = platform
        .requests()
        .iter()
        .map(|r| {
            (
                r.header("authorization").unwrap_or("").to_string(),
                r.status,
            )
        })
        .collect();
    assert_eq!(
        sent,
        [
            ("Bearer t1".to_string(), 401),
            ("Bearer t2".to_string(), 200)
        ]
    );
    assert_eq!(fetches.load(Ordering::SeqCst), 2);
    let s = status_of(&app, GL_ID);
    assert_eq!(s["failures"], 0, "{s}");
    assert_eq!(s["delivery"], "flowing", "{s}");
    assert_eq!(s["delivered"], 1, "{s}");
}

/// A token endpoint that refuses the client (401) pauses delivery: status says `paused`
/// and names the token endpoint, the records stay pending with no attempt counted and the
/// platform gets nothing. A 503 from it is a passing failure (backing off). When it gives a
/// token again, delivery resumes by itself.
#[test]
fn oauth2_token_endpoint_refusal_pauses_delivery_until_it_works() {
    let tokens = Server::plain();
    let mode = Arc::new(AtomicU16::new(401));
    let m = Arc::clone(&mode);
    tokens.answer(move |_| match m.load(Ordering::Relaxed) {
        200 => (
            200,
            json!({"access_token": "t-ok", "expires_in": 3600}).to_string(),
        ),
        n => (n, "{\"error\":\"invalid_client\"}".into()),
    });
    let token_url = tokens.url("/oauth2/token");
    let platform = Server::plain();
    let files = tempfile::tempdir().unwrap();
    let app = app(
        &platform.url("/intake"),
        "",
        &oauth2_table(&token_url, &secret_file(files.path())),
    );
    assert_eq!(app.post_records(GL, &[gl("T1"), gl("T2")]).status, 202);

    assert!(
        wait_for(WAIT, || status_of(&app, GL_ID)["delivery"] == "paused"),
        "a refusing token endpoint pauses delivery: {}",
        status_of(&app, GL_ID)
    );
    assert!(
        wait_for(WAIT, || tokens.requests().len() >= 3),
        "the token endpoint is tried again while paused"
    );
    let s = status_of(&app, GL_ID);
    let error = s["last_error"].as_str().unwrap_or("");
    assert!(
        error.contains(&token_url) && error.contains("401"),
        "last_error names the token endpoint and its answer: {s}"
    );
    assert_eq!(s["pending"], 2, "{s}");
    for key in ["gl-code:main/T1", "gl-code:main/T2"] {
        let item = app.item(key).unwrap();
        assert_eq!(item.state, State::Pending);
        assert_eq!(item.attempts, 0, "{key}: a pause counts no attempt");
    }
    assert!(platform.requests().is_empty());

    mode.store(503, Ordering::Relaxed);
    assert!(
        wait_for(WAIT, || status_of(&app, GL_ID)["delivery"] == "backing off"),
        "a 503 from the token endpoint is retried, not a pause: {}",
        status_of(&app, GL_ID)
    );
    assert!(last_error(&app, GL_ID).contains(&token_url));
    assert!(platform.requests().is_empty());

    mode.store(200, Ordering::Relaxed);
    assert!(
        wait_for(WAIT, || pending(&app, GL_ID) == 0),
        "delivery resumed by itself: {}",
        status_of(&app, GL_ID)
    );
    let mut codes = platform.delivered_codes();
    codes.sort();
    assert_eq!(codes, ["T1", "T2"]);
    assert!(
        platform
            .requests()
            .iter()
            .all(|r| r.header("authorization") == Some("Bearer t-ok"))
    );
    assert!(
        wait_for(WAIT, || status_of(&app, GL_ID)["delivery"] == "flowing"),
        "{}",
        status_of(&app, GL_ID)
    );
}

/// Everything at once, as behind a corporate firewall: the platform and its token endpoint
/// over HTTPS with the private CA, a client certificate required by the platform, both
/// reached through the configured proxy, an OAuth2 token on the document.
#[test]
fn oauth2_over_https_with_client_certificate_through_the_proxy() {
    let pki = Pki::new();
    let (tokens, fetches) = token_endpoint(Server::https(pki.server_tls(false)), 3600);
    let platform = Server::https(pki.server_tls(true));
    let proxy = Proxy::start();
    let files = tempfile::tempdir().unwrap();
    let lines = format!(
        "{}{}proxy = \"{}\"\n",
        pki.ca_line(),
        pki.client_lines(),
        proxy.url()
    );
    let app = app(
        &platform.url("/intake"),
        &lines,
        &oauth2_table(&tokens.url("/oauth2/token"), &secret_file(files.path())),
    );
    assert_eq!(app.post_records(GL, &[gl("A1")]).status, 202);
    assert!(
        wait_for(WAIT, || pending(&app, GL_ID) == 0),
        "{} proxy {:?} platform handshakes {:?} token handshakes {:?}",
        status_of(&app, GL_ID),
        proxy.lines(),
        platform.handshake_errors(),
        tokens.handshake_errors()
    );
    let r = &platform.requests()[0];
    assert_eq!(r.header("authorization"), Some("Bearer t1"));
    assert_eq!(r.client_cert, Some(pki.client.der()));
    assert_eq!(fetches.load(Ordering::SeqCst), 1);
    for server in [&tokens, &platform] {
        let authority = format!("127.0.0.1:{}", server.addr.port());
        assert!(
            proxy
                .lines()
                .contains(&format!("CONNECT {authority} HTTP/1.1")),
            "{authority} reached through the proxy: {:?}",
            proxy.lines()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 5. check-config

/// `check-config --config F` on the test config for an https:// platform, with
/// `platform_lines` added to `[platform]` and `tables` after it: (exit code, stdout, stderr).
fn check_config(dir: &Path, platform_lines: &str, tables: &str) -> (Option<i32>, String, String) {
    let file = dir.join("config.toml");
    let text = config_text(
        &dir.join("data"),
        "https://platform.example/intake",
        platform_lines,
        tables,
    );
    std::fs::write(&file, text).unwrap();
    let out = bin()
        .args(["check-config", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Each broken network key makes `check-config` fail with a message naming that key.
#[test]
fn check_config_names_the_broken_network_key() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let not_pem = file("not-pem.txt", "this is not a certificate\n");
    let bad_pem = file(
        "bad.pem",
        "-----BEGIN CERTIFICATE-----\n!!!! not base64 !!!!\n-----END CERTIFICATE-----\n",
    );
    let key_only = pki.path("client.key").display().to_string();
    let cert = pki.path("client.pem").display().to_string();
    let ca = pki.path("ca.pem").display().to_string();
    let secret = file("secret", "s3cret\n");
    let empty_secret = file("empty-secret", "\n");
    let missing = dir.path().join("missing.pem").display().to_string();
    let oauth = |token_url: &str, secret_file: &str, client_id: &str| {
        format!(
            "[platform.oauth2]\ntoken_url = \"{token_url}\"\nclient_id = \"{client_id}\"\n\
             client_secret_file = \"{secret_file}\"\n"
        )
    };
    let good_token_url = "https://login.example/oauth2/token";
    let cases: Vec<(&str, String, String, &str)> = vec![
        (
            "ca_file missing",
            format!("ca_file = \"{missing}\"\n"),
            String::new(),
            "platform.ca_file",
        ),
        (
            "ca_file not PEM",
            format!("ca_file = \"{not_pem}\"\n"),
            String::new(),
            "platform.ca_file",
        ),
        (
            "ca_file broken PEM",
            format!("ca_file = \"{bad_pem}\"\n"),
            String::new(),
            "platform.ca_file",
        ),
        (
            "ca_file with a key only",
            format!("ca_file = \"{key_only}\"\n"),
            String::new(),
            "platform.ca_file",
        ),
        (
            "client_cert without client_key",
            format!("client_cert = \"{cert}\"\n"),
            String::new(),
            "platform.client_key",
        ),
        (
            "client_key without client_cert",
            format!("client_key = \"{key_only}\"\n"),
            String::new(),
            "platform.client_cert",
        ),
        (
            "client_key holding no key",
            format!("client_cert = \"{cert}\"\nclient_key = \"{ca}\"\n"),
            String::new(),
            "platform.client_key",
        ),
        (
            "client_cert holding no certificate",
            format!("client_cert = \"{key_only}\"\nclient_key = \"{key_only}\"\n"),
            String::new(),
            "platform.client_cert",
        ),
        (
            "client_key missing",
            format!("client_cert = \"{cert}\"\nclient_key = \"{missing}\"\n"),
            String::new(),
            "platform.client_key",
        ),
        (
            "proxy not a URL",
            "proxy = \"not a url\"\n".into(),
            String::new(),
            "platform.proxy",
        ),
        (
            "proxy of another scheme",
            "proxy = \"socks5://127.0.0.1:1080\"\n".into(),
            String::new(),
            "platform.proxy",
        ),
        (
            "proxy ftp",
            "proxy = \"ftp://proxy.corp.example:21\"\n".into(),
            String::new(),
            "platform.proxy",
        ),
        (
            "token_url of another scheme",
            String::new(),
            oauth("ftp://login.example/token", &secret, "ap-intake"),
            "platform.oauth2.token_url",
        ),
        (
            "token_url not a URL",
            String::new(),
            oauth("not a url", &secret, "ap-intake"),
            "platform.oauth2.token_url",
        ),
        (
            "client_secret_file missing",
            String::new(),
            oauth(good_token_url, &missing, "ap-intake"),
            "platform.oauth2.client_secret_file",
        ),
        (
            "client_secret_file empty",
            String::new(),
            oauth(good_token_url, &empty_secret, "ap-intake"),
            "platform.oauth2.client_secret_file",
        ),
        (
            "client_id empty",
            String::new(),
            oauth(good_token_url, &secret, ""),
            "platform.oauth2.client_id",
        ),
        (
            "oauth2 and bearer_token",
            "bearer_token = \"abc\"\n".into(),
            oauth(good_token_url, &secret, "ap-intake"),
            "platform.oauth2",
        ),
        (
            "oauth2 and basic auth",
            "username = \"u\"\npassword = \"p\"\n".into(),
            oauth(good_token_url, &secret, "ap-intake"),
            "platform.oauth2",
        ),
    ];
    let mut failures = Vec::new();
    for (name, lines, tables, key) in &cases {
        let (code, _, stderr) = check_config(dir.path(), lines, tables);
        let named = stderr.contains(&format!("{key}: "));
        if code == Some(0) || code.is_none() || code == Some(101) || !named {
            failures.push(format!(
                "{name}: exit {code:?}, expected non-zero naming `{key}`: {}",
                stderr.trim()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A config using every network key, valid files and all, passes `check-config`.
#[test]
fn check_config_accepts_a_complete_network_config() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let secret = secret_file(dir.path());
    let lines = format!(
        "{}{}proxy = \"http://proxy.corp.example:3128\"\n",
        pki.ca_line(),
        pki.client_lines()
    );
    let (code, stdout, stderr) = check_config(
        dir.path(),
        &lines,
        &oauth2_table("https://login.example/oauth2/token", &secret),
    );
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("OK"), "{stdout}");
    assert!(
        stdout.contains("https://platform.example/intake"),
        "{stdout}"
    );
}
