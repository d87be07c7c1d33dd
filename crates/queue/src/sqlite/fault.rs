//! What can go wrong inside the SQLite engine, and the one place it becomes the product's
//! [`StoreError`]: SQLite's own errors by their codes, and the conditions of ours SQLite has
//! no code for, each a variant of its own rather than a borrowed SQLite error.

use crate::StoreError;
use std::path::Path;

/// A failure inside the engine.
#[derive(Debug)]
pub(super) enum Fault {
    /// SQLite's error.
    Sql(rusqlite::Error),
    /// The file cannot keep a write-ahead log (SQLite answered with this journal mode: a
    /// filesystem without the shared memory WAL mode needs).
    NoWal(String),
    /// A broken invariant of the queue's own writes: a bug, never the client's or the disk's.
    Broken(&'static str),
}

impl From<rusqlite::Error> for Fault {
    fn from(e: rusqlite::Error) -> Self {
        Self::Sql(e)
    }
}

/// The product's error for an engine failure on the file at `path`.
pub(super) fn error_at(path: &Path, e: impl Into<Fault>) -> StoreError {
    use rusqlite::ErrorCode as C;
    let file = path.display().to_string();
    let e = match e.into() {
        Fault::Sql(e) => e,
        Fault::NoWal(mode) => {
            return StoreError::CannotOpen {
                at: file,
                detail: format!(
                    "the queue file cannot use a write-ahead log (journal mode {mode})"
                ),
            };
        }
        Fault::Broken(why) => return StoreError::Internal(format!("{file}: {why}")),
    };
    if is_failed_flush(&e) {
        return StoreError::FlushFailed {
            path: file,
            detail: e.to_string(),
        };
    }
    match e.sqlite_error_code() {
        Some(C::DiskFull) => StoreError::Full(format!("the disk holding {file} is full")),
        Some(C::DatabaseCorrupt | C::NotADatabase) => StoreError::Damaged {
            path: file,
            detail: e.to_string(),
        },
        Some(C::DatabaseBusy | C::DatabaseLocked) => StoreError::Busy(file),
        Some(C::CannotOpen) => StoreError::CannotOpen {
            at: file,
            detail: e.to_string(),
        },
        _ => StoreError::Engine {
            engine: crate::Engine::Sqlite,
            at: file,
            source: Box::new(e),
        },
    }
}

/// SQLite's error for a failed fsync or fdatasync (D40).
pub(super) fn is_failed_flush(e: &rusqlite::Error) -> bool {
    use rusqlite::ffi::{SQLITE_IOERR_DIR_FSYNC, SQLITE_IOERR_FSYNC};
    matches!(e, rusqlite::Error::SqliteFailure(f, _)
        if matches!(f.extended_code, SQLITE_IOERR_FSYNC | SQLITE_IOERR_DIR_FSYNC))
}
