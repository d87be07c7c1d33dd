//! Backup and restore of the embedded queue (D45). A backup is `VACUUM INTO` on a reader of
//! the live file: one read transaction, so the copy is the queue as of one commit, receipts
//! included, while the service goes on storing (a reader never holds up SQLite's writer in
//! WAL mode). The copy is one self-contained file (rollback journal, no WAL beside it),
//! written under a temporary name, flushed, and only then given its name. A restore checks
//! the copy, keeps the queue it replaces under a dated name, and puts the copy in place.

use super::{FILE_NAME, check, connect, error_at, lock};
use crate::StoreError;
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use std::path::{Path, PathBuf};

/// What a copy holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Contents {
    /// Items waiting for delivery.
    pub pending: u64,
    /// Items the platform refused.
    pub rejected: u64,
    /// Items that could not be read back (D29).
    pub quarantined: u64,
    /// Requests with a receipt (D38).
    pub receipts: u64,
    /// When the copy was made (unix ms); `None` for a file `backup` did not write.
    pub made_at_ms: Option<u64>,
}

/// What a restore did.
#[derive(Debug, Clone)]
pub struct Restored {
    /// What the restored queue holds.
    pub contents: Contents,
    /// Where the queue it replaced is kept (never deleted); `None` when there was none.
    pub kept: Option<PathBuf>,
}

/// SQLite instructions between looks at the copy's growth.
const PROGRESS_OPS: std::ffi::c_int = 100_000;

/// The copy is flushed each time it has grown by this much. `VACUUM INTO` writes its copy
/// without flushing it, and left alone the whole copy would be flushed at the end, at once:
/// the service's next commit, whose fsync the filesystem orders behind it, waited 1.1 s
/// with a 636 MiB copy (BENCHMARKS.md, "Backup under load"). Small steps keep every commit
/// meanwhile to about one step's flush.
const FLUSH_EVERY: u64 = 2 << 20;

/// Flushes the copy as it grows (see [`FLUSH_EVERY`]).
struct Flush {
    path: PathBuf,
    file: Option<std::fs::File>,
    flushed: u64,
}

impl Flush {
    fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            file: None,
            flushed: 0,
        }
    }

    /// One look from SQLite's progress handler; never interrupts (false). A flush that
    /// fails here is not fatal: the copy is flushed whole, and checked, at the end.
    fn step(&mut self) -> bool {
        if self.file.is_none() {
            self.file = std::fs::File::open(&self.path).ok();
        }
        if let Some(f) = &self.file {
            let size = f.metadata().map_or(0, |m| m.len());
            if size >= self.flushed + FLUSH_EVERY {
                let _ = f.sync_data();
                self.flushed = size;
            }
        }
        false
    }
}

/// The meta row a backup writes into its copy: when it was made.
const MADE_AT: &str = "backup_made_at";

/// Copies the queue in `data_dir` to `to`, which must not exist, as of one commit.
pub fn backup(data_dir: &Path, to: &Path) -> Result<Contents, StoreError> {
    check::refuse_old_format(data_dir)?;
    let live = data_dir.join(FILE_NAME);
    if !live.is_file() {
        return Err(StoreError::Missing(live.display().to_string()));
    }
    if to.exists() {
        return Err(StoreError::Exists(to.display().to_string()));
    }
    let partial = with_suffix(to, ".partial");
    for end in ["", "-journal"] {
        // Left by a backup that was cut off.
        let _ = std::fs::remove_file(with_suffix(&partial, end));
    }
    let made = (|| -> Result<Contents, StoreError> {
        let mut conn = connect(&live, false).map_err(|e| error_at(&live, e))?;
        let mut flush = Flush::new(&partial);
        conn.progress_handler(PROGRESS_OPS, Some(move || flush.step()))
            .map_err(|e| error_at(&live, e))?;
        let target = partial.to_string_lossy().into_owned();
        conn.execute("VACUUM INTO ?1", [&target])
            .map_err(|e| error_at(to, e))?;
        drop(conn);
        let copy = Connection::open_with_flags(&partial, OpenFlags::SQLITE_OPEN_READ_WRITE)
            .map_err(|e| error_at(&partial, e))?;
        let sealed = (|| {
            copy.query_row("PRAGMA journal_mode=DELETE", [], |_| Ok(()))?;
            copy.execute(
                "INSERT OR REPLACE INTO meta (name, value) VALUES (?1, ?2)",
                rusqlite::params![MADE_AT, crate::codes::stored_now()],
            )?;
            contents(&copy)
        })();
        let contents = sealed.map_err(|e| error_at(&partial, e))?;
        copy.close().map_err(|(_, e)| error_at(&partial, e))?;
        std::fs::File::open(&partial)?.sync_all()?;
        std::fs::rename(&partial, to)?;
        sync_dir(to)?;
        Ok(contents)
    })();
    if made.is_err() {
        // The copy's own journal goes too: nothing of a failed copy is left behind.
        for end in ["", "-journal", "-wal", "-shm"] {
            let _ = std::fs::remove_file(with_suffix(&partial, end));
        }
    }
    made
}

/// Puts the copy `from` in place of the queue in `data_dir`, after checking it; the queue it
/// replaces is kept beside it, named with `stamp` (a UTC time). The service must be stopped:
/// its lock on the data directory refuses the restore otherwise ([`StoreError::Busy`]).
pub fn restore(data_dir: &Path, from: &Path, stamp: &str) -> Result<Restored, StoreError> {
    check::refuse_old_format(data_dir)?;
    let problems = verify_copy(from)?;
    if !problems.is_empty() {
        return Err(StoreError::Damaged {
            path: from.display().to_string(),
            detail: problems.join("; "),
        });
    }
    let contents = {
        let copy = read_only(from)?;
        contents(&copy).map_err(|e| error_at(from, e))?
    };
    std::fs::create_dir_all(data_dir)?;
    let _lock = lock::take(data_dir)?;
    let live = data_dir.join(FILE_NAME);
    let kept = match live.exists() {
        false => None,
        true => {
            let kept = data_dir.join(format!("{FILE_NAME}.replaced-{stamp}"));
            // The log and its index go along under the kept name, so it opens as it was.
            for end in ["-wal", "-shm"] {
                let (file, aside) = (with_suffix(&live, end), with_suffix(&kept, end));
                if file.exists() {
                    std::fs::rename(&file, &aside)?;
                }
            }
            std::fs::rename(&live, &kept)?;
            Some(kept)
        }
    };
    let partial = with_suffix(&live, ".partial");
    std::fs::copy(from, &partial)?;
    std::fs::File::open(&partial)?.sync_all()?;
    std::fs::rename(&partial, &live)?;
    sync_dir(&live)?;
    Ok(Restored { contents, kept })
}

/// `check-store --file`: a copy `backup` made (or any queue file nothing else uses), read
/// whole as `check-store` reads the data directory's, without changing it.
pub fn verify_copy(file: &Path) -> Result<Vec<String>, StoreError> {
    if !file.is_file() {
        return Err(StoreError::Missing(file.display().to_string()));
    }
    let conn = read_only(file)?;
    check::verify_open(&conn, file)
}

/// What a copy holds.
pub fn describe_copy(file: &Path) -> Result<Contents, StoreError> {
    let conn = read_only(file)?;
    contents(&conn).map_err(|e| error_at(file, e))
}

fn read_only(file: &Path) -> Result<Connection, StoreError> {
    Connection::open_with_flags(
        file,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| error_at(file, e))
}

fn contents(conn: &Connection) -> rusqlite::Result<Contents> {
    let count = |state: crate::State| -> rusqlite::Result<u64> {
        conn.query_row(
            "SELECT count(*) FROM item WHERE state = ?1",
            [state.code()],
            |r| r.get::<_, i64>(0),
        )
        .map(|n| u64::try_from(n).unwrap_or(0))
    };
    let receipts: i64 = conn.query_row("SELECT count(*) FROM receipt", [], |r| r.get(0))?;
    let made_at: Option<i64> = conn
        .query_row("SELECT value FROM meta WHERE name = ?1", [MADE_AT], |r| {
            r.get(0)
        })
        .optional()?;
    Ok(Contents {
        pending: count(crate::State::Pending)?,
        rejected: count(crate::State::Rejected)?,
        quarantined: count(crate::State::Quarantined)?,
        receipts: u64::try_from(receipts).unwrap_or(0),
        made_at_ms: made_at.and_then(|t| u64::try_from(t).ok()),
    })
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Flushes the directory holding `file`, so its new name survives a power cut.
fn sync_dir(file: &Path) -> std::io::Result<()> {
    match file.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(dir) => std::fs::File::open(dir)?.sync_all(),
        None => std::fs::File::open(".")?.sync_all(),
    }
}
