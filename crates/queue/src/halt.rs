//! The stop a store puts on itself when it must take no more writes: after a failed flush
//! (D40), or on PostgreSQL when a newer node has migrated the queue's schema past what this
//! version knows.
//!
//! When fsync or fdatasync of a store file fails, the kernel may already have dropped the
//! pages it could not write and marked them clean, so a later flush succeeds without them
//! ("fsyncgate"). Retrying is not safe: a checkpoint that then completes would let SQLite
//! reset its write-ahead log, the only place those pages still are. So the first failed
//! flush trips the store's [`Halt`]: no write is acknowledged after it, the store is never
//! closed (SQLite's last close checkpoints), and the service exits so that the next start
//! recovers from what reached the disk (74).
//!
//! A node whose schema is older than the database's cannot tell whether its writes still
//! mean what the newer version reads: it takes none, and the service exits 78 (a restart
//! would meet the same schema) until the node is upgraded.

use crate::StoreError;
use std::sync::{Arc, OnceLock};
use tokio::sync::watch;

/// Why a store halted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Halted {
    /// A flush of a store file failed (D40): what failed.
    FlushFailed(String),
    /// The queue's schema is `found`, newer than the `reads` this version knows.
    NewerSchema {
        /// The database's schema version.
        found: i64,
        /// The newest this version reads.
        reads: i64,
    },
}

impl Halted {
    /// The error every write after the halt gets, for the store at `path`.
    pub fn error(&self, path: &str) -> StoreError {
        match self {
            Self::FlushFailed(why) => StoreError::FlushFailed {
                path: path.to_string(),
                detail: why.clone(),
            },
            Self::NewerSchema { found, reads } => StoreError::NewerSchema {
                path: path.to_string(),
                version: *found,
                reads: *reads,
            },
        }
    }
}

/// Tripped once, by the first cause; never reset.
#[derive(Clone)]
pub struct Halt(Arc<Inner>);

struct Inner {
    why: OnceLock<Halted>,
    tripped: watch::Sender<bool>,
}

impl Default for Halt {
    fn default() -> Self {
        Self(Arc::new(Inner {
            why: OnceLock::new(),
            tripped: watch::Sender::new(false),
        }))
    }
}

impl std::fmt::Debug for Halt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Halt").field(&self.reason()).finish()
    }
}

impl Halt {
    /// Trips the halt for a failed flush; the first cause stays, and only it is logged.
    pub fn trip(&self, why: &str) {
        if self.0.why.set(Halted::FlushFailed(why.to_string())).is_ok() {
            tracing::error!(
                error = why,
                "a flush of the queue to disk failed: nothing more is acknowledged, and the \
                 service stops so that its next start recovers the queue from its write-ahead \
                 log (D40)"
            );
            self.0.tripped.send_replace(true);
        }
    }

    /// Trips the halt for a schema newer than this version reads.
    pub fn outdated(&self, found: i64, reads: i64) {
        if self.0.why.set(Halted::NewerSchema { found, reads }).is_ok() {
            tracing::error!(
                found,
                reads,
                "a newer ap-intake migrated the queue's schema past what this node reads: it \
                 takes no more records and stops; upgrade it (README, Upgrading a cluster)"
            );
            self.0.tripped.send_replace(true);
        }
    }

    /// What tripped it, once it has.
    pub fn reason(&self) -> Option<&Halted> {
        self.0.why.get()
    }

    /// Resolves once the halt has tripped (at once if it already has), with the cause.
    pub async fn tripped(&self) -> Halted {
        let mut rx = self.0.tripped.subscribe();
        let _ = rx.wait_for(|t| *t).await;
        self.reason()
            .cloned()
            .unwrap_or(Halted::FlushFailed(String::new()))
    }
}
