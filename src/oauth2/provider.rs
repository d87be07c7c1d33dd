//! The key set of the customer's identity provider (`[oauth2.external]`, D47): Entra ID,
//! Keycloak or ADFS tokens are checked offline against it. A `jwks_url` set is fetched in the
//! background and again when a token names a `kid` it lacks (at most once a minute); the last
//! good set is kept in the data directory, so a restart while the provider is unreachable
//! still accepts its tokens. A `jwks_file` set is the operator's, read at start and on reload.

use crate::config::KeySource;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::{Duration, Instant};

/// The last good key set of a `jwks_url` is kept in the data directory under this name and
/// a hash of the URL, so a set is only ever read back for the URL it came from.
pub const CACHE_PREFIX: &str = "oauth2-provider-jwks-";

/// The file that keeps the last good set of `url` in `data_dir`.
pub fn cache_file(data_dir: &Path, url: &str) -> PathBuf {
    use sha2::Digest;
    let hash = hex::encode(sha2::Sha256::digest(url.as_bytes()));
    data_dir.join(format!("{CACHE_PREFIX}{}.json", &hash[..16]))
}
/// How often a `jwks_url` set is fetched while all is well.
const REFRESH_EVERY: Duration = Duration::from_secs(15 * 60);
/// How soon a failed fetch is tried again.
const RETRY_EVERY: Duration = Duration::from_secs(30);
/// A token with a `kid` the set lacks fetches it again at most this often (D47).
pub const KID_REFETCH_EVERY: Duration = Duration::from_secs(60);
/// How long one fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest key set read (Entra's is a few KiB).
const MAX_SET_BYTES: u64 = 1024 * 1024;

/// One public key of the provider.
struct ProviderKey {
    kid: Option<String>,
    alg: Algorithm,
    key: DecodingKey,
}

/// The usable signing keys of a JWKS: RSA (RS256), P-256 (ES256) and Ed25519 (EdDSA) keys
/// meant for signatures; any other is skipped.
pub struct KeySet {
    keys: Vec<ProviderKey>,
}

impl KeySet {
    /// The keys of a JWKS document, or why it holds none usable.
    pub fn parse(bytes: &[u8]) -> Result<Self, String> {
        let doc: Value =
            serde_json::from_slice(bytes).map_err(|e| format!("not a JSON key set: {e}"))?;
        let listed = doc
            .get("keys")
            .and_then(Value::as_array)
            .ok_or("no \"keys\" array (RFC 7517 section 5)")?;
        // One key the crate cannot read (an encryption key, an unknown curve) does not spoil
        // the others.
        let keys: Vec<ProviderKey> = listed
            .iter()
            .filter_map(|k| serde_json::from_value::<Jwk>(k.clone()).ok())
            .filter_map(|jwk| usable(&jwk))
            .collect();
        if keys.is_empty() {
            return Err(format!(
                "none of its {} keys is an RS256, ES256 or EdDSA signing key",
                listed.len()
            ));
        }
        Ok(Self { keys })
    }

    /// The key a token's header names: by `kid`, or the only key when it names none.
    pub fn find(&self, kid: Option<&str>) -> Option<(Algorithm, &DecodingKey)> {
        let key = match kid {
            Some(kid) => self.keys.iter().find(|k| k.kid.as_deref() == Some(kid)),
            None if self.keys.len() == 1 => self.keys.first(),
            None => None,
        }?;
        Some((key.alg, &key.key))
    }

    /// How many keys it holds.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether it holds none (never, once parsed).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

fn usable(jwk: &Jwk) -> Option<ProviderKey> {
    if matches!(
        jwk.common.public_key_use,
        Some(PublicKeyUse::Encryption | PublicKeyUse::Other(_))
    ) {
        return None;
    }
    let alg = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Algorithm::RS256,
        AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => Algorithm::ES256,
        AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => {
            Algorithm::EdDSA
        }
        _ => return None,
    };
    // A key that names another algorithm (RS384, say) is not used for this one.
    let named = jwk
        .common
        .key_algorithm
        .map(|a| format!("{a:?}").to_ascii_uppercase());
    if named.is_some_and(|n| n != format!("{alg:?}").to_ascii_uppercase()) {
        return None;
    }
    Some(ProviderKey {
        kid: jwk.common.key_id.clone(),
        alg,
        key: DecodingKey::from_jwk(jwk).ok()?,
    })
}

/// The provider's current key set, where it comes from, and what went wrong last.
pub struct ProviderKeys {
    source: KeySource,
    cache: PathBuf,
    agent: ureq::Agent,
    set: RwLock<Option<Arc<KeySet>>>,
    last_error: RwLock<Option<String>>,
    /// One refresh at a time (the background one and one for an unknown kid may meet): the
    /// later never replaces a newer set with an older, nor writes the file beside the other.
    refreshing: Mutex<()>,
    /// When a token's unknown `kid` last fetched the set (an async lock, so a flood of such
    /// tokens waits for one fetch instead of starting many).
    kid_fetch: tokio::sync::Mutex<Option<Instant>>,
}

impl ProviderKeys {
    /// The set of `source`: a `jwks_file` read now, or a `jwks_url`'s last good set from
    /// `data_dir` (fetched by [`keep_fresh`]). Never fails: what went wrong is logged and
    /// reported by [`ProviderKeys::missing`].
    pub fn open(source: &KeySource, data_dir: &Path) -> Arc<Self> {
        let keys = Arc::new(Self {
            source: source.clone(),
            cache: match source {
                KeySource::Url(url) => cache_file(data_dir, url),
                KeySource::File(file) => file.clone(),
            },
            agent: agent(source),
            refreshing: Mutex::new(()),
            set: RwLock::new(None),
            last_error: RwLock::new(None),
            kid_fetch: tokio::sync::Mutex::new(None),
        });
        let first = match source {
            KeySource::File(file) => read_set(file),
            KeySource::Url(_) if keys.cache.exists() => read_set(&keys.cache),
            KeySource::Url(url) => Err(format!("not fetched from {url} yet")),
        };
        keys.settle(first.map(|set| (set, None)));
        keys
    }

    /// Where the set comes from.
    pub fn source(&self) -> &KeySource {
        &self.source
    }

    /// The set tokens are checked against now.
    pub fn current(&self) -> Option<Arc<KeySet>> {
        self.set
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Why there is no key set at all (bearer requests then get 503, /readyz says so).
    pub fn missing(&self) -> Option<String> {
        if self.current().is_some() {
            return None;
        }
        let why = self
            .last_error
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .unwrap_or_default();
        Some(format!("no key set of the identity provider yet: {why}"))
    }

    /// Reads the set again (blocking: a fetch takes up to 10 s); keeps the last good one on
    /// failure. Returns how many keys it holds, or why not.
    pub fn refresh(&self) -> Result<usize, String> {
        let _one = self
            .refreshing
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let got = match &self.source {
            KeySource::File(file) => read_set(file).map(|s| (s, None)),
            KeySource::Url(url) => fetch(&self.agent, url),
        };
        let n = got.as_ref().map(|(s, _)| s.len()).map_err(Clone::clone);
        self.settle(got);
        n
    }

    fn settle(&self, got: Result<(KeySet, Option<Vec<u8>>), String>) {
        match got {
            Ok((set, fetched)) => {
                if let Some(bytes) = fetched
                    && let Err(e) = write_atomically(&self.cache, &bytes)
                {
                    tracing::warn!(file = %self.cache.display(), error = %e, "cannot keep the identity provider's key set on disk; it is kept in memory");
                }
                *self.set.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(set));
                *self
                    .last_error
                    .write()
                    .unwrap_or_else(PoisonError::into_inner) = None;
            }
            Err(e) => {
                *self
                    .last_error
                    .write()
                    .unwrap_or_else(PoisonError::into_inner) = Some(e);
            }
        }
    }

    /// What `check-config` says of `source` now: how many usable keys it has, or why none
    /// (a set fetched is not kept: the service fetches its own).
    pub fn probe(source: &KeySource) -> Result<usize, String> {
        match source {
            KeySource::File(file) => read_set(file).map(|s| s.len()),
            KeySource::Url(url) => fetch(&agent(source), url).map(|(s, _)| s.len()),
        }
    }

    /// For a token whose `kid` the set lacks: fetches the set again unless that was done
    /// within the last minute (D47), waiting for a fetch already under way. Whether the set
    /// may have changed.
    pub async fn refetch_for_unknown_kid(self: &Arc<Self>) -> bool {
        let mut last = self.kid_fetch.lock().await;
        if last.is_some_and(|t| t.elapsed() < KID_REFETCH_EVERY) {
            return false;
        }
        *last = Some(Instant::now());
        let keys = Arc::clone(self);
        let outcome = tokio::task::spawn_blocking(move || keys.refresh()).await;
        match outcome {
            Ok(Ok(n)) => {
                tracing::info!(
                    keys = n,
                    "identity provider's key set fetched again for a token with an unknown kid"
                );
                true
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "identity provider's key set could not be fetched again; the last good set stays");
                false
            }
            Err(_) => false,
        }
    }
}

/// The agent of `source`: an https URL is never followed to plain HTTP.
fn agent(source: &KeySource) -> ureq::Agent {
    let https = matches!(source, KeySource::Url(url) if url.starts_with("https://"));
    ureq::Agent::config_builder()
        .https_only(https)
        .timeout_global(Some(FETCH_TIMEOUT))
        .http_status_as_error(false)
        .max_redirects(3)
        // The system's CAs: an on-premises Keycloak or ADFS has the site's own CA there.
        .tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(crate::config::root_certs(None))
                .build(),
        )
        .user_agent(concat!("ap-intake/", env!("CARGO_PKG_VERSION")))
        .build()
        .into()
}

/// The set at `url`, and its bytes (to keep on disk).
fn fetch(agent: &ureq::Agent, url: &str) -> Result<(KeySet, Option<Vec<u8>>), String> {
    let mut reply = agent
        .get(url)
        .call()
        .map_err(|e| format!("cannot fetch {url}: {e}"))?;
    let status = reply.status().as_u16();
    if status != 200 {
        return Err(format!("{url} answered {status}"));
    }
    let mut bytes = Vec::new();
    reply
        .body_mut()
        .as_reader()
        .take(MAX_SET_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {url}: {e}"))?;
    if bytes.len() as u64 > MAX_SET_BYTES {
        return Err(format!("{url}: the key set is over {MAX_SET_BYTES} bytes"));
    }
    let set = KeySet::parse(&bytes).map_err(|e| format!("{url}: {e}"))?;
    Ok((set, Some(bytes)))
}

fn read_set(file: &Path) -> Result<KeySet, String> {
    let bytes = std::fs::read(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    KeySet::parse(&bytes).map_err(|e| format!("{}: {e}", file.display()))
}

/// Writes `bytes` to `file` so that a crash leaves the old set or the new one, never half.
fn write_atomically(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = file.with_extension("json.tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, file)?;
    if let Some(dir) = file.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Keeps a `jwks_url` set fresh: fetched at once, then every 15 minutes (every 30 s while it
/// fails), until `until` resolves or the keys are dropped (a reload replaced them).
pub async fn keep_fresh(keys: Weak<ProviderKeys>, until: impl std::future::Future<Output = ()>) {
    tokio::pin!(until);
    loop {
        let Some(k) = keys.upgrade() else { return };
        if matches!(k.source, KeySource::File(_)) {
            return;
        }
        let outcome = tokio::task::spawn_blocking(move || k.refresh()).await;
        let wait = match outcome {
            Ok(Ok(n)) => {
                tracing::debug!(keys = n, "identity provider's key set fetched");
                REFRESH_EVERY
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, retry_in_secs = RETRY_EVERY.as_secs(), "identity provider's key set could not be fetched; the last good set stays");
                RETRY_EVERY
            }
            Err(_) => RETRY_EVERY,
        };
        tokio::select! {
            () = &mut until => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_keeps_its_signing_keys_and_skips_the_rest() {
        let ed = r#"{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","kid":"ed"}"#;
        let enc = r#"{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","kid":"enc","use":"enc"}"#;
        let hmac = r#"{"kty":"oct","k":"c2VjcmV0","kid":"hs"}"#;
        let odd = r#"{"kty":"XYZ","kid":"odd"}"#;
        let doc = format!(r#"{{"keys":[{ed},{enc},{hmac},{odd}]}}"#);
        let set = KeySet::parse(doc.as_bytes()).unwrap();
        assert_eq!(set.len(), 1);
        assert_eq!(set.find(Some("ed")).map(|(a, _)| a), Some(Algorithm::EdDSA));
        assert!(set.find(Some("hs")).is_none(), "HMAC keys are never used");
        assert!(set.find(Some("enc")).is_none());
        assert!(set.find(None).is_some(), "one key: a token without kid");
        let none = KeySet::parse(format!(r#"{{"keys":[{hmac}]}}"#).as_bytes());
        assert!(none.is_err_and(|e| e.contains("none of its 1 keys")));
        assert!(KeySet::parse(b"[]").is_err_and(|e| e.contains("\"keys\"")));
    }
}
