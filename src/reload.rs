//! SIGHUP (`systemctl reload`, D34): the config file is read again and what can change
//! without a restart is applied: API keys and their rate limits, the TLS certificate and key
//! (for new connections), the log level, the platform's credentials, CA, client certificate
//! and proxy, and OAuth 2.0 (D47): `[auth] accept`, the clients, the identity provider, and
//! the signing key (the previous one still accepted until the tokens it signed expire). A file that does not check is refused and logged; the running config stays.
//! Everything else takes effect at the next restart, and the log says which keys changed.

use crate::config::{Admin, Config, Delivery, DeliverySettings, Log, Server};
use crate::delivery::target::{PlatformClient, SandboxSink, Target};
use crate::http::auth::Auth;
use crate::live::Live;
use std::path::PathBuf;
use std::sync::Arc;

/// Why a reload changed nothing: a part of the new config could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The new certificate or key (`[server.tls]`).
    #[error(transparent)]
    Tls(#[from] crate::http::tls::TlsError),
    /// The new platform client (`[platform]`).
    #[error("[platform]: {0}")]
    Platform(#[from] crate::delivery::target::ClientError),
    /// The new log level.
    #[error(transparent)]
    Level(#[from] crate::telemetry::LevelError),
    /// The new signing key (`[oauth2] signing_key_file`).
    #[error("[oauth2] signing_key_file: {0}")]
    SigningKey(#[from] crate::oauth2::KeyError),
}

/// The parts of a running service a reload replaces.
pub struct Reloadable {
    /// API keys.
    pub auth: Arc<Live<Auth>>,
    /// The intake listener's TLS.
    pub tls: Arc<Live<Option<tokio_rustls::TlsAcceptor>>>,
    /// Where deliveries go.
    pub target: Arc<Live<Target>>,
    /// The token endpoint's issuer and keys, if the service signs tokens.
    pub oauth2: Option<Arc<crate::http::oauth2::Endpoints>>,
    /// What the OAuth 2.0 parts of the last build leave for the next (D47).
    pub oauth2_state: crate::oauth2::setup::State,
    /// The service's stop signal, for the identity provider's key fetches a reload starts.
    pub stop: crate::queue::Stop,
    /// The queue, whose audit trail records each reload (D50).
    pub store: Arc<dyn crate::queue::Store>,
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

    /// Reads the file again and applies it; logs what changed, or why nothing did, and
    /// records it in the audit trail (D50).
    pub fn reload(&mut self) {
        let outcome = self.reread();
        let args = serde_json::json!({
            "file": self.path.as_ref().map(|p| p.display().to_string()),
        });
        let store = Arc::clone(&self.parts.store);
        let write = move || {
            let actor = crate::admin::audit::Actor::signal("SIGHUP");
            let done =
                crate::admin::audit::record(store.as_ref(), &actor, "reload", &args, &outcome);
            if let Err(e) = done {
                tracing::warn!(error = %e, "the audit trail could not record this reload");
            }
        };
        // A store write (an fsync, a database round trip) stays off the async workers.
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(write)),
            Err(_) => write(),
        }
    }

    /// [`Reloader::reload`]'s work: what it did, for the audit record.
    fn reread(&mut self) -> serde_json::Value {
        let Some(path) = &self.path else {
            tracing::info!("reload: no config file (sandbox default); nothing to read");
            return serde_json::json!({ "applied": [] });
        };
        let next = match Config::load(path) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "reload refused: the config file does not check; the running configuration stays");
                return serde_json::json!({ "refused": e.to_string() });
            }
        };
        match self.apply(&next) {
            Ok(applied) => {
                let later = needs_restart(&self.started, &next);
                let shown = match applied.is_empty() {
                    true => "nothing changed".to_string(),
                    false => applied.join(", "),
                };
                tracing::info!(applied = %shown, "reload: configuration re-read");
                if !later.is_empty() {
                    tracing::warn!(keys = %later.join(", "), "reload: these changes take effect after a restart");
                }
                self.current = next;
                serde_json::json!({ "applied": applied, "after_restart": later })
            }
            Err(e) => {
                tracing::error!(error = %e, "reload refused; the running configuration stays");
                serde_json::json!({ "refused": e.to_string() })
            }
        }
    }

    /// Builds everything first, so a broken certificate or proxy changes nothing; then swaps.
    fn apply(&mut self, next: &Config) -> Result<Vec<&'static str>, ReloadError> {
        // No `..` in this pattern nor in `needs_restart`'s: a key added to `Config` (or to one
        // of the sections named here) does not compile until it is applied below or named
        // restart-only there, so a reload never ignores a changed key without saying so (D34).
        let Config {
            api_keys,
            server:
                Server {
                    // Applied: the certificate and key are read again (turning TLS on or off
                    // is restart-only).
                    tls,
                    listen: _,
                    header_timeout: _,
                    body_timeout: _,
                    handshake_timeout: _,
                    max_connections: _,
                    max_connections_per_ip: _,
                    max_streams_per_connection: _,
                    trusted_proxies: _,
                },
            log:
                Log {
                    level,
                    format: _,
                    stderr: _,
                    dir: _,
                    max_files: _,
                    requests: _,
                },
            // Applied whole: `PlatformClient::new` reads every part of it.
            platform,
            delivery:
                Delivery {
                    // Goes with the platform client.
                    timeout,
                    settings: _,
                },
            // Restart-only: `needs_restart` names them.
            sandbox: _,
            admin: _,
            data_dir: _,
            storage: _,
            max_body_bytes: _,
            max_records: _,
            inflight_bytes: _,
            schema_dir: _,
            accounting_types: _,
            receipt_retention: _,
            audit_retention: _,
            delivered_retention: _,
            // Applied: `oauth2::setup::build` reads every part of it.
            oauth2,
            accept,
        } = next;
        // Sandbox or not is decided at start: keys and deliveries follow the running mode.
        let sandbox = self.started.sandbox;
        let tls = match tls {
            Some(t) => Some(tokio_rustls::TlsAcceptor::from(
                crate::http::tls::server_config(t)?,
            )),
            None => None,
        };
        let target = match (platform, sandbox) {
            (Some(p), false) => Some(Target::Platform(PlatformClient::new(p, *timeout)?)),
            (None, true) => Some(Target::Sandbox(SandboxSink::new(&self.started.data_dir))),
            _ => None,
        };
        let o2 = crate::oauth2::setup::build(
            oauth2.as_ref(),
            &self.started.data_dir,
            &self.parts.oauth2_state,
        )?;
        crate::telemetry::set_level(level)?;
        let old = &self.current;
        let mut applied = Vec::new();
        if old.log.level != *level {
            applied.push("log.level");
        }
        // A key whose name, hash and limits stay keeps its rate limiter, and with it what
        // its client has used of the burst (D20, D34).
        let clients = oauth2.as_ref().map_or(&[][..], |o| &o.clients[..]);
        let auth = self.parts.auth.get().renewed(sandbox, api_keys.clone());
        self.parts
            .auth
            .set(auth.with_oauth2(*accept, clients, o2.verifier.clone()));
        if old.api_keys != *api_keys {
            applied.push("api_keys");
        }
        if old.accept != *accept {
            applied.push("auth.accept");
        }
        if old.oauth2 != *oauth2 {
            applied.push("oauth2");
        }
        let kid = |s: &crate::oauth2::setup::State| s.ring().map(|r| r.current().kid.clone());
        if kid(&self.parts.oauth2_state) != kid(&o2.state) && self.parts.oauth2.is_some() {
            applied.push("oauth2 signing key (the previous one accepted until its tokens expire)");
        }
        if let (Some(endpoints), Some(issuer), Some(ring)) =
            (&self.parts.oauth2, o2.issuer, o2.state.ring())
        {
            endpoints.renew(issuer, ring.clone());
        }
        if let Some(keys) = &o2.opened {
            let stop = self.parts.stop.clone();
            tokio::spawn(crate::oauth2::provider::keep_fresh(
                Arc::downgrade(keys),
                async move { stop.signalled().await },
            ));
        }
        self.parts.oauth2_state = o2.state;
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
    // No `..` (see `Reloader::apply`): every key of `new` is compared here or applied there.
    let Config {
        sandbox,
        server,
        admin,
        log,
        data_dir,
        storage,
        max_body_bytes,
        max_records,
        inflight_bytes,
        schema_dir,
        accounting_types,
        delivery,
        receipt_retention,
        audit_retention,
        delivered_retention,
        // Applied by `apply`, but for turning the token endpoint on or off.
        oauth2,
        api_keys: _,
        platform: _,
        accept: _,
    } = new;
    differs("sandbox", old.sandbox != *sandbox);
    let signs = |o: &Option<crate::config::OAuth2Server>| {
        o.as_ref().is_some_and(|o| o.signing_key_file.is_some())
    };
    differs(
        "oauth2.signing_key_file (turning the token endpoint on or off)",
        signs(&old.oauth2) != signs(oauth2),
    );
    let Server {
        listen,
        tls,
        header_timeout,
        body_timeout,
        handshake_timeout,
        max_connections,
        max_connections_per_ip,
        max_streams_per_connection,
        trusted_proxies,
    } = server;
    let a = &old.server;
    differs("server.listen", a.listen != *listen);
    differs(
        "server.header_timeout_secs",
        a.header_timeout != *header_timeout,
    );
    differs("server.body_timeout_secs", a.body_timeout != *body_timeout);
    differs(
        "server.handshake_timeout_secs",
        a.handshake_timeout != *handshake_timeout,
    );
    differs(
        "server.max_connections",
        a.max_connections != *max_connections,
    );
    differs(
        "server.max_connections_per_ip",
        a.max_connections_per_ip != *max_connections_per_ip,
    );
    differs(
        "server.max_streams_per_connection",
        a.max_streams_per_connection != *max_streams_per_connection,
    );
    differs(
        "server.trusted_proxies",
        a.trusted_proxies != *trusted_proxies,
    );
    // The certificate and key are applied; whether there is TLS at all is not.
    differs(
        "server.tls (turning TLS on or off)",
        a.tls.is_some() != tls.is_some(),
    );
    differs(
        "storage",
        old.data_dir != *data_dir || old.storage != *storage,
    );
    let Admin {
        listen,
        socket,
        socket_group,
    } = admin;
    differs(
        "admin",
        old.admin.listen != *listen
            || old.admin.socket != *socket
            || old.admin.socket_group != *socket_group,
    );
    differs(
        "limits",
        (old.max_body_bytes, old.max_records, old.inflight_bytes)
            != (*max_body_bytes, *max_records, *inflight_bytes),
    );
    differs("validation.schema_dir", old.schema_dir != *schema_dir);
    differs(
        "accounting_objects",
        old.accounting_types != *accounting_types,
    );
    // The timeout goes with the platform client, which a reload rebuilds.
    let Delivery {
        settings: DeliverySettings {
            batch_size,
            backoff,
        },
        timeout: _,
    } = delivery;
    let a = &old.delivery.settings;
    differs(
        "delivery (batch size, backoff)",
        a.batch_size != *batch_size || a.backoff != *backoff,
    );
    let Log {
        // Applied by `apply`.
        level: _,
        format,
        stderr,
        dir,
        max_files,
        requests,
    } = log;
    let a = &old.log;
    differs("log.format", a.format != *format);
    differs("log.stderr", a.stderr != *stderr);
    differs("log.dir", a.dir != *dir);
    differs("log.max_files", a.max_files != *max_files);
    differs("log.requests", a.requests != *requests);
    differs(
        "receipts.retention_days",
        old.receipt_retention != *receipt_retention,
    );
    differs(
        "audit.retention_days",
        old.audit_retention != *audit_retention,
    );
    differs(
        "retention.delivered_days",
        old.delivered_retention != *delivered_retention,
    );
    keys
}
