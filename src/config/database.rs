//! `[storage.postgres]` (D39): the database that holds the queue when several nodes share it.

use super::KeyError;
use serde::Deserialize;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPostgres {
    url: Option<String>,
    password_file: Option<PathBuf>,
    ca_file: Option<PathBuf>,
    lease_secs: Option<u64>,
    node: Option<String>,
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

impl RawPostgres {
    pub(super) fn check(&self) -> Result<Postgres, KeyError> {
        let url = self.url.clone().ok_or((
            "postgres.url",
            "required with backend = \"postgres\" (D39)".to_string(),
        ))?;
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err((
                "postgres.url",
                format!(
                    "{} is not a postgres:// URL (postgres://user@host:5432/database)",
                    redacted(&url)
                ),
            ));
        }
        let password = self
            .password_file
            .as_deref()
            .map(|p| super::platform::read_secret(p, "postgres.password_file"))
            .transpose()?;
        let ca_pem = self
            .ca_file
            .as_deref()
            .map(|p| {
                std::fs::read(p).map_err(|e| {
                    (
                        "postgres.ca_file",
                        format!("cannot read {}: {e}", p.display()),
                    )
                })
            })
            .transpose()?;
        let lease_secs = self.lease_secs.unwrap_or(DEFAULT_LEASE_SECS);
        if !(5..=3600).contains(&lease_secs) {
            return Err((
                "postgres.lease_secs",
                format!("{lease_secs} is outside 5 to 3600 seconds"),
            ));
        }
        let node = match &self.node {
            Some(n) if n.trim().is_empty() || n.len() > 64 => {
                return Err(("postgres.node", "must be 1 to 64 characters".into()));
            }
            Some(n) => n.clone(),
            None => rustix::system::uname()
                .nodename()
                .to_string_lossy()
                .into_owned(),
        };
        Ok(Postgres {
            url,
            password,
            ca_pem,
            lease: Duration::from_secs(lease_secs),
            node,
        })
    }
}
