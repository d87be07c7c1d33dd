//! The cluster's side of `move-to-postgres` (D45, `moving.rs`): one transaction, every
//! statement leaving alone what the cluster already holds as new or newer.

use super::PostgresStore;
use super::write::next_versions;
use crate::carried::{Export, Exported, Moved};
use crate::codes::KNOWN_STATES;
use crate::codes::stored_ms as ms;
use crate::{State, StoreError};
use postgres::Transaction;
use std::collections::HashMap;

/// Rows per statement.
const CHUNK: usize = 5000;

impl PostgresStore {
    /// Copies `export` into the cluster in one transaction and checks that every key it
    /// holds is there after it.
    pub fn import(&self, export: &Export) -> Result<Moved, StoreError> {
        let moved = self.tx(|tx| {
            let kept_newer = items(tx, &export.items)?;
            for (interface, b) in &export.backoffs {
                tx.execute(
                    "INSERT INTO backoff VALUES ($1, $2, $3, $4, $5, $6, $7)
                     ON CONFLICT (interface) DO NOTHING",
                    &[
                        interface,
                        &i32::try_from(b.failures).unwrap_or(i32::MAX),
                        &ms(b.next_attempt_ms),
                        &b.last_error,
                        &b.last_error_ms.map(ms),
                        &b.paused,
                        &b.last_success_ms.map(ms),
                    ],
                )?;
            }
            let receipts = receipts(tx, export)?;
            for record in &export.audit {
                super::audit::add(tx, record)?;
            }
            let keys: Vec<&[u8]> = export.items.iter().map(|i| i.key.as_slice()).collect();
            let present: i64 = tx
                .query_one("SELECT count(*) FROM item WHERE key = ANY($1)", &[&keys])?
                .get(0);
            let mut by_state = [0u64; 3];
            for item in &export.items {
                let at = match State::from_code(i64::from(item.state)) {
                    Some(State::Pending) => 0,
                    Some(State::Rejected) => 1,
                    _ => 2,
                };
                by_state[at] += 1;
            }
            Ok((by_state, kept_newer, receipts, present))
        })?;
        let (items, kept_newer, receipts, present) = moved;
        if usize::try_from(present).ok() != Some(export.items.len()) {
            // The transaction committed; a second run copies what is missing.
            return Err(StoreError::MovedShort {
                present,
                moved: export.items.len(),
            });
        }
        Ok(Moved {
            items,
            kept_newer,
            receipts,
            moved_before_ms: None,
        })
    }
}

/// The items, each interface's line in its order: `seq` from the cluster's sequence in that
/// order, and a queued time never below the one before it in the line (it went back only
/// with the clock, D31), so the cluster's order, queued time then seq, is the embedded
/// queue's. A key the cluster holds in a version stored later keeps it. How many did.
fn items(tx: &mut Transaction<'_>, items: &[Exported]) -> Result<u64, postgres::Error> {
    let mut kept = 0u64;
    let mut last_queued: HashMap<&str, i64> = HashMap::new();
    for chunk in items.chunks(CHUNK) {
        let seqs = next_versions(tx, chunk.len())?;
        let queued: Vec<i64> = chunk
            .iter()
            .map(|i| {
                let at = last_queued.entry(i.interface.as_str()).or_insert(i64::MIN);
                *at = (*at).max(i.queued_at);
                *at
            })
            .collect();
        let keys: Vec<&[u8]> = chunk.iter().map(|i| i.key.as_slice()).collect();
        let ifaces: Vec<&str> = chunk.iter().map(|i| i.interface.as_str()).collect();
        let states: Vec<i16> = chunk.iter().map(|i| i.state).collect();
        let versions: Vec<i64> = chunk.iter().map(|i| i.version).collect();
        let updated: Vec<i64> = chunk.iter().map(|i| i.updated_at).collect();
        let attempts: Vec<i32> = chunk.iter().map(|i| i.attempts).collect();
        let errors: Vec<Option<&str>> = chunk.iter().map(|i| i.last_error.as_deref()).collect();
        let xmls: Vec<&str> = chunk.iter().map(|i| i.xml.as_str()).collect();
        let state_at: Vec<Option<i64>> = chunk.iter().map(|i| i.state_at).collect();
        let o_requests: Vec<Option<&str>> = chunk
            .iter()
            .map(|i| i.origin.as_ref().map(|o| o.0.as_str()))
            .collect();
        let o_clients: Vec<Option<&str>> = chunk
            .iter()
            .map(|i| i.origin.as_ref().map(|o| o.1.as_str()))
            .collect();
        let o_indexes: Vec<Option<i32>> = chunk
            .iter()
            .map(|i| i.origin.as_ref().map(|o| o.2))
            .collect();
        let written = tx.execute(
            &format!(
                "INSERT INTO item AS i (key, interface, state, version, queued_at, seq, updated_at,
                                        attempts, last_error, xml, state_at, origin_request,
                                        origin_client, origin_index)
                 SELECT k, f, CASE WHEN s IN {KNOWN_STATES} THEN s ELSE {q} END, v, qa, sq, u,
                        a, e, x, sa, oq, oc, oi
                 FROM unnest($1::bytea[], $2::text[], $3::smallint[], $4::bigint[],
                             $5::bigint[], $6::bigint[], $7::bigint[], $8::integer[],
                             $9::text[], $10::text[], $11::bigint[], $12::text[], $13::text[],
                             $14::integer[])
                      AS t(k, f, s, v, qa, sq, u, a, e, x, sa, oq, oc, oi)
                 ON CONFLICT (key) DO UPDATE SET
                   interface = excluded.interface, state = excluded.state,
                   version = excluded.version, queued_at = excluded.queued_at,
                   seq = excluded.seq, updated_at = excluded.updated_at,
                   attempts = excluded.attempts, last_error = excluded.last_error,
                   xml = excluded.xml, state_at = excluded.state_at,
                   origin_request = excluded.origin_request,
                   origin_client = excluded.origin_client,
                   origin_index = excluded.origin_index,
                   lease_instance = NULL, lease_until = NULL
                 WHERE excluded.updated_at > i.updated_at",
                q = State::Quarantined.code()
            ),
            &[
                &keys,
                &ifaces,
                &states,
                &versions,
                &queued,
                &seqs,
                &updated,
                &attempts,
                &errors,
                &xmls,
                &state_at,
                &o_requests,
                &o_clients,
                &o_indexes,
            ],
        )?;
        kept += u64::try_from(chunk.len())
            .unwrap_or(u64::MAX)
            .saturating_sub(written);
    }
    // Versions handed out later are above every moved one (D18: a version is never reused).
    if let Some(top) = items.iter().map(|i| i.version).max() {
        tx.execute(
            "SELECT setval('item_version', greatest($1, (SELECT last_value FROM item_version)))",
            &[&top],
        )?;
    }
    Ok(kept)
}

/// The receipts whose request the cluster has none of, with their lines, and the settled
/// versions; how many receipts.
fn receipts(tx: &mut Transaction<'_>, export: &Export) -> Result<u64, postgres::Error> {
    let mut copied = 0;
    for r in &export.receipts {
        let rid = tx.query_opt(
            "INSERT INTO receipt (request_id, api_key, nonce, interface, received_at)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (request_id, api_key) DO NOTHING RETURNING rid",
            &[
                &r.request_id,
                &r.api_key,
                &r.nonce,
                &r.interface,
                &r.received_at,
            ],
        )?;
        let Some(rid) = rid.map(|row| row.get::<_, i64>(0)) else {
            continue;
        };
        copied += 1;
        let idxs: Vec<i32> = r.lines.iter().map(|l| l.0).collect();
        let keys: Vec<&[u8]> = r.lines.iter().map(|l| l.1.as_slice()).collect();
        let versions: Vec<i64> = r.lines.iter().map(|l| l.2).collect();
        tx.execute(
            "INSERT INTO receipt_line (rid, idx, key, version)
             SELECT $1, * FROM unnest($2::integer[], $3::bytea[], $4::bigint[])",
            &[&rid, &idxs, &keys, &versions],
        )?;
    }
    for chunk in export.settled.chunks(CHUNK) {
        let keys: Vec<&[u8]> = chunk.iter().map(|s| s.key.as_slice()).collect();
        let versions: Vec<i64> = chunk.iter().map(|s| s.version).collect();
        let states: Vec<i16> = chunk.iter().map(|s| s.state).collect();
        let at: Vec<i64> = chunk.iter().map(|s| s.at).collect();
        let reasons: Vec<Option<&str>> = chunk.iter().map(|s| s.reason.as_deref()).collect();
        tx.execute(
            "INSERT INTO settled (key, version, state, at, reason)
             SELECT * FROM unnest($1::bytea[], $2::bigint[], $3::smallint[], $4::bigint[],
                                  $5::text[])
             ON CONFLICT (key, version) DO NOTHING",
            &[&keys, &versions, &states, &at, &reasons],
        )?;
    }
    Ok(copied)
}
