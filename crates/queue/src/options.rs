//! What opening a store needs to know: the checked `[storage]` and `[storage.postgres]`
//! sections. The service's config reads them from TOML and checks them; this crate only uses
//! them, so it depends on no config format.

use std::fmt;
use std::time::Duration;

/// Which store keeps the queue (`[storage] backend`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// The embedded SQLite file in the data directory (D28).
    Sqlite,
    /// A PostgreSQL database, possibly shared by several nodes (D39).
    Postgres(Postgres),
}

/// `[storage]`: the queue's store and its free-space rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Storage {
    /// The store.
    pub backend: Backend,
    /// Writes that grow the queue are refused below this much free space (D30).
    pub min_free_bytes: u64,
}

impl Default for Storage {
    fn default() -> Self {
        Self {
            backend: Backend::Sqlite,
            min_free_bytes: 256 * 1024 * 1024,
        }
    }
}

/// How long a node holds the keys it is delivering unless it renews them (D39).
pub const DEFAULT_LEASE_SECS: u64 = 30;

/// The checked `[storage.postgres]`.
#[derive(Clone, PartialEq, Eq)]
pub struct Postgres {
    /// `postgres://user@host:port/db?sslmode=require` (libpq's URL form).
    pub url: String,
    /// The password, from `password_file` (or the URL).
    pub password: Option<String>,
    /// Extra CA certificates (PEM) trusted for the database's TLS certificate.
    pub ca_pem: Option<Vec<u8>>,
    /// The system's trusted CA certificates (PEM), read when the config was checked.
    pub system_ca_pem: Vec<u8>,
    /// How long a node holds the keys it delivers (D39).
    pub lease: Duration,
    /// This node's name in the cluster status (default: the host name): a label only, which
    /// two processes may share; leases belong to the process (D41).
    pub node: String,
}

// Never print the password.
impl fmt::Debug for Postgres {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Postgres")
            .field("url", &redacted(&self.url))
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("lease", &self.lease)
            .field("node", &self.node)
            .finish()
    }
}

/// The URL without a password it may carry (`postgres://user:secret@host` -> `user:***`).
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.split_once('@') {
        Some((user, host)) if user.contains(':') => {
            let name = user.split(':').next().unwrap_or_default();
            format!("{scheme}://{name}:***@{host}")
        }
        _ => url.to_string(),
    }
}
