//! Kept versions and replay (D49) on PostgreSQL (the meaning is in `replay.rs`): the
//! delivery's statement keeps the XML it removes; a replay inserts items as an upsert of new
//! keys does, and a key another node queued meanwhile is left alone by the insert itself.

use super::write::next_versions;
use crate::QueueKey;
use crate::codes::{pending, stored_ms, stored_now};
use crate::replay::{Kept, KeptSize, PRUNE_STEP, Replayed, Window};
use postgres::{Client, Transaction};
use std::collections::HashSet;

/// Schema 3's kept versions.
pub(super) const SCHEMA_V3: &str = "
  CREATE TABLE ap_intake.kept (key bytea PRIMARY KEY, interface text NOT NULL,
    version bigint NOT NULL, at bigint NOT NULL, bytes bigint NOT NULL, xml text NOT NULL);
  CREATE INDEX kept_age ON ap_intake.kept (at, bytes);";

/// The CTE a delivery adds to keep what it removed (`changed`: key, interface, version,
/// xml), when `$keep` is true, at `$at`.
macro_rules! keep_changed {
    ($keep:literal, $at:literal) => {
        concat!(
            ", kept_now AS (INSERT INTO kept (key, interface, version, at, bytes, xml)
               SELECT key, interface, version, ",
            $at,
            "::bigint, octet_length(xml), xml FROM changed WHERE ",
            $keep,
            "::boolean
               ON CONFLICT (key) DO UPDATE SET interface = excluded.interface,
                 version = excluded.version, at = excluded.at, bytes = excluded.bytes,
                 xml = excluded.xml
               WHERE excluded.version > kept.version) "
        )
    };
}
pub(super) use keep_changed;

/// The kept versions in `window`, in the order they were delivered.
fn in_window(tx: &mut Transaction<'_>, window: &Window) -> Result<Vec<Kept>, postgres::Error> {
    let until = window.until_ms.map_or(i64::MAX, stored_ms);
    let rows = tx.query(
        "SELECT key, interface, xml FROM kept WHERE at >= $1 AND at < $2
           AND ($3::text IS NULL OR interface = $3) ORDER BY at, key",
        &[&stored_ms(window.since_ms), &until, &window.interface],
    )?;
    Ok(rows
        .iter()
        .map(|r| Kept {
            key: QueueKey::from_bytes(r.get::<_, &[u8]>("key")),
            interface: r.get("interface"),
            xml: r.get("xml"),
        })
        .filter(|k| window.names(&k.key))
        .collect())
}

/// Queues the kept versions of `window` again (or says what it would, `dry_run`).
pub(super) fn replay(
    tx: &mut Transaction<'_>,
    window: &Window,
    dry_run: bool,
) -> Result<Replayed, postgres::Error> {
    let found = in_window(tx, window)?;
    let mut done = Replayed {
        not_kept: window.missing(&found),
        ..Replayed::default()
    };
    let keys: Vec<&[u8]> = found.iter().map(|k| k.key.as_bytes()).collect();
    let placed: HashSet<Vec<u8>> = if dry_run {
        let there: HashSet<Vec<u8>> = tx
            .query("SELECT key FROM item WHERE key = ANY($1)", &[&keys])?
            .iter()
            .map(|r| r.get::<_, Vec<u8>>(0))
            .collect();
        keys.iter()
            .filter(|k| !there.contains(**k))
            .map(|k| k.to_vec())
            .collect()
    } else {
        let versions = next_versions(tx, found.len())?;
        let ifaces: Vec<&str> = found.iter().map(|k| k.interface.as_str()).collect();
        let xmls: Vec<&str> = found.iter().map(|k| k.xml.as_str()).collect();
        tx.query(
            concat!(
                "INSERT INTO item (key, interface, state, version, queued_at, seq, updated_at,
                                   attempts, last_error, xml, state_at)
                 SELECT k, f, ",
                pending!(),
                ", v, $5, v, $5, 0, NULL, x, NULL
                 FROM unnest($1::bytea[], $2::text[], $3::bigint[], $4::text[]) AS t(k, f, v, x)
                 ON CONFLICT (key) DO NOTHING RETURNING key"
            ),
            &[&keys, &ifaces, &versions, &xmls, &stored_now()],
        )?
        .iter()
        .map(|r| r.get::<_, Vec<u8>>(0))
        .collect()
    };
    for kept in found {
        if placed.contains(kept.key.as_bytes()) {
            done.queued.push(kept.key);
        } else {
            done.left_alone.push(kept.key);
        }
    }
    Ok(done)
}

/// Keys kept and their bytes.
pub(super) fn size(client: &mut Client) -> Result<KeptSize, postgres::Error> {
    let row = client.query_one(
        "SELECT count(*), coalesce(sum(bytes), 0)::bigint FROM kept",
        &[],
    )?;
    Ok(KeptSize {
        keys: u64::try_from(row.get::<_, i64>(0)).unwrap_or(0),
        bytes: u64::try_from(row.get::<_, i64>(1)).unwrap_or(0),
    })
}

/// Removes up to [`PRUNE_STEP`] versions delivered before `before` (unix ms), oldest first.
pub(super) fn prune_step(tx: &mut Transaction<'_>, before: u64) -> Result<usize, postgres::Error> {
    let n = tx.execute(
        "DELETE FROM kept WHERE key IN
           (SELECT key FROM kept WHERE at < $1 ORDER BY at LIMIT $2)",
        &[&stored_ms(before), &PRUNE_STEP],
    )?;
    Ok(usize::try_from(n).unwrap_or(0))
}
