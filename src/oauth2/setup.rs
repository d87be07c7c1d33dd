//! The OAuth 2.0 parts a config makes (D47), at start and again at each reload (D34): the
//! issuer and its key ring, the checker of bearer tokens, and the identity provider's key
//! set. What a reload must carry over is [`State`]: the key a new signing key replaces (its
//! tokens stay accepted until they expire) and the provider's set when its source stays.

use super::keys::{KeyError, KeyRing, SigningKey};
use super::provider::ProviderKeys;
use super::tokens::{Issuer, Provider, Verifier};
use crate::config::{KeySource, OAuth2Server};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What one build leaves for the next (a reload's).
#[derive(Clone, Default)]
pub struct State {
    ring: Option<KeyRing>,
    /// The token lifetime the ring's current key signs with.
    ttl: Duration,
    provider: Option<Arc<ProviderKeys>>,
}

impl State {
    /// The service's signing keys, if it signs.
    pub fn ring(&self) -> Option<&KeyRing> {
        self.ring.as_ref()
    }
}

/// The parts of one config.
#[derive(Default)]
pub struct Parts {
    /// Issues tokens (with `[oauth2] signing_key_file`).
    pub issuer: Option<Issuer>,
    /// Checks bearer tokens (with `[oauth2]`).
    pub verifier: Option<Arc<Verifier>>,
    /// The provider's key set, when this build opened it: the caller keeps it fresh
    /// ([`super::provider::keep_fresh`]). `None` when there is none, or the previous one stays.
    pub opened: Option<Arc<ProviderKeys>>,
    /// What the next build starts from.
    pub state: State,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The parts of `config` (`None`: no `[oauth2]`), after `before` (`None` at start). A
/// signing key that cannot be used is an error, and a reload then changes nothing.
/// Turning signing off is restart-only: without `signing_key_file` the keys of `before` stay.
pub fn build(
    config: Option<&OAuth2Server>,
    data_dir: &Path,
    before: &State,
) -> Result<Parts, KeyError> {
    let Some(o) = config else {
        return Ok(Parts::default());
    };
    let ring = match (&o.signing_key_file, &before.ring) {
        (Some(file), None) => Some(KeyRing::new(Arc::new(SigningKey::load(file)?))),
        (Some(file), Some(ring)) => {
            let next = Arc::new(SigningKey::load(file)?);
            Some(ring.rotated(next, before.ttl, now_secs()))
        }
        (None, ring) => ring.clone(),
    };
    // A replaced key is accepted for the longest lifetime it signed with since it became
    // the current one (a reload may have shortened token_ttl_secs meanwhile).
    let same_key = |r: &KeyRing| {
        before
            .ring
            .as_ref()
            .is_some_and(|b| b.current().kid == r.current().kid)
    };
    let ttl = match &ring {
        Some(r) if same_key(r) => before.ttl.max(o.token_ttl),
        _ => o.token_ttl,
    };
    let issuer = ring
        .as_ref()
        .map(|r| Issuer::new(Arc::clone(r.current()), &o.issuer, &o.audience, o.token_ttl));
    let (provider, opened) = match &o.external {
        None => (None, None),
        Some(e) => {
            // A source that stays keeps its set: a jwks_url its fetches, a jwks_file is read
            // again, and a file that no longer reads leaves the last good set in place.
            let kept = before.provider.as_ref().filter(|k| *k.source() == e.keys);
            let (keys, opened) = match kept {
                Some(k) => {
                    if let KeySource::File(file) = &e.keys
                        && let Err(why) = k.refresh()
                    {
                        tracing::warn!(file = %file.display(), error = %why, "the identity provider's key file cannot be used; the last good set stays");
                    }
                    (Arc::clone(k), None)
                }
                None => {
                    let k = ProviderKeys::open(&e.keys, data_dir);
                    (Arc::clone(&k), Some(k))
                }
            };
            let provider = Provider {
                issuer: e.issuer.clone(),
                audience: e.audience.clone(),
                scope_claim: e.scope_claim.clone(),
                keys: Arc::clone(&keys),
            };
            (Some(provider), opened)
        }
    };
    let provider_keys = provider.as_ref().map(|p| Arc::clone(&p.keys));
    let verifier =
        Verifier::new(ring.clone(), &o.issuer, &o.audience, &o.clients).with_provider(provider);
    Ok(Parts {
        issuer,
        verifier: Some(Arc::new(verifier)),
        opened,
        state: State {
            ring,
            ttl,
            provider: provider_keys,
        },
    })
}
