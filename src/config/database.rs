//! `[storage.postgres]` (D39): the database that holds the queue when several nodes share it.

use super::KeyError;
pub use ap_intake_queue::options::{DEFAULT_LEASE_SECS, Postgres, redacted};
use serde::Deserialize;
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
            system_ca_pem: super::system_ca_bundle().unwrap_or_default(),
            lease: Duration::from_secs(lease_secs),
            node,
        })
    }
}
