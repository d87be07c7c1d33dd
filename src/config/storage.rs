//! `[storage]`: which store keeps the queue (SQLite, D28, or PostgreSQL, D39), where, and the
//! free-space rule (D30).

use super::{KeyError, database};
pub use ap_intake_queue::options::{Backend, Storage};
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
