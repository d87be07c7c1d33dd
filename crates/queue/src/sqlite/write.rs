//! Changes to the queue tables, each inside the caller's transaction (schema in `mod.rs`).
//! Counters change with the items in the same transaction, so they stay exact.

use super::fault::Fault;
use super::outcomes::{self, Origin};
use super::receipts::{self, Heads};
use crate::codes::{
    DELIVERED_KIND, dropped_because, parked, pending, quarantined_because, rejected, stored_ms,
    stored_now,
};
use crate::receipt::ReceiptState;
use crate::{NewRecord, QueueKey, Sent, State};
use rusqlite::{OptionalExtension, Statement, Transaction, params};

/// Counter changes collected during a transaction and written once at its end. A transaction
/// touches few (interface, kind) pairs: a list searched in place costs less per record than
/// hashing and an owned key.
#[derive(Default)]
pub(super) struct Counts(Vec<(String, &'static str, i64)>);

impl Counts {
    pub fn add(&mut self, interface: &str, kind: &'static str, delta: i64) {
        match self
            .0
            .iter_mut()
            .find(|(i, k, _)| *k == kind && i == interface)
        {
            Some((_, _, n)) => *n += delta,
            None => self.0.push((interface.to_string(), kind, delta)),
        }
    }

    pub fn write(self, tx: &Transaction<'_>) -> rusqlite::Result<()> {
        let mut stmt = tx.prepare_cached(
            "INSERT INTO counter (interface, kind, n) VALUES (?1, ?2, max(?3, 0))
             ON CONFLICT (interface, kind) DO UPDATE SET n = max(n + ?3, 0)",
        )?;
        for (interface, kind, delta) in self.0 {
            if delta != 0 {
                stmt.execute(params![interface, kind, delta])?;
            }
        }
        Ok(())
    }
}

/// What an upsert needs of the row it replaces.
struct Old {
    rowid: i64,
    interface: String,
    state: Option<State>,
    attempts: i64,
    last_error: Option<String>,
    /// Where its version came from: it is superseded now (D48).
    origin: Option<Origin>,
}

/// Reads [`Old`] by key (`?1`).
const OLD: &str = "SELECT rowid, interface, state, attempts, last_error, origin_request,
    origin_client, origin_index FROM item WHERE key = ?1";

fn old(stmt: &mut Statement<'_>, key: &QueueKey) -> rusqlite::Result<Option<Old>> {
    stmt.query_row(params![key.as_bytes()], |r| {
        // Read leniently: a damaged row is replaced, not a reason to refuse the new record.
        Ok(Old {
            rowid: r.get(0)?,
            interface: r.get::<_, String>(1).unwrap_or_default(),
            state: r.get::<_, i64>(2).ok().and_then(State::from_code),
            attempts: r.get(3).unwrap_or(0),
            last_error: r.get(4).unwrap_or(None),
            origin: Origin::read(r, 5),
        })
    })
    .optional()
}

/// Bits of a rowid below the line number: the version that placed the key.
pub(super) const PLACE_BITS: u32 = 48;

/// The line numbers of the interfaces a transaction queues into, each read (or made) once.
#[derive(Default)]
pub(super) struct Lines(Vec<(String, i64)>);

impl Lines {
    /// The number of `interface`'s line, numbering a new interface's line on first use.
    pub fn of(&mut self, tx: &Transaction<'_>, interface: &str) -> rusqlite::Result<i64> {
        if let Some((_, n)) = self.0.iter().find(|(i, _)| i == interface) {
            return Ok(*n);
        }
        let found: Option<i64> = tx
            .prepare_cached("SELECT n FROM line WHERE interface = ?1")?
            .query_row(params![interface], |r| r.get(0))
            .optional()?;
        let n = match found {
            Some(n) => n,
            None => {
                tx.prepare_cached("INSERT INTO line (interface) VALUES (?1)")?
                    .execute(params![interface])?;
                tx.last_insert_rowid()
            }
        };
        self.0.push((interface.to_string(), n));
        Ok(n)
    }

    /// The place of a key that `version` puts at the end of `interface`'s line.
    pub fn place(
        &mut self,
        tx: &Transaction<'_>,
        interface: &str,
        version: i64,
    ) -> rusqlite::Result<i64> {
        Ok((self.of(tx, interface)? << PLACE_BITS) | (version & ((1 << PLACE_BITS) - 1)))
    }
}

/// Stores records as pending (D16): a pending key keeps its place in the line, its attempts
/// and last error, and only its version, times and XML change; any other key goes to the end
/// of its interface's line. `version` is the next version to hand out, advanced per record.
///
/// A new key is inserted without a look first (the insert finds a key already there by
/// itself, and then does nothing): the look is a second search of the key index, about a
/// sixth of the writer's CPU at 100 new records a request (BENCHMARKS.md). Records come in
/// runs, new keys after new keys and resends after resends, so the record before decides:
/// after a resend the row is looked up first, as an insert that finds the key would be a
/// search in vain (D27: floods of resends cost what they did).
pub(super) fn upsert(
    tx: &Transaction<'_>,
    records: &[NewRecord],
    now_ms: u64,
    version: &mut u64,
) -> Result<(), Fault> {
    let now = stored_ms(now_ms);
    let mut counts = Counts::default();
    let mut heads = Heads::default();
    let mut lines = Lines::default();
    // Prepared once per transaction: a cached statement is still looked up and returned per
    // use.
    let mut find = tx.prepare_cached(OLD)?;
    let mut add = tx.prepare_cached(concat!(
        "INSERT INTO item (rowid, key, interface, state, version, queued_at, updated_at,
                           attempts, last_error, xml, origin_request, origin_client,
                           origin_index)
         VALUES (?1, ?2, ?3, ",
        pending!(),
        ", ?4, ?5, ?5, 0, NULL, ?6, ?7, ?8, ?9) ON CONFLICT (key) DO NOTHING"
    ))?;
    // Touches no index: neither the key, the place nor the state change.
    let mut replace = tx.prepare_cached(
        "UPDATE item SET version = ?2, updated_at = ?3, xml = ?4, state_at = NULL,
           origin_request = ?5, origin_client = ?6, origin_index = ?7
         WHERE rowid = ?1",
    )?;
    let mut last_was_new = true;
    for rec in records {
        let v = i64::try_from(*version).unwrap_or(i64::MAX);
        *version += 1;
        let origin = Origin::of(rec.receipt.as_ref());
        let (o_request, o_client, o_index) = Origin::columns(origin.as_ref());
        let mut insert = || -> rusqlite::Result<bool> {
            let place = lines.place(tx, rec.interface, v)?;
            let args = params![
                place,
                rec.key.as_bytes(),
                rec.interface,
                v,
                now,
                rec.xml,
                o_request,
                o_client,
                o_index
            ];
            Ok(add.execute(args)? == 1)
        };
        let stored = last_was_new && insert()?;
        let found = if stored {
            None
        } else {
            old(&mut find, &rec.key)?
        };
        last_was_new = found.is_none();
        if let Some(Old {
            origin: Some(from),
            interface,
            ..
        }) = &found
        {
            outcomes::append(
                tx,
                from,
                rec.key.as_bytes(),
                interface,
                ReceiptState::Superseded,
                None,
            )?;
        }
        match found {
            None => {
                // The insert cannot find the key now: it was not there a moment ago.
                if !stored && !insert()? {
                    return Err(Fault::Broken(
                        "a key missing a moment ago could not be inserted",
                    ));
                }
            }
            Some(o) if o.state == Some(State::Pending) && o.interface == rec.interface => {
                replace.execute(params![
                    o.rowid, v, now, rec.xml, o_request, o_client, o_index
                ])?;
                counts.add(&o.interface, State::Pending.name(), -1);
            }
            Some(o) => {
                // To the end of the line: another interface's (its queued time, attempts and
                // last error stay with a pending key), or anew after a rejection.
                let place = lines.place(tx, rec.interface, v)?;
                let pending = o.state == Some(State::Pending);
                tx.prepare_cached(concat!(
                    "UPDATE item SET rowid = ?2, interface = ?3, state = ",
                    pending!(),
                    ", version = ?4,
                       queued_at = CASE WHEN ?8 THEN queued_at ELSE ?5 END, updated_at = ?5,
                       attempts = ?6, last_error = ?7, xml = ?9, state_at = NULL,
                       origin_request = ?10, origin_client = ?11, origin_index = ?12
                     WHERE rowid = ?1"
                ))?
                .execute(params![
                    o.rowid,
                    place,
                    rec.interface,
                    v,
                    now,
                    if pending { o.attempts } else { 0 },
                    if pending {
                        o.last_error.as_deref()
                    } else {
                        None
                    },
                    pending,
                    rec.xml,
                    o_request,
                    o_client,
                    o_index
                ])?;
                if let Some(state) = o.state {
                    counts.add(&o.interface, state.name(), -1);
                }
            }
        }
        counts.add(rec.interface, State::Pending.name(), 1);
        if let Some(line) = &rec.receipt {
            heads.line(line, &rec.key, v);
        }
    }
    heads.write(tx)?;
    Ok(counts.write(tx)?)
}

fn version(sent: &Sent) -> i64 {
    i64::try_from(sent.version).unwrap_or(-1)
}

/// Removes delivered items still at the version sent; counts them. Every version sent is
/// noted as delivered for its receipt (D38), also one replaced while it was on its way; with
/// `keep`, each removed version's XML is kept for a replay (D49).
pub(super) fn delivered(
    tx: &Transaction<'_>,
    sent: &[Sent],
    keep: bool,
) -> rusqlite::Result<usize> {
    let mut counts = Counts::default();
    let mut stmt = tx.prepare_cached(concat!(
        "DELETE FROM item WHERE key = ?1 AND version = ?2 AND state = ",
        pending!(),
        " RETURNING interface, origin_request, origin_client, origin_index, xml"
    ))?;
    let mut gone = 0;
    for s in sent {
        let found: Option<(String, Option<Origin>, String)> = stmt
            .query_row(params![s.key.as_bytes(), version(s)], |r| {
                Ok((r.get(0)?, Origin::read(r, 1), r.get(4)?))
            })
            .optional()?;
        receipts::settle(tx, s.key.as_bytes(), version(s), None, None)?;
        if let Some((interface, origin, xml)) = found {
            if keep {
                super::replay::keep(tx, s.key.as_bytes(), &interface, version(s), &xml)?;
            }
            if let Some(from) = &origin {
                let (key, state) = (s.key.as_bytes(), ReceiptState::Delivered);
                outcomes::append(tx, from, key, &interface, state, None)?;
            }
            counts.add(&interface, State::Pending.name(), -1);
            counts.add(&interface, DELIVERED_KIND, 1);
            gone += 1;
        }
    }
    counts.write(tx)?;
    Ok(gone)
}

/// Counts a failed attempt on the items still at the version sent.
pub(super) fn failed(tx: &Transaction<'_>, sent: &[Sent], error: &str) -> rusqlite::Result<()> {
    let mut stmt = tx.prepare_cached(concat!(
        "UPDATE item SET attempts = attempts + 1, last_error = ?3
         WHERE key = ?1 AND version = ?2 AND state = ",
        pending!()
    ))?;
    for s in sent {
        stmt.execute(params![s.key.as_bytes(), version(s), error])?;
    }
    Ok(())
}

/// Parks an item the platform refused, if it is still pending at the version sent.
pub(super) fn reject(tx: &Transaction<'_>, sent: &Sent, error: &str) -> rusqlite::Result<bool> {
    let interface: Option<(String, Option<Origin>)> = tx
        .prepare_cached(concat!(
            "UPDATE item SET state = ",
            rejected!(),
            ", attempts = attempts + 1, last_error = ?3, state_at = ?4
             WHERE key = ?1 AND version = ?2 AND state = ",
            pending!(),
            " RETURNING interface, origin_request, origin_client, origin_index"
        ))?
        .query_row(
            params![sent.key.as_bytes(), version(sent), error, stored_now()],
            |r| Ok((r.get::<_, String>(0)?, Origin::read(r, 1))),
        )
        .optional()?;
    let Some((interface, origin)) = interface else {
        return Ok(false);
    };
    if let Some(from) = &origin {
        let (key, state) = (sent.key.as_bytes(), ReceiptState::Rejected);
        outcomes::append(tx, from, key, &interface, state, Some(error))?;
    }
    let mut counts = Counts::default();
    counts.add(&interface, State::Pending.name(), -1);
    counts.add(&interface, State::Rejected.name(), 1);
    counts.write(tx)?;
    Ok(true)
}

/// The interface and state of a parked (rejected or quarantined) item.
fn parked(tx: &Transaction<'_>, key: &QueueKey) -> rusqlite::Result<Option<(String, State)>> {
    let row: Option<(String, i64)> = tx
        .prepare_cached(concat!(
            "SELECT interface, state FROM item WHERE key = ?1 AND state IN ",
            parked!()
        ))?
        .query_row(params![key.as_bytes()], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    Ok(row.and_then(|(i, s)| Some((i, State::from_code(s)?))))
}

/// Puts a rejected or quarantined item back in the line, at the place it had (D18, D29).
pub(super) fn requeue(tx: &Transaction<'_>, key: &QueueKey) -> rusqlite::Result<bool> {
    let Some((interface, state)) = parked(tx, key)? else {
        return Ok(false);
    };
    tx.prepare_cached(concat!(
        "UPDATE item SET state = ",
        pending!(),
        ", attempts = 0, state_at = ?2 WHERE key = ?1"
    ))?
    .execute(params![key.as_bytes(), stored_now()])?;
    let mut counts = Counts::default();
    counts.add(&interface, state.name(), -1);
    counts.add(&interface, State::Pending.name(), 1);
    counts.write(tx)?;
    Ok(true)
}

/// Removes a rejected or quarantined item for good.
pub(super) fn discard(tx: &Transaction<'_>, key: &QueueKey) -> rusqlite::Result<bool> {
    let Some((interface, state)) = parked(tx, key)? else {
        return Ok(false);
    };
    let (version, reason, origin): (i64, Option<String>, Option<Origin>) = tx
        .prepare_cached(
            "DELETE FROM item WHERE key = ?1
             RETURNING version, last_error, origin_request, origin_client, origin_index",
        )?
        .query_row(params![key.as_bytes()], |r| {
            Ok((r.get(0)?, r.get(1)?, Origin::read(r, 2)))
        })?;
    let reason = dropped_because(reason.as_deref());
    if let Some(from) = &origin {
        // D48: the drop is a change of the reason its client hears of, in the state it had.
        let shown = match state {
            State::Quarantined => ReceiptState::Quarantined,
            _ => ReceiptState::Rejected,
        };
        outcomes::append(tx, from, key.as_bytes(), &interface, shown, Some(&reason))?;
    }
    receipts::settle(tx, key.as_bytes(), version, Some(state), Some(&reason))?;
    let mut counts = Counts::default();
    counts.add(&interface, state.name(), -1);
    counts.write(tx)?;
    Ok(true)
}

/// Moves pending rows that cannot be read out of the line (D29), with the reason.
pub(super) fn quarantine(
    tx: &Transaction<'_>,
    interface: &str,
    rows: &[(i64, String)],
) -> rusqlite::Result<()> {
    let mut counts = Counts::default();
    let mut stmt = tx.prepare_cached(concat!(
        "UPDATE item SET state = ?3, last_error = ?2, state_at = ?4
         WHERE rowid = ?1 AND state = ",
        pending!(),
        " RETURNING key, origin_request, origin_client, origin_index"
    ))?;
    for (rowid, reason) in rows {
        let reason = quarantined_because(reason);
        let args = params![rowid, reason, State::Quarantined.code(), stored_now()];
        let changed: Option<(Vec<u8>, Option<Origin>)> = stmt
            .query_row(args, |r| {
                Ok((r.get(0).unwrap_or_default(), Origin::read(r, 1)))
            })
            .optional()?;
        if let Some((key, origin)) = changed {
            if let Some(from) = &origin {
                let state = ReceiptState::Quarantined;
                outcomes::append(tx, from, &key, interface, state, Some(&reason))?;
            }
            counts.add(interface, State::Pending.name(), -1);
            counts.add(interface, State::Quarantined.name(), 1);
        }
    }
    counts.write(tx)
}

/// Stores the retry state of one interface.
pub(super) fn set_backoff(
    tx: &Transaction<'_>,
    interface: &str,
    b: &crate::Backoff,
) -> rusqlite::Result<()> {
    let ms = stored_ms;
    tx.prepare_cached(
        "INSERT OR REPLACE INTO backoff (interface, failures, next_attempt_ms, last_error,
                                         last_error_ms, paused, last_success_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        interface,
        b.failures,
        ms(b.next_attempt_ms),
        b.last_error,
        b.last_error_ms.map(ms),
        b.paused,
        b.last_success_ms.map(ms)
    ])?;
    Ok(())
}

/// Records the version below which every version may have been handed out.
pub(super) fn set_next_version(tx: &Transaction<'_>, next: u64) -> rusqlite::Result<()> {
    tx.prepare_cached("INSERT OR REPLACE INTO meta (name, value) VALUES ('next_version', ?1)")?
        .execute(params![stored_ms(next)])?;
    Ok(())
}

/// Writes a marker and reads it back inside the transaction.
pub(super) fn probe(tx: &Transaction<'_>, now_ms: u64) -> rusqlite::Result<bool> {
    let now = stored_ms(now_ms);
    tx.execute(
        "INSERT OR REPLACE INTO meta (name, value) VALUES ('probe', ?1)",
        params![now],
    )?;
    let back: i64 = tx.query_row("SELECT value FROM meta WHERE name = 'probe'", [], |r| {
        r.get(0)
    })?;
    Ok(back == now)
}

#[cfg(test)]
mod tests {
    use super::super::{Mode, SqliteStore};
    use crate::{NewRecord, QueueKey, Store};

    fn record(code: &str) -> NewRecord {
        NewRecord {
            key: QueueKey::new("gl-code", &["main", code]).unwrap(),
            interface: "general-ledger-codes-v1",
            xml: format!("<gl_code>{code}</gl_code>"),
            receipt: None,
        }
    }

    /// D31: the line is the order of queueing, not of the wall clock's readings.
    #[test]
    fn the_line_keeps_the_order_of_queueing_when_the_wall_clock_goes_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path(), Mode::Serve, 0).unwrap();
        for (code, now) in [("A", 5000), ("B", 1000), ("C", 3000), ("A", 900)] {
            store.upsert(&[record(code)], now).unwrap();
        }
        let line: Vec<(String, u64)> = store
            .take("general-ledger-codes-v1", 10)
            .unwrap()
            .into_iter()
            .map(|(k, i)| (k.to_string(), i.queued_at_ms))
            .collect();
        assert_eq!(
            line,
            [
                ("gl-code:main/A".to_string(), 5000),
                ("gl-code:main/B".to_string(), 1000),
                ("gl-code:main/C".to_string(), 3000)
            ]
        );
    }

    /// The meta row reserves a block of versions in the commit that reaches it, and only then;
    /// a queue found as a power cut leaves it (the synced files, no clean close) goes on above
    /// every version committed.
    #[test]
    fn versions_are_reserved_a_block_at_a_time_and_never_repeat_after_a_crash() {
        use super::super::{FILE_NAME, VERSION_BLOCK};
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path(), Mode::Serve, 0).unwrap();
        let meta = || -> u64 {
            let conn = rusqlite::Connection::open(dir.path().join(FILE_NAME)).unwrap();
            conn.query_row(
                "SELECT value FROM meta WHERE name = 'next_version'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .unwrap() as u64
        };
        let version = |code: &str| -> u64 {
            let key = QueueKey::new("gl-code", &["main", code]).unwrap();
            store.get(&key).unwrap().unwrap().version
        };
        store.upsert(&[record("A")], 1000).unwrap();
        let first = version("A");
        let reserved = meta();
        assert_eq!(reserved, first + 1 + VERSION_BLOCK);
        for n in 0..20 {
            store.upsert(&[record(&format!("B{n}"))], 1000).unwrap();
        }
        assert_eq!(meta(), reserved, "not rewritten while inside the block");
        // One upsert that runs past the block reserves the next in its own commit.
        let many: Vec<NewRecord> = (0..VERSION_BLOCK)
            .map(|n| record(&format!("C{n}")))
            .collect();
        store.upsert(&many, 1000).unwrap();
        let last = version(&format!("C{}", VERSION_BLOCK - 1));
        assert!(last >= reserved, "the upsert ran past the block: {last}");
        assert_eq!(meta(), last + 1 + VERSION_BLOCK);

        let copy = tempfile::tempdir().unwrap();
        for suffix in ["", "-wal"] {
            let name = format!("{FILE_NAME}{suffix}");
            std::fs::copy(dir.path().join(&name), copy.path().join(&name)).unwrap();
        }
        let after = SqliteStore::open(copy.path(), Mode::Serve, 0).unwrap();
        after.upsert(&[record("A")], 2000).unwrap();
        let key = QueueKey::new("gl-code", &["main", "A"]).unwrap();
        let again = after.get(&key).unwrap().unwrap().version;
        assert!(again > last, "{again} > {last}");
    }
}
