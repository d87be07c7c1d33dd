//! API-key authentication (D20), decided from the headers before the body is read.

use crate::config::{Access, ApiKey};
use crate::interfaces::Interface;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;
use subtle::ConstantTimeEq;

/// Why a caller is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// No `x-api-key` header (401).
    #[error("API key missing: send it in the x-api-key header")]
    Missing,
    /// A key that matches no configured one (401).
    #[error("API key invalid")]
    Invalid,
    /// A valid key without permission for the interface (403).
    #[error("API key {key:?} may not use {path}")]
    Forbidden {
        /// The key's configured name.
        key: String,
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

/// Whole seconds for `Retry-After`, rounded up and at least 1.
pub fn retry_after_secs(d: Duration) -> u64 {
    d.as_secs_f64().ceil().max(1.0) as u64
}

/// The configured keys and their rate limiters; in sandbox no key is needed (D21).
pub struct Auth {
    sandbox: bool,
    /// Each key with its limiter; the limiter is shared with the `Auth` a reload builds
    /// while the key and its limits stay the same (D34).
    keys: Vec<(ApiKey, Option<Arc<DefaultDirectRateLimiter>>)>,
}

impl Auth {
    /// Checks against `keys`, or lets everyone in when `sandbox`.
    pub fn new(sandbox: bool, keys: Vec<ApiKey>) -> Self {
        Self::with_limiters(sandbox, keys, |_| None)
    }

    /// The `Auth` of a reload (D34): like [`Auth::new`], but a key whose name, SHA-256 and
    /// rate limit are those of a key here keeps that key's limiter, so a reload gives no
    /// client a fresh burst. A key whose rate or burst changed gets a new limiter; a key no
    /// longer configured leaves with its limiter.
    pub fn renewed(&self, sandbox: bool, keys: Vec<ApiKey>) -> Self {
        Self::with_limiters(sandbox, keys, |k| {
            self.keys
                .iter()
                .find(|(old, _)| {
                    old.name == k.name && old.sha256 == k.sha256 && old.rate_limit == k.rate_limit
                })
                .and_then(|(_, limiter)| limiter.clone())
        })
    }

    /// `keys`, each with the limiter `kept` gives it, or else a new one for its rate limit.
    fn with_limiters(
        sandbox: bool,
        keys: Vec<ApiKey>,
        kept: impl Fn(&ApiKey) -> Option<Arc<DefaultDirectRateLimiter>>,
    ) -> Self {
        let keys = keys
            .into_iter()
            .map(|k| {
                let limiter = k.rate_limit.map(|r| {
                    kept(&k).unwrap_or_else(|| {
                        Arc::new(RateLimiter::direct(
                            Quota::per_second(r.per_second).allow_burst(r.burst),
                        ))
                    })
                });
                (k, limiter)
            })
            .collect();
        Self { sandbox, keys }
    }

    /// The name of the key that may call `iface` with `presented`; `None` in sandbox.
    pub fn check(
        &self,
        presented: Option<&[u8]>,
        iface: &Interface,
    ) -> Result<Option<&str>, Denied> {
        self.admit(presented, Some(iface))
    }

    /// The name of the key `presented`, whatever it may call (receipts, D38), within its
    /// rate limit; `None` in sandbox.
    pub fn identify(&self, presented: Option<&[u8]>) -> Result<Option<&str>, Denied> {
        self.admit(presented, None)
    }

    fn admit(
        &self,
        presented: Option<&[u8]>,
        iface: Option<&Interface>,
    ) -> Result<Option<&str>, Denied> {
        if self.sandbox {
            return Ok(None);
        }
        let presented = presented.filter(|k| !k.is_empty()).ok_or(Denied::Missing)?;
        let digest: [u8; 32] = Sha256::digest(presented).into();
        // Every key is compared, in constant time, so timing tells nothing about which matched.
        let mut found = None;
        for entry in &self.keys {
            if bool::from(entry.0.sha256.ct_eq(&digest)) {
                found = Some(entry);
            }
        }
        let (key, limiter) = found.ok_or(Denied::Invalid)?;
        if let Some(iface) = iface {
            let allowed = match &key.access {
                Access::All => true,
                Access::Only(ids) => ids.contains(&iface.id),
            };
            if !allowed {
                return Err(Denied::Forbidden {
                    key: key.name.clone(),
                    path: iface.path,
                });
            }
        }
        if let Some(Err(not_until)) = limiter.as_ref().map(|l| l.check()) {
            return Err(Denied::RateLimited {
                key: key.name.clone(),
                retry_after: not_until.wait_time_from(DefaultClock::default().now()),
            });
        }
        Ok(Some(&key.name))
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
        assert_eq!(old.identify(Some(b"s")), Ok(Some("same")));
        assert!(matches!(
            old.identify(Some(b"s")),
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
        assert_eq!(new.identify(Some(b"g")), Err(Denied::Invalid));
        // The burst spent before the reload stays spent.
        assert!(matches!(
            new.identify(Some(b"s")),
            Err(Denied::RateLimited { .. })
        ));
        // A key without a limit has no limiter; given one by a reload, it gets one.
        let free = Auth::new(false, vec![key("k", b"k", None)]);
        assert!(limiter(&free, "k").is_none());
        let limited = free.renewed(false, vec![key("k", b"k", Some((1, 1)))]);
        assert!(limiter(&limited, "k").is_some());
    }
}
