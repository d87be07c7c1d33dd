//! Kept versions and replay (D49) in SQLite (the meaning is in `replay.rs`): `kept` holds
//! each key's last delivered XML, written by the delivery's own transaction; a replay
//! inserts items the way a new key is queued, in one write transaction.

use super::write::{Counts, Lines};
use crate::codes::{pending, stored_ms, stored_now};
use crate::replay::{Kept, KeptSize, PRUNE_STEP, Replayed, Window};
use crate::{QueueKey, State};
use rusqlite::{Connection, OptionalExtension, Transaction, params};

/// Schema 3's kept versions: the size beside the XML, and in the age index, so the total is
/// read from the index alone.
pub(super) const SCHEMA_V3: &str = "
  CREATE TABLE kept (key BLOB PRIMARY KEY, interface TEXT NOT NULL, version INTEGER NOT NULL,
    at INTEGER NOT NULL, bytes INTEGER NOT NULL, xml TEXT NOT NULL);
  CREATE INDEX kept_age ON kept (at, bytes);";

/// Keeps the XML of a delivered version, unless a later one of the key is kept already.
pub(super) fn keep(
    tx: &Transaction<'_>,
    key: &[u8],
    interface: &str,
    version: i64,
    xml: &str,
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO kept (key, interface, version, at, bytes, xml)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (key) DO UPDATE SET interface = excluded.interface,
           version = excluded.version, at = excluded.at, bytes = excluded.bytes,
           xml = excluded.xml
         WHERE excluded.version > kept.version",
    )?
    .execute(params![
        key,
        interface,
        version,
        stored_now(),
        i64::try_from(xml.len()).unwrap_or(i64::MAX),
        xml
    ])?;
    Ok(())
}

/// The kept versions in `window`, in the order they were delivered.
fn in_window(tx: &Transaction<'_>, window: &Window) -> rusqlite::Result<Vec<Kept>> {
    let until = window.until_ms.map_or(i64::MAX, stored_ms);
    let mut stmt = tx.prepare_cached(
        "SELECT key, interface, xml FROM kept WHERE at >= ?1 AND at < ?2
           AND (?3 IS NULL OR interface = ?3) ORDER BY at, key",
    )?;
    let rows = stmt.query_map(
        params![stored_ms(window.since_ms), until, window.interface],
        |r| {
            Ok(Kept {
                key: QueueKey::from_bytes(&r.get::<_, Vec<u8>>(0)?),
                interface: r.get(1)?,
                xml: r.get(2)?,
            })
        },
    )?;
    let mut out = Vec::new();
    for row in rows {
        let kept = row?;
        if window.names(&kept.key) {
            out.push(kept);
        }
    }
    Ok(out)
}

/// Queues the kept versions of `window` again (or says what it would, `dry_run`).
pub(super) fn replay(
    tx: &Transaction<'_>,
    window: &Window,
    dry_run: bool,
    version: &mut u64,
) -> rusqlite::Result<Replayed> {
    let found = in_window(tx, window)?;
    let mut done = Replayed {
        not_kept: window.missing(&found),
        ..Replayed::default()
    };
    let now = stored_now();
    let mut lines = Lines::default();
    let mut counts = Counts::default();
    let mut exists = tx.prepare_cached("SELECT 1 FROM item WHERE key = ?1")?;
    let mut add = tx.prepare_cached(concat!(
        "INSERT INTO item (rowid, key, interface, state, version, queued_at, updated_at,
                           attempts, last_error, xml)
         VALUES (?1, ?2, ?3, ",
        pending!(),
        ", ?4, ?5, ?5, 0, NULL, ?6) ON CONFLICT (key) DO NOTHING"
    ))?;
    for kept in found {
        let there = exists
            .query_row(params![kept.key.as_bytes()], |_| Ok(()))
            .optional()?
            .is_some();
        if there {
            done.left_alone.push(kept.key);
            continue;
        }
        if !dry_run {
            let v = i64::try_from(*version).unwrap_or(i64::MAX);
            *version += 1;
            let place = lines.place(tx, &kept.interface, v)?;
            let args = params![place, kept.key.as_bytes(), kept.interface, v, now, kept.xml];
            if add.execute(args)? == 0 {
                done.left_alone.push(kept.key);
                continue;
            }
            counts.add(&kept.interface, State::Pending.name(), 1);
        }
        done.queued.push(kept.key);
    }
    counts.write(tx)?;
    Ok(done)
}

/// Keys kept and their bytes.
pub(super) fn size(conn: &Connection) -> rusqlite::Result<KeptSize> {
    conn.prepare_cached("SELECT count(*), coalesce(sum(bytes), 0) FROM kept")?
        .query_row([], |r| {
            Ok(KeptSize {
                keys: u64::try_from(r.get::<_, i64>(0)?).unwrap_or(0),
                bytes: u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
            })
        })
}

/// Removes up to [`PRUNE_STEP`] versions delivered before `before` (unix ms), oldest first.
pub(super) fn prune_step(tx: &Transaction<'_>, before: u64) -> rusqlite::Result<usize> {
    tx.prepare_cached(
        "DELETE FROM kept WHERE key IN
           (SELECT key FROM kept WHERE at < ?1 ORDER BY at LIMIT ?2)",
    )?
    .execute(params![stored_ms(before), PRUNE_STEP])
}
