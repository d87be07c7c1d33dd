//! Configuration: a TOML file read strictly (`deny_unknown_fields`) into [`RawConfig`], then
//! checked into a [`Config`]. Every error names the key it is about. With no file the service
//! runs as a sandbox (D21).

mod api_keys;
mod database;
mod network;
mod oauth2;
mod platform;
mod server;
mod storage;

pub use api_keys::{Access, ApiKey, RateLimit};
pub use oauth2::{Accept, External, KeySource, OAuth2Client, OAuth2Server};

/// A problem with one key of a section, found by the section's check: (the key below the
/// section, the message). `RawConfig::check` prefixes the section and the file.
type KeyError = (&'static str, String);
pub use database::{DEFAULT_LEASE_SECS, Postgres, redacted as redacted_url};
pub use network::{Network, OAuth2, certificates, root_certs, system_ca_bundle};
pub use platform::{
    Delivery, Platform, PlatformAuth, Policy as BackoffPolicy, Settings as DeliverySettings,
};
pub use server::{Admin, ClientAuth, Log, LogFormat, RequestLines, Server, Tls};
pub use storage::{Backend, Storage};

use api_keys::RawApiKey;
use platform::{RawDelivery, RawPlatform};
use serde::Deserialize;
use server::{RawAdmin, RawLog, RawServer};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use storage::RawStorage;

/// Accounting types accepted when the config names none (the spec's examples).
pub const DEFAULT_ACCOUNTING_TYPES: [&str; 4] =
    ["COSTCENTRE", "DEPARTMENT", "PROJECT", "BUSINESSUNIT"];

/// The example configuration, every key documented (`ap-intake print-config`).
pub const EXAMPLE: &str = include_str!("../../config.example.toml");

/// Where the queue lives when the config does not say (outside sandbox).
pub const DEFAULT_DATA_DIR: &str = "/var/lib/ap-intake";

/// A configuration that cannot be used; the service does not start.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML, or has an unknown key or a value of the wrong type.
    #[error("config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's explanation, naming the key, line and column.
        message: String,
    },
    /// A value is out of range or inconsistent with others.
    #[error("config file {path}: {key}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The key, as `section.key`.
        key: String,
        /// What is wrong and what is expected.
        message: String,
    },
}

/// The file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    sandbox: Option<bool>,
    #[serde(default)]
    server: RawServer,
    #[serde(default)]
    storage: RawStorage,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    validation: RawValidation,
    #[serde(default)]
    accounting_objects: RawAccountingObjects,
    #[serde(default)]
    api_keys: Vec<RawApiKey>,
    platform: Option<RawPlatform>,
    #[serde(default)]
    delivery: RawDelivery,
    #[serde(default)]
    admin: RawAdmin,
    #[serde(default)]
    log: RawLog,
    #[serde(default)]
    receipts: RawReceipts,
    #[serde(default)]
    audit: RawAudit,
    #[serde(default)]
    retention: RawRetention,
    oauth2: Option<oauth2::RawOAuth2>,
    #[serde(default)]
    auth: oauth2::RawAuth,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReceipts {
    retention_days: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAudit {
    retention_days: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRetention {
    delivered_days: Option<u32>,
}

/// The longest the delivered XML is kept for a replay (D49).
const MAX_DELIVERED_DAYS: u32 = 366;

/// How long audit records are kept by default (D50).
pub const DEFAULT_AUDIT_DAYS: u32 = 365;
/// The longest: ten years, for a risk team that keeps them that long.
const MAX_AUDIT_DAYS: u32 = 3660;

/// How long receipts are kept by default (D38).
pub const DEFAULT_RECEIPT_DAYS: u32 = 7;
/// The longest retention accepted: a receipt is for following a delivery, not an archive.
const MAX_RECEIPT_DAYS: u32 = 366;

/// What operator commands need of a config file: where the queue and the admin socket are.
#[derive(Debug, Clone)]
pub struct Locations {
    /// The data directory.
    pub data_dir: PathBuf,
    /// The store.
    pub storage: Storage,
    /// The service's admin socket (D37).
    pub admin_socket: PathBuf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    max_body_bytes: Option<u64>,
    max_records: Option<usize>,
    inflight_bytes: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawValidation {
    schema_dir: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAccountingObjects {
    types: Option<Vec<String>>,
}

/// A checked configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// No API keys; deliveries go to the built-in sink (D21).
    pub sandbox: bool,
    /// The intake listener: address, TLS, timeouts, connection cap.
    pub server: Server,
    /// The operator's HTTP listener.
    pub admin: Admin,
    /// Logging.
    pub log: Log,
    /// Where the queue lives.
    pub data_dir: PathBuf,
    /// The queue's store.
    pub storage: Storage,
    /// Largest accepted body (413 above, D5).
    pub max_body_bytes: u64,
    /// Most records per request (413 above, D5).
    pub max_records: usize,
    /// The memory budget of bodies being received or parsed (D27).
    pub inflight_bytes: u64,
    /// Directory whose schema files replace the built-in ones (D14).
    pub schema_dir: Option<PathBuf>,
    /// Valid `accountingType` values.
    pub accounting_types: Vec<String>,
    /// Keys that may call the service.
    pub api_keys: Vec<ApiKey>,
    /// Where deliveries go (`None` in sandbox: the built-in sink keeps them).
    pub platform: Option<Platform>,
    /// Batch size, timeout and backoff of deliveries.
    pub delivery: Delivery,
    /// How long receipts of requests are kept (`[receipts] retention_days`, D38); zero
    /// keeps none.
    pub receipt_retention: Duration,
    /// How long audit records are kept (`[audit] retention_days`, D50); at least a day.
    pub audit_retention: Duration,
    /// How long each key's last delivered XML is kept for a replay (`[retention]
    /// delivered_days`, D49); zero keeps none.
    pub delivered_retention: Duration,
    /// OAuth 2.0 (D47): the service's own tokens and the customer's provider's.
    pub oauth2: Option<OAuth2Server>,
    /// What authenticates a request (`[auth] accept`, D47).
    pub accept: Accept,
}

impl Config {
    /// The embedded default: a sandbox on 127.0.0.1:8080 with data in `./ap-intake-data`.
    pub fn sandbox_default() -> Self {
        Self {
            sandbox: true,
            server: Server {
                listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
                tls: None,
                header_timeout: Duration::from_secs(10),
                body_timeout: Duration::from_secs(30),
                handshake_timeout: Duration::from_secs(10),
                max_connections: 1024,
                max_connections_per_ip: server::DEFAULT_MAX_CONNECTIONS_PER_IP,
                max_streams_per_connection: server::DEFAULT_MAX_STREAMS_PER_CONNECTION,
                trusted_proxies: Vec::new(),
            },
            admin: Admin {
                listen: Some(SocketAddr::from(([127, 0, 0, 1], 9090))),
                socket: server::default_socket(Path::new("ap-intake-data")),
                socket_group: None,
            },
            log: Log::default(),
            data_dir: PathBuf::from("ap-intake-data"),
            storage: Storage::default(),
            max_body_bytes: 32 * 1024 * 1024,
            max_records: 10_000,
            inflight_bytes: 256 * 1024 * 1024,
            schema_dir: None,
            accounting_types: DEFAULT_ACCOUNTING_TYPES.map(String::from).to_vec(),
            api_keys: Vec::new(),
            platform: None,
            delivery: Delivery::default(),
            receipt_retention: days(DEFAULT_RECEIPT_DAYS),
            audit_retention: days(DEFAULT_AUDIT_DAYS),
            delivered_retention: Duration::ZERO,
            oauth2: None,
            accept: Accept {
                api_key: true,
                bearer: false,
                client_secret: false,
            },
        }
    }

    /// Reads and checks the file at `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Where the queue and the admin socket of the service configured by the file at `path`
    /// (or the sandbox default without one) are, for operator commands: secrets the service
    /// reads need not be readable by the operator.
    pub fn locations(path: Option<&Path>) -> Result<Locations, ConfigError> {
        let Some(path) = path else {
            let base = Self::sandbox_default();
            return Ok(Locations {
                data_dir: base.data_dir,
                storage: base.storage,
                admin_socket: base.admin.socket,
            });
        };
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let raw: RawConfig = toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let invalid = |(key, message): (&str, String)| ConfigError::Invalid {
            path: path.to_path_buf(),
            key: key.to_string(),
            message,
        };
        let data_dir = raw.data_dir(path)?;
        let storage = raw
            .storage
            .check()
            .map_err(|(k, m)| invalid((&format!("storage.{k}"), m)))?;
        let admin = raw
            .admin
            .check(&data_dir)
            .map_err(|(k, m)| invalid((&format!("admin.{k}"), m)))?;
        Ok(Locations {
            data_dir,
            storage,
            admin_socket: admin.socket,
        })
    }

    /// Checks `text`, the contents of the file at `path`.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        raw.check(path)
    }
}

fn days(n: u32) -> Duration {
    Duration::from_secs(u64::from(n) * 86_400)
}

impl RawConfig {
    fn data_dir(&self, path: &Path) -> Result<PathBuf, ConfigError> {
        match &self.storage.data_dir {
            Some(d) if d.as_os_str().is_empty() => Err(ConfigError::Invalid {
                path: path.to_path_buf(),
                key: "storage.data_dir".into(),
                message: "must not be empty".into(),
            }),
            Some(d) => Ok(d.clone()),
            None if self.sandbox.unwrap_or(false) => Ok(Config::sandbox_default().data_dir),
            None => Ok(PathBuf::from(DEFAULT_DATA_DIR)),
        }
    }

    fn check(self, path: &Path) -> Result<Config, ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            key: key.to_string(),
            message,
        };
        let sandbox = self.sandbox.unwrap_or(false);
        let base = Config::sandbox_default();
        let section =
            |name: &'static str| move |(k, m): (&str, String)| invalid(&format!("{name}.{k}"), m);
        let data_dir = self.data_dir(path)?;
        let server = self.server.check(sandbox).map_err(section("server"))?;
        let admin = self.admin.check(&data_dir).map_err(section("admin"))?;
        let log = self.log.check().map_err(section("log"))?;
        let storage = self.storage.check().map_err(section("storage"))?;
        let max_body_bytes = positive(self.limits.max_body_bytes, base.max_body_bytes)
            .map_err(|m| invalid("limits.max_body_bytes", m))?;
        let max_records = positive(self.limits.max_records, base.max_records)
            .map_err(|m| invalid("limits.max_records", m))?;
        let inflight_bytes = self.limits.inflight_bytes.unwrap_or(base.inflight_bytes);
        // A parsed body is charged up to 4.5 times its size (validate/cost.rs), from the
        // fifteen sixteenths of the budget not kept for small requests.
        if inflight_bytes < 5 * max_body_bytes {
            return Err(invalid(
                "limits.inflight_bytes",
                format!(
                    "must be at least five times limits.max_body_bytes ({} bytes), or a body of \
                     the largest size could not be processed",
                    5 * max_body_bytes
                ),
            ));
        }
        if let Some(dir) = &self.validation.schema_dir
            && !dir.is_dir()
        {
            return Err(invalid(
                "validation.schema_dir",
                format!("{} is not a directory", dir.display()),
            ));
        }
        let accounting_types = check_types(self.accounting_objects.types, base.accounting_types)
            .map_err(|m| invalid("accounting_objects.types", m))?;
        let api_keys = self
            .api_keys
            .into_iter()
            .enumerate()
            .map(|(i, k)| {
                k.check()
                    .map_err(|(field, m)| invalid(&format!("api_keys[{i}].{field}"), m))
            })
            .collect::<Result<Vec<_>, _>>()?;
        for (i, k) in api_keys.iter().enumerate() {
            if api_keys[..i].iter().any(|o| o.name == k.name) {
                return Err(invalid(
                    &format!("api_keys[{i}].name"),
                    format!("{:?} is used twice", k.name),
                ));
            }
        }
        let oauth2 = self
            .oauth2
            .map(oauth2::RawOAuth2::check)
            .transpose()
            .map_err(section("oauth2"))?;
        let accept = self.auth.check(oauth2.is_some()).map_err(section("auth"))?;
        // Someone must be able to send: a credential configured of a kind `accept` lists.
        let clients = oauth2.as_ref().is_some_and(|o| !o.clients.is_empty());
        let external = oauth2.as_ref().is_some_and(|o| o.external.is_some());
        let usable = (accept.api_key && !api_keys.is_empty())
            || (accept.bearer && (clients || external))
            || (accept.client_secret && clients);
        if !sandbox && !usable {
            let (key, message) = match oauth2.is_some() {
                false => (
                    "api_keys",
                    "no [[api_keys]] configured; create one with `ap-intake key generate --name NAME`, or set sandbox = true",
                ),
                true => (
                    "auth",
                    "no credential that [auth] accept lists is configured: add [[api_keys]] \
                     (`ap-intake key generate --name NAME`), [[oauth2.clients]] (`ap-intake key \
                     generate --client NAME`) or [oauth2.external], or set sandbox = true",
                ),
            };
            return Err(invalid(key, message.into()));
        }
        // In sandbox the built-in sink receives deliveries; a [platform] is ignored.
        let platform = match self.platform {
            _ if sandbox => None,
            Some(p) => Some(
                p.check()
                    .map_err(|(k, m)| invalid(&format!("platform.{k}"), m))?,
            ),
            None => {
                return Err(invalid(
                    "platform.url",
                    "required unless sandbox = true".into(),
                ));
            }
        };
        let delivery = self
            .delivery
            .check()
            .map_err(|(k, m)| invalid(&format!("delivery.{k}"), m))?;
        let retention_days = self.receipts.retention_days.unwrap_or(DEFAULT_RECEIPT_DAYS);
        if retention_days > MAX_RECEIPT_DAYS {
            return Err(invalid(
                "receipts.retention_days",
                format!("{retention_days} is more than {MAX_RECEIPT_DAYS} days"),
            ));
        }
        let audit_days = self.audit.retention_days.unwrap_or(DEFAULT_AUDIT_DAYS);
        if !(1..=MAX_AUDIT_DAYS).contains(&audit_days) {
            return Err(invalid(
                "audit.retention_days",
                format!("{audit_days} is not from 1 to {MAX_AUDIT_DAYS} days"),
            ));
        }
        let delivered_days = self.retention.delivered_days.unwrap_or(0);
        if delivered_days > MAX_DELIVERED_DAYS {
            return Err(invalid(
                "retention.delivered_days",
                format!("{delivered_days} is more than {MAX_DELIVERED_DAYS} days"),
            ));
        }
        Ok(Config {
            receipt_retention: days(retention_days),
            audit_retention: days(audit_days),
            delivered_retention: days(delivered_days),
            sandbox,
            server,
            admin,
            log,
            data_dir,
            storage,
            max_body_bytes,
            max_records,
            inflight_bytes,
            schema_dir: self.validation.schema_dir,
            accounting_types,
            api_keys,
            platform,
            delivery,
            oauth2,
            accept,
        })
    }
}

fn positive<T: PartialEq + Default>(v: Option<T>, default: T) -> Result<T, String> {
    match v {
        Some(v) if v == T::default() => Err("must be greater than 0".into()),
        Some(v) => Ok(v),
        None => Ok(default),
    }
}

fn check_types(types: Option<Vec<String>>, default: Vec<String>) -> Result<Vec<String>, String> {
    let Some(types) = types else {
        return Ok(default);
    };
    if types.is_empty() || types.len() > 9 {
        return Err(format!(
            "list 1 to 9 types (the spec allows nine), not {}",
            types.len()
        ));
    }
    for (i, t) in types.iter().enumerate() {
        if t.is_empty() {
            return Err("a type must not be empty".into());
        }
        if types[..i].contains(t) {
            return Err(format!("{t:?} is listed twice"));
        }
    }
    Ok(types)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "[[api_keys]]\nname = \"erp\"\nsha256 = \"0000000000000000000000000000000000000000000000000000000000000000\"\ninterfaces = [\"*\"]\n";

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(text, Path::new("c.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn example_config_is_valid() {
        let text = include_str!("../../config.example.toml");
        let c = parse(text).unwrap();
        assert!(!c.sandbox);
        assert_eq!(c.server.listen.to_string(), "0.0.0.0:8443");
        assert_eq!(c.max_body_bytes, 33_554_432);
        assert_eq!(c.max_records, 10_000);
    }

    /// The example documents the defaults by writing them out: the two must not drift.
    #[test]
    fn the_example_writes_the_defaults_of_the_code() {
        let example = parse(include_str!("../../config.example.toml")).unwrap();
        let code = Config::sandbox_default();
        let (e, c) = (&example.server, &code.server);
        assert_eq!(
            (e.header_timeout, e.body_timeout, e.handshake_timeout),
            (c.header_timeout, c.body_timeout, c.handshake_timeout)
        );
        assert_eq!(
            (
                e.max_connections,
                e.max_connections_per_ip,
                e.max_streams_per_connection
            ),
            (
                c.max_connections,
                c.max_connections_per_ip,
                c.max_streams_per_connection
            )
        );
        assert_eq!(
            (
                example.max_body_bytes,
                example.max_records,
                example.inflight_bytes
            ),
            (code.max_body_bytes, code.max_records, code.inflight_bytes)
        );
        assert_eq!(example.storage, code.storage);
        assert_eq!(example.delivery, code.delivery);
        assert_eq!(example.admin.listen, code.admin.listen);
        assert_eq!(example.accounting_types, code.accounting_types);
        let (e, c) = (&example.log, &code.log);
        assert_eq!(
            (&e.level, e.format, e.stderr),
            (&c.level, c.format, c.stderr)
        );
        assert_eq!((e.max_files, e.requests), (c.max_files, c.requests));
        assert_eq!(example.receipt_retention, code.receipt_retention);
        assert_eq!(example.audit_retention, code.audit_retention);
        assert_eq!(example.delivered_retention, code.delivered_retention);
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_key() {
        let e = parse("sandbox = true\n[server]\nlisten_on = \"x\"\n").unwrap_err();
        assert!(e.contains("listen_on"), "{e}");
        let e = parse("sandbox = true\n[server]\nlisten = \"nowhere\"\n").unwrap_err();
        assert!(e.contains("server.listen"), "{e}");
        let e = parse("sandbox = true\n[limits]\nmax_records = 0\n").unwrap_err();
        assert!(e.contains("limits.max_records"), "{e}");
        let e = parse("sandbox = true\n[limits]\nmax_records = \"many\"\n").unwrap_err();
        assert!(e.contains("max_records"), "{e}");
        let e = parse(&format!(
            "[server]\nplain_http = true\n[platform]\nurl = \"https://x\"\n{}",
            KEY.replace("\"*\"", "\"/nope\"")
        ))
        .unwrap_err();
        assert!(e.contains("api_keys[0].interfaces"), "{e}");
        let e =
            parse("[server]\nplain_http = true\n[platform]\nurl = \"https://x\"\n").unwrap_err();
        assert!(e.contains("api_keys"), "{e}");
        let e = parse(&format!("[server]\nplain_http = true\n{KEY}")).unwrap_err();
        assert!(e.contains("platform.url"), "{e}");
        let e =
            parse("sandbox = true\n[admin]\nsocket_group = \"no-such-group-here\"\n").unwrap_err();
        assert!(e.contains("admin.socket_group"), "{e}");
        let e = parse("sandbox = true\n[audit]\nretention_days = 0\n").unwrap_err();
        assert!(e.contains("audit.retention_days"), "{e}");
        let c = parse("sandbox = true\n[admin]\nsocket_group = \"0\"\n").unwrap();
        assert_eq!(c.admin.socket_group, Some(0));
    }

    #[test]
    fn sandbox_file_defaults() {
        let c = parse("sandbox = true\n").unwrap();
        assert!(c.sandbox && c.server.tls.is_none());
        assert_eq!(c.server.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.accounting_types.len(), 4);
    }
}
