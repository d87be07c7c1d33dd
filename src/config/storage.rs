//! `[storage]`: which store keeps the queue (SQLite, D28, or PostgreSQL, D39), where, and the
//! free-space rule (D30).

use super::{KeyError, database};
use serde::Deserialize;
use std::path::PathBuf;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStorage {
    pub(super) data_dir: Option<PathBuf>,
    backend: Option<String>,
    min_free_bytes: Option<u64>,
    postgres: Option<database::RawPostgres>,
}

/// Which store keeps the queue (`[storage] backend`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// The embedded SQLite file in the data directory (D28).
    Sqlite,
    /// A PostgreSQL database, possibly shared by several nodes (D39).
    Postgres(database::Postgres),
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

impl RawStorage {
    pub(super) fn check(&self) -> Result<Storage, KeyError> {
        let backend = match (self.backend.as_deref(), &self.postgres) {
            (None | Some("sqlite"), None) => Backend::Sqlite,
            (None | Some("sqlite"), Some(_)) => {
                return Err((
                    "postgres",
                    "[storage.postgres] is set but backend is not \"postgres\"".into(),
                ));
            }
            (Some("postgres"), Some(pg)) => Backend::Postgres(pg.check()?),
            (Some("postgres"), None) => {
                return Err((
                    "postgres.url",
                    "required with backend = \"postgres\" (D39)".into(),
                ));
            }
            (Some(other), _) => {
                return Err((
                    "backend",
                    format!("{other:?} is not a store this version has (\"sqlite\", \"postgres\")"),
                ));
            }
        };
        Ok(Storage {
            backend,
            min_free_bytes: self
                .min_free_bytes
                .unwrap_or(Storage::default().min_free_bytes),
        })
    }
}
