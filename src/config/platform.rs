//! `[platform]` and `[delivery]`: where and how accepted records are delivered (D18).

use serde::Deserialize;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPlatform {
    url: String,
    bearer_token: Option<String>,
    bearer_token_file: Option<PathBuf>,
    username: Option<String>,
    password: Option<String>,
    password_file: Option<PathBuf>,
    ca_file: Option<PathBuf>,
    client_cert: Option<PathBuf>,
    client_key: Option<PathBuf>,
    proxy: Option<String>,
    oauth2: Option<super::network::RawOAuth2>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDelivery {
    batch_size: Option<usize>,
    timeout_secs: Option<u64>,
    backoff_base_ms: Option<u64>,
    backoff_cap_ms: Option<u64>,
}

/// The AP platform.
#[derive(Clone)]
pub struct Platform {
    /// Base URL; each interface's documents go to `<url>/<interface id>`.
    pub url: String,
    /// How ap-intake authenticates to it.
    pub auth: Option<PlatformAuth>,
    /// CA, client certificate, proxy, OAuth2 (D33).
    pub network: super::network::Network,
}

/// Credentials for the platform, read from the config or from files (secrets stay out of
/// the config).
#[derive(Clone)]
pub enum PlatformAuth {
    /// `Authorization: Bearer <token>`.
    Bearer(String),
    /// `Authorization: Basic ...`.
    Basic {
        /// User name.
        username: String,
        /// Password.
        password: String,
    },
}

impl fmt::Debug for Platform {
    // Never print credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let auth = match &self.auth {
            None => "none",
            Some(PlatformAuth::Bearer(_)) => "bearer <redacted>",
            Some(PlatformAuth::Basic { .. }) => "basic <redacted>",
        };
        f.debug_struct("Platform")
            .field("url", &self.url)
            .field("auth", &auth)
            .field("network", &self.network)
            .finish()
    }
}

use super::KeyError;

/// A secret given in the file itself or in a file of its own (`keys`: the two keys), never both.
fn inline_or_file(
    inline: Option<String>,
    file: Option<&Path>,
    (key, file_key): (&'static str, &'static str),
) -> Result<Option<String>, KeyError> {
    match (inline, file) {
        (Some(_), Some(_)) => Err((file_key, format!("set {key} or {file_key}, not both"))),
        (Some(value), None) => Ok(Some(value)),
        (None, Some(path)) => read_secret(path, file_key).map(Some),
        (None, None) => Ok(None),
    }
}

pub(super) fn read_secret(path: &Path, key: &'static str) -> Result<String, KeyError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| (key, format!("cannot read {}: {e}", path.display())))?;
    let secret = text.trim_end_matches(['\n', '\r']).to_string();
    if secret.is_empty() {
        return Err((key, format!("{} is empty", path.display())));
    }
    Ok(secret)
}

impl RawPlatform {
    pub(super) fn check(self) -> Result<Platform, KeyError> {
        let uri: http::Uri = self
            .url
            .parse()
            .map_err(|_| ("url", format!("{:?} is not a URL", self.url)))?;
        if !matches!(uri.scheme_str(), Some("https" | "http")) || uri.host().is_none() {
            return Err((
                "url",
                format!(
                    "{:?} must be an http:// or https:// URL with a host",
                    self.url
                ),
            ));
        }
        let token = inline_or_file(
            self.bearer_token,
            self.bearer_token_file.as_deref(),
            ("bearer_token", "bearer_token_file"),
        )?;
        let password = inline_or_file(
            self.password,
            self.password_file.as_deref(),
            ("password", "password_file"),
        )?;
        let auth = match (token, self.username, password) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
                return Err((
                    "bearer_token",
                    "use a bearer token or a username and password, not both".into(),
                ));
            }
            (Some(t), None, None) => Some(PlatformAuth::Bearer(t)),
            (None, Some(username), Some(password)) => {
                Some(PlatformAuth::Basic { username, password })
            }
            (None, Some(_), None) => {
                return Err((
                    "password",
                    "username needs password or password_file".into(),
                ));
            }
            (None, None, Some(_)) => return Err(("username", "password needs a username".into())),
            (None, None, None) => None,
        };
        let network = super::network::check(
            self.ca_file.as_deref(),
            self.client_cert.as_deref(),
            self.client_key.as_deref(),
            self.proxy,
            self.oauth2,
        )?;
        if auth.is_some() && network.oauth2.is_some() {
            return Err((
                "oauth2",
                "use OAuth2, a bearer token or a username and password, not several".into(),
            ));
        }
        Ok(Platform {
            url: self.url,
            auth,
            network,
        })
    }
}

/// `[delivery]`, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// Batch size and backoff.
    pub settings: Settings,
    /// Longest a POST to the platform may take.
    pub timeout: Duration,
}

impl Default for Delivery {
    /// 100 records per document, 30 s timeout, backoff from 1 s up to 5 min.
    fn default() -> Self {
        Self {
            settings: Settings {
                batch_size: 100,
                backoff: Policy {
                    base: Duration::from_secs(1),
                    cap: Duration::from_secs(300),
                },
            },
            timeout: Duration::from_secs(30),
        }
    }
}

impl RawDelivery {
    pub(super) fn check(self) -> Result<Delivery, KeyError> {
        let d = Delivery::default();
        let batch_size = self.batch_size.unwrap_or(d.settings.batch_size);
        if batch_size == 0 {
            return Err(("batch_size", "must be at least 1".into()));
        }
        let timeout = self.timeout_secs.unwrap_or(d.timeout.as_secs());
        if timeout == 0 {
            return Err(("timeout_secs", "must be at least 1".into()));
        }
        let base = self
            .backoff_base_ms
            .unwrap_or(d.settings.backoff.base.as_millis() as u64);
        let cap = self
            .backoff_cap_ms
            .unwrap_or(d.settings.backoff.cap.as_millis() as u64);
        if base == 0 {
            return Err(("backoff_base_ms", "must be at least 1".into()));
        }
        if cap < base {
            return Err((
                "backoff_cap_ms",
                format!("must be at least backoff_base_ms ({base})"),
            ));
        }
        Ok(Delivery {
            settings: Settings {
                batch_size,
                backoff: Policy {
                    base: Duration::from_millis(base),
                    cap: Duration::from_millis(cap),
                },
            },
            timeout: Duration::from_secs(timeout),
        })
    }
}

/// `[delivery]` batch size and backoff, as the delivery lanes use them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Most records per document.
    pub batch_size: usize,
    /// Retry delays.
    pub backoff: Policy,
}

/// `[delivery] backoff_base_ms` and `backoff_cap_ms` (the rules: `delivery::backoff`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// The first delay's ceiling.
    pub base: Duration,
    /// No delay's ceiling exceeds this.
    pub cap: Duration,
}
