//! Changes to the queue tables, each in one transaction (schema in `mod.rs`).

use super::outcomes::{origin_returned, with_outcomes};
use super::replay::keep_changed;
use crate::codes::{
    KNOWN_STATES, SETTLED_DELIVERED, dropped_because, parked, pending, quarantined_because,
    rejected, stored_ms as ms, stored_now as now, unknown_state,
};
use crate::receipt::RequestInfo;
use crate::{Backoff, NewRecord, Sent, State};
use postgres::{Client, GenericClient, Transaction};
use std::collections::HashMap;

/// `n` new versions from the store-wide sequence, in ascending order.
pub(super) fn next_versions(
    tx: &mut Transaction<'_>,
    n: usize,
) -> Result<Vec<i64>, postgres::Error> {
    let n = i64::try_from(n).unwrap_or(i64::MAX);
    let mut versions: Vec<i64> = tx
        .query(
            "SELECT nextval('item_version') FROM generate_series(1, $1::bigint)",
            &[&n],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    versions.sort_unstable();
    Ok(versions)
}

/// Stores records as pending (D16), in one statement: a pending key keeps its place in the
/// line, its attempts and last error; any other key goes to the end of the line. Later
/// records of the call win; every record, also one replaced within the call, gets a version
/// and its receipt line (D38).
pub(super) fn upsert(
    tx: &mut Transaction<'_>,
    records: &[NewRecord],
    now_ms: u64,
) -> Result<(), postgres::Error> {
    if records.is_empty() {
        return Ok(());
    }
    let versions = next_versions(tx, records.len())?;
    // The last record of each key, in key order: one row per key in the statement (a key
    // twice would fail it) and the same lock order on every node (no deadlock).
    let mut last: HashMap<&[u8], usize> = HashMap::new();
    for (i, r) in records.iter().enumerate() {
        last.insert(r.key.as_bytes(), i);
    }
    let mut kept: Vec<usize> = last.into_values().collect();
    kept.sort_by_key(|i| records[*i].key.as_bytes());
    let keys: Vec<&[u8]> = kept.iter().map(|i| records[*i].key.as_bytes()).collect();
    let ifaces: Vec<&str> = kept.iter().map(|i| records[*i].interface).collect();
    let vers: Vec<i64> = kept.iter().map(|i| versions[*i]).collect();
    let xmls: Vec<&str> = kept.iter().map(|i| records[*i].xml.as_str()).collect();
    // D48: each version's origin, for the outcomes the feed lists.
    let line = |i: &usize| records[*i].receipt.as_ref();
    let o_requests: Vec<Option<&str>> = kept
        .iter()
        .map(|i| line(i).map(|l| l.request.request_id.as_str()))
        .collect();
    let o_clients: Vec<Option<&str>> = kept
        .iter()
        .map(|i| line(i).map(|l| l.request.api_key.as_str()))
        .collect();
    let o_indexes: Vec<Option<i32>> = kept
        .iter()
        .map(|i| line(i).map(|l| i32::try_from(l.index).unwrap_or(i32::MAX)))
        .collect();
    tx.execute(
        concat!(
            "INSERT INTO item AS i (key, interface, state, version, queued_at, seq, updated_at,
                                    attempts, last_error, xml, state_at, origin_request,
                                    origin_client, origin_index)
             SELECT k, f, ",
            pending!(),
            ", v, $5, v, $5, 0, NULL, x, NULL, oq, oc, oi
             FROM unnest($1::bytea[], $2::text[], $3::bigint[], $4::text[], $6::text[],
                         $7::text[], $8::integer[]) AS t(k, f, v, x, oq, oc, oi)
             ON CONFLICT (key) DO UPDATE SET
               interface = excluded.interface, state = ",
            pending!(),
            ", version = excluded.version,
               queued_at = CASE WHEN i.state = ",
            pending!(),
            " THEN i.queued_at ELSE excluded.queued_at END,
               seq = CASE WHEN i.state = ",
            pending!(),
            " AND i.interface = excluded.interface THEN i.seq ELSE excluded.seq END,
               updated_at = excluded.updated_at,
               attempts = CASE WHEN i.state = ",
            pending!(),
            " THEN i.attempts ELSE 0 END,
               last_error = CASE WHEN i.state = ",
            pending!(),
            " THEN i.last_error ELSE NULL END,
               xml = excluded.xml, state_at = NULL, origin_request = excluded.origin_request,
               origin_client = excluded.origin_client, origin_index = excluded.origin_index"
        ),
        &[
            &keys,
            &ifaces,
            &vers,
            &xmls,
            &ms(now_ms),
            &o_requests,
            &o_clients,
            &o_indexes,
        ],
    )?;
    receipt_lines(tx, records, &versions)
}

/// The receipt lines of the records that carry one, under their request's head.
fn receipt_lines(
    tx: &mut Transaction<'_>,
    records: &[NewRecord],
    versions: &[i64],
) -> Result<(), postgres::Error> {
    let infos: Vec<&RequestInfo> = records
        .iter()
        .filter_map(|r| r.receipt.as_ref().map(|l| l.request.as_ref()))
        .collect();
    if infos.is_empty() {
        return Ok(());
    }
    let heads = heads(tx, &infos)?;
    let (mut rids, mut idxs, mut keys, mut vers) = (vec![], vec![], vec![], vec![]);
    for (r, v) in records.iter().zip(versions) {
        let Some(line) = &r.receipt else { continue };
        let Some(rid) = heads.get(&(
            line.request.request_id.as_str(),
            line.request.api_key.as_str(),
        )) else {
            continue;
        };
        rids.push(*rid);
        idxs.push(i32::try_from(line.index).unwrap_or(i32::MAX));
        keys.push(r.key.as_bytes());
        vers.push(*v);
    }
    tx.execute(
        "INSERT INTO receipt_line (rid, idx, key, version)
         SELECT * FROM unnest($1::bigint[], $2::integer[], $3::bytea[], $4::bigint[])
         ON CONFLICT (rid, idx) DO UPDATE SET key = excluded.key, version = excluded.version",
        &[&rids, &idxs, &keys, &vers],
    )?;
    Ok(())
}

/// The receipt rows of the requests of one transaction, in three statements whatever their
/// number: new heads inserted, a head of an older request with the same id and key replaced
/// (its lines dropped), the heads an earlier part of the same request wrote looked up. Heads
/// go in (id, key) order, the same on every node.
fn heads<'r>(
    tx: &mut Transaction<'_>,
    infos: &[&'r RequestInfo],
) -> Result<HashMap<(&'r str, &'r str), i64>, postgres::Error> {
    // One head per (id, key): a later request in the transaction wins.
    let mut latest: HashMap<(&str, &str), &RequestInfo> = HashMap::new();
    for info in infos {
        latest.insert((info.request_id.as_str(), info.api_key.as_str()), info);
    }
    let mut wanted: Vec<&RequestInfo> = latest.into_values().collect();
    wanted.sort_by(|a, b| (&a.request_id, &a.api_key).cmp(&(&b.request_id, &b.api_key)));
    let ids: Vec<&str> = wanted.iter().map(|i| i.request_id.as_str()).collect();
    let keys: Vec<&str> = wanted.iter().map(|i| i.api_key.as_str()).collect();
    let nonces: Vec<i64> = wanted.iter().map(|i| i.nonce as i64).collect();
    let ifaces: Vec<&str> = wanted.iter().map(|i| i.interface).collect();
    let ats: Vec<i64> = wanted.iter().map(|i| ms(i.received_at_ms)).collect();
    let written = tx.query(
        "INSERT INTO receipt (request_id, api_key, nonce, interface, received_at)
         SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::bigint[])
         ON CONFLICT (request_id, api_key) DO UPDATE SET nonce = excluded.nonce,
           interface = excluded.interface, received_at = excluded.received_at
           WHERE receipt.nonce <> excluded.nonce
         RETURNING rid, request_id, api_key, xmax::text <> '0'",
        &[&ids, &keys, &nonces, &ifaces, &ats],
    )?;
    let mut out: HashMap<(&str, &str), i64> = HashMap::new();
    let mut replaced: Vec<i64> = Vec::new();
    for row in &written {
        let (id, key): (&str, &str) = (row.get(1), row.get(2));
        if let Some(info) = wanted
            .iter()
            .find(|i| i.request_id == id && i.api_key == key)
        {
            out.insert(
                (info.request_id.as_str(), info.api_key.as_str()),
                row.get(0),
            );
        }
        if row.get::<_, bool>(3) {
            replaced.push(row.get(0));
        }
    }
    if !replaced.is_empty() {
        tx.execute("DELETE FROM receipt_line WHERE rid = ANY($1)", &[&replaced])?;
    }
    if out.len() < wanted.len() {
        let rest = tx.query(
            "SELECT r.rid, r.request_id, r.api_key FROM receipt r
             JOIN unnest($1::text[], $2::text[]) AS w(request_id, api_key)
               ON r.request_id = w.request_id AND r.api_key = w.api_key",
            &[&ids, &keys],
        )?;
        for row in &rest {
            let (id, key): (&str, &str) = (row.get(1), row.get(2));
            if let Some(info) = wanted
                .iter()
                .find(|i| i.request_id == id && i.api_key == key)
            {
                out.entry((info.request_id.as_str(), info.api_key.as_str()))
                    .or_insert(row.get(0));
            }
        }
    }
    Ok(out)
}

/// The keys and versions of a batch, in key order: the order an upsert locks keys in, which
/// makes a deadlock with one rarer (the plan decides; `PostgresStore::tx` runs the loser
/// again).
fn sent_arrays(sent: &[Sent]) -> (Vec<&[u8]>, Vec<i64>) {
    let mut pairs: Vec<(&[u8], i64)> = sent
        .iter()
        .map(|s| (s.key.as_bytes(), i64::try_from(s.version).unwrap_or(-1)))
        .collect();
    pairs.sort_unstable();
    pairs.into_iter().unzip()
}

/// Of one interface's delivered items: how many, and the place in the line of the last.
pub(super) type Gone = (i64, (i64, i64));

/// Removes delivered items still at the version sent and counts them; every version sent is
/// noted as delivered for its receipt (D38); this instance's leases on the keys end (D41).
/// Fenced: a key another instance has taken since (this one's lease lapsed) is left to it,
/// item and receipt alike, so that what the holder's platform says is the item's state.
/// Returns, per interface, how many went and the place in the line of the last of them.
pub(super) fn delivered(
    tx: &mut Transaction<'_>,
    sent: &[Sent],
    instance: &str,
    keep: bool,
) -> Result<HashMap<String, Gone>, postgres::Error> {
    let (keys, vers) = sent_arrays(sent);
    let gone = tx.query(
        with_outcomes!(
            concat!(
                "DELETE FROM item i USING unnest($1::bytea[], $2::bigint[]) AS s(key, version)
                 WHERE i.key = s.key AND i.version = s.version AND i.state = ",
                pending!(),
                " AND (i.lease_instance IS NULL OR i.lease_instance = $3)
                 RETURNING i.key, i.interface, i.queued_at, i.seq, i.version, i.xml, ",
                origin_returned!(),
                ", NULL::text AS why"
            ),
            "$4",
            "$5",
            concat!(
                keep_changed!("$6", "$5"),
                "SELECT interface, queued_at, seq FROM changed"
            )
        ),
        &[&keys, &vers, &instance, &SETTLED_DELIVERED, &now(), &keep],
    )?;
    let mut counts: HashMap<String, Gone> = HashMap::new();
    for row in &gone {
        let place = (row.get(1), row.get(2));
        let entry = counts.entry(row.get(0)).or_insert((0, place));
        entry.0 += 1;
        entry.1 = entry.1.max(place);
    }
    let (interfaces, numbers): (Vec<&str>, Vec<i64>) =
        counts.iter().map(|(f, (n, _))| (f.as_str(), *n)).unzip();
    super::counts::add_delivered(tx, &interfaces, &numbers)?;
    tx.execute(
        "INSERT INTO settled (key, version, state, at)
         SELECT key, version, $4, $3 FROM unnest($1::bytea[], $2::bigint[]) AS s(key, version)
         WHERE NOT EXISTS (SELECT 1 FROM item i WHERE i.key = s.key
                             AND i.lease_instance IS NOT NULL AND i.lease_instance <> $5)
         ON CONFLICT (key, version) DO UPDATE SET state = $4, at = excluded.at, reason = NULL",
        &[&keys, &vers, &now(), &SETTLED_DELIVERED, &instance],
    )?;
    tx.execute(
        "UPDATE item SET lease_instance = NULL, lease_until = NULL
         WHERE key = ANY($1) AND lease_instance = $2",
        &[&keys, &instance],
    )?;
    Ok(counts)
}

/// Counts a failed attempt on the items still at the version sent, unless another instance
/// has taken them since (fenced: a node whose lease lapsed does not write over its successor,
/// even one with its name, D41).
pub(super) fn failed(
    tx: &mut Transaction<'_>,
    sent: &[Sent],
    error: &str,
    instance: &str,
) -> Result<(), postgres::Error> {
    let (keys, vers) = sent_arrays(sent);
    tx.execute(
        concat!(
            "UPDATE item i SET attempts = attempts + 1, last_error = $3
             FROM unnest($1::bytea[], $2::bigint[]) AS s(key, version)
             WHERE i.key = s.key AND i.version = s.version AND i.state = ",
            pending!(),
            " AND (i.lease_instance IS NULL OR i.lease_instance = $4)"
        ),
        &[&keys, &vers, &error, &instance],
    )?;
    Ok(())
}

/// Parks an item the platform refused, if it is still pending at the version sent, unless
/// another instance has taken it since (fenced as [`failed`] is, D41).
pub(super) fn reject(
    tx: &mut Transaction<'_>,
    sent: &Sent,
    error: &str,
    instance: &str,
) -> Result<bool, postgres::Error> {
    let version = i64::try_from(sent.version).unwrap_or(-1);
    let changed = tx.query(
        with_outcomes!(
            concat!(
                "UPDATE item SET state = ",
                rejected!(),
                ", attempts = attempts + 1, last_error = $3, state_at = $4,
                   lease_instance = NULL, lease_until = NULL
                 WHERE key = $1 AND version = $2 AND state = ",
                pending!(),
                " AND (lease_instance IS NULL OR lease_instance = $5)
                 RETURNING key, interface, ",
                origin_returned!(),
                ", last_error AS why"
            ),
            "$6",
            "$4",
            "SELECT 1 FROM changed"
        ),
        &[
            &sent.key.as_bytes(),
            &version,
            &error,
            &now(),
            &instance,
            &State::Rejected.code(),
        ],
    )?;
    Ok(!changed.is_empty())
}

/// Puts a rejected or quarantined item back in the line, at the place it had (D18, D29).
pub(super) fn requeue(tx: &mut Transaction<'_>, key: &[u8]) -> Result<bool, postgres::Error> {
    let n = tx.execute(
        concat!(
            "UPDATE item SET state = ",
            pending!(),
            ", attempts = 0, state_at = $2 WHERE key = $1 AND state IN ",
            parked!()
        ),
        &[&key, &now()],
    )?;
    Ok(n > 0)
}

/// Removes a rejected or quarantined item for good, noting it for its receipt (D38).
pub(super) fn discard(tx: &mut Transaction<'_>, key: &[u8]) -> Result<bool, postgres::Error> {
    let Some(row) = tx.query_opt(
        concat!(
            "DELETE FROM item WHERE key = $1 AND state IN ",
            parked!(),
            " RETURNING version, state, last_error, interface, ",
            origin_returned!()
        ),
        &[&key],
    )?
    else {
        return Ok(false);
    };
    let (version, state, reason): (i64, i16, Option<String>) = (row.get(0), row.get(1), row.get(2));
    let reason = dropped_because(reason.as_deref());
    // D48: the drop is a change of the reason its client hears of, in the state it had
    // (a parked state's code is its outcome's).
    tx.execute(
        "INSERT INTO outcome (client, state, interface, request_id, idx, key, reason, at)
         SELECT $1::text, $2, $3, $4, $5, $6, $7, $8 WHERE $1::text IS NOT NULL",
        &[
            &row.get::<_, Option<&str>>("origin_client"),
            &state,
            &row.get::<_, &str>("interface"),
            &row.get::<_, Option<&str>>("origin_request"),
            &row.get::<_, Option<i32>>("origin_index"),
            &key,
            &reason,
            &now(),
        ],
    )?;
    tx.execute(
        "INSERT INTO settled VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (key, version) DO UPDATE SET state = excluded.state, at = excluded.at,
           reason = excluded.reason",
        &[&key, &version, &state, &now(), &reason],
    )?;
    Ok(true)
}

/// Stores the retry state of one interface.
pub(super) fn set_backoff(
    client: &mut impl GenericClient,
    interface: &str,
    b: &Backoff,
) -> Result<(), postgres::Error> {
    client.execute(
        "INSERT INTO backoff VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (interface) DO UPDATE SET failures = excluded.failures,
           next_attempt_ms = excluded.next_attempt_ms, last_error = excluded.last_error,
           last_error_ms = excluded.last_error_ms, paused = excluded.paused,
           last_success_ms = excluded.last_success_ms",
        &[
            &interface,
            &i32::try_from(b.failures).unwrap_or(i32::MAX),
            &ms(b.next_attempt_ms),
            &b.last_error,
            &b.last_error_ms.map(ms),
            &b.paused,
            &b.last_success_ms.map(ms),
        ],
    )?;
    Ok(())
}

/// Writes and reads back this instance's probe row (readiness): keyed by the instance, as
/// a namesake probing at the same moment would write over a row keyed by the name (D41).
pub(super) fn probe(client: &mut Client, instance: &str) -> Result<bool, postgres::Error> {
    let at = now();
    client.execute(
        "INSERT INTO probe VALUES ($1, $2) ON CONFLICT (node) DO UPDATE SET at = excluded.at",
        &[&instance, &at],
    )?;
    let back: i64 = client
        .query_one("SELECT at FROM probe WHERE node = $1", &[&instance])?
        .get(0);
    Ok(back == at)
}

/// At a node's start (D29): rows whose state no version of ap-intake writes (a hand edit, a
/// newer version's code) are quarantined rather than left where no query finds them. How
/// many were.
pub(super) fn sweep(tx: &mut Transaction<'_>) -> Result<usize, postgres::Error> {
    let misfits = tx.query(
        &format!("SELECT key, state FROM item WHERE state NOT IN {KNOWN_STATES} FOR UPDATE"),
        &[],
    )?;
    for row in &misfits {
        let (key, state): (&[u8], i16) = (row.get(0), row.get(1));
        let reason = quarantined_because(&unknown_state(&state.to_string()));
        tx.execute(
            "UPDATE item SET state = $2, last_error = $3, state_at = $4,
               lease_instance = NULL, lease_until = NULL
             WHERE key = $1",
            &[&key, &State::Quarantined.code(), &reason, &now()],
        )?;
    }
    Ok(misfits.len())
}
