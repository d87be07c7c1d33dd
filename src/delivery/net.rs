//! Reaching the platform (D33): the operating system's trust store plus `[platform]
//! ca_file`, a client certificate, a proxy, and OAuth2 client-credential tokens cached until
//! they expire.

use crate::config::{Network, OAuth2, certificates, root_certs};
use std::io::Read;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use ureq::tls::{ClientCert, PemItem, TlsConfig};

/// The TLS settings: system roots plus `ca_file` (or the built-in Mozilla list when the
/// system has no bundle and no `ca_file` is given), and the client certificate.
fn tls(network: &Network) -> Result<TlsConfig, ClientError> {
    let root_certs = root_certs(network.ca_pem.as_deref());
    let client_cert = match &network.client_pem {
        Some((chain, key)) => {
            let key = ureq::tls::parse_pem(key)
                .find_map(|item| match item {
                    Ok(PemItem::PrivateKey(k)) => Some(k),
                    _ => None,
                })
                .ok_or(ClientError::NoPrivateKey)?;
            Some(ClientCert::new_with_certs(&certificates(chain), key))
        }
        None => None,
    };
    Ok(TlsConfig::builder()
        .root_certs(root_certs)
        .client_cert(client_cert)
        .build())
}

/// The HTTP agent for the platform (and its token endpoint).
/// Why the platform's client cannot be built from the configuration (D33).
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// `[platform] client_key` holds no private key.
    #[error("client_key holds no private key")]
    NoPrivateKey,
    /// `[platform] proxy` is not a proxy URL ureq can use.
    #[error("proxy {proxy:?}: {detail}")]
    Proxy {
        /// The configured value.
        proxy: String,
        /// What ureq said.
        detail: String,
    },
}

pub(super) fn agent(network: &Network, timeout: Duration) -> Result<ureq::Agent, ClientError> {
    let proxy = match &network.proxy {
        Some(p) => Some(ureq::Proxy::new(p).map_err(|e| ClientError::Proxy {
            proxy: p.clone(),
            detail: e.to_string(),
        })?),
        None => ureq::Proxy::try_from_env(),
    };
    Ok(ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .max_redirects(0)
        .user_agent(concat!("ap-intake/", env!("CARGO_PKG_VERSION")))
        .tls_config(tls(network)?)
        .proxy(proxy)
        .build()
        .into())
}

/// A token is fetched again this long before it expires.
const EARLY: Duration = Duration::from_secs(30);
/// Tokens that say nothing of their lifetime are kept this long.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(300);

/// Why no token: the platform's configuration (pause, D32) or a passing failure (retry).
pub(super) enum TokenError {
    /// The token endpoint refused the client (4xx).
    Refused(String),
    /// Network error or 5xx.
    Failed(String),
}

/// OAuth2 client credentials and the token they gave, until it expires.
pub(super) struct Tokens {
    oauth2: OAuth2,
    cached: Mutex<Option<(String, Instant)>>,
}

impl Tokens {
    pub fn new(oauth2: OAuth2) -> Self {
        Self {
            oauth2,
            cached: Mutex::new(None),
        }
    }

    /// Forgets the token (the platform answered 401).
    pub fn forget(&self) {
        if let Ok(mut c) = self.cached.lock() {
            *c = None;
        }
    }

    /// A valid token: the cached one, or a new one from the token endpoint.
    pub fn token(&self, agent: &ureq::Agent) -> Result<String, TokenError> {
        if let Ok(c) = self.cached.lock()
            && let Some((token, until)) = c.as_ref()
            && Instant::now() < *until
        {
            return Ok(token.clone());
        }
        let (token, lifetime) = self.fetch(agent)?;
        if let Ok(mut c) = self.cached.lock() {
            let until = Instant::now() + lifetime.saturating_sub(EARLY);
            *c = Some((token.clone(), until));
        }
        Ok(token)
    }

    fn fetch(&self, agent: &ureq::Agent) -> Result<(String, Duration), TokenError> {
        let o = &self.oauth2;
        let mut form = vec![
            ("grant_type", "client_credentials"),
            ("client_id", o.client_id.as_str()),
            ("client_secret", o.client_secret.as_str()),
        ];
        if let Some(scope) = &o.scope {
            form.push(("scope", scope));
        }
        let url = &o.token_url;
        let mut resp =
            agent.post(url).send_form(form).map_err(|e| {
                match super::target::failed(&format!("token endpoint {url}"), &e) {
                    super::target::Answer::Paused { error, .. } => TokenError::Refused(error),
                    _ => TokenError::Failed(format!("token endpoint {url}: {e}")),
                }
            })?;
        let status = resp.status().as_u16();
        let mut body = Vec::new();
        let _ = resp
            .body_mut()
            .as_reader()
            .take(64 * 1024)
            .read_to_end(&mut body);
        let text = String::from_utf8_lossy(&body);
        match status {
            200..=299 => {}
            400..=499 => {
                return Err(TokenError::Refused(format!(
                    "token endpoint {url}: HTTP {status}: {}",
                    text.chars().take(300).collect::<String>().trim()
                )));
            }
            _ => {
                return Err(TokenError::Failed(format!(
                    "token endpoint {url}: HTTP {status}"
                )));
            }
        }
        let json: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
            TokenError::Failed(format!("token endpoint {url}: answer is not JSON: {e}"))
        })?;
        let token = json["access_token"]
            .as_str()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                TokenError::Failed(format!(
                    "token endpoint {url}: no access_token in the answer"
                ))
            })?;
        let lifetime = json["expires_in"]
            .as_u64()
            .map_or(DEFAULT_LIFETIME, Duration::from_secs);
        Ok((token.to_string(), lifetime))
    }
}
