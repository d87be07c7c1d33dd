//! API-key authentication (D20), decided from the headers before the body is read.

use crate::config::{Access, ApiKey};
use crate::interfaces::Interface;
use sha2::{Digest, Sha256};
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
}

/// The configured keys; in sandbox no key is needed (D21).
pub struct Auth {
    sandbox: bool,
    keys: Vec<ApiKey>,
}

impl Auth {
    /// Checks against `keys`, or lets everyone in when `sandbox`.
    pub fn new(sandbox: bool, keys: Vec<ApiKey>) -> Self {
        Self { sandbox, keys }
    }

    /// The name of the key that may call `iface` with `presented`; `None` in sandbox.
    pub fn check(
        &self,
        presented: Option<&[u8]>,
        iface: &Interface,
    ) -> Result<Option<&str>, Denied> {
        if self.sandbox {
            return Ok(None);
        }
        let presented = presented.filter(|k| !k.is_empty()).ok_or(Denied::Missing)?;
        let digest: [u8; 32] = Sha256::digest(presented).into();
        // Every key is compared, in constant time, so timing tells nothing about which matched.
        let mut found = None;
        for key in &self.keys {
            if bool::from(key.sha256.ct_eq(&digest)) {
                found = Some(key);
            }
        }
        let key = found.ok_or(Denied::Invalid)?;
        let allowed = match &key.access {
            Access::All => true,
            Access::Only(ids) => ids.contains(&iface.id),
        };
        if allowed {
            Ok(Some(&key.name))
        } else {
            Err(Denied::Forbidden {
                key: key.name.clone(),
                path: iface.path,
            })
        }
    }
}
