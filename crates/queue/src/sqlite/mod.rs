//! [`Store`] on SQLite (D28): one file, `<data_dir>/queue.sqlite3`, in WAL mode with
//! `synchronous=FULL`, so a commit is on disk (the WAL fsync'd) when it returns (D17).
//!
//! ```sql
//! -- application_id 0x41504951 ('APIQ'), user_version 3 (SCHEMA_VERSION below; a queue of
//! -- schema 1 or 2 is upgraded at open, migrate.rs, schema.rs); auto_vacuum INCREMENTAL: pages freed by
//! -- deliveries go back to the filesystem.
//! CREATE TABLE line (n INTEGER PRIMARY KEY,    -- one delivery line per interface, numbered
//!                    interface TEXT NOT NULL UNIQUE);      -- when it is first used
//! CREATE TABLE item (                      -- one row per queue key (D15, D16)
//!   -- rowid: the key's place, line n << 48 | the version that placed it. The line is the
//!   -- table's own order, so an interface's line is a range of rowids and needs no index.
//!   -- A resend of a pending key and a requeue keep the place (D16, D18).
//!   key        BLOB PRIMARY KEY,           -- QueueKey bytes: space 0x00 part 0x00 part
//!   interface  TEXT NOT NULL,              -- interface id of the latest version
//!   state      INTEGER NOT NULL,           -- 0 pending, 1 rejected, 2 quarantined (D18, D29)
//!   version    INTEGER NOT NULL,           -- store-wide, grows with every upsert
//!   queued_at  INTEGER NOT NULL,           -- unix ms the key became pending; kept on resend
//!   updated_at INTEGER NOT NULL,           -- unix ms of the latest version
//!   attempts   INTEGER NOT NULL,
//!   last_error TEXT,                       -- last delivery failure, rejection or quarantine
//!   xml        TEXT NOT NULL,              -- the record's XML element (D19)
//!   state_at   INTEGER,                    -- unix ms it was rejected, quarantined or requeued
//!   origin_request TEXT, origin_client TEXT, origin_index INTEGER
//!                                          -- the request and record of this version (D48)
//! );
//! CREATE INDEX item_parked ON item (state) WHERE state != 0;
//!                                          -- rejected, quarantined and damaged rows only:
//!                                          -- queueing a pending record never touches it
//! CREATE TABLE counter (interface TEXT, kind TEXT, n INTEGER NOT NULL,
//!                       PRIMARY KEY (interface, kind)) WITHOUT ROWID;
//!                                          -- pending, rejected, quarantined, delivered
//! CREATE TABLE backoff (interface TEXT PRIMARY KEY, failures INTEGER NOT NULL,
//!                       next_attempt_ms INTEGER NOT NULL, last_error TEXT,
//!                       last_error_ms INTEGER, paused INTEGER NOT NULL DEFAULT 0,
//!                       last_success_ms INTEGER) WITHOUT ROWID;   -- D18, D31, D32
//! CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
//!                                          -- next_version, probe
//! -- Receipts (D38), pruned after [receipts] retention_days (sqlite/receipts.rs). A request's
//! -- lines (index, key, version of each record) are one blob, not a row each:
//! CREATE TABLE receipt (rid INTEGER PRIMARY KEY, request_id TEXT, api_key TEXT,
//!                       nonce INTEGER, interface TEXT, received_at INTEGER,
//!                       lines BLOB);       -- UNIQUE (request_id, api_key); INDEX (received_at):
//!                                          -- pruned oldest first
//! CREATE TABLE receipt_more (rid, first, lines BLOB, PRIMARY KEY (rid, first)) WITHOUT ROWID;
//!                                          -- lines of a large request's later transactions
//! CREATE TABLE settled (key BLOB, version, state, at, reason,
//!                       PRIMARY KEY (key, version)) WITHOUT ROWID;
//!                                          -- versions that left: delivered (3) or dropped
//! -- The outcome feed (D48, sqlite/outcomes.rs), pruned with the receipts:
//! CREATE TABLE outcome (seq INTEGER PRIMARY KEY AUTOINCREMENT, client, state, interface,
//!                       request_id, idx, key, reason, at);  -- INDEX (client, state, seq)
//! -- Each key's last delivered XML (D49, sqlite/replay.rs), pruned after [retention]
//! -- delivered_days:
//! CREATE TABLE kept (key BLOB PRIMARY KEY, interface, version, at, bytes, xml);
//!                                          -- INDEX (at, bytes)
//! -- The audit trail (D50, sqlite/audit.rs), pruned after [audit] retention_days:
//! CREATE TABLE audit (n INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE, at, actor, uid,
//!                     action, args, changed);
//! ```
//!
//! One writer connection (behind a mutex) runs every change as one transaction; the intake's
//! [`super::Writer`] hands it the records of many requests at once, so they share one fsync.
//! Reads use connections of their own, which in WAL mode never block the writer. A thread
//! checkpoints the WAL into the main file in the background (PASSIVE, so it never waits
//! for the writer), flushes what it copied, and returns free pages to the filesystem after
//! large deliveries (`checkpoint.rs`). SQLite's automatic checkpoint, which runs inside a
//! commit, ignores a failed flush of the main file, and every failed flush must be seen (D40):
//! it is off, and the writer's safety net for a WAL the thread lets grow is a checkpoint of
//! our own whose failure fails its commit ([`safety_net`]).
//!
//! A failed flush (fsync or fdatasync, of a commit, a checkpoint or our own) trips the
//! store's [`Halt`]: every later write is refused, and the writer connection is never closed,
//! because SQLite's last close checkpoints and removes the WAL, which may then hold the only
//! copy of pages the kernel dropped (`super::halt`).

mod audit;
pub mod backup;
mod check;
mod checkpoint;
pub(crate) mod export;
mod fault;
mod lock;
mod migrate;
mod outcomes;
mod read;
mod receipts;
mod replay;
mod schema;
mod store;
mod wal;
mod write;

pub use check::verify_file;

use super::space::Space;
use super::{Halt, Mode, StoreError};
use fault::{Fault, error_at, is_failed_flush};
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The queue file in a data directory.
pub const FILE_NAME: &str = "queue.sqlite3";

/// Marks a file as an ap-intake queue (`PRAGMA application_id`, "APIQ").
const APPLICATION_ID: i64 = 0x4150_4951;
/// The schema this version reads and writes (`PRAGMA user_version`).
const SCHEMA_VERSION: i64 = 3;

/// How long a connection waits for a lock another connection (the CLI beside the service, a
/// checkpoint) holds before reporting the store busy.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Idle read connections kept for reuse (delivery lanes, status, receipts).
const READERS: usize = 4;
/// The writer checkpoints by itself once the WAL has grown this far (pages), a safety net
/// should the background thread fall behind (under a steady load its PASSIVE checkpoints
/// rarely reach the WAL's end, and only a checkpoint that does lets the WAL start over).
/// Not SQLite's automatic checkpoint, which ignores a failed flush of the queue file: ours
/// ([`safety_net`]) fails the commit that ran it, so the failure is seen (D40).
const AUTOCHECKPOINT_PAGES: i32 = 16_384;
/// After a checkpoint the WAL file is cut back to this size.
const WAL_SIZE_LIMIT: i64 = 64 * 1024 * 1024;

/// The durability settings of an open store (`SqliteStore::settings`), logged at start and
/// asserted by the tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `wal`.
    pub journal_mode: String,
    /// `FULL`: every commit fsyncs the WAL (D17).
    pub synchronous: &'static str,
    /// The writer's own checkpoint threshold (pages), a safety net ([`AUTOCHECKPOINT_PAGES`];
    /// SQLite's automatic checkpoint is off, D40).
    pub wal_autocheckpoint_pages: i64,
    /// How often the background thread checkpoints (PASSIVE); `None` for operator commands.
    pub background_checkpoint: Option<Duration>,
    /// `INCREMENTAL`: free pages are returned to the filesystem in steps.
    pub auto_vacuum: &'static str,
    /// The WAL is cut back to this many bytes after a checkpoint.
    pub journal_size_limit: i64,
}

/// How often the readiness probe reruns the (bounded) integrity check.
const RECHECK_EVERY: Duration = Duration::from_secs(60);

struct WriterConn {
    conn: Connection,
    next_version: u64,
    /// The meta row's `next_version`: every version below it may have been handed out, so the
    /// row is written only when a transaction reaches it (see [`VERSION_BLOCK`]).
    reserved: u64,
}

/// Versions are reserved in blocks of this many: the meta row is rewritten once a block, not
/// in every transaction, which saves its page of WAL in each commit. A restart skips what is
/// left of the block: a version tells one upsert of a key from another (receipts, `settled`,
/// a delivery finishing only the version it sent), so versions must never repeat, but need
/// not be dense; 2^48 of them (the place bits) outlast any number of restarts.
const VERSION_BLOCK: u64 = 1 << 16;

/// The queue in `<data_dir>/queue.sqlite3`.
pub struct SqliteStore {
    path: PathBuf,
    writer: Arc<Mutex<WriterConn>>,
    readers: crate::pool::Pool<Connection>,
    space: Space,
    /// Set when SQLite reported damage: the store is never served silently (D29).
    damaged: Mutex<Option<String>>,
    /// The outcome of the last write, for readiness without a write of its own.
    last_write: crate::recent::LastWrite,
    /// When `/readyz` last ran the integrity check (it runs at most every [`RECHECK_EVERY`]).
    last_check: Mutex<Option<Instant>>,
    checkpointer: Mutex<Option<checkpoint::Checkpointer>>,
    /// Set by [`Store::close`]: every later call is refused.
    closed: std::sync::atomic::AtomicBool,
    /// Tripped by a failed flush (D40).
    halt: Halt,
    /// Held while the store is open: one service (or operator command) per data directory.
    lock: Mutex<Option<std::fs::File>>,
    /// Whether deliveries keep their XML for a replay (D49).
    keep_delivered: std::sync::atomic::AtomicBool,
}

impl SqliteStore {
    /// Opens (or, in [`Mode::Serve`], creates) the queue in `data_dir`, refusing a damaged
    /// file or one in the old format (D28, D29). `min_free_bytes`: below it writes are
    /// refused as "storage is full" (D30).
    pub fn open(data_dir: &Path, mode: Mode, min_free_bytes: u64) -> Result<Self, StoreError> {
        check::refuse_old_format(data_dir)?;
        // Operator commands on a stopped service take the lock too: a service starting
        // meanwhile waits, and a running one that does not answer on its socket is told apart
        // from a stopped one.
        let path = data_dir.join(FILE_NAME);
        if mode == Mode::Inspect && !path.is_file() {
            return Err(StoreError::Missing(path.display().to_string()));
        }
        if mode == Mode::Serve {
            std::fs::create_dir_all(data_dir)?;
        }
        let lock = Some(lock::take(data_dir)?);
        wal::write_back(&path)?;
        let mut conn = connect(&path, true).map_err(|e| error_at(&path, e))?;
        conn.wal_hook(Some(safety_net))
            .map_err(|e| error_at(&path, e))?;
        let prepared = (|| {
            // A file with nothing in it yet is a queue not yet made, not a damaged one: a
            // first start stopped before its schema was committed (a kill, a failed flush,
            // D40) leaves one.
            if mode == Mode::Serve && schema::is_blank(&conn).map_err(|e| error_at(&path, e))? {
                schema::create(&mut conn).map_err(|e| error_at(&path, e))?;
            }
            check::quick(&mut conn, &path, mode)?;
            schema::upgrade(&mut conn).map_err(|e| error_at(&path, e))?;
            read::next_version(&conn).map_err(|e| error_at(&path, e))
        })();
        let next_version = match prepared {
            Ok(v) => v,
            Err(e) => {
                if matches!(e, StoreError::FlushFailed { .. }) {
                    // Closing the only connection would checkpoint without what the kernel
                    // dropped and remove the WAL that still has it (D40).
                    std::mem::forget(conn);
                }
                return Err(e);
            }
        };
        let halt = Halt::default();
        let writer = Arc::new(Mutex::new(WriterConn {
            conn,
            next_version,
            reserved: next_version,
        }));
        let checkpointer = match mode {
            Mode::Serve => Some(checkpoint::Checkpointer::start(
                &path,
                Arc::clone(&writer),
                halt.clone(),
            )?),
            Mode::Inspect => None,
        };
        Ok(Self {
            space: Space::new(data_dir, min_free_bytes),
            path,
            writer,
            readers: crate::pool::Pool::new(READERS, Duration::MAX),
            damaged: Mutex::new(None),
            last_write: crate::recent::LastWrite::default(),
            last_check: Mutex::new(Some(Instant::now())),
            checkpointer: Mutex::new(checkpointer),
            closed: Default::default(),
            halt,
            lock: Mutex::new(lock),
            keep_delivered: Default::default(),
        })
    }

    /// Whether a queue file exists in `data_dir`.
    pub fn exists(data_dir: &Path) -> bool {
        data_dir.join(FILE_NAME).is_file()
    }

    /// The queue file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The durability settings in force on the writer connection, as SQLite reports them.
    pub fn settings(&self) -> Result<Settings, StoreError> {
        let w = self
            .writer
            .lock()
            .map_err(|_| StoreError::Internal("queue writer lock poisoned".into()))?;
        let text = |name: &str| -> rusqlite::Result<String> {
            w.conn
                .query_row(&format!("PRAGMA {name}"), [], |r| r.get::<_, String>(0))
        };
        let int = |name: &str| -> rusqlite::Result<i64> {
            w.conn
                .query_row(&format!("PRAGMA {name}"), [], |r| r.get(0))
        };
        let read = || -> rusqlite::Result<Settings> {
            Ok(Settings {
                journal_mode: text("journal_mode")?,
                synchronous: match int("synchronous")? {
                    0 => "OFF",
                    1 => "NORMAL",
                    2 => "FULL",
                    _ => "EXTRA",
                },
                wal_autocheckpoint_pages: match int("wal_autocheckpoint")? {
                    0 => i64::from(AUTOCHECKPOINT_PAGES),
                    sqlite_own => -sqlite_own, // never: connect turns it off
                },
                background_checkpoint: self
                    .checkpointer
                    .lock()
                    .ok()
                    .and_then(|c| c.as_ref().map(|_| checkpoint::EVERY)),
                auto_vacuum: match int("auto_vacuum")? {
                    0 => "NONE",
                    1 => "FULL",
                    _ => "INCREMENTAL",
                },
                journal_size_limit: int("journal_size_limit")?,
            })
        };
        read().map_err(|e| self.fail(e))
    }

    /// A read connection: an idle one, or a new one (a file's connection does not go stale).
    fn reader(&self) -> Result<Connection, StoreError> {
        self.readers
            .get(|_| true, || connect(&self.path, false))
            .map_err(|e| self.fail(e))
    }

    /// Runs `f` on a read connection (one from the pool, or a new one).
    fn read<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, rusqlite::Error>,
    ) -> Result<T, StoreError> {
        self.open_for_use()?;
        let conn = self.reader()?;
        let out = f(&conn).map_err(|e| self.fail(e));
        self.readers.put(conn);
        out
    }

    /// Runs `f` in one write transaction (IMMEDIATE: it holds the write lock from the
    /// start, so it never has to be retried). With `grows`, the free-space rule (D30) is
    /// checked first: deliveries, which free space, run even when intake is refused.
    fn write<T, E: Into<Fault>>(
        &self,
        grows: bool,
        f: impl FnOnce(&rusqlite::Transaction<'_>, &mut u64) -> Result<T, E>,
    ) -> Result<T, StoreError> {
        let outcome = self.write_once(grows, f);
        self.last_write.note(&outcome);
        outcome
    }

    /// [`SqliteStore::write`], its outcome not yet noted.
    fn write_once<T, E: Into<Fault>>(
        &self,
        grows: bool,
        f: impl FnOnce(&rusqlite::Transaction<'_>, &mut u64) -> Result<T, E>,
    ) -> Result<T, StoreError> {
        self.open_for_use()?;
        self.halted()?;
        if grows {
            self.space.check()?;
        }
        let mut w = self
            .writer
            .lock()
            .map_err(|_| StoreError::Internal("queue writer lock poisoned".into()))?;
        let WriterConn {
            conn,
            next_version,
            reserved,
        } = &mut *w;
        let mut version = *next_version;
        let mut reserve = *reserved;
        let result = (|| -> Result<T, Fault> {
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let out = f(&tx, &mut version).map_err(Into::into)?;
            // Committed with the versions it covers, so a crash never reuses one.
            if version > reserve {
                reserve = version.saturating_add(VERSION_BLOCK);
                write::set_next_version(&tx, reserve)?;
            }
            tx.commit()?;
            Ok(out)
        })();
        match result {
            Ok(out) => {
                *next_version = version;
                *reserved = reserve;
                // A flush failed while this transaction ran: it is in the WAL, but nothing
                // after the failure is acknowledged (D40); a resend replaces it (D16).
                self.halted()?;
                Ok(out)
            }
            Err(e) => {
                // A failed commit (disk full, I/O error) may leave the transaction open.
                if !conn.is_autocommit() {
                    let _ = conn.execute_batch("ROLLBACK");
                }
                // An error may come after the commit happened (a hook's): go on from the
                // versions the file has reserved, so that none is handed out twice (D18).
                if let Ok(stored) = read::next_version(conn) {
                    *next_version = (*next_version).max(stored);
                    *reserved = (*reserved).max(stored);
                }
                Err(self.fail(e))
            }
        }
    }

    /// Refuses every call once the store is closed.
    fn open_for_use(&self) -> Result<(), StoreError> {
        match self.closed.load(std::sync::atomic::Ordering::Acquire) {
            false => Ok(()),
            true => Err(StoreError::Stopping),
        }
    }

    /// [`Store::close`]: stops the checkpoints, writes the log back into the file and closes
    /// the connections, so a stopped queue is one self-contained file. After a failed flush
    /// nothing is written back (D40): the next start recovers from the log.
    pub(super) fn close_files(&self) -> Result<(), StoreError> {
        if self.closed.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return Ok(());
        }
        let background = self.checkpointer.lock().ok().and_then(|mut c| c.take());
        if let Some(c) = background {
            c.stop();
        }
        if self.halt.reason().is_some() {
            return Ok(());
        }
        self.readers.clear();
        let mut w = self
            .writer
            .lock()
            .map_err(|_| StoreError::Internal("queue writer lock poisoned".into()))?;
        let written_back = w
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                r.get::<_, i64>(0)
            })
            .map_err(|e| self.fail(e))?;
        if written_back != 0 {
            tracing::warn!(
                "a reader kept part of the queue's log from being written back; the next start does it"
            );
        }
        // The writer's place holds a connection to nothing: the store takes no calls now.
        let blank = Connection::open_in_memory().map_err(|e| self.fail(e))?;
        let conn = std::mem::replace(&mut w.conn, blank);
        conn.close().map_err(|(_, e)| self.fail(e))?;
        // Only a closed queue is let go: the next opener finds one file, written back.
        drop(self.lock.lock().ok().and_then(|mut l| l.take()));
        Ok(())
    }

    /// Refuses every write once a flush has failed (D40).
    fn halted(&self) -> Result<(), StoreError> {
        match self.halt.reason() {
            None => Ok(()),
            Some(why) => Err(why.error(&self.path.display().to_string())),
        }
    }

    /// Turns an engine error into the product's, remembering damage and tripping the halt on
    /// a failed flush (D40).
    fn fail(&self, e: impl Into<Fault>) -> StoreError {
        let err = error_at(&self.path, e);
        if let StoreError::FlushFailed { detail, .. } = &err {
            self.halt.trip(detail);
        }
        if let StoreError::Damaged { detail, .. } = &err {
            tracing::error!(file = %self.path.display(), %detail,
                "the queue database is damaged; stop the service and run `ap-intake check-store`");
            if let Ok(mut d) = self.damaged.lock() {
                d.get_or_insert_with(|| detail.clone());
            }
        }
        err
    }

    /// The bounded integrity check, at most every [`RECHECK_EVERY`] (for `/readyz`, D29).
    fn recheck(&self) -> Result<(), StoreError> {
        let due = match self.last_check.lock() {
            Ok(mut last) if last.is_none_or(|t| t.elapsed() >= RECHECK_EVERY) => {
                *last = Some(Instant::now());
                true
            }
            _ => false,
        };
        if !due {
            return Ok(());
        }
        let mut conn = self.reader()?;
        let result = check::bounded_check(&mut conn, &self.path, check::SHORT_CHECK_BUDGET);
        self.readers.put(conn);
        if let Err(StoreError::Damaged { detail, .. }) = &result
            && let Ok(mut d) = self.damaged.lock()
        {
            d.get_or_insert_with(|| detail.clone());
        }
        result
    }

    /// The free-space rule (D30), as a write that grows would meet it.
    pub(super) fn space_check(&self) -> Result<(), StoreError> {
        self.space.check()
    }

    /// Readiness from the last write, when it was recent (`recent.rs`); a failed flush
    /// answers at once (D40).
    pub(super) fn recent_write(&self) -> Option<Result<(), StoreError>> {
        if let Err(e) = self.halted() {
            return Some(Err(e));
        }
        self.last_write.recent()
    }

    fn damage(&self) -> Option<String> {
        self.damaged.lock().ok().and_then(|d| d.clone())
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        if let Some(c) = self.checkpointer.get_mut().ok().and_then(Option::take) {
            c.stop();
        }
        if self.halt.reason().is_some() {
            // Never closed after a failed flush: the last close would checkpoint without the
            // pages the kernel dropped and remove the WAL that still holds them (D40). While
            // the writer stays open, no other connection's close is the last.
            std::mem::forget(Arc::clone(&self.writer));
        }
        // Otherwise the connections close now; the last one checkpoints and removes the WAL,
        // so a stopped queue is one self-contained file.
    }
}

/// Opens a connection with the durability settings every connection of the store shares.
fn connect(path: &Path, create: bool) -> Result<Connection, Fault> {
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // Only takes effect on a file with no tables yet, and must come before switching to WAL
    // (which writes the header); on an existing file it changes nothing.
    pragma(&conn, "auto_vacuum=INCREMENTAL")?;
    let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Fault::NoWal(mode));
    }
    pragma(&conn, "synchronous=FULL")?;
    pragma(&conn, "wal_autocheckpoint=0")?;
    pragma(&conn, &format!("journal_size_limit={WAL_SIZE_LIMIT}"))?;
    Ok(conn)
}

/// The writer's checkpoint after a commit that left `pages` in the WAL (see
/// [`AUTOCHECKPOINT_PAGES`]). It runs after the commit has happened, and an error returned
/// here is reported as the commit's: only a failed flush is (D40: it must be seen, and the
/// halt it trips refuses every later write). Anything else (the background thread holding
/// the checkpoint, a busy reader) is no failure of the commit: the next commit, or the
/// thread, checkpoints.
fn safety_net(wal: &mut rusqlite::hooks::Wal, pages: std::ffi::c_int) -> rusqlite::Result<()> {
    if pages < AUTOCHECKPOINT_PAGES {
        return Ok(());
    }
    match wal.checkpoint_v2(rusqlite::wal::CheckpointMode::PASSIVE) {
        Err(e) if is_failed_flush(&e) => Err(e),
        _ => Ok(()),
    }
}

/// Runs a pragma to the end, ignoring the rows some of them answer with.
pub(super) fn pragma(conn: &Connection, body: &str) -> Result<(), rusqlite::Error> {
    let mut stmt = conn.prepare(&format!("PRAGMA {body}"))?;
    let mut rows = stmt.query([])?;
    while rows.next()?.is_some() {}
    Ok(())
}
