//! Who a request's credentials name, decided from the headers before the body is read:
//! API keys (D20), bearer tokens and the spec's `Client_Id`/`Client_Secret` headers (D47), as
//! `[auth] accept` allows. A credential presented that fails refuses the request, whatever
//! else it carries (D47).

use super::credentials::{Authorization, authorization, client_headers};
use crate::config::{Accept, Access, ApiKey, OAuth2Client, RateLimit};
use crate::interfaces::Interface;
use crate::oauth2::{ProviderKeys, TokenError, Verifier};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use http::HeaderMap;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;
use subtle::ConstantTimeEq;

/// Why a caller is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// No `x-api-key` header, where only keys are accepted (401).
    #[error("API key missing: send it in the x-api-key header")]
    Missing,
    /// No credential of any kind accepted (401, D47).
    #[error(
        "credentials missing: send an API key in the x-api-key header or an access token in \
         an Authorization: Bearer header"
    )]
    NoCredentials,
    /// A key that matches no configured one (401).
    #[error("API key invalid")]
    Invalid,
    /// A credential of a kind `[auth] accept` does not list (401, D47).
    #[error("{0} are not accepted by this service")]
    NotAccepted(&'static str),
    /// A bearer token that is not valid, or has expired (401, D47); why, for the log.
    #[error("access token invalid or expired")]
    InvalidToken(String),
    /// A bearer token signed with a key the identity provider's set lacks (401 like
    /// [`Denied::InvalidToken`], once the set has been fetched again, D47).
    #[error("access token invalid or expired")]
    UnknownKid(String),
    /// The identity provider's key set has never been had, so a token cannot be checked;
    /// it may be good (503 with `Retry-After`, D47).
    #[error("the identity provider's keys are not available yet; retry later")]
    KeysUnavailable(String),
    /// `Client_Id` and `Client_Secret` that name no configured client (401, D47).
    #[error("client credentials invalid")]
    InvalidClient,
    /// A valid key without permission for the interface (403).
    #[error("API key {key:?} may not use {path}")]
    Forbidden {
        /// The key's configured name.
        key: String,
        /// The interface's path.
        path: &'static str,
    },
    /// A valid token whose scope does not name the interface (403, D47).
    #[error("the access token of client {client:?} may not use {path}")]
    InsufficientScope {
        /// The client it was issued to.
        client: String,
        /// The interface's id (the scope that would name it).
        scope: &'static str,
        /// The interface's path.
        path: &'static str,
    },
    /// The key's rate limit is exhausted (429, with `Retry-After`).
    #[error("rate limit of API key {key:?} exceeded; retry after {} s", retry_after_secs(*.retry_after))]
    RateLimited {
        /// The key's configured name.
        key: String,
        /// When a request will be accepted again.
        retry_after: Duration,
    },
}

/// The challenge of an API key (RFC 9110 section 15.5.2).
pub const API_KEY_CHALLENGE: &str = r#"ApiKey realm="ap-intake", header="x-api-key""#;

impl Denied {
    /// The `WWW-Authenticate` of a 401 or a 403 for a token's scope (RFC 6750 section 3).
    pub fn challenge(&self) -> Option<String> {
        let bearer = r#"Bearer realm="ap-intake""#;
        Some(match self {
            Self::Missing | Self::Invalid => API_KEY_CHALLENGE.to_string(),
            Self::NoCredentials | Self::NotAccepted(_) | Self::InvalidClient => {
                format!("{bearer}, {API_KEY_CHALLENGE}")
            }
            Self::InvalidToken(_) | Self::UnknownKid(_) => {
                format!(r#"{bearer}, error="invalid_token""#)
            }
            Self::InsufficientScope { scope, .. } => {
                format!(r#"{bearer}, error="insufficient_scope", scope="{scope}""#)
            }
            Self::Forbidden { .. } | Self::RateLimited { .. } | Self::KeysUnavailable(_) => {
                return None;
            }
        })
    }
}

/// Whole seconds for `Retry-After`, rounded up and at least 1.
pub fn retry_after_secs(d: Duration) -> u64 {
    d.as_secs_f64().ceil().max(1.0) as u64
}

/// A limiter of one key or client, shared with the `Auth` a reload builds while its limits
/// stay the same (D34).
type Limiter = Option<Arc<DefaultDirectRateLimiter>>;

/// The configured keys and clients, their rate limiters, and the tokens accepted; in sandbox
/// no credential is needed (D21).
pub struct Auth {
    sandbox: bool,
    accept: Accept,
    keys: Vec<(ApiKey, Limiter)>,
    clients: Vec<(OAuth2Client, Limiter)>,
    tokens: Option<Arc<Verifier>>,
}

/// What a token whose scope was checked may use, and the limit of a caller without one.
static ALL: Access = Access::All;
static NO_LIMIT: Limiter = None;

fn limiter(rate: Option<RateLimit>, kept: Limiter) -> Limiter {
    rate.map(|r| {
        kept.unwrap_or_else(|| {
            Arc::new(RateLimiter::direct(
                Quota::per_second(r.per_second).allow_burst(r.burst),
            ))
        })
    })
}

impl Auth {
    /// Checks against `keys`, or lets everyone in when `sandbox`.
    pub fn new(sandbox: bool, keys: Vec<ApiKey>) -> Self {
        Self::with_limiters(sandbox, keys, |_| None)
    }

    /// The `Auth` of a reload (D34): like [`Auth::new`], but a key whose name, SHA-256 and
    /// rate limit are those of a key here keeps that key's limiter, so a reload gives no
    /// client a fresh burst. A key whose rate or burst changed gets a new limiter; a key no
    /// longer configured leaves with its limiter. The OAuth2 side stays as it is.
    pub fn renewed(&self, sandbox: bool, keys: Vec<ApiKey>) -> Self {
        let mut next = Self::with_limiters(sandbox, keys, |k| {
            self.keys
                .iter()
                .find(|(old, _)| {
                    old.name == k.name && old.sha256 == k.sha256 && old.rate_limit == k.rate_limit
                })
                .and_then(|(_, limiter)| limiter.clone())
        });
        next.accept = self.accept;
        next.clients = self.clients.clone();
        next.tokens = self.tokens.clone();
        next
    }

    /// `keys`, each with the limiter `kept` gives it, or else a new one for its rate limit.
    fn with_limiters(sandbox: bool, keys: Vec<ApiKey>, kept: impl Fn(&ApiKey) -> Limiter) -> Self {
        let keys = keys
            .into_iter()
            .map(|k| {
                let l = limiter(k.rate_limit, kept(&k));
                (k, l)
            })
            .collect();
        Self {
            sandbox,
            accept: Accept {
                api_key: true,
                bearer: false,
                client_secret: false,
            },
            keys,
            clients: Vec::new(),
            tokens: None,
        }
    }

    /// The OAuth2 side (D47): what `[auth] accept` lists, the clients, and the tokens
    /// accepted.
    pub fn with_oauth2(
        mut self,
        accept: Accept,
        clients: &[OAuth2Client],
        tokens: Option<Arc<Verifier>>,
    ) -> Self {
        self.accept = accept;
        // A client whose settings stay keeps its limiter across a reload, as a key does.
        let kept = |c: &OAuth2Client| {
            self.clients
                .iter()
                .find(|(old, _)| old == c)
                .and_then(|(_, l)| l.clone())
        };
        let clients = clients
            .iter()
            .map(|c| (c.clone(), limiter(c.rate_limit, kept(c))))
            .collect();
        self.clients = clients;
        self.tokens = tokens;
        self
    }

    /// Why bearer tokens cannot be checked at all (the identity provider's key set has never
    /// been had, D47): /readyz says so.
    pub fn not_ready(&self) -> Option<String> {
        if !self.accept.bearer || self.sandbox {
            return None;
        }
        self.tokens.as_ref()?.provider_keys()?.missing()
    }

    /// Who may call `iface` with these credentials (a key's name, or `client:<id>`); `None`
    /// in sandbox.
    pub fn check(&self, headers: &HeaderMap, iface: &Interface) -> Result<Option<String>, Denied> {
        self.admit(headers, Some(iface))
    }

    /// Who these credentials name, whatever they may call (receipts, D38), within their
    /// rate limit; `None` in sandbox.
    pub fn identify(&self, headers: &HeaderMap) -> Result<Option<String>, Denied> {
        self.admit(headers, None)
    }

    /// [`Auth::check`] (or, without `iface`, [`Auth::identify`]), fetching the identity
    /// provider's key set again when a token names a `kid` it lacks (at most once a minute,
    /// D47): a provider that rotated its key is followed without a restart.
    pub async fn admit_following(
        &self,
        headers: &HeaderMap,
        iface: Option<&Interface>,
    ) -> Result<Option<String>, Denied> {
        match self.admit(headers, iface) {
            Err(Denied::UnknownKid(kid)) => match self.provider_keys() {
                Some(keys) if keys.refetch_for_unknown_kid().await => self.admit(headers, iface),
                _ => Err(Denied::UnknownKid(kid)),
            },
            other => other,
        }
    }

    fn provider_keys(&self) -> Option<Arc<ProviderKeys>> {
        self.tokens.as_ref()?.provider_keys().cloned()
    }

    fn admit(
        &self,
        headers: &HeaderMap,
        iface: Option<&Interface>,
    ) -> Result<Option<String>, Denied> {
        if self.sandbox {
            return Ok(None);
        }
        self.once_each(headers)?;
        let mut who: Option<(String, &Access, &Limiter)> = None;
        if let Some(key) = headers.get("x-api-key") {
            if !self.accept.api_key {
                return Err(Denied::NotAccepted("API keys"));
            }
            let (k, l) = self.key(key.as_bytes())?;
            who = Some((k.name.clone(), &k.access, l));
        }
        let basic = match authorization(headers) {
            Some(Authorization::Bearer(token)) => {
                let (name, access, l) = self.token(token, iface)?;
                who.get_or_insert((name, access, l));
                None
            }
            Some(Authorization::Basic(pair)) if self.accept.client_secret => Some(pair),
            Some(Authorization::Basic(_)) => {
                return Err(Denied::NotAccepted("HTTP Basic credentials"));
            }
            Some(Authorization::Other) => {
                return Err(Denied::NotAccepted(
                    "Authorization schemes other than Bearer",
                ));
            }
            None => None,
        };
        if self.accept.client_secret {
            // Each pair presented must name a client: the spec's headers and HTTP Basic.
            for (id, secret) in [client_headers(headers), basic].into_iter().flatten() {
                let (c, l) = self.client_with_secret(&id, &secret)?;
                who.get_or_insert((format!("client:{}", c.client_id), &c.access, l));
            }
        }
        if who.is_none() {
            return Err(if self.accept.bearer || self.accept.client_secret {
                Denied::NoCredentials
            } else {
                Denied::Missing
            });
        }
        self.within_limit(who, iface)
    }

    /// A credential header given twice is refused: which one counts would be a guess, and a
    /// failing one is never ignored (D47).
    fn once_each(&self, headers: &HeaderMap) -> Result<(), Denied> {
        let twice = |name: &str| headers.get_all(name).iter().nth(1).is_some();
        if twice("x-api-key") {
            return Err(Denied::Invalid);
        }
        if twice("authorization") {
            return Err(Denied::InvalidToken("Authorization given twice".into()));
        }
        if self.accept.client_secret && (twice("client_id") || twice("client_secret")) {
            return Err(Denied::InvalidClient);
        }
        Ok(())
    }

    /// Who a bearer token names, what it may use and its limiter; its scope must name
    /// `iface` (403 `insufficient_scope`).
    fn token(
        &self,
        token: &str,
        iface: Option<&Interface>,
    ) -> Result<(String, &Access, &Limiter), Denied> {
        let tokens = self
            .tokens
            .as_ref()
            .filter(|_| self.accept.bearer)
            .ok_or(Denied::NotAccepted("bearer tokens"))?;
        if token.is_empty() {
            return Err(Denied::InvalidToken("an empty token".into()));
        }
        let grant = tokens.verify(token).map_err(|e| {
            tracing::debug!(error = %e, "bearer token refused");
            match e {
                TokenError::Invalid(why) => Denied::InvalidToken(why),
                TokenError::UnknownKid(kid) => Denied::UnknownKid(kid),
                TokenError::NoKeySet(why) => Denied::KeysUnavailable(why),
            }
        })?;
        if let Some(iface) = iface
            && !allows(&grant.access, iface)
        {
            return Err(Denied::InsufficientScope {
                client: grant.client_id.clone(),
                scope: iface.id,
                path: iface.path,
            });
        }
        // Its scope, bounded by its client's interfaces when it was checked, named `iface`:
        // nothing more to check of its access.
        if grant.external {
            // The provider's clients are not configured here: no rate limit of their own.
            return Ok((format!("idp:{}", grant.client_id), &ALL, &NO_LIMIT));
        }
        let (_, l) = self.client(&grant.client_id).ok_or(Denied::InvalidToken(
            "the token's client is not configured".into(),
        ))?;
        Ok((format!("client:{}", grant.client_id), &ALL, l))
    }

    /// The configured key `presented` is, compared in constant time with every key.
    fn key(&self, presented: &[u8]) -> Result<(&ApiKey, &Limiter), Denied> {
        if presented.is_empty() {
            return Err(Denied::Missing);
        }
        let digest: [u8; 32] = Sha256::digest(presented).into();
        // Every key is compared, in constant time, so timing tells nothing about which matched.
        let mut found = None;
        for entry in &self.keys {
            if bool::from(entry.0.sha256.ct_eq(&digest)) {
                found = Some(entry);
            }
        }
        found.map(|(k, l)| (k, l)).ok_or(Denied::Invalid)
    }

    fn client(&self, id: &str) -> Option<(&OAuth2Client, &Limiter)> {
        self.clients
            .iter()
            .find(|(c, _)| c.client_id == id)
            .map(|(c, l)| (c, l))
    }

    /// The client `id` if `secret` is its secret (its SHA-256 compared in constant time).
    pub fn client_with_secret(
        &self,
        id: &str,
        secret: &str,
    ) -> Result<(&OAuth2Client, &Limiter), Denied> {
        let digest: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
        match self.client(id) {
            Some((c, l)) if bool::from(c.secret_sha256.ct_eq(&digest)) => Ok((c, l)),
            _ => Err(Denied::InvalidClient),
        }
    }

    /// The caller `who`, if it may call `iface` now (its access, its rate limit).
    fn within_limit(
        &self,
        who: Option<(String, &Access, &Limiter)>,
        iface: Option<&Interface>,
    ) -> Result<Option<String>, Denied> {
        let Some((name, access, limiter)) = who else {
            return Err(Denied::Missing);
        };
        if let Some(iface) = iface
            && !allows(access, iface)
        {
            return Err(Denied::Forbidden {
                key: name,
                path: iface.path,
            });
        }
        if let Some(Err(not_until)) = limiter.as_ref().map(|l| l.check()) {
            return Err(Denied::RateLimited {
                key: name,
                retry_after: not_until.wait_time_from(DefaultClock::default().now()),
            });
        }
        Ok(Some(name))
    }
}

fn allows(access: &Access, iface: &Interface) -> bool {
    match access {
        Access::All => true,
        Access::Only(ids) => ids.contains(&iface.id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RateLimit;
    use std::num::NonZeroU32;

    fn key(name: &str, secret: &[u8], limit: Option<(u32, u32)>) -> ApiKey {
        let n = |v| NonZeroU32::new(v).unwrap();
        ApiKey {
            name: name.into(),
            sha256: Sha256::digest(secret).into(),
            access: Access::All,
            rate_limit: limit.map(|(per_second, burst)| RateLimit {
                per_second: n(per_second),
                burst: n(burst),
            }),
        }
    }

    fn with_key(key: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-api-key", key.parse().unwrap());
        h
    }

    fn limiter<'a>(auth: &'a Auth, name: &str) -> Option<&'a Arc<DefaultDirectRateLimiter>> {
        auth.keys
            .iter()
            .find(|(k, _)| k.name == name)
            .and_then(|(_, l)| l.as_ref())
    }

    /// D34: a reload keeps the limiter of a key whose name, hash and limits stay (its
    /// exhausted burst with it), gives a changed one a new limiter, and drops a removed one.
    #[test]
    fn a_renewed_auth_keeps_the_limiters_of_unchanged_keys() {
        let old = Auth::new(
            false,
            vec![
                key("same", b"s", Some((1, 1))),
                key("rate", b"r", Some((1, 1))),
                key("burst", b"b", Some((1, 1))),
                key("hash", b"h", Some((1, 1))),
                key("gone", b"g", Some((1, 1))),
            ],
        );
        assert_eq!(old.identify(&with_key("s")), Ok(Some("same".into())));
        assert!(matches!(
            old.identify(&with_key("s")),
            Err(Denied::RateLimited { .. })
        ));
        let new = old.renewed(
            false,
            vec![
                key("same", b"s", Some((1, 1))),
                key("rate", b"r", Some((2, 1))),
                key("burst", b"b", Some((1, 2))),
                key("hash", b"h2", Some((1, 1))),
                key("added", b"a", Some((1, 1))),
            ],
        );
        let kept = |name| match (limiter(&old, name), limiter(&new, name)) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        assert!(kept("same"));
        assert!(!kept("rate") && !kept("burst") && !kept("hash"));
        assert!(limiter(&new, "added").is_some());
        assert!(limiter(&new, "gone").is_none());
        assert_eq!(new.identify(&with_key("g")), Err(Denied::Invalid));
        // The burst spent before the reload stays spent.
        assert!(matches!(
            new.identify(&with_key("s")),
            Err(Denied::RateLimited { .. })
        ));
        // A key without a limit has no limiter; given one by a reload, it gets one.
        let free = Auth::new(false, vec![key("k", b"k", None)]);
        assert!(limiter(&free, "k").is_none());
        let limited = free.renewed(false, vec![key("k", b"k", Some((1, 1)))]);
        assert!(limiter(&limited, "k").is_some());
    }
}
