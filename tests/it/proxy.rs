//! Behind a reverse proxy (issue 45, item 5; README "Behind a reverse proxy"): a real nginx,
//! configured as that section shows, in front of the real binary with
//! `[server] trusted_proxies`. The service sees each client's own address (in its log lines
//! and the per-address log limits, D44), a client cannot pass for another with a forged
//! `X-Forwarded-For`, the proxy's pooled connections are not capped per address (D26), and a
//! client's `x-request-id` comes back through it. Skipped without nginx (a failure under
//! `AP_INTAKE_REQUIRE_TOOLS=1`; .ci/run installs nginx-light).

use crate::common::process::Service;
use crate::common::skip::skip;
use crate::common::*;
use socket2::{Domain, SockAddr, Socket, Type};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const GL: &str = "/general-ledger-codes/v1";

/// nginx in the foreground with the proxy of README's example, killed when dropped.
struct Nginx {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Nginx {
    fn start(upstream: SocketAddr) -> Option<Self> {
        let Some(nginx) = ["/usr/sbin/nginx", "/usr/bin/nginx"]
            .into_iter()
            .find(|p| Path::new(p).exists())
        else {
            skip("nginx (Debian's nginx-light)");
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // Workers as the user that runs the test (nginx ignores `user` when that is not root),
        // so they can write their temporary files into `dir`.
        let conf = format!(
            r#"user root;
daemon off;
master_process off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log;
events {{}}
http {{
  access_log off;
  client_body_temp_path {dir}/body;
  proxy_temp_path {dir}/proxy;
  upstream ap_intake {{
    server {upstream};
    keepalive 16;
  }}
  server {{
    listen 127.0.0.1:{port};
    # As README "Behind a reverse proxy" shows it.
    client_max_body_size 32m;
    proxy_request_buffering off;
    location / {{
      proxy_pass http://ap_intake;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto $scheme;
      proxy_read_timeout 60s;
      proxy_send_timeout 60s;
    }}
  }}
}}
"#,
            dir = dir.path().display()
        );
        std::fs::write(dir.path().join("nginx.conf"), conf).unwrap();
        let child = Command::new(nginx)
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(dir.path().join("nginx.conf"))
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "nginx did not listen on {addr}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(Self {
            child,
            addr,
            _dir: dir,
        })
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The service with `trusted_proxies = ["127.0.0.1"]` (where nginx connects from), at most
/// two connections per address, and a log line for every request.
fn service(dir: &Path) -> Service {
    let text = config_for(
        &dir.join("data"),
        "",
        NOWHERE,
        "[log]\nrequests = \"all\"\n",
    )
    .replacen(
        "body_timeout_secs = 2\n",
        "body_timeout_secs = 10\ntrusted_proxies = [\"127.0.0.1\"]\nmax_connections_per_ip = 2\n",
        1,
    );
    std::fs::write(dir.join("c.toml"), text).unwrap();
    Service::start(&dir.join("c.toml"), dir)
}

/// A connection to `to` from the loopback address `from` (127.0.0.2 is another client).
fn connect_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    socket
        .bind(&SockAddr::from(SocketAddr::from((from, 0))))
        .unwrap();
    socket.connect(&SockAddr::from(to)).unwrap();
    let stream: TcpStream = socket.into();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream
}

/// One POST of a GL code from `from` to `to` with `headers`, the body sent in two halves
/// `pause` apart; the answer's status line and head.
fn post(from: [u8; 4], to: SocketAddr, headers: &str, pause: Duration) -> String {
    let body = envelope(&[gl("P1")]).to_string();
    let (first, second) = body.split_at(body.len() / 2);
    let mut s = connect_from(from, to);
    let head = format!(
        "POST {GL} HTTP/1.1\r\nHost: ap-intake\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{headers}\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(first.as_bytes()).unwrap();
    std::thread::sleep(pause);
    s.write_all(second.as_bytes()).unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer
}

/// The service's log lines about the request `id`.
fn lines_of(service: &Service, id: &str) -> Vec<String> {
    let wanted = format!("request_id=\"{id}\"");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found: Vec<String> = service
            .stderr()
            .lines()
            .filter(|l| l.contains(&wanted))
            .map(str::to_string)
            .collect();
        if !found.is_empty() || Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn behind_nginx_the_service_sees_each_client_and_cannot_be_fooled() {
    let dir = tempfile::tempdir().unwrap();
    let service = service(dir.path());
    let Some(nginx) = Nginx::start(service.addr) else {
        return;
    };
    let key = format!("x-api-key: {KEY}\r\n");

    // Through nginx, with a forged X-Forwarded-For: the client is its own address, and its
    // request id comes back.
    let forged = format!("{key}X-Forwarded-For: 6.6.6.6\r\nx-request-id: via-nginx-1\r\n");
    let answer = post([127, 0, 0, 2], nginx.addr, &forged, Duration::ZERO);
    assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("x-request-id: via-nginx-1\r\n"),
        "{answer}"
    );
    let lines = lines_of(&service, "via-nginx-1");
    assert!(
        lines.len() == 1 && lines[0].contains("peer=\"127.0.0.2\""),
        "the log names the client behind nginx: {lines:?}"
    );

    // Straight to the service, from a peer that is no trusted proxy: the header is ignored.
    let direct = format!("{key}X-Forwarded-For: 6.6.6.6\r\nx-request-id: direct-1\r\n");
    let answer = post([127, 0, 0, 3], service.addr, &direct, Duration::ZERO);
    assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
    let lines = lines_of(&service, "direct-1");
    assert!(
        lines.len() == 1 && lines[0].contains("peer=\"127.0.0.3:"),
        "a header from an untrusted peer is ignored: {lines:?}"
    );
}

/// D26 and D44 behind a proxy: six requests at once through nginx's pool (six connections
/// from 127.0.0.1, where `max_connections_per_ip = 2`) are all served; refusals are logged ten
/// a minute per client, not per proxy.
#[test]
fn behind_nginx_limits_apply_per_client_not_per_proxy() {
    let dir = tempfile::tempdir().unwrap();
    let service = service(dir.path());
    let Some(nginx) = Nginx::start(service.addr) else {
        return;
    };
    let key = format!("x-api-key: {KEY}\r\n");
    let at = nginx.addr;
    let answers: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|i| {
                let key = &key;
                s.spawn(move || post([127, 0, 0, 10 + i], at, key, Duration::from_millis(500)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for a in &answers {
        assert!(a.starts_with("HTTP/1.1 202"), "through the pool: {a}");
    }

    // Twelve wrong keys from one client, three from another: the first gets ten lines and a
    // count, the second its own three.
    for (from, n) in [([127, 0, 0, 4], 12), ([127, 0, 0, 5], 3)] {
        for _ in 0..n {
            let answer = post(from, at, "x-api-key: wrong\r\n", Duration::ZERO);
            assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
        }
    }
    let count = |peer: &str| {
        service
            .stderr()
            .lines()
            .filter(|l| l.contains("status=401") && l.contains(&format!("peer=\"{peer}\"")))
            .count()
    };
    assert_eq!(count("127.0.0.4"), 10, "{}", service.stderr());
    assert_eq!(count("127.0.0.5"), 3, "{}", service.stderr());
}
