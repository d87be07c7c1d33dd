//! The outcome feed (D48) in SQLite (the meaning is in `feed.rs`): each outcome a row of
//! `outcome`, appended by the transaction that changes the item; its number (`seq`, never
//! reused: AUTOINCREMENT) is its place, as the one writer commits in that order.

use crate::QueueKey;
use crate::codes::{PRUNE_SETTLED, outcome_code, outcome_state, stored_now};
use crate::feed::{self, Outcome, Position, Request};
use crate::receipt::{ReceiptLine, ReceiptState};
use rusqlite::{Connection, Row, Transaction, params};

/// Schema 3: the item's origin, and the feed. `seq` is AUTOINCREMENT so that pruning every
/// outcome never lets a number come back (a cursor past it would skip the new one).
pub(super) const SCHEMA_V3: &str = "
  ALTER TABLE item ADD COLUMN origin_request TEXT;
  ALTER TABLE item ADD COLUMN origin_client TEXT;
  ALTER TABLE item ADD COLUMN origin_index INTEGER;
  CREATE TABLE outcome (seq INTEGER PRIMARY KEY AUTOINCREMENT, client TEXT NOT NULL,
    state INTEGER NOT NULL, interface TEXT NOT NULL, request_id TEXT NOT NULL,
    idx INTEGER NOT NULL, key BLOB NOT NULL, reason TEXT, at INTEGER NOT NULL);
  CREATE INDEX outcome_feed ON outcome (client, state, seq);";

/// The request and record a version came from: what its outcomes name.
#[derive(Debug, Clone)]
pub(super) struct Origin {
    pub request_id: String,
    pub client: String,
    pub index: i64,
}

impl Origin {
    /// The origin of a record queued with a receipt line.
    pub fn of(line: Option<&ReceiptLine>) -> Option<Self> {
        line.map(|l| Self {
            request_id: l.request.request_id.clone(),
            client: l.request.api_key.clone(),
            index: i64::from(l.index),
        })
    }

    /// Read from three columns of `row` starting at `first` (`origin_request`,
    /// `origin_client`, `origin_index`); `None`
    /// for a version queued without a receipt (or a damaged row).
    pub fn read(row: &Row<'_>, first: usize) -> Option<Self> {
        Some(Self {
            request_id: row.get::<_, String>(first).ok()?,
            client: row.get::<_, String>(first + 1).ok()?,
            index: row.get::<_, i64>(first + 2).ok()?,
        })
    }

    /// Its three columns' values, NULL for none.
    pub fn columns(this: Option<&Self>) -> (Option<&str>, Option<&str>, Option<i64>) {
        match this {
            Some(o) => (Some(&o.request_id), Some(&o.client), Some(o.index)),
            None => (None, None, None),
        }
    }
}

/// Appends an outcome of the version that came from `origin`.
pub(super) fn append(
    tx: &Transaction<'_>,
    origin: &Origin,
    key: &[u8],
    interface: &str,
    state: ReceiptState,
    reason: Option<&str>,
) -> rusqlite::Result<()> {
    let Some(code) = outcome_code(state) else {
        return Ok(());
    };
    tx.prepare_cached(
        "INSERT INTO outcome (client, state, interface, request_id, idx, key, reason, at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        origin.client,
        code,
        interface,
        origin.request_id,
        origin.index,
        key,
        reason,
        stored_now()
    ])?;
    Ok(())
}

/// A page of the feed; `None` for a cursor of PostgreSQL's.
pub(super) fn page(
    conn: &Connection,
    request: &Request<'_>,
) -> rusqlite::Result<Option<feed::Page>> {
    if request.after.is_some_and(|p| p.tx.is_some()) {
        return Ok(None);
    }
    let after = request.after.map_or(0, |p| p.seq);
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let limit = i64::try_from(request.limit).unwrap_or(i64::MAX);
    // One bound for every state: each statement reads its own snapshot, and a later one
    // could list a state's outcome past another state's it did not yet see. Outcomes are
    // numbered as the one writer commits them, so every one up to the bound is in.
    let bound: i64 = conn
        .prepare_cached("SELECT coalesce(max(seq), 0) FROM outcome")?
        .query_row([], |r| r.get(0))?;
    let mut stmt = conn.prepare_cached(
        "SELECT seq, request_id, idx, key, interface, reason, at FROM outcome
         WHERE client = ?1 AND state = ?2 AND seq > ?3 AND seq <= ?6
           AND (?4 IS NULL OR interface = ?4)
         ORDER BY seq LIMIT ?5",
    )?;
    let mut read = Vec::new();
    for state in request.states {
        let Some(code) = outcome_code(*state) else {
            continue;
        };
        let rows = stmt.query_map(
            params![request.client, code, after, request.interface, limit, bound],
            |r| {
                Ok(Outcome {
                    position: Position {
                        tx: None,
                        seq: u64::try_from(r.get::<_, i64>(0)?).unwrap_or(0),
                    },
                    request_id: r.get(1)?,
                    index: u32::try_from(r.get::<_, i64>(2)?).unwrap_or(u32::MAX),
                    key: QueueKey::from_bytes(&r.get::<_, Vec<u8>>(3)?).to_string(),
                    interface: r.get(4)?,
                    state: outcome_state(code.into()).unwrap_or(*state),
                    reason: r.get(5)?,
                    at_ms: u64::try_from(r.get::<_, i64>(6)?).unwrap_or(0),
                })
            },
        )?;
        for row in rows {
            read.push(row?);
        }
    }
    Ok(Some(feed::merge(request, read, Position::default())))
}

/// Removes up to [`PRUNE_SETTLED`] outcomes older than `before` (stored ms), oldest first;
/// how many went. Outcomes are numbered as they happen, so the oldest are the lowest: those
/// before the first one still kept go, and the search for it reads no more than they are.
pub(super) fn prune_step(tx: &Transaction<'_>, before: i64) -> rusqlite::Result<usize> {
    tx.prepare_cached(
        "DELETE FROM outcome WHERE seq IN
           (SELECT seq FROM outcome WHERE seq < coalesce(
              (SELECT seq FROM outcome WHERE at >= ?1 ORDER BY seq LIMIT 1),
              9223372036854775807)
            ORDER BY seq LIMIT ?2)",
    )?
    .execute(params![before, PRUNE_SETTLED])
}
