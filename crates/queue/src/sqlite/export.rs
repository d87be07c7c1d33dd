//! The embedded queue read whole for `move-to-postgres` (D45), and the mark it gets once
//! moved. Both hold the data directory's lock: the service must be stopped.

use super::{FILE_NAME, check, connect, error_at, lock, receipts};
use crate::carried::{Export, Exported, ExportedReceipt, ExportedSettled};
use crate::{Backoff, StoreError};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use std::path::Path;

/// The meta row of a moved queue: when it was moved (unix ms).
const MOVED_AT: &str = "moved_to_postgres";

/// Everything in the queue of `data_dir` and when it was moved before, with the lock held
/// until the caller is done; `None` without a queue.
pub(crate) fn read(
    data_dir: &Path,
) -> Result<Option<(Export, Option<u64>, std::fs::File)>, StoreError> {
    check::refuse_old_format(data_dir)?;
    let path = data_dir.join(FILE_NAME);
    if !path.is_file() {
        return Ok(None);
    }
    let lock = lock::take(data_dir)?;
    super::wal::write_back(&path)?;
    let conn = connect(&path, false).map_err(|e| error_at(&path, e))?;
    let problems = check::verify_open(&conn, &path)?;
    if !problems.is_empty() {
        return Err(StoreError::Damaged {
            path: path.display().to_string(),
            detail: problems.join("; "),
        });
    }
    let moved = moved_at(&conn).map_err(|e| error_at(&path, e))?;
    let export = everything(&conn).map_err(|e| error_at(&path, e))?;
    Ok(Some((export, moved, lock)))
}

/// Marks the queue of `data_dir` as moved at `at_ms`; nothing else in it changes.
pub(crate) fn mark_moved(data_dir: &Path, at_ms: u64) -> Result<(), StoreError> {
    let path = data_dir.join(FILE_NAME);
    let conn = connect(&path, false).map_err(|e| error_at(&path, e))?;
    conn.execute(
        "INSERT OR REPLACE INTO meta (name, value) VALUES (?1, ?2)",
        params![MOVED_AT, i64::try_from(at_ms).unwrap_or(i64::MAX)],
    )
    .map_err(|e| error_at(&path, e))?;
    Ok(())
}

/// Undelivered items of a queue never moved; 0 without a queue.
pub(crate) fn left_behind(data_dir: &Path) -> Result<u64, StoreError> {
    let path = data_dir.join(FILE_NAME);
    if !path.is_file() {
        return Ok(0);
    }
    // Read-only: a service about to run on PostgreSQL changes nothing here.
    let conn = Connection::open_with_flags(
        &path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| error_at(&path, e))?;
    let count = || -> rusqlite::Result<u64> {
        if moved_at(&conn)?.is_some() {
            return Ok(0);
        }
        let n: i64 = conn.query_row("SELECT count(*) FROM item", [], |r| r.get(0))?;
        Ok(u64::try_from(n).unwrap_or(0))
    };
    count().map_err(|e| error_at(&path, e))
}

fn moved_at(conn: &Connection) -> rusqlite::Result<Option<u64>> {
    let at: Option<i64> = conn
        .query_row("SELECT value FROM meta WHERE name = ?1", [MOVED_AT], |r| {
            r.get(0)
        })
        .optional()?;
    Ok(at.and_then(|t| u64::try_from(t).ok()))
}

fn everything(conn: &Connection) -> rusqlite::Result<Export> {
    // The table's order is each interface's line (the rowid is the place, mod.rs).
    let items = conn
        .prepare(
            "SELECT key, interface, state, version, queued_at, updated_at, attempts, last_error,
                    xml, state_at, origin_request, origin_client, origin_index
             FROM item ORDER BY rowid",
        )?
        .query_map([], |r| {
            Ok(Exported {
                key: r.get(0)?,
                interface: r.get(1)?,
                state: r.get(2)?,
                version: r.get(3)?,
                queued_at: r.get(4)?,
                updated_at: r.get(5)?,
                attempts: r.get(6)?,
                last_error: r.get(7)?,
                xml: r.get(8)?,
                state_at: r.get(9)?,
                origin: match (r.get(10)?, r.get(11)?, r.get(12)?) {
                    (Some(request), Some(client), Some(index)) => Some((request, client, index)),
                    _ => None,
                },
            })
        })?
        .collect::<Result<_, _>>()?;
    let backoffs = conn
        .prepare(
            "SELECT interface, failures, next_attempt_ms, last_error, last_error_ms, paused,
                    last_success_ms FROM backoff",
        )?
        .query_map([], |r| {
            let ms = |i| -> rusqlite::Result<Option<u64>> {
                Ok(r.get::<_, Option<i64>>(i)?
                    .and_then(|t| u64::try_from(t).ok()))
            };
            Ok((
                r.get(0)?,
                Backoff {
                    failures: r.get(1)?,
                    next_attempt_ms: ms(2)?.unwrap_or(0),
                    last_error: r.get(3)?,
                    last_error_ms: ms(4)?,
                    paused: r.get(5)?,
                    last_success_ms: ms(6)?,
                },
            ))
        })?
        .collect::<Result<_, _>>()?;
    let heads: Vec<(i64, String, String, i64, String, i64)> = conn
        .prepare(
            "SELECT rid, request_id, api_key, nonce, interface, received_at FROM receipt
             ORDER BY rid",
        )?
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })?
        .collect::<Result<_, _>>()?;
    let mut receipts = Vec::with_capacity(heads.len());
    for (rid, request_id, api_key, nonce, interface, received_at) in heads {
        let lines = receipts::stored_lines(conn, rid)?
            .into_iter()
            .map(|l| (i32::try_from(l.index).unwrap_or(i32::MAX), l.key, l.version))
            .collect();
        receipts.push(ExportedReceipt {
            request_id,
            api_key,
            nonce,
            interface,
            received_at,
            lines,
        });
    }
    let settled = conn
        .prepare("SELECT key, version, state, at, reason FROM settled")?
        .query_map([], |r| {
            Ok(ExportedSettled {
                key: r.get(0)?,
                version: r.get(1)?,
                state: r.get(2)?,
                at: r.get(3)?,
                reason: r.get(4)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    let audit = super::audit::trail(conn, 0, usize::MAX)?;
    Ok(Export {
        audit,
        items,
        backoffs,
        receipts,
        settled,
    })
}
