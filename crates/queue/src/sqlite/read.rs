//! Reading the queue tables (schema in `mod.rs`). A row that cannot be turned back into an
//! [`Item`] is reported, not fatal: the caller quarantines it (D29).

use super::write::PLACE_BITS;
use crate::codes::{counter_kind, pending};
use crate::{Backoff, Item, QueueKey, State, Stats};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, Row, params};

/// The columns [`decode`] reads, by name.
pub(super) const COLUMNS: &str =
    "rowid, key, interface, state, version, queued_at, updated_at, attempts, last_error, xml";

/// A row that could not be read: its rowid and why.
pub(super) type Unreadable = (i64, String);

/// Why a row is not an item: the database failed, or the row itself is wrong.
enum Bad {
    Sql(rusqlite::Error),
    Row(String),
}

impl From<rusqlite::Error> for Bad {
    fn from(e: rusqlite::Error) -> Self {
        Self::Sql(e)
    }
}

/// An item row (selected with [`COLUMNS`]), or why it cannot be read.
pub(super) fn decode(row: &Row<'_>) -> rusqlite::Result<Result<(QueueKey, Item), Unreadable>> {
    let rowid: i64 = row.get("rowid")?;
    match cells(row) {
        Ok(item) => Ok(Ok(item)),
        Err(Bad::Row(reason)) => Ok(Err((rowid, reason))),
        Err(Bad::Sql(e)) => Err(e),
    }
}

fn cells(row: &Row<'_>) -> Result<(QueueKey, Item), Bad> {
    let int = |name: &str| -> Result<u64, Bad> {
        match row.get_ref(name)? {
            ValueRef::Integer(n) if n >= 0 => Ok(n as u64),
            other => Err(Bad::Row(format!("{name} is {other:?}, not a count"))),
        }
    };
    let text = |name: &str| -> Result<String, Bad> {
        match row.get_ref(name)? {
            ValueRef::Text(t) => String::from_utf8(t.to_vec())
                .map_err(|e| Bad::Row(format!("{name} is not valid UTF-8 ({e})"))),
            other => Err(Bad::Row(format!(
                "{name} is {:?}, not text",
                other.data_type()
            ))),
        }
    };
    let key = match row.get_ref("key")? {
        ValueRef::Blob(b) => QueueKey::from_bytes(b),
        other => return Err(Bad::Row(format!("key is {:?}", other.data_type()))),
    };
    let state = match row.get_ref("state")? {
        ValueRef::Integer(code) => State::from_code(code).ok_or_else(|| code.to_string()),
        other => Err(format!("{:?}", other.data_type())),
    };
    let state = state.map_err(|shown| Bad::Row(crate::codes::unknown_state(&shown)))?;
    let last_error = match row.get_ref("last_error")? {
        ValueRef::Null => None,
        _ => Some(text("last_error")?),
    };
    let item = Item {
        interface: text("interface")?,
        version: int("version")?,
        state,
        queued_at_ms: int("queued_at")?,
        updated_at_ms: int("updated_at")?,
        attempts: u32::try_from(int("attempts")?)
            .map_err(|_| Bad::Row("attempts out of range".into()))?,
        last_error,
        xml: text("xml")?,
    };
    Ok((key, item))
}

/// The next version to hand out: the meta row's, which is above every version committed
/// (reserved in blocks, `VERSION_BLOCK`). Only when that row is missing or not a number are
/// the items scanned.
pub(super) fn next_version(conn: &Connection) -> rusqlite::Result<u64> {
    let meta: Option<rusqlite::types::Value> = conn
        .query_row(
            "SELECT value FROM meta WHERE name = 'next_version'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(rusqlite::types::Value::Integer(n)) = meta
        && let Ok(n) = u64::try_from(n)
    {
        return Ok(n.max(1));
    }
    // A damaged row's version may not be a number: it does not count (it is quarantined).
    let max: Option<i64> = conn.query_row(
        "SELECT max(version) FROM item WHERE typeof(version) = 'integer'",
        [],
        |r| r.get(0),
    )?;
    Ok(u64::try_from(max.unwrap_or(0).saturating_add(1)).unwrap_or(1))
}

/// The item of one key.
pub(super) fn get(
    conn: &Connection,
    key: &QueueKey,
) -> rusqlite::Result<Option<Result<(QueueKey, Item), Unreadable>>> {
    let sql = format!("SELECT {COLUMNS} FROM item WHERE key = ?1");
    let mut stmt = conn.prepare_cached(&sql)?;
    stmt.query_row(params![key.as_bytes()], decode).optional()
}

/// The rowids of `interface`'s line (`None`: it has never had one).
fn range(conn: &Connection, interface: &str) -> rusqlite::Result<Option<(i64, i64)>> {
    let n: Option<i64> = conn
        .prepare_cached("SELECT n FROM line WHERE interface = ?1")?
        .query_row(params![interface], |r| r.get(0))
        .optional()?;
    Ok(n.map(|n| (n << PLACE_BITS, ((n + 1) << PLACE_BITS) - 1)))
}

/// Pending items of one interface, in delivery order (oldest place first), up to `limit`.
pub(super) fn line(
    conn: &Connection,
    interface: &str,
    limit: usize,
) -> rusqlite::Result<Vec<Result<(QueueKey, Item), Unreadable>>> {
    let Some((first, last)) = range(conn, interface)? else {
        return Ok(Vec::new());
    };
    let sql = format!(
        concat!(
            "SELECT {COLUMNS} FROM item WHERE rowid BETWEEN ?1 AND ?2 AND state = ",
            pending!(),
            " ORDER BY rowid LIMIT ?3"
        ),
        COLUMNS = COLUMNS
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = stmt.query_map(params![first, last, limit], decode)?;
    rows.collect()
}

/// Keys in a state, of one interface or all, in delivery order per interface.
pub(super) fn keys(
    conn: &Connection,
    state: State,
    interface: Option<&str>,
) -> rusqlite::Result<Vec<QueueKey>> {
    // Parked keys are found through their partial index (its condition said as it is
    // written there), pending ones in place order.
    let mut stmt = conn.prepare_cached(if state == State::Pending {
        "SELECT key FROM item WHERE state = ?1 AND (?2 IS NULL OR interface = ?2)
         ORDER BY interface, rowid"
    } else {
        concat!(
            "SELECT key FROM item WHERE state = ?1 AND state != ",
            pending!(),
            " AND (?2 IS NULL OR interface = ?2) ORDER BY interface, rowid"
        )
    })?;
    let rows = stmt.query_map(params![state.code(), interface], |r| {
        Ok(match r.get_ref(0)? {
            ValueRef::Blob(b) | ValueRef::Text(b) => Some(QueueKey::from_bytes(b)),
            _ => None,
        })
    })?;
    rows.filter_map(Result::transpose).collect()
}

/// Counts, oldest pending item and retry state of one interface.
pub(super) fn stats(conn: &Connection, interface: &str) -> rusqlite::Result<Stats> {
    let counts = conn
        .prepare_cached("SELECT kind, n FROM counter WHERE interface = ?1")?
        .query_map(params![interface], |r| Ok((r.get("kind")?, r.get("n")?)))?
        .collect::<rusqlite::Result<Vec<(String, i64)>>>()?;
    let oldest_pending_ms: Option<i64> = match range(conn, interface)? {
        None => None,
        Some((first, last)) => conn
            .prepare_cached(concat!(
                "SELECT queued_at FROM item WHERE rowid BETWEEN ?1 AND ?2 AND state = ",
                pending!(),
                " ORDER BY rowid LIMIT 1"
            ))?
            .query_row(params![first, last], |r| r.get(0))
            .optional()?,
    };
    let backoff = conn
        .prepare_cached(
            "SELECT failures, next_attempt_ms, last_error, last_error_ms, paused,
                    last_success_ms FROM backoff WHERE interface = ?1",
        )?
        .query_row(params![interface], |r| {
            let ms = |t: Option<i64>| t.and_then(|t| t.try_into().ok());
            Ok(Backoff {
                failures: r.get("failures")?,
                next_attempt_ms: r.get::<_, i64>("next_attempt_ms")?.try_into().unwrap_or(0),
                last_error: r.get("last_error")?,
                last_error_ms: ms(r.get("last_error_ms")?),
                paused: r.get::<_, i64>("paused")? != 0,
                last_success_ms: ms(r.get("last_success_ms")?),
            })
        })
        .optional()?
        .unwrap_or_default();
    let oldest_pending_ms = oldest_pending_ms.and_then(|t| t.try_into().ok());
    Ok(Stats::counted(&counts, oldest_pending_ms, backoff))
}

/// Every readable item, in key order.
pub(super) fn all(
    conn: &Connection,
) -> rusqlite::Result<Vec<Result<(QueueKey, Item), Unreadable>>> {
    let sql = format!("SELECT {COLUMNS} FROM item ORDER BY key");
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt.query_map([], decode)?;
    rows.collect()
}

/// What `check-store` finds beyond damaged pages: unreadable items and counters that
/// disagree with the items.
pub(super) fn audit(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut problems = Vec::new();
    let mut unreadable = 0usize;
    for row in all(conn)? {
        if let Err((rowid, reason)) = row {
            unreadable += 1;
            if unreadable <= 20 {
                problems.push(format!("item row {rowid} cannot be read: {reason}"));
            }
        }
    }
    if unreadable > 20 {
        problems.push(format!("{unreadable} item rows cannot be read in all"));
    }
    let mut stmt = conn.prepare(concat!(
        "SELECT i.interface, i.state, count(*), coalesce(c.n, 0) FROM item i
             LEFT JOIN counter c ON c.interface = i.interface AND c.kind = ",
        counter_kind!("i.state"),
        " GROUP BY i.interface, i.state"
    ))?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, i64>(2)?,
            r.get::<_, i64>(3)?,
        ))
    })?;
    for row in rows {
        let (interface, state, items, counted) = row?;
        if items != counted {
            problems.push(format!(
                "counter of {interface} state {state} says {counted}, the items are {items}"
            ));
        }
    }
    Ok(problems)
}
