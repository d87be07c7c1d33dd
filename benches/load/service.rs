//! The real service as a child process, configured for a benchmark.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The API key benchmarks send.
pub const KEY: &str = "bench-key";

/// The service binary: this build's, or `AP_INTAKE_BENCH_BIN` (to compare two builds in
/// alternate runs, each with its own copy of this benchmark).
pub fn binary() -> String {
    std::env::var("AP_INTAKE_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_ap-intake").into())
}

/// A config: plain HTTP on a free loopback port, one key, deliveries to a closed port (so the
/// worker backs off and stays out of the measurement) unless `platform` is given.
pub fn write_config(dir: &Path, data_dir: &Path, platform: Option<&str>) -> PathBuf {
    write_config_on(dir, data_dir, platform, None, "bench.toml")
}

/// [`write_config`] with the queue on PostgreSQL (`postgres`: URL and node name), in `file`.
pub fn write_config_on(
    dir: &Path,
    data_dir: &Path,
    platform: Option<&str>,
    postgres: Option<(&str, &str)>,
    file: &str,
) -> PathBuf {
    let storage = postgres.map_or(String::new(), |(url, node)| {
        crate::pg::storage_toml(url, node)
    });
    let text = format!(
        r#"[server]
listen = "127.0.0.1:0"
plain_http = true
max_connections = 4096
# Every load client connects from 127.0.0.1: the per-address cap (D26) must not be the limit.
max_connections_per_ip = 4096
[storage]
data_dir = "{}"
{storage}
[limits]
max_records = 10000
[[api_keys]]
name = "bench"
sha256 = "{}"
interfaces = ["*"]
[platform]
url = "{}"
[admin]
listen = "127.0.0.1:0"
[log]
level = "warn,ap_intake::service=info"
"#,
        data_dir.display(),
        ap_intake::keys::sha256_hex(KEY),
        platform.unwrap_or("http://127.0.0.1:9/intake"),
    );
    let file = dir.join(file);
    std::fs::write(&file, text).expect("write config");
    file
}

/// A blocking client whose every answer is a reply (not an error), 30 s at most a request.
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

pub struct Service {
    pub child: Child,
    pub addr: SocketAddr,
    /// The admin listener (`/metrics`), from its log line, which comes before "listening".
    pub admin: Option<SocketAddr>,
    /// From spawn to the "listening" log line.
    pub start_time: Duration,
}

impl Service {
    pub fn start(config: &Path) -> Self {
        let started = Instant::now();
        let mut child = Command::new(binary())
            // As systemd/ap-intake.service runs it.
            .env("MIMALLOC_ARENA_EAGER_COMMIT", "0")
            .env("MIMALLOC_PURGE_DELAY", "0")
            .args(["serve", "--config"])
            .arg(config)
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("start the service");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut admin = None;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let field = |name: &str| {
                    let rest = line.split(name).nth(1)?;
                    rest.split_whitespace().next()?.parse::<SocketAddr>().ok()
                };
                if let Some(a) = field("admin=") {
                    admin = Some(a);
                }
                if let Some(addr) = field("listen=") {
                    let _ = tx.send((addr, admin));
                }
            }
        });
        let (addr, admin) = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("the service logs where it listens");
        Self {
            child,
            addr,
            admin,
            start_time: started.elapsed(),
        }
    }

    /// Resident memory in MiB, from /proc.
    pub fn rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        stop(&mut self.child, "-TERM");
    }
}

/// Sends `signal` (as `kill` spells it) to `child` and waits for it to exit.
pub fn stop(child: &mut Child, signal: &str) {
    let _ = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status();
    let _ = child.wait();
}

/// Bytes under `dir`.
pub fn dir_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}
