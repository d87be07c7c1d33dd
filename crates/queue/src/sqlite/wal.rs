//! The write-ahead log a stopped service left behind, made durable before anything reads it
//! (D40).
//!
//! After a failed flush the kernel keeps the pages it could not write in its cache, marked
//! clean: the service that starts next (systemd restarts it, the machine still up) reads
//! them, and SQLite's recovery takes a commit found there as committed, although it was
//! never on disk and its client got 503. A checkpoint could then copy it into the queue file
//! and flush it there, while the WAL on disk still lacks it: after a power cut the file
//! would hold pages of a transaction the WAL never had, beside older ones from the WAL, which
//! is a damaged queue. SQLite's own flush of the WAL before each checkpoint does not help,
//! since the pages are clean. Writing every page of the WAL back makes them dirty, so the
//! flush that follows puts on disk exactly what recovery is about to read.

use crate::StoreError;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The WAL of the queue file at `db`.
fn path_of(db: &Path) -> PathBuf {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    PathBuf::from(wal)
}

/// Writes the WAL of `db` back over itself and flushes it; nothing to do when there is none
/// (a clean stop removes it). Called before the first connection opens the queue.
pub(super) fn write_back(db: &Path) -> Result<(), StoreError> {
    let wal = path_of(db);
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&wal)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let mut chunk = vec![0u8; 1 << 20];
    let mut at = 0u64;
    loop {
        let n = file.read_at(&mut chunk, at)?;
        if n == 0 {
            break;
        }
        file.write_all_at(&chunk[..n], at)?;
        at += n as u64;
    }
    file.sync_data().map_err(|e| StoreError::FlushFailed {
        path: wal.display().to_string(),
        detail: format!("fdatasync of the WAL left by the last stop: {e}"),
    })
}
