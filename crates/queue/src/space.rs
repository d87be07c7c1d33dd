//! Free space (D30): writes that grow the queue are refused, as "storage is full", while the
//! filesystem holding the data directory has less than `[storage] min_free_bytes` free, so
//! the disk never fills under the queue and deliveries (which free space) can still commit.
//! Checked at every such write (one `statvfs`, about a microsecond): when space returns, the
//! next request is accepted, no restart needed.

use super::StoreError;
use std::path::{Path, PathBuf};

/// The free-space rule of one data directory.
#[derive(Debug, Clone)]
pub struct Space {
    dir: PathBuf,
    min_free: u64,
}

impl Space {
    /// The rule for `dir` with `min_free` bytes kept free (0: only a full disk refuses).
    pub fn new(dir: &Path, min_free: u64) -> Self {
        Self {
            dir: dir.to_path_buf(),
            min_free,
        }
    }

    /// Bytes available to the service on the filesystem of the data directory.
    pub fn free(&self) -> std::io::Result<u64> {
        let s = rustix::fs::statvfs(&self.dir)?;
        Ok(s.f_bavail.saturating_mul(s.f_frsize))
    }

    /// `Err(Full)` when less than the minimum is free. A failing `statvfs` does not refuse:
    /// the write itself will tell.
    pub fn check(&self) -> Result<(), StoreError> {
        match self.free() {
            Ok(free) if free < self.min_free => Err(StoreError::Full(format!(
                "{} free on the filesystem of {}, less than [storage] min_free_bytes ({})",
                mib(free),
                self.dir.display(),
                mib(self.min_free)
            ))),
            _ => Ok(()),
        }
    }
}

/// Bytes as MiB with one decimal, for messages.
fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}
