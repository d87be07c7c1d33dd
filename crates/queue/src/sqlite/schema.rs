//! Making the queue's tables (the schema is described in `mod.rs`), and bringing an older
//! queue up to date.

use super::{APPLICATION_ID, SCHEMA_VERSION, audit, migrate, outcomes, receipts, replay};
use rusqlite::Connection;

/// The item table's columns (also made by the upgrade from schema 1).
pub(super) const ITEM_COLUMNS: &str = "(key BLOB PRIMARY KEY, interface TEXT NOT NULL,
    state INTEGER NOT NULL, version INTEGER NOT NULL, queued_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL, attempts INTEGER NOT NULL, last_error TEXT, xml TEXT NOT NULL,
    state_at INTEGER)";
/// The lines and the item table's index.
pub(super) const LINE_SCHEMA: &str = "
  CREATE TABLE line (n INTEGER PRIMARY KEY, interface TEXT NOT NULL UNIQUE);";
pub(super) const PARKED_INDEX: &str = concat!(
    "CREATE INDEX item_parked ON item (state) WHERE state != ",
    crate::codes::pending!(),
    ";"
);

pub(super) fn create(conn: &mut Connection) -> Result<(), rusqlite::Error> {
    let tx = conn.transaction()?;
    tx.execute_batch(&format!(
        "CREATE TABLE item {ITEM_COLUMNS}; {PARKED_INDEX} {LINE_SCHEMA}"
    ))?;
    tx.execute_batch(receipts::SCHEMA)?;
    tx.execute_batch(outcomes::SCHEMA_V3)?;
    tx.execute_batch(audit::SCHEMA_V3)?;
    tx.execute_batch(replay::SCHEMA_V3)?;
    tx.execute_batch(&format!(
        "CREATE TABLE counter (interface TEXT, kind TEXT, n INTEGER NOT NULL,
           PRIMARY KEY (interface, kind)) WITHOUT ROWID;
         CREATE TABLE backoff (interface TEXT PRIMARY KEY, failures INTEGER NOT NULL,
           next_attempt_ms INTEGER NOT NULL, last_error TEXT, last_error_ms INTEGER,
           paused INTEGER NOT NULL DEFAULT 0, last_success_ms INTEGER) WITHOUT ROWID;
         CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
         INSERT INTO meta VALUES ('next_version', 1);
         PRAGMA application_id={APPLICATION_ID};
         PRAGMA user_version={SCHEMA_VERSION};"
    ))?;
    tx.commit()
}

/// Whether the file holds no table and no header of ours: a database never written.
pub(super) fn is_blank(conn: &Connection) -> Result<bool, rusqlite::Error> {
    let tables: i64 = conn.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))?;
    let id: i64 = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
    Ok(tables == 0 && id == 0)
}

/// Brings a queue of schema 1 to schema 2 (migrate.rs), gives one made before receipts
/// were pruned oldest first its index on their age (an index older versions read past),
/// and brings schema 2 to 3: the items' origins and the outcome feed (D48), in one
/// transaction.
pub(super) fn upgrade(conn: &mut Connection) -> Result<(), rusqlite::Error> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version == 1 {
        migrate::from_v1(conn)?;
    }
    conn.execute_batch("CREATE INDEX IF NOT EXISTS receipt_age ON receipt (received_at)")?;
    if version < SCHEMA_VERSION {
        let tx = conn.transaction()?;
        tx.execute_batch(outcomes::SCHEMA_V3)?;
        tx.execute_batch(audit::SCHEMA_V3)?;
        tx.execute_batch(replay::SCHEMA_V3)?;
        tx.execute_batch(&format!("PRAGMA user_version={SCHEMA_VERSION};"))?;
        tx.commit()?;
    }
    Ok(())
}
