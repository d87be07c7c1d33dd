//! This process in the cluster (D41): a node is a running process, not a name. Each open of
//! the store draws an instance id of its own; leases, the node row, the heartbeat and the
//! readiness probe are keyed by it, so two processes with one `[storage.postgres] node`
//! (two on one host, cloned machines) never take, renew or release each other's leases.

use super::StoreError;
use crate::Node;
use postgres::Client;
use std::time::Duration;

/// Rows of instances not seen for this many of their lease periods are pruned (an hour at
/// the default 30 s): a process gone without a clean stop (killed, its machine lost) leaves
/// its row behind, which status shows until then; rows must not pile up forever with every
/// crash and restart. Its leases lapsed long before.
const PRUNE_AFTER_LEASES: f64 = 120.0;

/// A new instance id: 128 random bits in hex, never shared by two processes in practice.
pub(super) fn draw() -> Result<String, StoreError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| StoreError::Internal(format!("cannot draw this node's instance id: {e}")))?;
    Ok(hex::encode(bytes))
}

/// This instance is alive: its row's `last_seen` and its leases move on (D39); a new row
/// marks when it started. Rows of instances long gone are pruned (a row pruned while its
/// process was cut off comes back when it returns, started then).
pub(super) fn beat(
    client: &mut Client,
    instance: &str,
    name: &str,
    lease: Duration,
) -> Result<(), postgres::Error> {
    let secs = lease.as_secs_f64();
    client.execute(
        "INSERT INTO node (instance, name, started_at, last_seen, lease_secs)
         VALUES ($1, $2, now(), now(), $3)
         ON CONFLICT (instance) DO UPDATE SET last_seen = now(), lease_secs = excluded.lease_secs",
        &[&instance, &name, &secs],
    )?;
    client.execute(
        "UPDATE item SET lease_until = now() + make_interval(secs => $2)
         WHERE lease_instance = $1 AND lease_until > now()",
        &[&instance, &secs],
    )?;
    client.execute(
        "DELETE FROM node WHERE last_seen < now() - make_interval(secs => lease_secs * $1)",
        &[&PRUNE_AFTER_LEASES],
    )?;
    // Probe rows carry the node's clock in ms; one not written for as long goes too.
    let horizon = (secs * PRUNE_AFTER_LEASES * 1000.0) as i64;
    client.execute(
        "DELETE FROM probe WHERE at < $1",
        &[&(crate::codes::stored_now() - horizon)],
    )?;
    Ok(())
}

/// A clean stop (D41): the keys this instance holds are free for another node at once, and
/// its row and probe go (a stopped process is no node). A key another instance took after
/// this one's lease lapsed is not touched.
pub(super) fn release(client: &mut Client, instance: &str) -> Result<(), postgres::Error> {
    let mut tx = client.transaction()?;
    tx.execute(
        "UPDATE item SET lease_instance = NULL, lease_until = NULL WHERE lease_instance = $1",
        &[&instance],
    )?;
    tx.execute("DELETE FROM node WHERE instance = $1", &[&instance])?;
    tx.execute("DELETE FROM probe WHERE node = $1", &[&instance])?;
    tx.commit()
}

/// The instances that ran the service and did not stop cleanly, with the leases each holds
/// now (D39, D41); `live`: seen within its lease period.
pub(super) fn nodes(c: &mut Client) -> Result<Vec<Node>, postgres::Error> {
    let rows = c.query(
        "SELECT n.name, n.instance, (extract(epoch FROM n.started_at) * 1000)::bigint,
                (extract(epoch FROM n.last_seen) * 1000)::bigint,
                (SELECT count(*) FROM item i
                 WHERE i.lease_instance = n.instance AND i.lease_until > now()),
                n.last_seen > now() - make_interval(secs => n.lease_secs)
         FROM node n ORDER BY n.name, n.started_at, n.instance",
        &[],
    )?;
    let ms = |v: i64| u64::try_from(v).unwrap_or(0);
    Ok(rows
        .iter()
        .map(|r| Node {
            name: r.get(0),
            instance: r.get(1),
            started_at_ms: ms(r.get(2)),
            last_seen_ms: ms(r.get(3)),
            leases: ms(r.get(4)),
            live: r.get(5),
        })
        .collect())
}

/// How many other live instances carry `name` (a warning at start, D41).
pub(super) fn namesakes(
    c: &mut Client,
    instance: &str,
    name: &str,
) -> Result<i64, postgres::Error> {
    Ok(c.query_one(
        "SELECT count(*) FROM node WHERE name = $1 AND instance <> $2
           AND last_seen > now() - make_interval(secs => lease_secs)",
        &[&name, &instance],
    )?
    .get(0))
}
