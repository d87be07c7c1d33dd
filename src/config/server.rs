//! `[server]` (the intake listener, TLS, timeouts), `[admin]` and `[log]`.

use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::KeyError;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    listen: Option<String>,
    plain_http: Option<bool>,
    body_timeout_secs: Option<u64>,
    header_timeout_secs: Option<u64>,
    handshake_timeout_secs: Option<u64>,
    max_connections: Option<usize>,
    max_connections_per_ip: Option<usize>,
    max_streams_per_connection: Option<u32>,
    trusted_proxies: Option<Vec<String>>,
    tls: Option<RawTls>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert: PathBuf,
    key: PathBuf,
    client_ca: Option<PathBuf>,
    client_auth: Option<ClientAuth>,
}

/// Whether clients must present a certificate from `client_ca`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    /// A handshake without a certificate from the CA is refused.
    Required,
    /// Clients may present one; a certificate from another CA is still refused.
    Optional,
}

/// `[server.tls]`, checked for presence; the files are read when the listener starts (and
/// by `check-config`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    /// PEM certificate chain.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
    /// PEM CA certificates that client certificates must chain to (mutual TLS).
    pub client_ca: Option<PathBuf>,
    /// Required or optional client certificates (with `client_ca`).
    pub client_auth: ClientAuth,
}

/// `[server]`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// Address and port of the intake listener.
    pub listen: SocketAddr,
    /// HTTPS settings; `None` serves plain HTTP (only when asked for, or in sandbox).
    pub tls: Option<Tls>,
    /// How long a client may take to send its request headers (408 after that).
    pub header_timeout: Duration,
    /// How long a client may take to send its body (408 after that, D5).
    pub body_timeout: Duration,
    /// How long a TLS handshake may take.
    pub handshake_timeout: Duration,
    /// Most connections served at once, counted from accept to close (TLS handshake and
    /// HTTP/2 preface included); more wait in the listen queue.
    pub max_connections: usize,
    /// Most connections from one client address at once; more are closed at once (D26).
    pub max_connections_per_ip: usize,
    /// Most concurrent HTTP/2 streams on one connection (D26).
    pub max_streams_per_connection: u32,
    /// Reverse proxies whose `Forwarded` or `X-Forwarded-For` names the client: addresses
    /// and networks. Their own connections are not capped per address.
    pub trusted_proxies: Vec<ipnet::IpNet>,
}

/// Connections one client address may hold when the config does not say (D26).
pub const DEFAULT_MAX_CONNECTIONS_PER_IP: usize = 64;

/// Concurrent HTTP/2 streams per connection when the config does not say (D26).
pub const DEFAULT_MAX_STREAMS_PER_CONNECTION: u32 = 16;

fn secs(v: Option<u64>, default: u64, key: &'static str) -> Result<Duration, KeyError> {
    match v.unwrap_or(default) {
        0 => Err((key, "must be at least 1".into())),
        s => Ok(Duration::from_secs(s)),
    }
}

impl RawServer {
    pub(super) fn check(self, sandbox: bool) -> Result<Server, KeyError> {
        let listen = match &self.listen {
            Some(s) => s.parse().map_err(|_| {
                (
                    "listen",
                    format!("{s:?} is not an address and port such as \"0.0.0.0:8443\""),
                )
            })?,
            None if sandbox => SocketAddr::from(([127, 0, 0, 1], 8080)),
            None => SocketAddr::from(([0, 0, 0, 0], 8443)),
        };
        let tls = self.tls.map(|t| {
            if t.client_auth.is_some() && t.client_ca.is_none() {
                return Err(("tls.client_auth", "needs tls.client_ca".to_string()));
            }
            Ok(Tls {
                cert: t.cert,
                key: t.key,
                client_auth: t.client_auth.unwrap_or(ClientAuth::Required),
                client_ca: t.client_ca,
            })
        });
        let tls = tls.transpose()?;
        match (&tls, self.plain_http) {
            (Some(_), Some(true)) => {
                return Err((
                    "plain_http",
                    "set either [server.tls] or plain_http = true, not both".into(),
                ));
            }
            (None, Some(true)) => {}
            (None, _) if !sandbox => {
                return Err((
                    "tls",
                    "no [server.tls] configured: add cert and key, or set plain_http = true to serve plain HTTP".into(),
                ));
            }
            _ => {}
        }
        let max_connections = self.max_connections.unwrap_or(1024);
        if max_connections == 0 {
            return Err(("max_connections", "must be at least 1".into()));
        }
        let max_connections_per_ip = per_ip(self.max_connections_per_ip, max_connections)?;
        let max_streams_per_connection = match self.max_streams_per_connection {
            Some(0) => return Err(("max_streams_per_connection", "must be at least 1".into())),
            Some(n) => n,
            None => DEFAULT_MAX_STREAMS_PER_CONNECTION,
        };
        let trusted_proxies = self
            .trusted_proxies
            .unwrap_or_default()
            .iter()
            .map(|p| proxy(p))
            .collect::<Result<_, _>>()?;
        Ok(Server {
            listen,
            tls,
            header_timeout: secs(self.header_timeout_secs, 10, "header_timeout_secs")?,
            body_timeout: secs(self.body_timeout_secs, 30, "body_timeout_secs")?,
            handshake_timeout: secs(self.handshake_timeout_secs, 10, "handshake_timeout_secs")?,
            max_connections,
            max_connections_per_ip,
            max_streams_per_connection,
            trusted_proxies,
        })
    }
}

/// One entry of `trusted_proxies`: an address (`10.0.0.5`, `::1`) or a network
/// (`10.0.0.0/24`).
fn proxy(entry: &str) -> Result<ipnet::IpNet, KeyError> {
    let entry = entry.trim();
    entry
        .parse::<ipnet::IpNet>()
        .map(|net| net.trunc())
        .or_else(|_| entry.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| {
            (
                "trusted_proxies",
                format!("{entry:?} is not an address or a network such as \"10.0.0.0/24\""),
            )
        })
}

/// The per-address cap (D26): an explicit value above `max_connections` could never bind, so
/// it is refused; the default shrinks to fit a smaller `max_connections`.
fn per_ip(v: Option<usize>, max_connections: usize) -> Result<usize, KeyError> {
    match v {
        None => Ok(DEFAULT_MAX_CONNECTIONS_PER_IP.min(max_connections)),
        Some(0) => Err(("max_connections_per_ip", "must be at least 1".into())),
        Some(n) if n > max_connections => Err((
            "max_connections_per_ip",
            format!("{n} is more than max_connections ({max_connections}); it must not exceed it"),
        )),
        Some(n) => Ok(n),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdmin {
    listen: Option<String>,
    socket: Option<PathBuf>,
    socket_group: Option<String>,
}

/// `[admin]`: the operator's HTTP listener (`/healthz`, `/readyz`, `/metrics`) and the
/// socket of `status` and `requeue` (D37).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admin {
    /// Where it listens; `None` when disabled (`listen = ""`).
    pub listen: Option<SocketAddr>,
    /// The admin socket.
    pub socket: PathBuf,
    /// The group (gid) whose members may use the socket besides its owner (mode 0660), each
    /// named in the audit trail as themselves (D50); owner only (0600) when `None`.
    pub socket_group: Option<u32>,
}

/// The admin socket when `[admin] socket` is not set (D37): in the runtime directory systemd
/// gives the service (`RuntimeDirectory=`, `/run/ap-intake`), else in the data directory.
pub fn default_socket(data_dir: &Path) -> PathBuf {
    match std::env::var_os("RUNTIME_DIRECTORY") {
        // systemd lists several directories separated by colons when the unit asks for more.
        Some(dirs) if !dirs.is_empty() => {
            let dirs = dirs.to_string_lossy().into_owned();
            let first = dirs.split(':').next().unwrap_or_default();
            Path::new(first).join("admin.sock")
        }
        _ => data_dir.join("admin.sock"),
    }
}

impl RawAdmin {
    pub(super) fn check(&self, data_dir: &Path) -> Result<Admin, KeyError> {
        let socket = match &self.socket {
            Some(s) if s.as_os_str().is_empty() => {
                return Err(("socket", "must not be empty".into()));
            }
            Some(s) => s.clone(),
            None => default_socket(data_dir),
        };
        let listen = match self.listen.as_deref() {
            None => Some(SocketAddr::from(([127, 0, 0, 1], 9090))),
            Some("") => None,
            Some(s) => Some(s.parse().map_err(|_| {
                ("listen", format!("{s:?} is not an address and port such as \"127.0.0.1:9090\" (\"\" disables it)"))
            })?),
        };
        let socket_group = match self.socket_group.as_deref() {
            None => None,
            Some(name) => Some(
                uzers::get_group_by_name(name)
                    .map(|g| g.gid())
                    .or_else(|| name.parse().ok())
                    .ok_or_else(|| {
                        (
                            "socket_group",
                            format!(
                                "{name:?} is no group on this machine (groupadd it, or give a gid)"
                            ),
                        )
                    })?,
            ),
        };
        Ok(Admin {
            listen,
            socket,
            socket_group,
        })
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLog {
    level: Option<String>,
    format: Option<LogFormat>,
    stderr: Option<bool>,
    dir: Option<PathBuf>,
    max_files: Option<usize>,
    requests: Option<String>,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One line of text per event.
    Text,
    /// One JSON object per line.
    Json,
}

/// `[log]`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Log {
    /// A tracing filter: `info`, `debug`, `ap_intake=debug,warn`, ...
    pub level: String,
    /// Text or JSON.
    pub format: LogFormat,
    /// Write to stderr (journald under systemd).
    pub stderr: bool,
    /// Also write daily-rotated files here.
    pub dir: Option<PathBuf>,
    /// Rotated files kept.
    pub max_files: usize,
    /// Which requests get a line of their own (D36).
    pub requests: RequestLines,
}

impl Default for Log {
    fn default() -> Self {
        Self {
            level: "info".into(),
            format: LogFormat::Text,
            stderr: true,
            dir: None,
            max_files: 14,
            requests: RequestLines::Failures,
        }
    }
}

impl RawLog {
    pub(super) fn check(self) -> Result<Log, KeyError> {
        let d = Log::default();
        let level = self.level.unwrap_or(d.level);
        tracing_subscriber::EnvFilter::try_new(&level)
            .map_err(|e| ("level", format!("{level:?} is not a log filter: {e}")))?;
        let stderr = self.stderr.unwrap_or(true);
        if !stderr && self.dir.is_none() {
            return Err((
                "stderr",
                "with stderr = false, set dir (or nothing would be logged)".into(),
            ));
        }
        let max_files = self.max_files.unwrap_or(d.max_files);
        if max_files == 0 {
            return Err(("max_files", "must be at least 1".into()));
        }
        let requests = match self.requests.as_deref() {
            None => d.requests,
            Some("failures") => RequestLines::Failures,
            Some("all") => RequestLines::All,
            Some("off") => RequestLines::Off,
            Some(other) => {
                return Err((
                    "requests",
                    format!("{other:?} is not one of \"failures\", \"all\", \"off\""),
                ));
            }
        };
        Ok(Log {
            level,
            format: self.format.unwrap_or(d.format),
            stderr,
            dir: self.dir,
            max_files,
            requests,
        })
    }
}

/// Which requests get a log line of their own (D36, `[log] requests`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestLines {
    /// Refusals and errors: every answer with a status of 400 or more (the default).
    Failures,
    /// Every request.
    All,
    /// None.
    Off,
}

#[cfg(test)]
mod tests {
    use super::proxy;

    #[test]
    fn a_trusted_proxy_is_an_address_or_a_network() {
        let shown = |e: &str| proxy(e).map(|n| n.to_string());
        assert_eq!(shown("10.0.0.5").as_deref(), Ok("10.0.0.5/32"));
        assert_eq!(shown(" 10.0.0.7/24 ").as_deref(), Ok("10.0.0.0/24"));
        assert_eq!(shown("::1").as_deref(), Ok("::1/128"));
        assert_eq!(shown("fd00::/8").as_deref(), Ok("fd00::/8"));
        for bad in ["proxy.lan", "10.0.0.0/33", ""] {
            let (key, why) = proxy(bad).unwrap_err();
            assert_eq!(key, "trusted_proxies");
            assert!(why.contains("is not an address or a network"), "{why}");
        }
    }
}
