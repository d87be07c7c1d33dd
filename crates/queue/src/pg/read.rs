//! Reads, and the lease a lane takes with its next batch (schema in `mod.rs`).

use crate::codes::{LineFacts, PRUNE_REQUESTS, PRUNE_SETTLED, pending, receipt_line};
use crate::receipt::{Receipt, ReceiptRecord};
use crate::{Backoff, Item, QueueKey, State, Stats};
use postgres::{Client, Row, Transaction};
use std::time::Duration;

const COLUMNS: &str =
    "key, interface, state, version, queued_at, seq, updated_at, attempts, last_error, xml";

/// An item with its place in the line: `(queued_at, seq, (key, item))`.
pub(super) type Placed = (i64, i64, (QueueKey, Item));

fn unsigned(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// A code no version writes reads as quarantined: it is not delivered, and the sweep at the
/// next start quarantines the row for good (D29).
fn state_of(code: i16) -> State {
    State::from_code(i64::from(code)).unwrap_or(State::Quarantined)
}

fn item(row: &Row) -> (QueueKey, Item) {
    let key = QueueKey::from_bytes(row.get::<_, &[u8]>("key"));
    let item = Item {
        interface: row.get("interface"),
        state: state_of(row.get("state")),
        version: unsigned(row.get("version")),
        queued_at_ms: unsigned(row.get("queued_at")),
        updated_at_ms: unsigned(row.get("updated_at")),
        attempts: u32::try_from(row.get::<_, i32>("attempts")).unwrap_or(0),
        last_error: row.get("last_error"),
        xml: row.get("xml"),
    };
    (key, item)
}

/// The item of one key.
pub(super) fn get(c: &mut Client, key: &QueueKey) -> Result<Option<Item>, postgres::Error> {
    let sql = format!("SELECT {COLUMNS} FROM item WHERE key = $1");
    Ok(c.query_opt(&sql, &[&key.as_bytes()])?.map(|r| item(&r).1))
}

/// The next pending items of an interface in delivery order, leased to `instance` (D39,
/// D41): items another instance holds are skipped, whatever its node name, and so are items
/// locked by one taking them right now. Items this instance holds already (a batch it failed
/// to deliver) are taken again.
///
/// Only the part of the line in `places` (after `.0`, up to and including `.1`) is read:
/// where this instance's previous batch of the interface ended splits the line, as the rows
/// before it are mostly the ones it delivered, dead until vacuumed, and an index scan from
/// the start of the line would wade through all of them on every batch (see
/// `PostgresStore::take`).
pub(super) fn lease(
    tx: &mut Transaction<'_>,
    interface: &str,
    limit: usize,
    instance: &str,
    lease: Duration,
    places: ((i64, i64), (i64, i64)),
) -> Result<Vec<Placed>, postgres::Error> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let ((at, seq), (to_at, to_seq)) = places;
    let sql = format!(
        "WITH picked AS (
           SELECT key FROM item
           WHERE interface = $1 AND state = {pending}
             AND (queued_at, seq) > ($5, $6) AND (queued_at, seq) <= ($7, $8)
             AND (lease_until IS NULL OR lease_until < now() OR lease_instance = $3)
           ORDER BY queued_at, seq LIMIT $2 FOR UPDATE SKIP LOCKED)
         UPDATE item i SET lease_instance = $3, lease_until = now() + make_interval(secs => $4)
         FROM picked WHERE i.key = picked.key
         RETURNING {columns}",
        pending = pending!(),
        columns = COLUMNS
            .split(", ")
            .map(|c| format!("i.{c}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let rows = tx.query(
        &sql,
        &[
            &interface,
            &limit,
            &instance,
            &lease.as_secs_f64(),
            &at,
            &seq,
            &to_at,
            &to_seq,
        ],
    )?;
    let mut items: Vec<Placed> = rows
        .iter()
        .map(|r| (r.get("queued_at"), r.get("seq"), item(r)))
        .collect();
    items.sort_by_key(|(at, seq, _)| (*at, *seq));
    Ok(items)
}

/// Keys in a state, of one interface or all, in delivery order.
pub(super) fn keys(
    c: &mut Client,
    state: State,
    interface: Option<&str>,
) -> Result<Vec<QueueKey>, postgres::Error> {
    let rows = c.query(
        "SELECT key FROM item WHERE state = $1 AND ($2::text IS NULL OR interface = $2)
         ORDER BY interface, queued_at, seq",
        &[&state.code(), &interface],
    )?;
    Ok(rows
        .iter()
        .map(|r| QueueKey::from_bytes(r.get::<_, &[u8]>(0)))
        .collect())
}

/// The counts and retry state of one interface.
pub(super) fn stats(c: &mut Client, interface: &str) -> Result<Stats, postgres::Error> {
    let counts = super::counts::read(c, interface)?;
    let oldest = c
        .query_opt(
            concat!(
                "SELECT queued_at FROM item WHERE interface = $1 AND state = ",
                pending!(),
                " ORDER BY queued_at, seq LIMIT 1"
            ),
            &[&interface],
        )?
        .map(|r| unsigned(r.get("queued_at")));
    let backoff = c
        .query_opt(
            "SELECT failures, next_attempt_ms, last_error, last_error_ms, paused,
                    last_success_ms FROM backoff WHERE interface = $1",
            &[&interface],
        )?
        .map(|b| Backoff {
            failures: u32::try_from(b.get::<_, i32>("failures")).unwrap_or(0),
            next_attempt_ms: unsigned(b.get("next_attempt_ms")),
            last_error: b.get("last_error"),
            last_error_ms: b.get::<_, Option<i64>>("last_error_ms").map(unsigned),
            paused: b.get("paused"),
            last_success_ms: b.get::<_, Option<i64>>("last_success_ms").map(unsigned),
        })
        .unwrap_or_default();
    Ok(Stats::counted(&counts, oldest, backoff))
}

/// The receipts of `request_id` (one per key that used the id), or only `api_key`'s.
pub(super) fn receipts(
    c: &mut Client,
    request_id: &str,
    api_key: Option<&str>,
) -> Result<Vec<Receipt>, postgres::Error> {
    let heads = c.query(
        "SELECT rid, api_key, received_at, interface FROM receipt
         WHERE request_id = $1 AND ($2::text IS NULL OR api_key = $2) ORDER BY received_at",
        &[&request_id, &api_key],
    )?;
    let mut out = Vec::with_capacity(heads.len());
    for h in heads {
        out.push(Receipt {
            request_id: request_id.to_string(),
            api_key: h.get("api_key"),
            received_at_ms: unsigned(h.get("received_at")),
            interface: h.get("interface"),
            records: lines(c, h.get("rid"))?,
        });
    }
    Ok(out)
}

fn lines(c: &mut Client, rid: i64) -> Result<Vec<ReceiptRecord>, postgres::Error> {
    let rows = c.query(
        "SELECT l.idx, l.key, s.state AS settled, s.at AS settled_at, s.reason,
                i.version = l.version AS same, i.state AS now, coalesce(i.state_at,
                i.updated_at) AS now_at, i.last_error
         FROM receipt_line l
         LEFT JOIN settled s ON s.key = l.key AND s.version = l.version
         LEFT JOIN item i ON i.key = l.key
         WHERE l.rid = $1 ORDER BY l.idx",
        &[&rid],
    )?;
    Ok(rows
        .iter()
        .map(|r| {
            let at = |name| r.get::<_, Option<i64>>(name).map(unsigned);
            let settled = r
                .get::<_, Option<i16>>("settled")
                .map(|code| (i64::from(code), at("settled_at"), r.get("reason")));
            let current = r.get::<_, Option<bool>>("same").map(|same| {
                let code = r.get::<_, Option<i16>>("now").map_or(-1, i64::from);
                (same, code, at("now_at"), r.get("last_error"))
            });
            let (state, updated_at_ms, reason) = receipt_line(LineFacts { settled, current });
            ReceiptRecord {
                index: u32::try_from(r.get::<_, i32>("idx")).unwrap_or(0),
                key: QueueKey::from_bytes(r.get::<_, &[u8]>("key")).to_string(),
                state,
                updated_at_ms,
                reason,
            }
        })
        .collect())
}

/// Removes one step of the receipts older than `before_ms`; how many rows went (0: done).
pub(super) fn prune_step(
    tx: &mut Transaction<'_>,
    before_ms: u64,
) -> Result<usize, postgres::Error> {
    let before = i64::try_from(before_ms).unwrap_or(i64::MAX);
    let rids: Vec<i64> = tx
        .query(
            "SELECT rid FROM receipt WHERE received_at < $1 ORDER BY received_at, rid LIMIT $2",
            &[&before, &PRUNE_REQUESTS],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    tx.execute("DELETE FROM receipt_line WHERE rid = ANY($1)", &[&rids])?;
    tx.execute("DELETE FROM receipt WHERE rid = ANY($1)", &[&rids])?;
    let settled = tx.execute(
        "DELETE FROM settled WHERE (key, version) IN
           (SELECT key, version FROM settled WHERE at < $1 ORDER BY at LIMIT $2)",
        &[&before, &PRUNE_SETTLED],
    )?;
    Ok(rids.len() + usize::try_from(settled).unwrap_or(0))
}
