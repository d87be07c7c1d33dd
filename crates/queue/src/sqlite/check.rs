//! Integrity (D29): the bounded check at every open, the full one of `check-store`, and the
//! refusal of a data directory in the old format (D28).

use super::{APPLICATION_ID, FILE_NAME, Mode, SCHEMA_VERSION, WriterConn, connect, error_at, read};
use crate::StoreError;
use crate::codes::{
    DELIVERED_KIND, counter_kind, known_states, pending, quarantined, quarantined_prefix,
    unknown_state,
};
use rusqlite::Connection;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long the check at the service's start may take. A queue of a hundred megabytes or so
/// is checked whole; of a larger one, the part read in this time, and `check-store` reads
/// the rest.
const QUICK_CHECK_BUDGET: Duration = Duration::from_millis(250);
/// The same for operator commands (`status` on a stopped service must answer at once) and
/// for `/readyz`.
pub(super) const SHORT_CHECK_BUDGET: Duration = Duration::from_millis(50);

/// Refuses a data directory holding a queue written by a version before D28 (sled).
pub(super) fn refuse_old_format(data_dir: &Path) -> Result<(), StoreError> {
    let old = data_dir.join("queue");
    if old.join("db").exists() || old.join("conf").exists() {
        return Err(StoreError::OldFormat(old.display().to_string()));
    }
    Ok(())
}

/// What a file is before SQLite reads it: refuse what is not ours with a clear word.
fn header(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let pragma = |name: &str| -> Result<i64, StoreError> {
        conn.query_row(&format!("PRAGMA {name}"), [], |r| r.get(0))
            .map_err(|e| error_at(path, e))
    };
    let (app, version) = (pragma("application_id")?, pragma("user_version")?);
    if app != APPLICATION_ID {
        return Err(StoreError::Damaged {
            path: path.display().to_string(),
            detail: format!("not an ap-intake queue (application id {app:#x})"),
        });
    }
    // Schemas 1 and 2 are upgraded when the queue is opened (schema.rs).
    if !(1..=SCHEMA_VERSION).contains(&version) {
        return Err(StoreError::NewerSchema {
            path: path.display().to_string(),
            version,
            reads: SCHEMA_VERSION,
        });
    }
    Ok(())
}

/// The check at open: the header, then `PRAGMA quick_check` for at most
/// [`QUICK_CHECK_BUDGET`]. Damage found refuses the open.
pub(super) fn quick(conn: &mut Connection, path: &Path, mode: Mode) -> Result<(), StoreError> {
    header(conn, path)?;
    let budget = match mode {
        Mode::Serve => QUICK_CHECK_BUDGET,
        Mode::Inspect => SHORT_CHECK_BUDGET,
    };
    bounded_check(conn, path, budget)
}

/// `PRAGMA quick_check` for at most `budget`: damage found is an error; running out of time
/// is not (the part read was sound).
pub(super) fn bounded_check(
    conn: &mut Connection,
    path: &Path,
    budget: Duration,
) -> Result<(), StoreError> {
    let started = Instant::now();
    if conn
        .progress_handler(10_000, Some(move || started.elapsed() > budget))
        .is_err()
    {
        // Unbounded it could keep a large queue from starting for minutes: leave it to
        // check-store.
        return Ok(());
    }
    let problems = integrity(conn, "quick_check(20)");
    let _ = conn.progress_handler(0, None::<fn() -> bool>);
    match problems {
        Ok(problems) if problems.is_empty() => Ok(()),
        Ok(problems) => Err(StoreError::Damaged {
            path: path.display().to_string(),
            detail: problems.join("; "),
        }),
        Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::OperationInterrupted) => {
            tracing::debug!(file = %path.display(), budget_ms = budget.as_millis() as u64,
                "the queue is large; the check read part of it (`ap-intake check-store` reads all)");
            Ok(())
        }
        Err(e) => Err(error_at(path, e)),
    }
}

/// The rows of an integrity pragma other than "ok", each on one line. Damage that stops the
/// pragma part-way is one more problem, after those it found; an interruption (time budget)
/// with nothing found is the error.
fn integrity(conn: &Connection, pragma: &str) -> Result<Vec<String>, rusqlite::Error> {
    let mut stmt = conn.prepare(&format!("PRAGMA {pragma}"))?;
    let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
    let mut problems = Vec::new();
    for row in rows {
        match row {
            Ok(row) if row == "ok" => {}
            Ok(row) => problems.push(row.replace('\n', "; ")),
            Err(e) if problems.is_empty() => return Err(e),
            Err(e) => {
                problems.push(e.to_string());
                break;
            }
        }
    }
    Ok(problems)
}

/// Rows whose state or interface column is damaged (not one of the states, not text): no
/// query of the delivery path finds them, so they block nothing, but `status` must show them.
const BAD_STATE: &str = concat!(
    "typeof(state) != 'integer' OR state NOT IN ",
    known_states!()
);
const BAD_INTERFACE: &str = "typeof(interface) != 'text'";

/// Shortly after the service's start (D29): rows whose state is damaged are quarantined
/// rather than left where no query finds them, and the counters are recounted when any was.
/// A damaged state is not 0, so the partial index of parked rows holds every such row and the
/// pass reads only that index (a damaged interface, version or XML of a pending row is met,
/// and quarantined, on delivery, which reads the line by place). The pass reads on `reader`,
/// so neither the start nor the writer waits for it; only the rows it found are changed on
/// `writer`, each again only while it is still a misfit.
pub(super) fn sweep(
    reader: &Connection,
    writer: &Mutex<WriterConn>,
) -> Result<(), rusqlite::Error> {
    let misfits: Vec<i64> = {
        let mut stmt = reader.prepare(&format!(
            concat!(
                "SELECT rowid FROM item INDEXED BY item_parked WHERE state != ",
                pending!(),
                " AND ({bad_state} OR {bad_interface})"
            ),
            bad_state = BAD_STATE,
            bad_interface = BAD_INTERFACE
        ))?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        rows.collect::<Result<_, _>>()?
    };
    if misfits.is_empty() {
        return Ok(());
    }
    let Ok(mut writer) = writer.lock() else {
        return Ok(());
    };
    let tx = writer.conn.transaction()?;
    let mut n = 0;
    for rowid in &misfits {
        n += tx.execute(
            &format!(
                concat!(
                    "UPDATE item SET state = ",
                    quarantined!(),
                    ", last_error = ?2 || CASE
                       WHEN {bad_state} THEN ?3 || quote(state)
                       ELSE 'interface is not text: ' || quote(interface) END
                     WHERE rowid = ?1 AND ({bad_state} OR {bad_interface})"
                ),
                bad_state = BAD_STATE,
                bad_interface = BAD_INTERFACE
            ),
            rusqlite::params![rowid, quarantined_prefix!(), unknown_state("")],
        )?;
    }
    if n > 0 {
        tracing::warn!(
            items = n,
            "queued items this version cannot deliver were quarantined (see `ap-intake status`)"
        );
        tx.execute("DELETE FROM counter WHERE kind != ?1", [DELIVERED_KIND])?;
        tx.execute(
            concat!(
                "INSERT INTO counter (interface, kind, n) SELECT CAST(interface AS TEXT), ",
                counter_kind!("state"),
                " AS kind, count(*) FROM item GROUP BY 1, 2 HAVING kind IS NOT NULL"
            ),
            [],
        )?;
    }
    tx.commit()
}

/// `check-store` (D29): reads the whole queue in `data_dir` (the service stopped) and lists
/// what is damaged: pages (`PRAGMA integrity_check`), items that cannot be read, counters
/// that disagree with the items. Empty: sound. `Err`: the file cannot be read at all.
pub fn verify_file(data_dir: &Path) -> Result<Vec<String>, StoreError> {
    refuse_old_format(data_dir)?;
    let path = data_dir.join(FILE_NAME);
    if !path.is_file() {
        return Err(StoreError::Missing(path.display().to_string()));
    }
    // Held for the check: a service starting meanwhile waits for it to end.
    let _lock = super::lock::take(data_dir)?;
    super::wal::write_back(&path)?;
    // Read-write so that a WAL left by a crash is recovered, as the service would.
    let conn = connect(&path, false).map_err(|e| error_at(&path, e))?;
    verify_open(&conn, &path)
}

/// The whole check of an open queue file at `path`: what `check-store` lists.
pub(super) fn verify_open(conn: &Connection, path: &Path) -> Result<Vec<String>, StoreError> {
    header(conn, path)?;
    let mut problems = integrity(conn, "integrity_check(100)").map_err(|e| error_at(path, e))?;
    if problems.is_empty() {
        problems.extend(read::audit(conn).map_err(|e| error_at(path, e))?);
    }
    Ok(problems)
}
