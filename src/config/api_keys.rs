//! `[[api_keys]]`: who may call which interface, and how often (D20).

use crate::interfaces;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawApiKey {
    name: String,
    sha256: String,
    interfaces: Vec<String>,
    rate_limit_per_second: Option<u32>,
    burst: Option<u32>,
}

/// Which interfaces a key may use (D20).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// `["*"]`: every interface.
    All,
    /// The interfaces with these identifiers.
    Only(Vec<&'static str>),
}

/// One configured API key; the key itself is never stored, only its SHA-256 (D20).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    /// Shown in logs instead of the key.
    pub name: String,
    /// SHA-256 of the key.
    pub sha256: [u8; 32],
    /// What it may use.
    pub access: Access,
    /// Requests per second and burst; `None` is unlimited.
    pub rate_limit: Option<RateLimit>,
}

/// A per-key rate limit: a steady rate and the burst allowed on top of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Requests per second.
    pub per_second: std::num::NonZeroU32,
    /// Requests allowed at once (defaults to the rate).
    pub burst: std::num::NonZeroU32,
}

impl RawApiKey {
    pub(super) fn check(self) -> Result<ApiKey, (&'static str, String)> {
        if self.name.trim().is_empty() {
            return Err(("name", "must not be empty".into()));
        }
        // Receipts and logs name OAuth 2.0 callers `client:<id>` and `idp:<id>` (D47): a key
        // named so could read their receipts.
        if self.name.contains(':') {
            return Err(("name", format!("{:?} must not contain ':'", self.name)));
        }
        let sha256 = hex::decode(&self.sha256)
            .ok()
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .ok_or((
                "sha256",
                "must be 64 hex characters (the SHA-256 of the key)".to_string(),
            ))?;
        Ok(ApiKey {
            name: self.name,
            sha256,
            access: access_of(&self.interfaces)?,
            rate_limit: rate_limit(self.rate_limit_per_second, self.burst)?,
        })
    }
}

/// The interfaces a key or an OAuth2 client may use: `["*"]`, or paths
/// (`/general-ledger-codes/v1`), or interface ids (`general-ledger-codes-v1`, D47).
pub(super) fn access_of(list: &[String]) -> Result<Access, (&'static str, String)> {
    if list.is_empty() {
        return Err((
            "interfaces",
            "list [\"*\"] or the paths the key may use".into(),
        ));
    }
    if list.iter().any(|i| i == "*") {
        return Ok(Access::All);
    }
    let ids = list
        .iter()
        .map(|p| {
            interfaces::by_path(p)
                .or_else(|| interfaces::INTERFACES.iter().find(|i| i.id == p))
                .map(|i| i.id)
                .ok_or((
                    "interfaces",
                    format!(
                        "{p:?} is not an interface path, such as \"/general-ledger-codes/v1\", or \
                         id, such as \"general-ledger-codes-v1\""
                    ),
                ))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Access::Only(ids))
}

/// A rate limit from its two keys: none, or a rate and a burst (the rate when not given).
pub(super) fn rate_limit(
    per_second: Option<u32>,
    burst: Option<u32>,
) -> Result<Option<RateLimit>, (&'static str, String)> {
    let nonzero =
        |v: u32, key| std::num::NonZeroU32::new(v).ok_or((key, "must be at least 1".to_string()));
    match (per_second, burst) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err(("burst", "needs rate_limit_per_second".into())),
        (Some(rate), burst) => Ok(Some(RateLimit {
            per_second: nonzero(rate, "rate_limit_per_second")?,
            burst: nonzero(burst.unwrap_or(rate), "burst")?,
        })),
    }
}
