//! API-key authentication (D20), decided from the headers before the body is read.

use crate::config::{Access, ApiKey};
use crate::interfaces::Interface;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use sha2::{Digest, Sha256};
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
    keys: Vec<(ApiKey, Option<DefaultDirectRateLimiter>)>,
}

impl Auth {
    /// Checks against `keys`, or lets everyone in when `sandbox`.
    pub fn new(sandbox: bool, keys: Vec<ApiKey>) -> Self {
        let keys = keys
            .into_iter()
            .map(|k| {
                let limiter = k.rate_limit.map(|r| {
                    RateLimiter::direct(Quota::per_second(r.per_second).allow_burst(r.burst))
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
