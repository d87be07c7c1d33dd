//! SIGHUP (`systemctl reload`, D34): the config file is read again and what can change
//! without a restart is applied: API keys and their rate limits, the TLS certificate and key
//! (for new connections), the log level, the platform's credentials, CA, client certificate
//! and proxy. A file that does not check is refused and logged; the running config stays.
//! Everything else takes effect at the next restart, and the log says which keys changed.

use crate::config::Config;
use crate::delivery::target::{PlatformClient, SandboxSink, Target};
use crate::http::auth::Auth;
use crate::live::Live;
use std::path::PathBuf;
use std::sync::Arc;

/// The parts of a running service a reload replaces.
pub struct Reloadable {
    /// API keys.
    pub auth: Arc<Live<Auth>>,
    /// The intake listener's TLS.
    pub tls: Arc<Live<Option<tokio_rustls::TlsAcceptor>>>,
    /// Where deliveries go.
    pub target: Arc<Live<Target>>,
}

/// The reload of one service: its config file, what it started with and what it runs with
/// now.
pub struct Reloader {
    path: Option<PathBuf>,
    /// The config at start: what a restart-only key still runs with.
    started: Config,
    /// The config of the last reload that was applied.
    current: Config,
    parts: Reloadable,
}

impl Reloader {
    /// For a service started from `path` (the sandbox default without one) with `current`.
    pub fn new(path: Option<PathBuf>, current: Config, parts: Reloadable) -> Self {
        Self {
            path,
            started: current.clone(),
            current,
            parts,
        }
    }

    /// Reads the file again and applies it; logs what changed, or why nothing did.
    pub fn reload(&mut self) {
        let Some(path) = &self.path else {
            tracing::info!("reload: no config file (sandbox default); nothing to read");
            return;
        };
        let next = match Config::load(path) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "reload refused: the config file does not check; the running configuration stays");
                return;
            }
        };
        match self.apply(&next) {
            Ok(applied) => {
                let later = needs_restart(&self.started, &next);
                let applied = match applied.is_empty() {
                    true => "nothing changed".to_string(),
                    false => applied.join(", "),
                };
                tracing::info!(%applied, "reload: configuration re-read");
                if !later.is_empty() {
                    tracing::warn!(keys = %later.join(", "), "reload: these changes take effect after a restart");
                }
                self.current = next;
            }
            Err(e) => {
                tracing::error!(error = %e, "reload refused; the running configuration stays")
            }
        }
    }

    /// Builds everything first, so a broken certificate or proxy changes nothing; then swaps.
    fn apply(&self, next: &Config) -> Result<Vec<&'static str>, String> {
        // Sandbox or not is decided at start: keys and deliveries follow the running mode.
        let sandbox = self.started.sandbox;
        let tls = match &next.server.tls {
            Some(t) => Some(tokio_rustls::TlsAcceptor::from(
                crate::http::tls::server_config(t).map_err(|e| e.to_string())?,
            )),
            None => None,
        };
        let target = match (&next.platform, sandbox) {
            (Some(p), false) => Some(Target::Platform(
                PlatformClient::new(p, next.delivery.timeout)
                    .map_err(|e| format!("[platform]: {e}"))?,
            )),
            (None, true) => Some(Target::Sandbox(SandboxSink::new(&self.started.data_dir))),
            _ => None,
        };
        crate::telemetry::set_level(&next.log.level)?;
        let old = &self.current;
        let mut applied = Vec::new();
        if old.log.level != next.log.level {
            applied.push("log.level");
        }
        self.parts
            .auth
            .set(Auth::new(sandbox, next.api_keys.clone()));
        if format!("{:?}", old.api_keys) != format!("{:?}", next.api_keys) {
            applied.push("api_keys");
        }
        if self.started.server.tls.is_some() == tls.is_some() {
            self.parts.tls.set(tls);
            if next.server.tls.is_some() {
                applied.push("TLS certificate and key (re-read)");
            }
        }
        if let Some(target) = target {
            self.parts.target.set(target);
            applied.push("platform (re-read)");
        }
        Ok(applied)
    }
}

/// Keys whose change a reload cannot apply.
fn needs_restart(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut keys = Vec::new();
    let mut differs = |key, changed: bool| {
        if changed {
            keys.push(key);
        }
    };
    differs("sandbox", old.sandbox != new.sandbox);
    let (a, b) = (&old.server, &new.server);
    differs("server.listen", a.listen != b.listen);
    differs(
        "server.header_timeout_secs",
        a.header_timeout != b.header_timeout,
    );
    differs("server.body_timeout_secs", a.body_timeout != b.body_timeout);
    differs(
        "server.handshake_timeout_secs",
        a.handshake_timeout != b.handshake_timeout,
    );
    differs(
        "server.max_connections",
        a.max_connections != b.max_connections,
    );
    differs(
        "server.max_connections_per_ip",
        a.max_connections_per_ip != b.max_connections_per_ip,
    );
    differs(
        "server.max_streams_per_connection",
        a.max_streams_per_connection != b.max_streams_per_connection,
    );
    differs(
        "server.tls (turning TLS on or off)",
        old.server.tls.is_some() != new.server.tls.is_some(),
    );
    differs(
        "storage",
        old.data_dir != new.data_dir || old.storage != new.storage,
    );
    differs("admin", old.admin != new.admin);
    differs(
        "limits",
        (old.max_body_bytes, old.max_records, old.inflight_bytes)
            != (new.max_body_bytes, new.max_records, new.inflight_bytes),
    );
    differs("validation.schema_dir", old.schema_dir != new.schema_dir);
    differs(
        "accounting_objects",
        old.accounting_types != new.accounting_types,
    );
    // The timeout goes with the platform client, which a reload rebuilds.
    differs(
        "delivery (batch size, backoff)",
        old.delivery.settings != new.delivery.settings,
    );
    let (a, b) = (&old.log, &new.log);
    differs("log.format", a.format != b.format);
    differs("log.stderr", a.stderr != b.stderr);
    differs("log.dir", a.dir != b.dir);
    differs("log.max_files", a.max_files != b.max_files);
    differs("log.requests", a.requests != b.requests);
    differs(
        "receipts.retention_days",
        old.receipt_retention != new.receipt_retention,
    );
    keys
}
