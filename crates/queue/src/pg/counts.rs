//! The counts `stats` reports, on PostgreSQL: exact `counter` rows per (interface, kind),
//! changed in the transaction that changes the items, as SQLite keeps them. SQLite's one
//! writer adds up its changes in Rust; here triggers on `item` do it, one statement at a
//! time, from the rows the statement replaced and wrote (transition tables). The upsert is
//! one statement that cannot return the rows it replaced, and a look first would race
//! another node's insert of the same key; the trigger sees exactly what changed, whichever
//! statement, node or version changed it.
//!
//! Each database session adds to rows of its own (`writer` = its backend's process id), so
//! no two transactions ever wait on one counter row: rows shared by every node would be a
//! lock each commit of each node waits on. `stats` sums them. The rows of sessions that
//! ended are folded into row 0 at a node's start and by the hourly pruning loop, so they
//! stay as many as there are sessions, not as there ever were.

use crate::codes::{DELIVERED_KIND, counter_kind};
use postgres::{GenericClient, Transaction};

/// Schema 4: the counter rows, the triggers that keep them, and the counts the items give
/// (with the delivered counts of schema 1's `delivered` table). Creating the triggers locks
/// `item` against writes until the migration commits, so the first count sees every commit
/// before it and the triggers every one after. A TRUNCATE by hand (it holds `item` alone)
/// leaves only the delivered counts. `delivered` stays, empty: a node of schema 3
/// still running until it sees the new schema counts its deliveries there, and they count
/// (`read`) until a fold moves them over; were it gone, its deliveries could not be recorded
/// and would be sent again.
pub(super) const SCHEMA_V4: &str = concat!(
    "CREATE TABLE ap_intake.counter (interface text NOT NULL, kind text NOT NULL,
       writer integer NOT NULL, n bigint NOT NULL, PRIMARY KEY (interface, kind, writer));
     CREATE FUNCTION ap_intake.count_items() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN
       IF TG_OP = 'INSERT' THEN
         INSERT INTO ap_intake.counter AS c (interface, kind, writer, n)
         SELECT interface, kind, pg_backend_pid(), count(*)
         FROM (SELECT interface, ",
    counter_kind!("state"),
    " AS kind FROM written) AS w WHERE kind IS NOT NULL GROUP BY 1, 2
         ON CONFLICT (interface, kind, writer) DO UPDATE SET n = c.n + excluded.n;
       ELSIF TG_OP = 'DELETE' THEN
         INSERT INTO ap_intake.counter AS c (interface, kind, writer, n)
         SELECT interface, kind, pg_backend_pid(), -count(*)
         FROM (SELECT interface, ",
    counter_kind!("state"),
    " AS kind FROM replaced) AS r WHERE kind IS NOT NULL GROUP BY 1, 2
         ON CONFLICT (interface, kind, writer) DO UPDATE SET n = c.n + excluded.n;
       ELSIF TG_OP = 'TRUNCATE' THEN
         DELETE FROM ap_intake.counter WHERE kind <> 'delivered';
       ELSE
         INSERT INTO ap_intake.counter AS c (interface, kind, writer, n)
         SELECT interface, kind, pg_backend_pid(), sum(d)
         FROM (SELECT interface, ",
    counter_kind!("state"),
    " AS kind, 1 AS d FROM written
               UNION ALL SELECT interface, ",
    counter_kind!("state"),
    " AS kind, -1 AS d FROM replaced) AS u
         WHERE kind IS NOT NULL GROUP BY 1, 2 HAVING sum(d) <> 0
         ON CONFLICT (interface, kind, writer) DO UPDATE SET n = c.n + excluded.n;
       END IF;
       RETURN NULL;
     END $$;
     CREATE TRIGGER item_counted_insert AFTER INSERT ON ap_intake.item
       REFERENCING NEW TABLE AS written
       FOR EACH STATEMENT EXECUTE FUNCTION ap_intake.count_items();
     CREATE TRIGGER item_counted_update AFTER UPDATE ON ap_intake.item
       REFERENCING OLD TABLE AS replaced NEW TABLE AS written
       FOR EACH STATEMENT EXECUTE FUNCTION ap_intake.count_items();
     CREATE TRIGGER item_counted_delete AFTER DELETE ON ap_intake.item
       REFERENCING OLD TABLE AS replaced
       FOR EACH STATEMENT EXECUTE FUNCTION ap_intake.count_items();
     CREATE TRIGGER item_counted_truncate AFTER TRUNCATE ON ap_intake.item
       FOR EACH STATEMENT EXECUTE FUNCTION ap_intake.count_items();
     INSERT INTO ap_intake.counter (interface, kind, writer, n)
       SELECT interface, kind, 0, count(*) FROM (SELECT interface, ",
    counter_kind!("state"),
    " AS kind FROM ap_intake.item) AS i WHERE kind IS NOT NULL GROUP BY 1, 2;
     INSERT INTO ap_intake.counter (interface, kind, writer, n)
       SELECT interface, 'delivered', 0, n FROM ap_intake.delivered;
     DELETE FROM ap_intake.delivered;"
);

/// Adds deliveries, per interface, to this session's counter rows.
pub(super) fn add_delivered(
    tx: &mut Transaction<'_>,
    interfaces: &[&str],
    counts: &[i64],
) -> Result<(), postgres::Error> {
    tx.execute(
        "INSERT INTO counter AS c (interface, kind, writer, n)
         SELECT f, $3, pg_backend_pid(), n FROM unnest($1::text[], $2::bigint[]) AS d(f, n)
         ON CONFLICT (interface, kind, writer) DO UPDATE SET n = c.n + excluded.n",
        &[&interfaces, &counts, &DELIVERED_KIND],
    )?;
    Ok(())
}

/// One interface's counter rows, (kind, n), each kind summed over the sessions (and the
/// deliveries a node of schema 3 counted since the last fold).
pub(super) fn read(
    c: &mut impl GenericClient,
    interface: &str,
) -> Result<Vec<(String, i64)>, postgres::Error> {
    Ok(c.query(
        "SELECT kind, sum(n)::bigint AS n FROM (
           SELECT kind, n FROM counter WHERE interface = $1
           UNION ALL SELECT $2, n FROM delivered WHERE interface = $1) AS c
         GROUP BY kind",
        &[&interface, &DELIVERED_KIND],
    )?
    .iter()
    .map(|r| (r.get("kind"), r.get("n")))
    .collect())
}

/// Folds the rows of sessions that have ended into row 0: the sums stay, the rows do not
/// pile up. A row its session (or a new one with the same process id) is changing is
/// skipped, not waited for, so a fold never holds up a writer. Deliveries a node of schema 3
/// counted move over too.
pub(super) fn fold(c: &mut impl GenericClient) -> Result<(), postgres::Error> {
    c.execute(
        "WITH moved AS (DELETE FROM delivered RETURNING interface, n)
         INSERT INTO counter AS c (interface, kind, writer, n)
         SELECT interface, $1, 0, n FROM moved
         ON CONFLICT (interface, kind, writer) DO UPDATE SET n = c.n + excluded.n",
        &[&DELIVERED_KIND],
    )?;
    c.execute(
        "WITH ended AS (
           DELETE FROM counter WHERE (interface, kind, writer) IN (
             SELECT interface, kind, writer FROM counter c WHERE writer <> 0
               AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = c.writer)
             FOR UPDATE SKIP LOCKED)
           RETURNING interface, kind, n)
         INSERT INTO counter AS c (interface, kind, writer, n)
         SELECT interface, kind, 0, sum(n) FROM ended GROUP BY 1, 2
         ON CONFLICT (interface, kind, writer) DO UPDATE SET n = c.n + excluded.n",
        &[],
    )?;
    Ok(())
}
