//! The key the service signs its access tokens with (`[oauth2] signing_key_file`, D47): an
//! Ed25519 or P-256 private key in PEM (PKCS#8), its public half as a JWK with a `kid` that is
//! its RFC 7638 thumbprint, so every node given the same file names the key alike. ring does
//! the cryptography (the provider rustls already uses); nothing here is written by hand but
//! the JSON of the JWK.

use super::tokens::LEEWAY_SECS;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey};
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, Ed25519KeyPair, KeyPair};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Why a signing key cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The file cannot be read.
    #[error("cannot read the signing key {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a PKCS#8 Ed25519 or P-256 private key in PEM.
    #[error(
        "{path} is not an Ed25519 or P-256 private key in PEM (PKCS#8 \"PRIVATE KEY\"); make \
         one with `ap-intake key generate-signing FILE`"
    )]
    Unusable {
        /// The file.
        path: String,
    },
    /// A new key's file cannot be written (it exists: it is never replaced).
    #[error("cannot write the signing key {path}: {source} (an existing file is never replaced)")]
    Write {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A new key could not be made (the system's random source failed).
    #[error("cannot make a signing key: {0}")]
    Generate(String),
}

/// A private key to sign with, and its public half.
pub struct SigningKey {
    /// The JWS algorithm: EdDSA or ES256.
    pub alg: Algorithm,
    /// The public key's thumbprint (RFC 7638), each token's `kid`.
    pub kid: String,
    /// The public key as a JWK (what `/oauth2/jwks` serves).
    pub jwk: Value,
    encoding: EncodingKey,
    decoding: DecodingKey,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("alg", &self.alg)
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    /// Reads the PEM file at `path`.
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        let shown = path.display().to_string();
        let text = std::fs::read(path).map_err(|source| KeyError::Read {
            path: shown.clone(),
            source,
        })?;
        Self::from_pem(&text).ok_or(KeyError::Unusable { path: shown })
    }

    /// The key in `pem` (PKCS#8), if it is an Ed25519 or P-256 one.
    pub fn from_pem(pem: &[u8]) -> Option<Self> {
        let parsed = pem::parse(pem).ok()?;
        if parsed.tag() != "PRIVATE KEY" {
            return None;
        }
        let der = parsed.contents();
        if let Ok(pair) = Ed25519KeyPair::from_pkcs8_maybe_unchecked(der) {
            let x = B64.encode(pair.public_key().as_ref());
            let jwk = json!({"kty": "OKP", "crv": "Ed25519", "x": x});
            let thumbprint = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#);
            return Some(Self::with(
                Algorithm::EdDSA,
                jwk,
                &thumbprint,
                EncodingKey::from_ed_der(der),
                DecodingKey::from_ed_components(&x).ok()?,
            ));
        }
        let rng = ring::rand::SystemRandom::new();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der, &rng).ok()?;
        // The uncompressed point: 0x04, x, y.
        let point = pair.public_key().as_ref();
        let (x, y) = (
            B64.encode(point.get(1..33)?),
            B64.encode(point.get(33..65)?),
        );
        let jwk = json!({"kty": "EC", "crv": "P-256", "x": x, "y": y});
        let thumbprint = format!(r#"{{"crv":"P-256","kty":"EC","x":"{x}","y":"{y}"}}"#);
        Some(Self::with(
            Algorithm::ES256,
            jwk,
            &thumbprint,
            EncodingKey::from_ec_der(der),
            DecodingKey::from_ec_components(&x, &y).ok()?,
        ))
    }

    fn with(
        alg: Algorithm,
        mut jwk: Value,
        thumbprint: &str,
        encoding: EncodingKey,
        decoding: DecodingKey,
    ) -> Self {
        let kid = B64.encode(Sha256::digest(thumbprint.as_bytes()));
        jwk["kid"] = json!(kid);
        jwk["use"] = json!("sig");
        jwk["alg"] = json!(match alg {
            Algorithm::EdDSA => "EdDSA",
            _ => "ES256",
        });
        Self {
            alg,
            kid,
            jwk,
            encoding,
            decoding,
        }
    }

    /// The key to sign with.
    pub fn encoding(&self) -> &EncodingKey {
        &self.encoding
    }

    /// The key to check this key's signatures with.
    pub fn decoding(&self) -> &DecodingKey {
        &self.decoding
    }
}

/// A new Ed25519 private key in PEM (PKCS#8), for `ap-intake key generate-signing`.
pub fn generate_pem() -> Result<String, KeyError> {
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 =
        Ed25519KeyPair::generate_pkcs8(&rng).map_err(|e| KeyError::Generate(e.to_string()))?;
    Ok(pem::encode(&pem::Pem::new("PRIVATE KEY", pkcs8.as_ref())))
}

/// The service's signing keys (D47): the one tokens are signed with now, and those a reload
/// replaced, each still accepted until the last token it could have signed has expired.
#[derive(Debug, Clone)]
pub struct KeyRing {
    current: Arc<SigningKey>,
    /// Replaced keys, each with the Unix second after which no token it signed is live.
    retired: Vec<(Arc<SigningKey>, u64)>,
}

impl KeyRing {
    /// Signing with `current`, nothing retired.
    pub fn new(current: Arc<SigningKey>) -> Self {
        Self {
            current,
            retired: Vec::new(),
        }
    }

    /// The ring after a reload read `next` at `now`: the same key changes nothing; another
    /// one retires the current key until tokens of `ttl` (the lifetime it signed with) and the
    /// clock leeway have run out. Keys retired long enough ago leave.
    pub fn rotated(&self, next: Arc<SigningKey>, ttl: Duration, now: u64) -> Self {
        let mut retired: Vec<_> = self
            .retired
            .iter()
            .filter(|(k, until)| *until >= now && k.kid != next.kid)
            .cloned()
            .collect();
        if next.kid != self.current.kid {
            retired.push((
                Arc::clone(&self.current),
                now.saturating_add(ttl.as_secs())
                    .saturating_add(LEEWAY_SECS),
            ));
        }
        Self {
            current: next,
            retired,
        }
    }

    /// The key tokens are signed with.
    pub fn current(&self) -> &Arc<SigningKey> {
        &self.current
    }

    /// Whether a reload retired a key whose tokens may still be live at `now`.
    pub fn retiring(&self, now: u64) -> usize {
        self.retired
            .iter()
            .filter(|(_, until)| *until >= now)
            .count()
    }

    /// The key named `kid` if a token signed with it may be live at `now`.
    pub fn find(&self, kid: &str, now: u64) -> Option<&Arc<SigningKey>> {
        std::iter::once(&self.current)
            .chain(
                self.retired
                    .iter()
                    .filter(|(_, until)| *until >= now)
                    .map(|(k, _)| k),
            )
            .find(|k| k.kid == kid)
    }

    /// The public keys accepted at `now` as a JWK set (RFC 7517), for `/oauth2/jwks`.
    pub fn jwks(&self, now: u64) -> Value {
        let retired = self.retired.iter().filter(|(_, until)| *until >= now);
        let keys: Vec<&Value> = std::iter::once(&self.current.jwk)
            .chain(retired.map(|(k, _)| &k.jwk))
            .collect();
        json!({ "keys": keys })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_key_reads_back_with_a_stable_thumbprint() {
        let pem = generate_pem().unwrap();
        let a = SigningKey::from_pem(pem.as_bytes()).unwrap();
        let b = SigningKey::from_pem(pem.as_bytes()).unwrap();
        assert_eq!(a.alg, Algorithm::EdDSA);
        assert_eq!(a.kid, b.kid, "one file, one kid: nodes agree");
        assert_eq!(a.kid.len(), 43, "base64url of a SHA-256");
        assert_eq!(a.jwk["kty"], "OKP");
        assert!(a.jwk.get("d").is_none(), "no private part in the JWK");
        let other = SigningKey::from_pem(generate_pem().unwrap().as_bytes()).unwrap();
        assert_ne!(a.kid, other.kid);
        assert!(SigningKey::from_pem(b"not a key").is_none());
    }

    /// RFC 7638 section 3.1's example gives a thumbprint of a known key; Ed25519's form is
    /// RFC 8037 appendix A.3: kid "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k".
    #[test]
    fn the_kid_is_the_rfc_8037_thumbprint() {
        let x = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo";
        let thumbprint = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#);
        assert_eq!(
            B64.encode(Sha256::digest(thumbprint.as_bytes())),
            "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"
        );
    }

    /// D47, issue 47: a reload's new key signs; the one it replaced is accepted, and
    /// published, until a token it signed at the reload would have expired (ttl + leeway).
    #[test]
    fn a_replaced_key_is_accepted_until_its_last_token_expires() {
        let key = || Arc::new(SigningKey::from_pem(generate_pem().unwrap().as_bytes()).unwrap());
        let (a, b, c) = (key(), key(), key());
        let ttl = Duration::from_secs(3600);
        let ring = KeyRing::new(Arc::clone(&a)).rotated(Arc::clone(&b), ttl, 1000);
        assert_eq!(ring.current().kid, b.kid);
        let until = 1000 + 3600 + LEEWAY_SECS;
        assert!(ring.find(&a.kid, until).is_some());
        assert!(ring.find(&a.kid, until + 1).is_none());
        assert_eq!(ring.jwks(until)["keys"].as_array().unwrap().len(), 2);
        assert_eq!(ring.jwks(until + 1)["keys"].as_array().unwrap().len(), 1);
        assert_eq!(ring.retiring(1000), 1);
        let same = ring.rotated(Arc::clone(&b), ttl, 2000);
        assert!(
            same.find(&a.kid, 2000).is_some(),
            "the same key again retires nothing new"
        );
        assert_eq!(same.retiring(2000), 1);
        let later = ring.rotated(Arc::clone(&c), ttl, until + 1);
        assert!(
            later.find(&a.kid, until + 1).is_none(),
            "a lapsed key leaves"
        );
        assert!(later.find(&b.kid, until + 1).is_some());
        assert!(later.find(&c.kid, until + 1).is_some());
        assert!(ring.find("no such kid", 1000).is_none());
    }
}
