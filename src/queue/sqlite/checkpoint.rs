//! The background checkpoint thread: copies the WAL into the queue file (PASSIVE, so it never
//! waits for the writer), flushes what it copied, and returns free pages to the filesystem
//! after large deliveries.

use super::{WriterConn, check, connect, error_at, pragma};
use crate::queue::StoreError;
use rusqlite::Connection;
use std::path::Path;
use std::sync::{Arc, Mutex, mpsc};
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
    stop: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Checkpointer {
    pub(super) fn start(path: &Path, writer: Arc<Mutex<WriterConn>>) -> Result<Self, StoreError> {
        let conn = connect(path, false).map_err(|e| error_at(path, e))?;
        let path = path.to_path_buf();
        let (stop, stopped) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("queue-checkpoint".into())
            .spawn(move || {
                // D29: after the start, not before it: the pass reads the whole queue.
                if let Err(e) = check::sweep(&conn, &writer) {
                    tracing::warn!(error = %e, "looking for damaged queue rows failed");
                }
                let mut flush = Flush::new(&path);
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(EVERY) {
                    match checkpoint(&conn) {
                        Ok(progress) => flush.after(progress),
                        Err(e) => tracing::warn!(error = %e, "queue checkpoint failed; retrying"),
                    }
                    vacuum_step(&writer);
                }
            })?;
        Ok(Self { stop, thread })
    }

    pub(super) fn stop(self) {
        let _ = self.stop.send(());
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
/// keeps each flush to what the writer wrote in the last [`EVERY`]. It adds no durability
/// SQLite relies on: the WAL keeps every frame until a checkpoint reaches its end.
struct Flush {
    file: Option<std::fs::File>,
    last: (i64, i64),
    /// A flush failed and has not succeeded since: said once, not every [`EVERY`].
    failing: bool,
}

impl Flush {
    fn new(path: &Path) -> Self {
        let file = std::fs::File::open(path)
            .map_err(|e| tracing::warn!(error = %e, "the queue file cannot be opened for flushing"))
            .ok();
        Self {
            file,
            last: (0, 0),
            failing: false,
        }
    }

    /// After a checkpoint that reported `(log, copied)` frames.
    fn after(&mut self, progress: (i64, i64)) {
        // The checkpoint reports the WAL as it was when it began, so "all copied" does not
        // tell whether SQLite flushed: the writer may have appended since. A flush with
        // nothing dirty costs well under a millisecond.
        let copied_some = progress.1 > 0 && progress != self.last;
        self.last = progress;
        if let (true, Some(file)) = (copied_some, &self.file) {
            match file.sync_data() {
                Err(e) if !self.failing => {
                    self.failing = true;
                    tracing::warn!(error = %e, "flushing the queue file after a checkpoint failed; \
                        the WAL still holds every record, retrying quietly");
                }
                Ok(()) if self.failing => {
                    self.failing = false;
                    tracing::info!("flushing the queue file after a checkpoint works again");
                }
                _ => {}
            }
        }
    }
}

/// Returns a step of free pages to the filesystem when many are free (after a large queue
/// was delivered), on the writer connection so it never contends for the write lock.
fn vacuum_step(writer: &Mutex<WriterConn>) {
    let Ok(w) = writer.lock() else { return };
    let pages = |pragma: &str| -> i64 {
        w.conn
            .query_row(&format!("PRAGMA {pragma}"), [], |r| r.get(0))
            .unwrap_or(0)
    };
    let (free, total) = (pages("freelist_count"), pages("page_count"));
    if free >= VACUUM_STEP_PAGES && free * 4 > total {
        if let Err(e) = pragma(&w.conn, &format!("incremental_vacuum({VACUUM_STEP_PAGES})")) {
            tracing::warn!(error = %e, "returning free queue pages to the filesystem failed");
        }
    }
}
