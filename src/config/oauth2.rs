//! `[oauth2]`, `[[oauth2.clients]]`, `[oauth2.external]` and `[auth]` (D47): the service as
//! the authorization server of the client-credentials grant, the clients it knows, the
//! customer's own identity provider, and which credentials authenticate a request.

use super::api_keys::{Access, RateLimit, access_of, rate_limit};
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;

type KeyError = (&'static str, String);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOAuth2 {
    signing_key_file: Option<PathBuf>,
    issuer: Option<String>,
    audience: Option<String>,
    token_ttl_secs: Option<u64>,
    #[serde(default)]
    clients: Vec<RawClient>,
    external: Option<RawExternal>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClient {
    client_id: String,
    secret_sha256: String,
    interfaces: Vec<String>,
    rate_limit_per_second: Option<u32>,
    burst: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExternal {
    issuer: String,
    audience: String,
    jwks_url: Option<String>,
    jwks_file: Option<PathBuf>,
    scope_claim: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAuth {
    accept: Option<Vec<String>>,
}

/// What `iss` and `aud` are when the config does not say (D47).
pub const DEFAULT_ISSUER: &str = "ap-intake";
/// How long a token lives when the config does not say (D47).
pub const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(3600);
/// The longest token lifetime the config may ask for: a day.
const MAX_TOKEN_TTL_SECS: u64 = 86_400;

/// `[oauth2]`, checked (D47).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuth2Server {
    /// The PEM private key tokens are signed with (Ed25519 or P-256), read at start and on
    /// reload; `None` when only the external provider's tokens are accepted.
    pub signing_key_file: Option<PathBuf>,
    /// `iss` of the tokens the service issues, and what it checks in them.
    pub issuer: String,
    /// `aud` likewise.
    pub audience: String,
    /// How long an issued token lives.
    pub token_ttl: Duration,
    /// The clients of the client-credentials grant.
    pub clients: Vec<OAuth2Client>,
    /// The customer's identity provider, whose tokens are accepted too.
    pub external: Option<External>,
}

/// One client of the client-credentials grant: like an API key, its secret is never stored,
/// only its SHA-256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuth2Client {
    /// `client_id` (the spec's Client_Id).
    pub client_id: String,
    /// SHA-256 of the secret.
    pub secret_sha256: [u8; 32],
    /// The interfaces its tokens may name.
    pub access: Access,
    /// Requests per second and burst of the requests its tokens authenticate.
    pub rate_limit: Option<RateLimit>,
}

/// `[oauth2.external]`: tokens of the customer's identity provider (Entra ID, Keycloak,
/// ADFS), checked offline against its key set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct External {
    /// `iss` its tokens carry.
    pub issuer: String,
    /// `aud` its tokens must carry.
    pub audience: String,
    /// Where its key set is.
    pub keys: KeySource,
    /// The claim that names what a token may use: `scope`, `scp` or `roles`.
    pub scope_claim: String,
}

/// Where a provider's key set comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// Fetched, kept in the data directory, fetched again for an unknown `kid`.
    Url(String),
    /// A file the operator keeps.
    File(PathBuf),
}

/// What authenticates a request (`[auth] accept`, D47).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accept {
    /// `x-api-key` (D20).
    pub api_key: bool,
    /// `Authorization: Bearer` tokens.
    pub bearer: bool,
    /// The spec's `Client_Id` and `Client_Secret` headers on each request.
    pub client_secret: bool,
}

impl RawOAuth2 {
    pub(super) fn check(self) -> Result<OAuth2Server, KeyError> {
        let token_ttl = match self.token_ttl_secs {
            None => DEFAULT_TOKEN_TTL,
            Some(s @ 1..=MAX_TOKEN_TTL_SECS) => Duration::from_secs(s),
            Some(s) => {
                return Err((
                    "token_ttl_secs",
                    format!("{s} is outside 1 to {MAX_TOKEN_TTL_SECS} seconds"),
                ));
            }
        };
        let clients = self
            .clients
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                c.check()
                    .map_err(|(k, m)| (k, format!("clients[{i}]: {m}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        for (i, c) in clients.iter().enumerate() {
            if clients[..i].iter().any(|o| o.client_id == c.client_id) {
                return Err((
                    "clients",
                    format!("client_id {:?} is used twice", c.client_id),
                ));
            }
        }
        if !clients.is_empty() && self.signing_key_file.is_none() {
            return Err((
                "signing_key_file",
                "needed to sign the clients' tokens; make one with `ap-intake key \
                 generate-signing FILE`"
                    .into(),
            ));
        }
        let external = self.external.map(RawExternal::check).transpose()?;
        let nonempty = |v: Option<String>, key: &'static str| match v {
            Some(s) if s.trim().is_empty() => Err((key, "must not be empty".to_string())),
            Some(s) => Ok(s),
            None => Ok(DEFAULT_ISSUER.to_string()),
        };
        Ok(OAuth2Server {
            signing_key_file: self.signing_key_file,
            issuer: nonempty(self.issuer, "issuer")?,
            audience: nonempty(self.audience, "audience")?,
            token_ttl,
            clients,
            external,
        })
    }
}

impl RawClient {
    fn check(self) -> Result<OAuth2Client, KeyError> {
        if self.client_id.trim().is_empty() || self.client_id.contains(':') {
            return Err((
                "clients",
                "client_id must be non-empty and without ':' (HTTP Basic carries id:secret)".into(),
            ));
        }
        let secret_sha256 = hex::decode(&self.secret_sha256)
            .ok()
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .ok_or((
                "clients",
                "secret_sha256 must be 64 hex characters (the SHA-256 of the secret)".to_string(),
            ))?;
        Ok(OAuth2Client {
            client_id: self.client_id,
            secret_sha256,
            access: access_of(&self.interfaces).map_err(|(_, m)| ("clients", m))?,
            rate_limit: rate_limit(self.rate_limit_per_second, self.burst)
                .map_err(|(k, m)| ("clients", format!("{k} {m}")))?,
        })
    }
}

impl RawExternal {
    fn check(self) -> Result<External, KeyError> {
        let keys = match (self.jwks_url, self.jwks_file) {
            (Some(url), None) if url.starts_with("https://") || loopback_http(&url) => {
                KeySource::Url(url)
            }
            (Some(url), None) => {
                return Err((
                    "external.jwks_url",
                    format!(
                        "{url:?} is not an https URL (plain http only to this machine: whoever \
                         can change the keys in transit can sign tokens)"
                    ),
                ));
            }
            (None, Some(file)) => KeySource::File(file),
            _ => {
                return Err((
                    "external",
                    "set one of jwks_url (the provider's key set) and jwks_file".into(),
                ));
            }
        };
        let scope_claim = self.scope_claim.unwrap_or_else(|| "scope".into());
        if !["scope", "scp", "roles"].contains(&scope_claim.as_str()) {
            return Err((
                "external.scope_claim",
                format!("{scope_claim:?} is not one of \"scope\", \"scp\", \"roles\""),
            ));
        }
        Ok(External {
            issuer: self.issuer,
            audience: self.audience,
            keys,
            scope_claim,
        })
    }
}

impl RawAuth {
    /// `[auth] accept`, or its default: API keys, and bearer tokens when `[oauth2]` is there.
    pub(super) fn check(self, oauth2: bool) -> Result<Accept, KeyError> {
        let Some(list) = self.accept else {
            return Ok(Accept {
                api_key: true,
                bearer: oauth2,
                client_secret: false,
            });
        };
        let mut accept = Accept {
            api_key: false,
            bearer: false,
            client_secret: false,
        };
        for name in &list {
            match name.as_str() {
                "api_key" => accept.api_key = true,
                "bearer" => accept.bearer = true,
                "client_secret" => accept.client_secret = true,
                other => {
                    return Err((
                        "accept",
                        format!(
                            "{other:?} is not one of \"api_key\", \"bearer\", \"client_secret\""
                        ),
                    ));
                }
            }
        }
        if !(accept.api_key || accept.bearer || accept.client_secret) {
            return Err(("accept", "list at least one way to authenticate".into()));
        }
        if (accept.bearer || accept.client_secret) && !oauth2 {
            return Err((
                "accept",
                "\"bearer\" and \"client_secret\" need an [oauth2] section".into(),
            ));
        }
        Ok(accept)
    }
}

/// `http://` to this machine (127.0.0.0/8, ::1, localhost): no network to cross.
fn loopback_http(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}
