//! The outcome feed (D48) on PostgreSQL (the meaning is in `feed.rs`). An outcome's place is
//! its transaction's id, then its number; a page shows only what transactions older than
//! every one still running wrote, so no node's commit can land behind a cursor.

use crate::QueueKey;
use crate::codes::{PRUNE_SETTLED, outcome_code, outcome_state, superseded};
use crate::feed::{self, Outcome, Position, Request};
use postgres::{Client, Transaction};

/// Schema 3: the item's origin, the feed, and the trigger that notes a replaced version as
/// superseded. A trigger, because the upsert is one statement that cannot return the rows
/// it replaced, and a look first would race another node's insert of the same key; the
/// trigger sees the old row under its lock.
pub(super) const SCHEMA_V3: &str = concat!(
    "ALTER TABLE ap_intake.item ADD COLUMN origin_request text,
       ADD COLUMN origin_client text, ADD COLUMN origin_index integer;
     CREATE TABLE ap_intake.outcome (
       seq bigserial PRIMARY KEY,
       tx xid8 NOT NULL DEFAULT pg_current_xact_id(),
       client text NOT NULL, state smallint NOT NULL, interface text NOT NULL,
       request_id text NOT NULL, idx integer NOT NULL, key bytea NOT NULL, reason text,
       at bigint NOT NULL);
     CREATE INDEX outcome_feed ON ap_intake.outcome (client, state, tx, seq);
     CREATE FUNCTION ap_intake.note_superseded() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN
       INSERT INTO ap_intake.outcome (client, state, interface, request_id, idx, key, at)
       VALUES (OLD.origin_client, ",
    superseded!(),
    ", OLD.interface, OLD.origin_request, OLD.origin_index,
               OLD.key, NEW.updated_at);
       RETURN NULL;
     END $$;
     CREATE TRIGGER item_superseded AFTER UPDATE ON ap_intake.item FOR EACH ROW
       WHEN (OLD.version IS DISTINCT FROM NEW.version AND OLD.origin_client IS NOT NULL)
       EXECUTE FUNCTION ap_intake.note_superseded();"
);

/// Appends, in the statement that changes the items, an outcome for each changed row with
/// an origin: `changed` is a data-modifying CTE named `changed` returning `key`,
/// `interface`, the origin columns and `why` (the reason); `$state` and `$at` are the
/// numbered parameters of the outcome's code and time. What follows selects from `changed`.
macro_rules! with_outcomes {
    ($changed:expr, $state:literal, $at:literal, $select:expr) => {
        concat!(
            "WITH changed AS (",
            $changed,
            "), noted AS (INSERT INTO outcome (client, state, interface, request_id, idx, key,
                                              reason, at)
               SELECT origin_client, ",
            $state,
            "::smallint, interface, origin_request, origin_index, key, why, ",
            $at,
            "::bigint FROM changed WHERE origin_client IS NOT NULL) ",
            $select
        )
    };
}
pub(super) use with_outcomes;

/// The item columns that hold its origin, as `RETURNING` names them for [`with_outcomes`].
macro_rules! origin_returned {
    () => {
        "origin_request, origin_client, origin_index"
    };
}
pub(super) use origin_returned;

/// A page of the feed: every state read under one bound; `None` for a cursor of SQLite's.
pub(super) fn page(
    client: &mut Client,
    request: &Request<'_>,
) -> Result<Option<feed::Page>, postgres::Error> {
    let after = match request.after {
        Some(Position { tx: None, .. }) => return Ok(None),
        Some(p) => p,
        None => ORIGIN,
    };
    let tx_after = after.tx.unwrap_or(0).to_string();
    let seq_after = i64::try_from(after.seq).unwrap_or(i64::MAX);
    let limit = i64::try_from(request.limit).unwrap_or(i64::MAX);
    // One bound for every state: each statement has its own snapshot, and a later one's
    // bound could list a state's outcome past another state's not yet seen.
    let bound: String = client
        .query_one("SELECT pg_snapshot_xmin(pg_current_snapshot())::text", &[])?
        .get(0);
    let stmt = client.prepare(
        "SELECT tx::text AS tx, seq, request_id, idx, key, interface, reason, at FROM outcome
         WHERE client = $1 AND state = $2 AND ($3::text IS NULL OR interface = $3)
           AND (tx, seq) > ($4::text::xid8, $5) AND tx < $6::text::xid8
         ORDER BY tx, seq LIMIT $7",
    )?;
    let mut read = Vec::new();
    for state in request.states {
        let Some(code) = outcome_code(*state) else {
            continue;
        };
        let rows = client.query(
            &stmt,
            &[
                &request.client,
                &code,
                &request.interface,
                &tx_after,
                &seq_after,
                &bound,
                &limit,
            ],
        )?;
        for r in &rows {
            read.push(Outcome {
                position: Position {
                    tx: r.get::<_, &str>("tx").parse().ok(),
                    seq: u64::try_from(r.get::<_, i64>("seq")).unwrap_or(0),
                },
                request_id: r.get("request_id"),
                index: u32::try_from(r.get::<_, i32>("idx")).unwrap_or(u32::MAX),
                key: QueueKey::from_bytes(r.get::<_, &[u8]>("key")).to_string(),
                interface: r.get("interface"),
                state: outcome_state(code.into()).unwrap_or(*state),
                reason: r.get("reason"),
                at_ms: u64::try_from(r.get::<_, i64>("at")).unwrap_or(0),
            });
        }
    }
    Ok(Some(feed::merge(request, read, ORIGIN)))
}

/// The place before every outcome.
const ORIGIN: Position = Position {
    tx: Some(0),
    seq: 0,
};

/// Removes up to [`PRUNE_SETTLED`] outcomes older than `before` (stored ms), oldest first
/// (by number, which follows time); how many went.
pub(super) fn prune_step(tx: &mut Transaction<'_>, before: i64) -> Result<usize, postgres::Error> {
    let n = tx.execute(
        "DELETE FROM outcome WHERE seq IN
           (SELECT seq FROM outcome WHERE seq < coalesce(
              (SELECT seq FROM outcome WHERE at >= $1 ORDER BY seq LIMIT 1),
              9223372036854775807)
            ORDER BY seq LIMIT $2)",
        &[&before, &PRUNE_SETTLED],
    )?;
    Ok(usize::try_from(n).unwrap_or(0))
}
