//! Receipts (D38) in SQLite: written with the records they describe, in the same
//! transaction; a record's state is read from the item that holds its key, or from the
//! `settled` row its version left behind when it was delivered or dropped.

use super::read::state_code;
use crate::queue::receipt::{Receipt, ReceiptLine, ReceiptRecord, ReceiptState, RequestInfo};
use crate::queue::{QueueKey, State};
use rusqlite::{CachedStatement, Connection, OptionalExtension, Transaction, params};
use std::collections::HashMap;
use std::sync::Arc;

/// The tables, created on open when absent (a queue from before receipts gains them).
pub(super) const SCHEMA: &str = "
  CREATE TABLE IF NOT EXISTS receipt (rid INTEGER PRIMARY KEY, request_id TEXT NOT NULL,
    api_key TEXT NOT NULL, nonce INTEGER NOT NULL, interface TEXT NOT NULL,
    received_at INTEGER NOT NULL);
  CREATE UNIQUE INDEX IF NOT EXISTS receipt_id ON receipt (request_id, api_key);
  CREATE INDEX IF NOT EXISTS receipt_age ON receipt (received_at);
  CREATE TABLE IF NOT EXISTS receipt_line (rid INTEGER NOT NULL, idx INTEGER NOT NULL,
    key BLOB NOT NULL, version INTEGER NOT NULL, PRIMARY KEY (rid, idx)) WITHOUT ROWID;
  CREATE TABLE IF NOT EXISTS settled (key BLOB NOT NULL, version INTEGER NOT NULL,
    state INTEGER NOT NULL, at INTEGER NOT NULL, reason TEXT,
    PRIMARY KEY (key, version)) WITHOUT ROWID;
  CREATE INDEX IF NOT EXISTS settled_age ON settled (at);";

/// `settled.state` of a delivered version; dropped ones keep the code of the state they were
/// dropped from (rejected, quarantined).
const DELIVERED: i64 = 3;

/// Receipt heads written in one transaction, by request, and the statement that adds their
/// lines (prepared once per transaction, not per record).
pub(super) struct Heads<'tx> {
    rids: HashMap<*const RequestInfo, i64>,
    insert: CachedStatement<'tx>,
}

impl<'tx> Heads<'tx> {
    pub fn new(tx: &'tx Transaction<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            rids: HashMap::new(),
            insert: tx
                .prepare_cached("INSERT OR REPLACE INTO receipt_line VALUES (?1, ?2, ?3, ?4)")?,
        })
    }

    /// Adds the line of a record stored at `version` to its request's receipt.
    pub fn line(
        &mut self,
        tx: &Transaction<'_>,
        line: &ReceiptLine,
        key: &QueueKey,
        version: i64,
    ) -> rusqlite::Result<()> {
        let ptr = Arc::as_ptr(&line.request);
        let rid = match self.rids.get(&ptr) {
            Some(rid) => *rid,
            None => {
                let rid = head(tx, &line.request)?;
                self.rids.insert(ptr, rid);
                rid
            }
        };
        self.insert
            .execute(params![rid, line.index, key.as_bytes(), version])?;
        Ok(())
    }
}

/// The receipt row of a request: the one an earlier part of it wrote, or a new one that
/// replaces an older request's with the same id and key.
fn head(tx: &Transaction<'_>, info: &RequestInfo) -> rusqlite::Result<i64> {
    let nonce = info.nonce as i64;
    let found: Option<(i64, i64)> = tx
        .prepare_cached("SELECT rid, nonce FROM receipt WHERE request_id = ?1 AND api_key = ?2")?
        .query_row(params![info.request_id, info.api_key], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()?;
    match found {
        Some((rid, n)) if n == nonce => return Ok(rid),
        Some((rid, _)) => forget(tx, rid)?,
        None => {}
    }
    tx.prepare_cached(
        "INSERT INTO receipt (request_id, api_key, nonce, interface, received_at)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![
        info.request_id,
        info.api_key,
        nonce,
        info.interface,
        ms(info.received_at_ms)
    ])?;
    Ok(tx.last_insert_rowid())
}

fn forget(tx: &Transaction<'_>, rid: i64) -> rusqlite::Result<()> {
    tx.prepare_cached("DELETE FROM receipt_line WHERE rid = ?1")?
        .execute(params![rid])?;
    tx.prepare_cached("DELETE FROM receipt WHERE rid = ?1")?
        .execute(params![rid])?;
    Ok(())
}

fn ms(t: u64) -> i64 {
    i64::try_from(t).unwrap_or(i64::MAX)
}

/// Notes that `version` of `key` left the queue: delivered, or dropped from `state`.
pub(super) fn settle(
    tx: &Transaction<'_>,
    key: &[u8],
    version: i64,
    dropped_from: Option<State>,
    reason: Option<&str>,
) -> rusqlite::Result<()> {
    let state = dropped_from.map_or(DELIVERED, state_code);
    tx.prepare_cached("INSERT OR REPLACE INTO settled VALUES (?1, ?2, ?3, ?4, ?5)")?
        .execute(params![
            key,
            version,
            state,
            ms(crate::queue::now_ms()),
            reason
        ])?;
    Ok(())
}

/// The receipts of `request_id` (one per key that used the id), or only `api_key`'s.
pub(super) fn receipts(
    conn: &Connection,
    request_id: &str,
    api_key: Option<&str>,
) -> rusqlite::Result<Vec<Receipt>> {
    let mut stmt = conn.prepare_cached(
        "SELECT rid, api_key, received_at, interface FROM receipt
         WHERE request_id = ?1 AND (?2 IS NULL OR api_key = ?2) ORDER BY received_at",
    )?;
    let heads: Vec<(i64, String, i64, String)> = stmt
        .query_map(params![request_id, api_key], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?
        .collect::<Result<_, _>>()?;
    heads
        .into_iter()
        .map(|(rid, api_key, received_at, interface)| {
            Ok(Receipt {
                request_id: request_id.to_string(),
                api_key,
                received_at_ms: u64::try_from(received_at).unwrap_or(0),
                interface,
                records: lines(conn, rid)?,
            })
        })
        .collect()
}

fn lines(conn: &Connection, rid: i64) -> rusqlite::Result<Vec<ReceiptRecord>> {
    let mut stmt = conn.prepare_cached(
        "SELECT l.idx, l.key, s.state, s.at, s.reason, i.version = l.version, i.state,
                coalesce(i.state_at, i.updated_at), i.last_error
         FROM receipt_line l
         LEFT JOIN settled s ON s.key = l.key AND s.version = l.version
         LEFT JOIN item i ON i.key = l.key
         WHERE l.rid = ?1 ORDER BY l.idx",
    )?;
    let rows = stmt.query_map(params![rid], |r| {
        let settled: Option<i64> = r.get(2)?;
        let current: Option<bool> = r.get(5)?;
        let at = |i| -> rusqlite::Result<Option<u64>> {
            Ok(r.get::<_, Option<i64>>(i)?
                .and_then(|t| u64::try_from(t).ok()))
        };
        let (state, updated_at_ms, reason) = match (settled, current) {
            (Some(s), _) => (settled_state(s), at(3)?, r.get(4)?),
            (None, Some(true)) => (item_state(r.get(6)?), at(7)?, r.get(8)?),
            // A later version holds the key (or left already): this one was replaced.
            (None, _) => (ReceiptState::Superseded, at(7)?, None),
        };
        let reason = match state {
            ReceiptState::Rejected | ReceiptState::Quarantined => reason,
            _ => None,
        };
        Ok(ReceiptRecord {
            index: r.get(0)?,
            key: QueueKey::from_bytes(&r.get::<_, Vec<u8>>(1)?).to_string(),
            state,
            updated_at_ms,
            reason,
        })
    })?;
    rows.collect()
}

fn settled_state(code: i64) -> ReceiptState {
    match code {
        1 => ReceiptState::Rejected,
        2 => ReceiptState::Quarantined,
        _ => ReceiptState::Delivered,
    }
}

fn item_state(code: i64) -> ReceiptState {
    match code {
        1 => ReceiptState::Rejected,
        2 => ReceiptState::Quarantined,
        _ => ReceiptState::Pending,
    }
}

/// Receipts of at most this many requests, or this many settled rows, go in one transaction:
/// pruning a busy week never holds the writer long.
const PRUNE_STEP: i64 = 50;
const SETTLED_STEP: i64 = 5000;

/// Removes one step of what is older than `before_ms`; how many rows went (0: done).
pub(super) fn prune_step(tx: &Transaction<'_>, before_ms: u64) -> rusqlite::Result<usize> {
    let before = ms(before_ms);
    let rids: Vec<i64> = tx
        .prepare_cached("SELECT rid FROM receipt WHERE received_at < ?1 LIMIT ?2")?
        .query_map(params![before, PRUNE_STEP], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    for rid in &rids {
        forget(tx, *rid)?;
    }
    let settled = tx
        .prepare_cached(
            "DELETE FROM settled WHERE (key, version) IN
               (SELECT key, version FROM settled WHERE at < ?1 LIMIT ?2)",
        )?
        .execute(params![before, SETTLED_STEP])?;
    Ok(rids.len() + settled)
}
