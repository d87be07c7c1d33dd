//! Receipts (D38) in SQLite: written with the records they describe, in the same
//! transaction, a request's lines as one blob; a record's state is read from the item that
//! holds its key, or from the `settled` row its version left behind when it was delivered or
//! dropped.

use crate::codes::{
    LineFacts, PRUNE_REQUESTS, PRUNE_SETTLED, SETTLED_DELIVERED, receipt_line, stored_ms as ms,
    stored_now,
};
use crate::receipt::{Receipt, ReceiptLine, ReceiptRecord, RequestInfo};
use crate::{QueueKey, State};
use rusqlite::{Connection, OptionalExtension, Transaction, params};
use std::sync::Arc;

/// The tables (schema 2; migrate.rs brings schema 1's `receipt_line` rows into blobs).
pub(super) const SCHEMA: &str = "
  CREATE TABLE receipt (rid INTEGER PRIMARY KEY, request_id TEXT NOT NULL,
    api_key TEXT NOT NULL, nonce INTEGER NOT NULL, interface TEXT NOT NULL,
    received_at INTEGER NOT NULL, lines BLOB NOT NULL);
  CREATE UNIQUE INDEX receipt_id ON receipt (request_id, api_key);
  CREATE INDEX receipt_age ON receipt (received_at);
  CREATE TABLE receipt_more (rid INTEGER NOT NULL, first INTEGER NOT NULL,
    lines BLOB NOT NULL, PRIMARY KEY (rid, first)) WITHOUT ROWID;
  CREATE TABLE settled (key BLOB NOT NULL, version INTEGER NOT NULL,
    state INTEGER NOT NULL, at INTEGER NOT NULL, reason TEXT,
    PRIMARY KEY (key, version)) WITHOUT ROWID;
  CREATE INDEX settled_age ON settled (at);";

/// One line of a receipt as stored: the record's index, its version, its key.
pub(super) struct Line {
    pub index: u32,
    pub version: i64,
    pub key: Vec<u8>,
}

/// Appends a line to a blob of lines: index (u32), version (i64), key length (u32), all
/// little-endian, then the key.
pub(super) fn encode(out: &mut Vec<u8>, index: u32, version: i64, key: &[u8]) {
    out.extend_from_slice(&index.to_le_bytes());
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&u32::try_from(key.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(key);
}

/// The lines of a blob; a damaged tail ends the list.
fn decode(mut blob: &[u8], out: &mut Vec<Line>) {
    fn take<const N: usize>(b: &mut &[u8]) -> Option<[u8; N]> {
        let (head, rest) = b.split_first_chunk::<N>()?;
        *b = rest;
        Some(*head)
    }
    while !blob.is_empty() {
        let (Some(index), Some(version), Some(len)) = (
            take::<4>(&mut blob),
            take::<8>(&mut blob),
            take::<4>(&mut blob),
        ) else {
            return;
        };
        let len = u32::from_le_bytes(len) as usize;
        let Some((key, rest)) = blob.split_at_checked(len) else {
            return;
        };
        out.push(Line {
            index: u32::from_le_bytes(index),
            version: i64::from_le_bytes(version),
            key: key.to_vec(),
        });
        blob = rest;
    }
}

/// The receipt lines of one transaction, by request, written when it ends.
#[derive(Default)]
pub(super) struct Heads {
    parts: Vec<Part>,
}

struct Part {
    request: Arc<RequestInfo>,
    /// Index of its first line.
    first: u32,
    lines: Vec<u8>,
}

impl Heads {
    /// Adds the line of a record stored at `version` to its request's receipt.
    pub fn line(&mut self, line: &ReceiptLine, key: &QueueKey, version: i64) {
        let part = match self
            .parts
            .iter()
            .position(|p| Arc::ptr_eq(&p.request, &line.request))
        {
            Some(i) => &mut self.parts[i],
            None => {
                self.parts.push(Part {
                    request: Arc::clone(&line.request),
                    first: line.index,
                    lines: Vec::with_capacity(64),
                });
                let last = self.parts.len() - 1;
                &mut self.parts[last]
            }
        };
        encode(&mut part.lines, line.index, version, key.as_bytes());
    }

    /// Writes each request's lines: with a new receipt head, or beside the head an earlier
    /// transaction of the same request wrote.
    pub fn write(self, tx: &Transaction<'_>) -> rusqlite::Result<()> {
        for part in self.parts {
            match head(tx, &part.request)? {
                Some(rid) => {
                    tx.prepare_cached("INSERT OR REPLACE INTO receipt_more VALUES (?1, ?2, ?3)")?
                        .execute(params![rid, part.first, part.lines])?;
                }
                None => {
                    let info = &part.request;
                    tx.prepare_cached(
                        "INSERT INTO receipt (request_id, api_key, nonce, interface, received_at,
                                              lines)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    )?
                    .execute(params![
                        info.request_id,
                        info.api_key,
                        info.nonce as i64,
                        info.interface,
                        ms(info.received_at_ms),
                        part.lines
                    ])?;
                }
            }
        }
        Ok(())
    }
}

/// The receipt row an earlier part of the same request wrote; an older request's with the
/// same id and key is removed (a client that reuses an id gets its latest request's receipt).
fn head(tx: &Transaction<'_>, info: &RequestInfo) -> rusqlite::Result<Option<i64>> {
    let nonce = info.nonce as i64;
    let found: Option<(i64, i64)> = tx
        .prepare_cached("SELECT rid, nonce FROM receipt WHERE request_id = ?1 AND api_key = ?2")?
        .query_row(params![info.request_id, info.api_key], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()?;
    match found {
        Some((rid, n)) if n == nonce => Ok(Some(rid)),
        Some((rid, _)) => {
            forget(tx, rid)?;
            Ok(None)
        }
        None => Ok(None),
    }
}

fn forget(tx: &Transaction<'_>, rid: i64) -> rusqlite::Result<()> {
    tx.prepare_cached("DELETE FROM receipt_more WHERE rid = ?1")?
        .execute(params![rid])?;
    tx.prepare_cached("DELETE FROM receipt WHERE rid = ?1")?
        .execute(params![rid])?;
    Ok(())
}

/// Notes that `version` of `key` left the queue: delivered, or dropped from `state`.
pub(super) fn settle(
    tx: &Transaction<'_>,
    key: &[u8],
    version: i64,
    dropped_from: Option<State>,
    reason: Option<&str>,
) -> rusqlite::Result<()> {
    let state = dropped_from.map_or(SETTLED_DELIVERED, State::code);
    tx.prepare_cached("INSERT OR REPLACE INTO settled VALUES (?1, ?2, ?3, ?4, ?5)")?
        .execute(params![key, version, state, stored_now(), reason])?;
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

/// The lines a request's receipt holds, by index; a line written twice counts once, the
/// later one.
pub(super) fn stored_lines(conn: &Connection, rid: i64) -> rusqlite::Result<Vec<Line>> {
    let mut all = Vec::new();
    let head: Vec<u8> = conn
        .prepare_cached("SELECT lines FROM receipt WHERE rid = ?1")?
        .query_row(params![rid], |r| r.get(0))?;
    decode(&head, &mut all);
    let mut more =
        conn.prepare_cached("SELECT lines FROM receipt_more WHERE rid = ?1 ORDER BY first")?;
    for blob in more.query_map(params![rid], |r| r.get::<_, Vec<u8>>(0))? {
        decode(&blob?, &mut all);
    }
    // Sorted by index; a line written twice counts once, the later one.
    all.reverse();
    all.sort_by_key(|l| l.index);
    all.dedup_by_key(|l| l.index);
    Ok(all)
}

fn lines(conn: &Connection, rid: i64) -> rusqlite::Result<Vec<ReceiptRecord>> {
    let all = stored_lines(conn, rid)?;
    let mut settled = conn
        .prepare_cached("SELECT state, at, reason FROM settled WHERE key = ?1 AND version = ?2")?;
    let mut item = conn.prepare_cached(
        "SELECT version, state, coalesce(state_at, updated_at), last_error FROM item
         WHERE key = ?1",
    )?;
    let at = |t: Option<i64>| t.and_then(|t| u64::try_from(t).ok());
    all.into_iter()
        .map(|line| {
            let settled = settled
                .query_row(params![line.key, line.version], |r| {
                    Ok((r.get(0)?, at(r.get(1)?), r.get(2)?))
                })
                .optional()?;
            let current = match settled {
                Some(_) => None,
                None => item
                    .query_row(params![line.key], |r| {
                        let version: i64 = r.get(0)?;
                        Ok((version == line.version, r.get(1)?, at(r.get(2)?), r.get(3)?))
                    })
                    .optional()?,
            };
            let (state, updated_at_ms, reason) = receipt_line(LineFacts { settled, current });
            Ok(ReceiptRecord {
                index: line.index,
                key: QueueKey::from_bytes(&line.key).to_string(),
                state,
                updated_at_ms,
                reason,
            })
        })
        .collect()
}

/// Removes one step of what is older than `before_ms`; how many rows went (0: done). Rids
/// grow with time, so the oldest receipts are the lowest rids: the step reads from the start
/// and stops at the first one still kept.
pub(super) fn prune_step(tx: &Transaction<'_>, before_ms: u64) -> rusqlite::Result<usize> {
    let before = ms(before_ms);
    let rids: Vec<i64> = tx
        .prepare_cached(
            "SELECT rid FROM receipt WHERE received_at < ?1 ORDER BY received_at, rid LIMIT ?2",
        )?
        .query_map(params![before, PRUNE_REQUESTS], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    for rid in &rids {
        forget(tx, *rid)?;
    }
    let settled = tx
        .prepare_cached(
            "DELETE FROM settled WHERE (key, version) IN
               (SELECT key, version FROM settled WHERE at < ?1 ORDER BY at LIMIT ?2)",
        )?
        .execute(params![before, PRUNE_SETTLED])?;
    Ok(rids.len() + settled)
}
