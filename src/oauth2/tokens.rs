//! Access tokens (D47): issued as JWTs (RFC 9068: `typ` `at+jwt`; iss, aud, sub, client_id,
//! scope, iat, exp, jti) signed with the service's key, and checked before a request's body
//! is read: the signature against an allow-list of algorithms (EdDSA, ES256, RS256; `none` and
//! HMAC refused), exp and nbf with a minute's leeway, iss and aud. A token checked once is
//! remembered by its SHA-256 until it expires, so a bearer request costs about what a key
//! request does.

use super::keys::{KeyRing, SigningKey};
use super::provider::ProviderKeys;
use crate::config::{Access, OAuth2Client};
use jsonwebtoken::{Algorithm, Header, Validation};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The scope that names every interface (D47).
pub const ALL_SCOPE: &str = "ap-intake.write";

/// Clock skew tolerated on exp and nbf (D47).
pub const LEEWAY_SECS: u64 = 60;

/// Tokens remembered at most; past it, the expired ones go, then all.
const CACHE_MAX: usize = 10_000;

/// The claims of an access token (RFC 9068 section 2.2).
#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    iss: String,
    aud: Audience,
    sub: String,
    #[serde(default)]
    client_id: Option<String>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    iat: Option<u64>,
    exp: u64,
    #[serde(default)]
    jti: Option<String>,
}

/// `aud` as one string or a list.
#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
enum Audience {
    One(String),
    Many(Vec<String>),
}

/// A token the service issued.
#[derive(Debug)]
pub struct Issued {
    /// The JWT.
    pub access_token: String,
    /// Seconds until it expires.
    pub expires_in: u64,
    /// What it may be used for, space-separated.
    pub scope: String,
}

/// What a valid token lets its bearer do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The client it was issued to (receipts and logs name it so).
    pub client_id: String,
    /// The interfaces its scope names.
    pub access: Access,
    /// Issued by the customer's identity provider, not by the service.
    pub external: bool,
}

/// Why a token is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not a token the service accepts; why, for the log (the client is told only that).
    #[error("{0}")]
    Invalid(String),
    /// Signed with a key the identity provider's set lacks (it may have rotated).
    #[error("unknown kid {0}")]
    UnknownKid(String),
    /// The identity provider's key set has never been had: the token may be good (503).
    #[error("{0}")]
    NoKeySet(String),
}

/// The customer's identity provider (`[oauth2.external]`): what its tokens must say, and
/// its keys.
pub struct Provider {
    /// `iss` its tokens carry.
    pub issuer: String,
    /// `aud` they must carry.
    pub audience: String,
    /// The claim naming what a token may use: `scope`, `scp` or `roles`.
    pub scope_claim: String,
    /// Its key set.
    pub keys: Arc<ProviderKeys>,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Issues the service's own tokens.
pub struct Issuer {
    key: Arc<SigningKey>,
    issuer: String,
    audience: String,
    ttl: Duration,
}

impl Issuer {
    /// Tokens signed with `key`, naming `issuer` and `audience`, living `ttl`.
    pub fn new(key: Arc<SigningKey>, issuer: &str, audience: &str, ttl: Duration) -> Self {
        Self {
            key,
            issuer: issuer.to_string(),
            audience: audience.to_string(),
            ttl,
        }
    }

    /// The `iss` of its tokens.
    pub fn name(&self) -> &str {
        &self.issuer
    }

    /// A token for `client_id` with `scope` (interface ids, or [`ALL_SCOPE`]).
    pub fn issue(&self, client_id: &str, scope: &[String]) -> Result<Issued, String> {
        let now = now_secs();
        let scope = scope.join(" ");
        let mut jti = [0u8; 16];
        getrandom::fill(&mut jti).map_err(|e| e.to_string())?;
        let claims = Claims {
            iss: self.issuer.clone(),
            aud: Audience::One(self.audience.clone()),
            sub: client_id.to_string(),
            client_id: Some(client_id.to_string()),
            scope: Some(scope.clone()),
            iat: Some(now),
            exp: now + self.ttl.as_secs(),
            jti: Some(hex::encode(jti)),
        };
        let mut header = Header::new(self.key.alg);
        header.typ = Some("at+jwt".into());
        header.kid = Some(self.key.kid.clone());
        let access_token = jsonwebtoken::encode(&header, &claims, self.key.encoding())
            .map_err(|e| e.to_string())?;
        Ok(Issued {
            access_token,
            expires_in: self.ttl.as_secs(),
            scope,
        })
    }
}

/// Checks bearer tokens: the service's own (its current signing key, and the previous one
/// until the tokens it signed have expired) and the identity provider's.
pub struct Verifier {
    /// The service's own keys; none where it issues no tokens.
    ring: Option<KeyRing>,
    issuer: String,
    audience: String,
    clients: HashMap<String, Access>,
    provider: Option<Provider>,
    cache: Mutex<HashMap<[u8; 32], Checked>>,
}

/// A token checked before, by its SHA-256: what it grants, and its `exp`.
type Checked = (Arc<Grant>, u64);

impl Verifier {
    /// Accepts tokens signed with a key of `ring`, naming `issuer` and `audience`, of one of
    /// `clients` (a client no longer configured has no valid token).
    pub fn new(
        ring: Option<KeyRing>,
        issuer: &str,
        audience: &str,
        clients: &[OAuth2Client],
    ) -> Self {
        Self {
            ring,
            issuer: issuer.to_string(),
            audience: audience.to_string(),
            clients: clients
                .iter()
                .map(|c| (c.client_id.clone(), c.access.clone()))
                .collect(),
            provider: None,
            cache: Mutex::default(),
        }
    }

    /// Accepts the identity provider's tokens too.
    pub fn with_provider(mut self, provider: Option<Provider>) -> Self {
        self.provider = provider;
        self
    }

    /// The identity provider's keys, if its tokens are accepted.
    pub fn provider_keys(&self) -> Option<&Arc<ProviderKeys>> {
        self.provider.as_ref().map(|p| &p.keys)
    }

    /// What `token` grants, or why it is refused.
    pub fn verify(&self, token: &str) -> Result<Arc<Grant>, TokenError> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = now_secs();
        {
            let cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some((grant, exp)) = cache.get(&digest)
                && now <= exp.saturating_add(LEEWAY_SECS)
            {
                return Ok(Arc::clone(grant));
            }
        }
        let (grant, exp) = self.check(token)?;
        let grant = Arc::new(grant);
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.len() >= CACHE_MAX {
            cache.retain(|_, (_, exp)| now <= exp.saturating_add(LEEWAY_SECS));
            if cache.len() >= CACHE_MAX {
                cache.clear();
            }
        }
        cache.insert(digest, (Arc::clone(&grant), exp));
        Ok(grant)
    }

    fn check(&self, token: &str) -> Result<(Grant, u64), TokenError> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| TokenError::Invalid(format!("not a JWT: {e}")))?;
        if !matches!(
            header.alg,
            Algorithm::EdDSA | Algorithm::ES256 | Algorithm::RS256
        ) {
            return Err(TokenError::Invalid(format!(
                "algorithm {:?} is not accepted (EdDSA, ES256, RS256)",
                header.alg
            )));
        }
        let kid = header.kid.as_deref();
        let own = self
            .ring
            .as_ref()
            .zip(kid)
            .and_then(|(r, kid)| r.find(kid, now_secs()));
        if let Some(key) = own {
            return self.check_own(token, &header, key);
        }
        match &self.provider {
            Some(p) => check_external(token, &header, p),
            None => Err(TokenError::Invalid(format!(
                "unknown kid {}",
                kid.unwrap_or("(none)")
            ))),
        }
    }

    fn check_own(
        &self,
        token: &str,
        header: &Header,
        key: &SigningKey,
    ) -> Result<(Grant, u64), TokenError> {
        let invalid = |why: &str| TokenError::Invalid(why.to_string());
        let typ = header.typ.as_deref().map(str::to_ascii_lowercase);
        if typ.as_deref() != Some("at+jwt") {
            return Err(invalid("typ is not at+jwt (RFC 9068)"));
        }
        if key.alg != header.alg {
            return Err(invalid("the algorithm is not the key's"));
        }
        let validation = validation(key.alg, &self.issuer, &self.audience, "sub");
        let data = jsonwebtoken::decode::<Claims>(token, key.decoding(), &validation)
            .map_err(|e| TokenError::Invalid(e.to_string()))?;
        let claims = data.claims;
        let client_id = claims.client_id.unwrap_or(claims.sub);
        let allowed = self
            .clients
            .get(&client_id)
            .ok_or_else(|| TokenError::Invalid(format!("client {client_id} is not configured")))?;
        let access = scope_access(claims.scope.as_deref().unwrap_or(""), allowed);
        let grant = Grant {
            client_id,
            access,
            external: false,
        };
        Ok((grant, claims.exp))
    }
}

/// Checks with exp and nbf (a minute's leeway), `iss`, `aud` and `also` required.
fn validation(alg: Algorithm, issuer: &str, audience: &str, also: &str) -> Validation {
    let mut validation = Validation::new(alg);
    validation.leeway = LEEWAY_SECS;
    validation.validate_nbf = true;
    validation.set_issuer(&[issuer]);
    validation.set_audience(&[audience]);
    validation.set_required_spec_claims(&["exp", "iss", "aud", also]);
    validation
}

/// A token of the identity provider: its key by `kid`, `iss`, `aud`, and its scope claim.
fn check_external(token: &str, header: &Header, p: &Provider) -> Result<(Grant, u64), TokenError> {
    // Entra ID and Keycloak write `typ: JWT`; RFC 9068 providers `at+jwt`. Anything else (an
    // ID token's `id_token+jwt`, a logout token) is not an access token.
    let typ = header.typ.as_deref().map(str::to_ascii_lowercase);
    if !matches!(
        typ.as_deref(),
        None | Some("jwt" | "at+jwt" | "application/at+jwt")
    ) {
        return Err(TokenError::Invalid(format!(
            "typ {} is not an access token's",
            typ.unwrap_or_default()
        )));
    }
    let set = p
        .keys
        .current()
        .ok_or_else(|| TokenError::NoKeySet(p.keys.missing().unwrap_or_default()))?;
    let kid = header.kid.as_deref();
    let (alg, key) = set
        .find(kid)
        .ok_or_else(|| TokenError::UnknownKid(kid.unwrap_or("(none)").to_string()))?;
    if alg != header.alg {
        return Err(TokenError::Invalid("the algorithm is not the key's".into()));
    }
    let validation = validation(alg, &p.issuer, &p.audience, "exp");
    let data =
        jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(token, key, &validation)
            .map_err(|e| TokenError::Invalid(e.to_string()))?;
    let claims = data.claims;
    let text = |name: &str| claims.get(name).and_then(|v| v.as_str());
    // Who the token was issued to: RFC 9068's client_id, Keycloak's azp, Entra v1's appid.
    let client_id = ["client_id", "azp", "appid", "sub"]
        .iter()
        .find_map(|c| text(c))
        .unwrap_or("unknown")
        .to_string();
    let scope = match claims.get(&p.scope_claim) {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Array(values)) => values
            .iter()
            .filter_map(|v| v.as_str())
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    };
    let exp = claims
        .get("exp")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0);
    let grant = Grant {
        client_id,
        access: scope_access(&scope, &Access::All),
        external: true,
    };
    Ok((grant, exp))
}

/// The interfaces a scope names, within what the client may use.
fn scope_access(scope: &str, allowed: &Access) -> Access {
    let named: Vec<&str> = scope.split_whitespace().collect();
    if named.contains(&ALL_SCOPE) {
        return allowed.clone();
    }
    let ids = crate::interfaces::INTERFACES
        .iter()
        .map(|i| i.id)
        .filter(|id| named.contains(id))
        .filter(|id| match allowed {
            Access::All => true,
            Access::Only(ids) => ids.contains(id),
        })
        .collect();
    Access::Only(ids)
}
