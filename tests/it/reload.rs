//! SIGHUP (D34): the real binary re-reads its config file; new keys are accepted, removed
//! ones refused, a new TLS certificate is served on new connections (a connection opened
//! before keeps working), a new log level applies, and a broken file (or key file) is
//! refused with the running configuration kept. A key whose limits stay keeps its rate
//! limiter, spent burst and all; a key with new limits gets them.

use crate::common;
use common::certs::{Ca, Leaf};
use common::process::{Service, post};
use common::*;
use rcgen::ExtendedKeyUsagePurpose;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const GL: &str = "/general-ledger-codes/v1";

fn config(data: &Path, keys: &[&str]) -> String {
    let mut text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nplain_http = true\n[storage]\ndata_dir = \"{}\"\n\
         [platform]\nurl = \"http://127.0.0.1:9/intake\"\n[admin]\nlisten = \"\"\n",
        data.display()
    );
    for (i, key) in keys.iter().enumerate() {
        text.push_str(&format!(
            "[[api_keys]]\nname = \"k{i}\"\nsha256 = \"{}\"\ninterfaces = [\"*\"]\n",
            sha(key)
        ));
    }
    text
}

pub(crate) fn hangup(service: &Service) {
    let pid = service.child.id().to_string();
    let ok = std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -HUP");
}

/// Waits until the service's log has `n` lines containing `text`.
pub(crate) fn wait_log(service: &Service, text: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while service.stderr().matches(text).count() < n {
        assert!(
            Instant::now() < deadline,
            "no {text:?} in the log: {}",
            service.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How many times `text` is in the service's log.
fn count(service: &Service, text: &str) -> usize {
    service.stderr().matches(text).count()
}

#[test]
fn sighup_applies_new_keys_and_refuses_a_broken_file() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = dir.path().join("c.toml");
    let (old, new) = ("apk_old_key_0123456789", "apk_new_key_0123456789");
    std::fs::write(&file, config(&data, &[old])).unwrap();
    let service = Service::start(&file, dir.path());
    let body = envelope(&[fixture("general-ledger-codes", "minimal")]).to_string();
    let status = |key| post(service.addr, GL, &body, Some(key)).status;
    assert_eq!((status(old), status(new)), (202, 401));

    std::fs::write(&file, config(&data, &[new])).unwrap();
    hangup(&service);
    wait_log(&service, "reload: configuration re-read", 1);
    assert_eq!(
        (status(old), status(new)),
        (401, 202),
        "the keys of the new file"
    );

    std::fs::write(&file, "[server]\nlisten = ").unwrap();
    hangup(&service);
    wait_log(&service, "reload refused", 1);
    assert_eq!(status(new), 202, "the running configuration stays");

    // A change that needs a restart is named, and the rest is applied.
    let moved = config(&data, &[old]).replace("127.0.0.1:0", "127.0.0.1:1");
    std::fs::write(&file, moved).unwrap();
    hangup(&service);
    wait_log(&service, "reload: configuration re-read", 2);
    wait_log(&service, "server.listen", 1);
    assert_eq!((status(old), status(new)), (202, 401));
}

// ---------------------------------------------------------------------------------------------
// TLS: the certificate and key are read again; new connections get the new certificate.

/// A CA signing two server certificates for localhost that differ in their common name.
struct Pki {
    ca: Ca,
}

impl Leaf {
    fn cert_der(&self) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(self.cert_pem.as_bytes()).unwrap()
    }
}

impl Pki {
    fn new() -> Self {
        Self {
            ca: Ca::new("ap-intake reload test CA"),
        }
    }

    /// A certificate for localhost and 127.0.0.1 with common name `cn`.
    fn server(&self, cn: &str) -> Leaf {
        self.ca.leaf(
            cn,
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    /// A fresh rustls client (no session cache shared between connections) trusting the CA.
    fn client(&self) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        let ca = CertificateDer::from_pem_slice(self.ca.pem().as_bytes()).unwrap();
        roots.add(ca).unwrap();
        let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }
}

/// An HTTPS connection to "localhost" with its handshake done.
struct Session {
    conn: rustls::ClientConnection,
    sock: TcpStream,
}

impl Session {
    fn connect(addr: SocketAddr, config: Arc<rustls::ClientConfig>) -> Self {
        let name = ServerName::try_from("localhost").unwrap();
        let mut conn = rustls::ClientConnection::new(config, name).unwrap();
        let mut sock = TcpStream::connect(addr).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        while conn.is_handshaking() {
            conn.complete_io(&mut sock)
                .unwrap_or_else(|e| panic!("TLS handshake with {addr}: {e}"));
        }
        Self { conn, sock }
    }

    /// The certificate the server presented.
    fn peer(&self) -> CertificateDer<'static> {
        self.conn.peer_certificates().expect("a server certificate")[0].clone()
    }

    /// POSTs a GL code over HTTP/1.1 on this connection, keeping it open, and reads the
    /// answer (its Content-Length bytes of body).
    fn post(&mut self, code: &str) -> Reply {
        let mut record = fixture("general-ledger-codes", "minimal");
        record["code"] = serde_json::Value::from(code);
        let body = envelope(&[record]).to_string();
        let request = format!(
            "POST {GL} HTTP/1.1\r\nHost: localhost\r\nx-api-key: {KEY}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let mut stream = rustls::Stream::new(&mut self.conn, &mut self.sock);
        stream.write_all(request.as_bytes()).unwrap();
        stream.flush().unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let reply = parse_raw(&buf[..end + 4]);
                let length: usize = reply
                    .header("content-length")
                    .unwrap_or_else(|| panic!("no Content-Length: {reply:?}"))
                    .parse()
                    .unwrap();
                if buf.len() >= end + 4 + length {
                    return parse_raw(&buf[..end + 4 + length]);
                }
            }
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => panic!(
                    "the connection ended mid-answer: {:?}",
                    String::from_utf8_lossy(&buf)
                ),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    }
}

/// A config with `[server.tls]` on `cert` and `key`, and the common test key.
fn tls_config(data: &Path, cert: &Path, key: &Path) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[server.tls]\ncert = '{}'\nkey = '{}'\n\
         [storage]\ndata_dir = '{}'\n[platform]\nurl = \"{NOWHERE}\"\n[admin]\nlisten = \"\"\n\
         [[api_keys]]\nname = \"erp\"\nsha256 = \"{}\"\ninterfaces = [\"*\"]\n",
        cert.display(),
        key.display(),
        data.display(),
        sha(KEY)
    )
}

#[test]
fn sighup_serves_the_new_tls_certificate_to_new_connections() {
    let pki = Pki::new();
    let (a, b) = (pki.server("cert A"), pki.server("cert B"));
    assert_ne!(a.cert_der(), b.cert_der());
    let name = |der: &CertificateDer| {
        if *der == a.cert_der() {
            "certificate A"
        } else if *der == b.cert_der() {
            "certificate B"
        } else {
            "an unknown certificate"
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("server.crt"), dir.path().join("server.key"));
    std::fs::write(&cert, &a.cert_pem).unwrap();
    std::fs::write(&key, &a.key_pem).unwrap();
    let file = dir.path().join("c.toml");
    std::fs::write(&file, tls_config(&dir.path().join("data"), &cert, &key)).unwrap();
    let service = Service::start(&file, dir.path());

    // Served A; a connection that stays open across the reload.
    let mut before = Session::connect(service.addr, pki.client());
    assert_eq!(name(&before.peer()), "certificate A");
    let r = before.post("BEFORE-1");
    assert_eq!(r.status, 202, "{}", r.text);

    // The files now hold B: a reload, and new connections are served B.
    std::fs::write(&cert, &b.cert_pem).unwrap();
    std::fs::write(&key, &b.key_pem).unwrap();
    hangup(&service);
    wait_log(&service, "reload: configuration re-read", 1);
    let mut fresh = Session::connect(service.addr, pki.client());
    assert_eq!(
        name(&fresh.peer()),
        "certificate B",
        "a new connection after the reload; log:\n{}",
        service.stderr()
    );
    let r = fresh.post("AFTER-1");
    assert_eq!(r.status, 202, "{}", r.text);

    // The connection opened before the reload still works (on certificate A).
    let r = before.post("BEFORE-2");
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(name(&before.peer()), "certificate A");

    // A truncated key file: the reload is refused, and new connections still get B.
    let half = &b.key_pem[..b.key_pem.len() / 2];
    std::fs::write(&key, half).unwrap();
    hangup(&service);
    wait_log(&service, "reload refused", 1);
    assert_eq!(count(&service, "reload: configuration re-read"), 1);
    let mut fresh = Session::connect(service.addr, pki.client());
    assert_eq!(
        name(&fresh.peer()),
        "certificate B",
        "a new connection after a refused reload; log:\n{}",
        service.stderr()
    );
    let r = fresh.post("AFTER-2");
    assert_eq!(r.status, 202, "{}", r.text);
}

// ---------------------------------------------------------------------------------------------
// [log] level

#[test]
fn sighup_applies_a_new_log_level() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = dir.path().join("c.toml");
    // Each reload moves `[server] listen`, so each logs a warning (which needs a restart)
    // after its info line "reload: configuration re-read", in the same thread: once the
    // warning is in the log, the info line is there too unless the level hides it.
    let write = |level: &str, port: u16| {
        let text = config(&data, &[KEY])
            .replace("127.0.0.1:0", &format!("127.0.0.1:{port}"))
            .replace("[admin]", &format!("[log]\nlevel = \"{level}\"\n[admin]"));
        std::fs::write(&file, text).unwrap();
    };
    let (info, warning) = (
        "reload: configuration re-read",
        "reload: these changes take effect after a restart",
    );
    write("info", 0);
    let service = Service::start(&file, dir.path());

    // At info: both lines.
    write("info", 1);
    hangup(&service);
    wait_log(&service, warning, 1);
    assert_eq!(count(&service, info), 1, "{}", service.stderr());

    // To warn. Whether this reload's own info line comes before or after the new level
    // applies is not specified; the next reload's is hidden.
    write("warn", 2);
    hangup(&service);
    wait_log(&service, warning, 2);
    let infos = count(&service, info);
    write("warn", 3);
    hangup(&service);
    wait_log(&service, warning, 3);
    assert_eq!(
        count(&service, info),
        infos,
        "an info line logged at level warn:\n{}",
        service.stderr()
    );
    // Requests still work at level warn (nothing else changed).
    let body = envelope(&[fixture("general-ledger-codes", "minimal")]).to_string();
    assert_eq!(post(service.addr, GL, &body, Some(KEY)).status, 202);

    // Back to info: the info line again.
    write("info", 4);
    hangup(&service);
    wait_log(&service, warning, 4);
    wait_log(&service, info, infos + 1);
}

// ---------------------------------------------------------------------------------------------
// Changes a reload cannot apply are named

/// `[server]` timeouts and connection limits and `[log] requests` / `max_files` are set when
/// the service starts (the connection settings and the request log are not replaced by a
/// reload), so a reload that finds them changed names each in its restart warning, as it
/// does `server.listen`: otherwise the operator believes a `systemctl reload` applied them.
#[test]
fn sighup_names_every_change_it_cannot_apply() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = dir.path().join("c.toml");
    std::fs::write(&file, config(&data, &[KEY])).unwrap();
    let service = Service::start(&file, dir.path());

    let server_keys = [
        ("header_timeout_secs", "5"),
        ("body_timeout_secs", "20"),
        ("handshake_timeout_secs", "5"),
        ("max_connections", "100"),
        ("max_connections_per_ip", "10"),
        ("max_streams_per_connection", "8"),
    ];
    let mut server = String::from("[server]\n");
    for (key, value) in server_keys {
        server.push_str(&format!("{key} = {value}\n"));
    }
    let changed = config(&data, &[KEY])
        .replace("127.0.0.1:0", "127.0.0.1:1")
        .replace("[server]\n", &server)
        .replace(
            "[admin]",
            "[log]\nrequests = \"all\"\nmax_files = 3\n[admin]",
        );
    std::fs::write(&file, changed).unwrap();
    hangup(&service);
    let warning = "reload: these changes take effect after a restart";
    wait_log(&service, warning, 1);
    let log = service.stderr();
    let line = log.lines().find(|l| l.contains(warning)).unwrap();
    let missing: Vec<&str> = server_keys
        .iter()
        .map(|(key, _)| *key)
        .chain(["listen", "requests", "max_files"])
        .filter(|key| !line.contains(key))
        .collect();
    assert!(
        missing.is_empty(),
        "the restart warning does not name {missing:?}:\n{line}"
    );
}

// ---------------------------------------------------------------------------------------------
// Rate limits across a reload (D20, D34)

/// A config whose keys are `(key, (rate_limit_per_second, burst))`, without a limit for
/// `None`, at log level `level`.
fn limited_config(data: &Path, keys: &[(&str, Option<(u32, u32)>)], level: &str) -> String {
    let mut text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nplain_http = true\n[storage]\ndata_dir = \"{}\"\n\
         [platform]\nurl = \"http://127.0.0.1:9/intake\"\n[log]\nlevel = \"{level}\"\n\
         [admin]\nlisten = \"\"\n",
        data.display()
    );
    for (i, (key, limit)) in keys.iter().enumerate() {
        text.push_str(&format!(
            "[[api_keys]]\nname = \"k{i}\"\nsha256 = \"{}\"\ninterfaces = [\"*\"]\n",
            sha(key)
        ));
        if let Some((rate, burst)) = limit {
            text.push_str(&format!(
                "rate_limit_per_second = {rate}\nburst = {burst}\n"
            ));
        }
    }
    text
}

/// POSTs with `key` until the first 429 (at most `most` times): how many were accepted
/// before it, and when it came (`None` when none did).
fn spend(service: &Service, key: &str, most: usize) -> (usize, Option<Instant>) {
    let body = envelope(&[fixture("general-ledger-codes", "minimal")]).to_string();
    for accepted in 0..most {
        let reply = post(service.addr, GL, &body, Some(key));
        match reply.status {
            202 => {}
            429 => return (accepted, Some(Instant::now())),
            other => panic!("HTTP {other} for {key:?}: {}", reply.text),
        }
    }
    (most, None)
}

/// The most requests a limit of one per second can have let through since the 429 at
/// `refused`: each whole second gives one, and the first may come at once.
fn refilled(refused: Instant) -> usize {
    refused.elapsed().as_secs() as usize + 1
}

/// The `n`th (from 1) "reload: configuration re-read" line.
fn reread_line(service: &Service, n: usize) -> String {
    wait_log(service, "reload: configuration re-read", n);
    let log = service.stderr();
    let line = log
        .lines()
        .filter(|l| l.contains("reload: configuration re-read"))
        .nth(n - 1)
        .unwrap();
    line.to_string()
}

/// A reload used to build every rate limiter afresh, so a client that had spent its burst
/// got a new one with each `systemctl reload`. A key whose name, hash and limits are the
/// same keeps its limiter: after a reload of the same file, and after one that changes only
/// the log level, its burst is still spent (D20, D34).
#[test]
fn sighup_keeps_the_spent_burst_of_an_unchanged_key() {
    const BURST: usize = 10;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = dir.path().join("c.toml");
    let keys = [(KEY, Some((1, BURST as u32)))];
    std::fs::write(&file, limited_config(&data, &keys, "info")).unwrap();
    let service = Service::start(&file, dir.path());

    let (accepted, refused) = spend(&service, KEY, 3 * BURST);
    let mut refused = refused.unwrap_or_else(|| panic!("no 429 after {accepted} requests"));
    assert!(accepted >= BURST, "a burst of {BURST}, {accepted} accepted");

    // The same file; then only the log level changed (still at info).
    let levels = ["info", "info,ap_intake=info"];
    for (n, level) in levels.into_iter().enumerate() {
        std::fs::write(&file, limited_config(&data, &keys, level)).unwrap();
        hangup(&service);
        let line = reread_line(&service, n + 1);
        assert!(!line.contains("api_keys"), "keys unchanged: {line}");
        assert_eq!(line.contains("log.level"), n == 1, "{line}");
        let (accepted, again) = spend(&service, KEY, BURST);
        let most = refilled(refused);
        assert!(
            accepted <= most && accepted < BURST,
            "reload {} ({level}): {accepted} accepted after the burst was spent, where at most \
             {most} came back by the rate; a fresh burst after the reload?\n{}",
            n + 1,
            service.stderr()
        );
        refused = again.unwrap();
    }
}

/// A key whose `rate_limit_per_second` or `burst` changes gets a new limiter with the new
/// limits at the reload; another key, unchanged, keeps its spent burst; a key whose limit is
/// removed is no longer limited (D20, D34).
#[test]
fn sighup_applies_changed_rate_limits() {
    const A: &str = "apk_limited_a_0123456789";
    const B: &str = "apk_limited_b_0123456789";
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = dir.path().join("c.toml");
    let write = |a: Option<(u32, u32)>| {
        let text = limited_config(&data, &[(A, a), (B, Some((1, 3)))], "info");
        std::fs::write(&file, text).unwrap();
    };
    write(Some((1, 1)));
    let service = Service::start(&file, dir.path());
    let (_, a_refused) = spend(&service, A, 5);
    let (_, b_refused) = spend(&service, B, 10);
    a_refused.expect("A's burst of 1 spent");
    let mut b_refused = b_refused.expect("B's burst of 3 spent");

    // A's burst raised to 5, then its rate to 2 (the burst again 5): each time A gets a new
    // limiter, a burst of 5 at once, while B, unchanged, stays spent.
    let changes = [(1, 5), (2, 5)];
    for (n, (rate, burst)) in changes.into_iter().enumerate() {
        write(Some((rate, burst)));
        hangup(&service);
        let reloaded = Instant::now();
        let line = reread_line(&service, n + 1);
        assert!(line.contains("api_keys"), "{line}");
        let (accepted, refused) = spend(&service, A, 5 * burst as usize);
        let most = burst as usize + rate as usize * refilled(reloaded);
        assert!(
            refused.is_some() && (burst as usize..=most).contains(&accepted),
            "A at {rate}/s, burst {burst}: {accepted} accepted before a 429 \
             (expected {burst} to {most})\n{}",
            service.stderr()
        );
        let (accepted, refused) = spend(&service, B, 3);
        let most = refilled(b_refused);
        assert!(
            accepted <= most && accepted < 3,
            "B, unchanged: {accepted} accepted after its burst was spent (at most {most})"
        );
        b_refused = refused.expect("B limited");
    }

    // A without a limit: no 429.
    write(None);
    hangup(&service);
    reread_line(&service, changes.len() + 1);
    assert_eq!(spend(&service, A, 30), (30, None));
}
