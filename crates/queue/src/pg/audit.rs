//! The audit trail (D50) on PostgreSQL: a row per record, numbered as written.

use crate::audit::{AuditRecord, PRUNE_STEP};
use crate::codes::stored_ms;
use postgres::{Client, Transaction};

/// Schema 3's audit table.
pub(super) const SCHEMA_V3: &str = "
  CREATE TABLE ap_intake.audit (n bigserial PRIMARY KEY, id text NOT NULL UNIQUE,
    at bigint NOT NULL, actor text NOT NULL, uid bigint, action text NOT NULL,
    args text NOT NULL, changed text NOT NULL);";

/// Adds `record`, once.
pub(super) fn add(
    client: &mut impl postgres::GenericClient,
    r: &AuditRecord,
) -> Result<(), postgres::Error> {
    client.execute(
        "INSERT INTO audit (id, at, actor, uid, action, args, changed)
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING",
        &[
            &r.id,
            &stored_ms(r.at_ms),
            &r.actor,
            &r.uid.map(i64::from),
            &r.action,
            &r.args,
            &r.changed,
        ],
    )?;
    Ok(())
}

/// The records from `since` (unix ms) on, in the order written.
pub(super) fn trail(
    client: &mut Client,
    since: u64,
    limit: usize,
) -> Result<Vec<AuditRecord>, postgres::Error> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = client.query(
        "SELECT id, at, actor, uid, action, args, changed FROM audit WHERE at >= $1
         ORDER BY n LIMIT $2",
        &[&stored_ms(since), &limit],
    )?;
    Ok(rows
        .iter()
        .map(|r| AuditRecord {
            id: r.get("id"),
            at_ms: u64::try_from(r.get::<_, i64>("at")).unwrap_or(0),
            actor: r.get("actor"),
            uid: r
                .get::<_, Option<i64>>("uid")
                .and_then(|u| u32::try_from(u).ok()),
            action: r.get("action"),
            args: r.get("args"),
            changed: r.get("changed"),
        })
        .collect())
}

/// Removes up to [`PRUNE_STEP`] records made before `before` (unix ms), oldest first.
pub(super) fn prune_step(tx: &mut Transaction<'_>, before: u64) -> Result<usize, postgres::Error> {
    let n = tx.execute(
        "DELETE FROM audit WHERE n IN
           (SELECT n FROM audit WHERE at < $1 ORDER BY n LIMIT $2)",
        &[&stored_ms(before), &PRUNE_STEP],
    )?;
    Ok(usize::try_from(n).unwrap_or(0))
}
