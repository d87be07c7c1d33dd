//! The stop a failed flush puts on a store (D40).
//!
//! When fsync or fdatasync of a store file fails, the kernel may already have dropped the
//! pages it could not write and marked them clean, so a later flush succeeds without them
//! ("fsyncgate"). Retrying is not safe: a checkpoint that then completes would let SQLite
//! reset its write-ahead log, the only place those pages still are. So the first failed
//! flush trips the store's [`Halt`]: no write is acknowledged after it, the store is never
//! closed (SQLite's last close checkpoints), and the service exits so that the next start
//! recovers from what reached the disk.

use std::sync::{Arc, OnceLock};
use tokio::sync::watch;

/// Tripped once, by the first failed flush; never reset.
#[derive(Clone)]
pub struct Halt(Arc<Inner>);

struct Inner {
    why: OnceLock<String>,
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
    /// Trips the halt with what failed; the first reason stays, and only it is logged.
    pub fn trip(&self, why: &str) {
        if self.0.why.set(why.to_string()).is_ok() {
            tracing::error!(
                error = why,
                "a flush of the queue to disk failed: nothing more is acknowledged, and the \
                 service stops so that its next start recovers the queue from its write-ahead \
                 log (D40)"
            );
            self.0.tripped.send_replace(true);
        }
    }

    /// What tripped it, once it has.
    pub fn reason(&self) -> Option<&str> {
        self.0.why.get().map(String::as_str)
    }

    /// Resolves once the halt has tripped (at once if it already has), with the reason.
    pub async fn tripped(&self) -> String {
        let mut rx = self.0.tripped.subscribe();
        let _ = rx.wait_for(|t| *t).await;
        self.reason().unwrap_or_default().to_string()
    }
}
