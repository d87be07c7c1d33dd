//! The upgrade of a queue of schema 1 to schema 2, once, in one transaction, when the queue is
//! opened. Schema 1 kept a key's place in an index of its own (`item_line`: interface, state,
//! queued time, sequence) and a receipt's lines a row each; schema 2 keeps the place in the
//! rowid and a request's lines in one blob (the block comment of mod.rs). Every item keeps
//! its key, state, version, times, attempts, error and XML, and its order in its line.

use super::receipts;
use super::schema::{ITEM_COLUMNS, LINE_SCHEMA, PARKED_INDEX};
use super::write::PLACE_BITS;
use rusqlite::{Connection, params};

/// Columns later builds of schema 1 added, which a queue written by an earlier one lacks.
const LATE_COLUMNS: [(&str, &str, &str); 3] = [
    ("backoff", "paused", "paused INTEGER NOT NULL DEFAULT 0"),
    ("backoff", "last_success_ms", "last_success_ms INTEGER"),
    ("item", "state_at", "state_at INTEGER"),
];

fn has(conn: &Connection, table: &str, column: Option<&str>) -> rusqlite::Result<bool> {
    match column {
        Some(c) => conn
            .prepare("SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2")?
            .exists(params![table, c]),
        None => conn
            .prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1")?
            .exists(params![table]),
    }
}

/// Upgrades the queue on `conn` from schema 1 to schema 2.
pub(super) fn from_v1(conn: &mut Connection) -> rusqlite::Result<()> {
    let items: i64 = conn.query_row("SELECT count(*) FROM item", [], |r| r.get(0))?;
    tracing::info!(items, "upgrading the queue from schema 1 to schema 2");
    let tx = conn.transaction()?;
    for (table, column, ddl) in LATE_COLUMNS {
        if !has(&tx, table, Some(column))? {
            tx.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {ddl}"))?;
        }
    }
    // The lines, numbered in the order of their interface ids; each item placed in its line in
    // the order of schema 1's index. Row numbers stay below every version handed out, so
    // records queued after the upgrade take their places after these.
    tx.execute_batch(&format!(
        "{LINE_SCHEMA}
         INSERT INTO line (interface)
           SELECT DISTINCT CAST(interface AS TEXT) FROM item ORDER BY 1;
         CREATE TABLE item_v2 {ITEM_COLUMNS};
         INSERT INTO item_v2 (rowid, key, interface, state, version, queued_at, updated_at,
                              attempts, last_error, xml, state_at)
           SELECT ((SELECT n FROM line WHERE line.interface = CAST(i.interface AS TEXT))
                     << {PLACE_BITS})
                  | row_number() OVER (PARTITION BY CAST(i.interface AS TEXT)
                                       ORDER BY i.queued_at, i.seq, i.rowid),
                  key, interface, state, version, queued_at, updated_at, attempts,
                  last_error, xml, state_at
           FROM item i;
         DROP TABLE item;
         ALTER TABLE item_v2 RENAME TO item;
         {PARKED_INDEX}"
    ))?;
    if has(&tx, "receipt_line", None)? {
        receipt_lines(&tx)?;
    } else {
        tx.execute_batch(receipts::SCHEMA)?;
    }
    // Schema 2; schema.rs goes on from there.
    tx.execute_batch("PRAGMA user_version = 2")?;
    tx.commit()
}

/// Schema 1's receipt lines, a row each, into one blob per receipt.
fn receipt_lines(tx: &Connection) -> rusqlite::Result<()> {
    tx.execute_batch(
        "ALTER TABLE receipt ADD COLUMN lines BLOB NOT NULL DEFAULT x'';
         CREATE TABLE receipt_more (rid INTEGER NOT NULL, first INTEGER NOT NULL,
           lines BLOB NOT NULL, PRIMARY KEY (rid, first)) WITHOUT ROWID;
         DROP INDEX IF EXISTS receipt_age;",
    )?;
    let mut update = tx.prepare("UPDATE receipt SET lines = ?2 WHERE rid = ?1")?;
    let mut read =
        tx.prepare("SELECT rid, idx, key, version FROM receipt_line ORDER BY rid, idx")?;
    let mut rows = read.query([])?;
    let mut current: Option<(i64, Vec<u8>)> = None;
    while let Some(row) = rows.next()? {
        let (rid, idx, key, version): (i64, i64, Vec<u8>, i64) =
            (row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?);
        if current.as_ref().is_some_and(|(r, _)| *r != rid)
            && let Some((r, blob)) = current.take()
        {
            update.execute(params![r, blob])?;
        }
        let blob = &mut current.get_or_insert_with(|| (rid, Vec::new())).1;
        receipts::encode(blob, u32::try_from(idx).unwrap_or(u32::MAX), version, &key);
    }
    if let Some((r, blob)) = current {
        update.execute(params![r, blob])?;
    }
    drop(rows);
    tx.execute_batch("DROP TABLE receipt_line;")
}

#[cfg(test)]
mod tests {
    use super::super::{Mode, SqliteStore};
    use crate::{QueueKey, State, Store};
    use rusqlite::Connection;

    /// A queue as schema 1 wrote it (the receipts of its later builds included).
    const SCHEMA_1: &str = "
      CREATE TABLE item (key BLOB PRIMARY KEY, interface TEXT NOT NULL,
        state INTEGER NOT NULL, version INTEGER NOT NULL, queued_at INTEGER NOT NULL,
        seq INTEGER NOT NULL, updated_at INTEGER NOT NULL, attempts INTEGER NOT NULL,
        last_error TEXT, xml TEXT NOT NULL, state_at INTEGER);
      CREATE INDEX item_line ON item (interface, state, queued_at, seq);
      CREATE TABLE counter (interface TEXT, kind TEXT, n INTEGER NOT NULL,
        PRIMARY KEY (interface, kind)) WITHOUT ROWID;
      CREATE TABLE backoff (interface TEXT PRIMARY KEY, failures INTEGER NOT NULL,
        next_attempt_ms INTEGER NOT NULL, last_error TEXT, last_error_ms INTEGER,
        paused INTEGER NOT NULL DEFAULT 0, last_success_ms INTEGER) WITHOUT ROWID;
      CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
      INSERT INTO meta VALUES ('next_version', 100);
      CREATE TABLE receipt (rid INTEGER PRIMARY KEY, request_id TEXT NOT NULL,
        api_key TEXT NOT NULL, nonce INTEGER NOT NULL, interface TEXT NOT NULL,
        received_at INTEGER NOT NULL);
      CREATE UNIQUE INDEX receipt_id ON receipt (request_id, api_key);
      CREATE INDEX receipt_age ON receipt (received_at);
      CREATE TABLE receipt_line (rid INTEGER NOT NULL, idx INTEGER NOT NULL,
        key BLOB NOT NULL, version INTEGER NOT NULL, PRIMARY KEY (rid, idx)) WITHOUT ROWID;
      CREATE TABLE settled (key BLOB NOT NULL, version INTEGER NOT NULL,
        state INTEGER NOT NULL, at INTEGER NOT NULL, reason TEXT,
        PRIMARY KEY (key, version)) WITHOUT ROWID;
      CREATE INDEX settled_age ON settled (at);
      PRAGMA application_id = 1095780689;
      PRAGMA user_version = 1;";

    fn key(code: &str) -> QueueKey {
        QueueKey::new("gl-code", &["main", code]).unwrap()
    }

    #[test]
    fn a_schema_1_queue_keeps_every_item_its_order_and_its_receipts() {
        let dir = tempfile::tempdir().unwrap();
        {
            let conn = Connection::open(dir.path().join(super::super::FILE_NAME)).unwrap();
            conn.execute_batch("PRAGMA journal_mode=WAL;").unwrap();
            conn.execute_batch(SCHEMA_1).unwrap();
            // Inserted out of line order: B was queued before A; C is rejected; D another
            // interface.
            let gl = "general-ledger-codes-v1";
            for (code, iface, state, version, queued_at, seq) in [
                ("A", gl, 0, 12, 2000, 12),
                ("B", gl, 0, 15, 1000, 11),
                ("C", gl, 1, 13, 1500, 13),
                ("D", "vendor-data-v1", 0, 14, 500, 14),
            ] {
                conn.execute(
                    "INSERT INTO item VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?5, 1, 'x', ?7, NULL)",
                    rusqlite::params![
                        key(code).as_bytes(),
                        iface,
                        state,
                        version,
                        queued_at,
                        seq,
                        format!("<gl_code>{code}</gl_code>")
                    ],
                )
                .unwrap();
            }
            conn.execute_batch(
                "INSERT INTO counter VALUES ('general-ledger-codes-v1', 'pending', 2),
                   ('general-ledger-codes-v1', 'rejected', 1), ('vendor-data-v1', 'pending', 1);
                 INSERT INTO receipt VALUES (7, 'req-1', 'k', 1, 'general-ledger-codes-v1', 900);",
            )
            .unwrap();
            for (idx, code, version) in [(0, "A", 12), (1, "B", 15)] {
                conn.execute(
                    "INSERT INTO receipt_line VALUES (7, ?1, ?2, ?3)",
                    rusqlite::params![idx, key(code).as_bytes(), version],
                )
                .unwrap();
            }
        }
        let store = SqliteStore::open(dir.path(), Mode::Serve, 0).unwrap();
        let line: Vec<String> = store
            .take("general-ledger-codes-v1", 10)
            .unwrap()
            .into_iter()
            .map(|(k, i)| format!("{k} v{} {}", i.version, i.xml))
            .collect();
        assert_eq!(
            line,
            [
                "gl-code:main/B v15 <gl_code>B</gl_code>",
                "gl-code:main/A v12 <gl_code>A</gl_code>"
            ]
        );
        assert_eq!(store.take("vendor-data-v1", 10).unwrap().len(), 1);
        assert_eq!(store.keys(State::Rejected, None).unwrap(), [key("C")]);
        let receipt = &store.receipts("req-1", Some("k")).unwrap()[0];
        let states: Vec<(u32, String)> = receipt
            .records
            .iter()
            .map(|r| (r.index, format!("{} {:?}", r.key, r.state)))
            .collect();
        assert_eq!(
            states,
            [
                (0, "gl-code:main/A Pending".to_string()),
                (1, "gl-code:main/B Pending".to_string())
            ]
        );
        // A key queued after the upgrade takes its place after those before it; the version
        // goes on from where it was.
        let rec = crate::NewRecord {
            key: key("E"),
            interface: "general-ledger-codes-v1",
            xml: "<gl_code>E</gl_code>".into(),
            receipt: None,
        };
        store.upsert(&[rec], 3000).unwrap();
        let line: Vec<(String, u64)> = store
            .take("general-ledger-codes-v1", 10)
            .unwrap()
            .into_iter()
            .map(|(k, i)| (k.to_string(), i.version))
            .collect();
        assert_eq!(line[2], ("gl-code:main/E".to_string(), 100));
        assert_eq!(store.stats("general-ledger-codes-v1").unwrap().pending, 3);
        drop(store);
        assert!(super::super::verify_file(dir.path()).unwrap().is_empty());
    }
}
