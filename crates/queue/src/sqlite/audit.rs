//! The audit trail (D50) in SQLite: a row per record, numbered as written.

use crate::audit::{AuditRecord, PRUNE_STEP};
use crate::codes::stored_ms;
use rusqlite::{Connection, Transaction, params};

/// Schema 3's audit table.
pub(super) const SCHEMA_V3: &str = "
  CREATE TABLE audit (n INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,
    at INTEGER NOT NULL, actor TEXT NOT NULL, uid INTEGER, action TEXT NOT NULL,
    args TEXT NOT NULL, changed TEXT NOT NULL);";

/// Adds `record`, once.
pub(super) fn add(tx: &Transaction<'_>, r: &AuditRecord) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO audit (id, at, actor, uid, action, args, changed)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (id) DO NOTHING",
    )?
    .execute(params![
        r.id,
        stored_ms(r.at_ms),
        r.actor,
        r.uid,
        r.action,
        r.args,
        r.changed
    ])?;
    Ok(())
}

/// The records from `since` (unix ms) on, in the order written.
pub(super) fn trail(
    conn: &Connection,
    since: u64,
    limit: usize,
) -> rusqlite::Result<Vec<AuditRecord>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, at, actor, uid, action, args, changed FROM audit WHERE at >= ?1
         ORDER BY n LIMIT ?2",
    )?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = stmt.query_map(params![stored_ms(since), limit], |r| {
        Ok(AuditRecord {
            id: r.get(0)?,
            at_ms: u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
            actor: r.get(2)?,
            uid: r.get(3)?,
            action: r.get(4)?,
            args: r.get(5)?,
            changed: r.get(6)?,
        })
    })?;
    rows.collect()
}

/// Removes up to [`PRUNE_STEP`] records made before `before` (unix ms), oldest first.
pub(super) fn prune_step(tx: &Transaction<'_>, before: u64) -> rusqlite::Result<usize> {
    tx.prepare_cached(
        "DELETE FROM audit WHERE n IN
           (SELECT n FROM audit WHERE at < ?1 ORDER BY n LIMIT ?2)",
    )?
    .execute(params![stored_ms(before), PRUNE_STEP])
}
