//! The background checkpoint thread: copies the WAL into the queue file (PASSIVE, so it never
//! waits for the writer), flushes what it copied, and returns free pages to the filesystem
//! after large deliveries. A failed flush, SQLite's or ours, trips the store's halt and ends
//! the thread: a checkpoint after it could let the WAL be reset while it holds the only copy
//! of pages the kernel dropped (D40).

use super::{WriterConn, check, connect, error_at, pragma};
use crate::Stop;
use crate::{Halt, StoreError};
use rusqlite::Connection;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the background thread checkpoints the WAL. Often, so each checkpoint is small:
/// the commit right after one took about as long as the checkpoint itself (40-80 ms every
/// 500 ms under load), the p99 of 100-record requests (BENCHMARKS.md).
pub(super) const EVERY: Duration = Duration::from_millis(100);
/// Free pages are returned to the filesystem when they are more than a quarter of the file
/// and at least this many, this many per step.
const VACUUM_STEP_PAGES: i64 = 4096;

/// The background checkpoint thread and the way to stop it.
pub(super) struct Checkpointer {
    stop: Stop,
    thread: std::thread::JoinHandle<()>,
}

impl Checkpointer {
    pub(super) fn start(
        path: &Path,
        writer: Arc<Mutex<WriterConn>>,
        halt: Halt,
    ) -> Result<Self, StoreError> {
        let conn = connect(path, false).map_err(|e| error_at(path, e))?;
        let path = path.to_path_buf();
        let stop = Stop::new();
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("queue-checkpoint".into())
            .spawn(move || {
                // D29: after the start, not before it: the pass reads the whole queue.
                match check::sweep(&conn, &writer).map_err(|e| error_at(&path, e)) {
                    Ok(()) => {}
                    Err(StoreError::FlushFailed { detail, .. }) => return halt.trip(&detail),
                    Err(e) => tracing::warn!(error = %e, "looking for damaged queue rows failed"),
                }
                let mut flush = Flush::new(&path);
                while !stopped.wait_timeout(EVERY) {
                    if halt.reason().is_some() {
                        return; // the writer met a failed flush (D40)
                    }
                    let done = checkpoint(&conn)
                        .map_err(|e| error_at(&path, e))
                        .and_then(|progress| flush.after(progress))
                        .and_then(|()| vacuum_step(&writer, &path));
                    match done {
                        Ok(()) => {}
                        Err(StoreError::FlushFailed { detail, .. }) => return halt.trip(&detail),
                        Err(e) => tracing::warn!(error = %e, "queue checkpoint failed; retrying"),
                    }
                }
            })?;
        Ok(Self { stop, thread })
    }

    pub(super) fn stop(self) {
        self.stop.signal();
        let _ = self.thread.join();
    }
}

/// Runs a PASSIVE checkpoint: (frames in the WAL, frames copied into the file so far).
fn checkpoint(conn: &Connection) -> Result<(i64, i64), rusqlite::Error> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        Ok((r.get(1)?, r.get(2)?))
    })
}

/// Flushes the pages a checkpoint copied into the queue file.
///
/// SQLite fsyncs the file only when a checkpoint has copied the whole WAL *as it is when the
/// checkpoint ends*. While intake writes without pause the writer appends during every
/// checkpoint, so none gets there: the copied pages stay dirty in the page cache, hundreds of
/// MiB of them, until a checkpoint in a pause flushes them all at once (110-170 ms), and the
/// writer's WAL fsync, queued behind that on the same disk, stalls as long, and with it
/// every request waiting for its commit (D27; BENCHMARKS.md). Flushing after each checkpoint
/// keeps each flush to what the writer wrote in the last [`EVERY`].
///
/// SQLite counts the frames a PASSIVE checkpoint copied as done even when it did not flush
/// them (it flushes only a checkpoint that reaches the end of the WAL), so once a later
/// checkpoint completes, the WAL may be reset and this flush is all that stands for those
/// pages. Its failure is therefore as fatal as SQLite's own (D40).
struct Flush {
    path: std::path::PathBuf,
    file: Option<std::fs::File>,
    last: (i64, i64),
}

impl Flush {
    fn new(path: &Path) -> Self {
        let file = std::fs::File::open(path)
            .map_err(|e| tracing::warn!(error = %e, "the queue file cannot be opened for flushing"))
            .ok();
        Self {
            path: path.to_path_buf(),
            file,
            last: (0, 0),
        }
    }

    /// After a checkpoint that reported `(log, copied)` frames.
    fn after(&mut self, progress: (i64, i64)) -> Result<(), StoreError> {
        // The checkpoint reports the WAL as it was when it began, so "all copied" does not
        // tell whether SQLite flushed: the writer may have appended since. A flush with
        // nothing dirty costs well under a millisecond.
        let copied_some = progress.1 > 0 && progress != self.last;
        self.last = progress;
        match (copied_some, &self.file) {
            (true, Some(file)) => file.sync_data().map_err(|e| StoreError::FlushFailed {
                path: self.path.display().to_string(),
                detail: format!("fdatasync after a checkpoint: {e}"),
            }),
            _ => Ok(()),
        }
    }
}

/// Returns a step of free pages to the filesystem when many are free (after a large queue
/// was delivered), on the writer connection so it never contends for the write lock. Only
/// a failed flush is an error; anything else is logged and tried again later.
fn vacuum_step(writer: &Mutex<WriterConn>, path: &Path) -> Result<(), StoreError> {
    let Ok(w) = writer.lock() else { return Ok(()) };
    let pages = |pragma: &str| -> i64 {
        w.conn
            .query_row(&format!("PRAGMA {pragma}"), [], |r| r.get(0))
            .unwrap_or(0)
    };
    let (free, total) = (pages("freelist_count"), pages("page_count"));
    if free >= VACUUM_STEP_PAGES && free * 4 > total {
        match pragma(&w.conn, &format!("incremental_vacuum({VACUUM_STEP_PAGES})")) {
            Ok(()) => {}
            Err(e) => match error_at(path, e) {
                failed @ StoreError::FlushFailed { .. } => return Err(failed),
                e => {
                    tracing::warn!(error = %e, "returning free queue pages to the filesystem failed")
                }
            },
        }
    }
    Ok(())
}
