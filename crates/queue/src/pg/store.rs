//! The [`Store`] trait on [`PostgresStore`].

use super::{PostgresStore, audit, counts, fault, instance, outcomes, read, replay, write};
use crate::receipt::Receipt;
use crate::{Backoff, Item, NewRecord, QueueKey, Sent, State, Stats, Store, StoreError};
use postgres::{Client, Transaction};
use std::time::Duration;

impl PostgresStore {
    /// Runs `f` in one transaction on a pooled connection; again, up to [`CONFLICT_RETRIES`]
    /// times, when the database ended it to break a deadlock (`fault::conflicted`).
    pub(super) fn tx<T>(
        &self,
        mut f: impl FnMut(&mut Transaction<'_>) -> Result<T, postgres::Error>,
    ) -> Result<T, StoreError> {
        let outcome = self.with(|c: &mut Client| {
            let mut retries = 0;
            loop {
                match once(c, &mut f) {
                    Err(e) if retries < CONFLICT_RETRIES && fault::conflicted(&e) => {
                        retries += 1;
                        std::thread::sleep(Duration::from_millis(10 * u64::from(retries)));
                    }
                    out => return out,
                }
            }
        });
        self.last_write.note(&outcome);
        outcome
    }
}

/// How many times a transaction the database ended to break a deadlock runs again.
const CONFLICT_RETRIES: u32 = 3;

/// One run of `f` in a transaction of its own, committed if it succeeds.
fn once<T>(
    c: &mut Client,
    f: &mut impl FnMut(&mut Transaction<'_>) -> Result<T, postgres::Error>,
) -> Result<T, postgres::Error> {
    let mut tx = c.transaction()?;
    let out = f(&mut tx)?;
    tx.commit()?;
    Ok(out)
}

impl Store for PostgresStore {
    fn upsert(&self, records: &[NewRecord], now_ms: u64) -> Result<(), StoreError> {
        self.tx(|tx| write::upsert(tx, records, now_ms))
    }

    fn close(&self) -> Result<(), StoreError> {
        self.close_connections()
    }

    fn get(&self, key: &QueueKey) -> Result<Option<Item>, StoreError> {
        self.with(|c| read::get(c, key))
    }

    /// The next batch, leased to this process (D39, D41): after where the last delivered one
    /// ended, then, when that runs short, from the start of the line up to there (a resend
    /// keeps its place, D16; a failed batch and a requeue forget the cursors, so they are
    /// taken first; see `PostgresStore::cursor`).
    fn take(&self, interface: &str, limit: usize) -> Result<Vec<(QueueKey, Item)>, StoreError> {
        const START: (i64, i64) = (i64::MIN, i64::MIN);
        const END: (i64, i64) = (i64::MAX, i64::MAX);
        let after = self.cursor(interface);
        let (instance, lease) = (&self.instance, self.lease);
        self.held.store(true, std::sync::atomic::Ordering::Relaxed);
        let items = self.tx(|tx| {
            let mut items = read::lease(
                tx,
                interface,
                limit,
                instance,
                lease,
                (after.unwrap_or(START), END),
            )?;
            if let Some(after) = after.filter(|_| items.len() < limit) {
                let left = limit - items.len();
                items.extend(read::lease(
                    tx,
                    interface,
                    left,
                    instance,
                    lease,
                    (START, after),
                )?);
            }
            Ok(items)
        })?;
        Ok(items.into_iter().map(|(_, _, i)| i).collect())
    }

    fn keys(&self, state: State, interface: Option<&str>) -> Result<Vec<QueueKey>, StoreError> {
        self.with(|c| read::keys(c, state, interface))
    }

    fn delivered(&self, sent: &[Sent]) -> Result<usize, StoreError> {
        let keep = self
            .keep_delivered
            .load(std::sync::atomic::Ordering::Relaxed);
        let gone = self.tx(|tx| write::delivered(tx, sent, &self.instance, keep))?;
        for (interface, (_, place)) in &gone {
            self.advance_cursor(interface, *place);
        }
        Ok(gone
            .values()
            .map(|(n, _)| usize::try_from(*n).unwrap_or(0))
            .sum())
    }

    /// The batch is retried from the start of the line.
    fn failed(&self, sent: &[Sent], error: &str) -> Result<(), StoreError> {
        self.forget_cursors();
        self.tx(|tx| write::failed(tx, sent, error, &self.instance))
    }

    fn reject(&self, sent: &Sent, error: &str) -> Result<bool, StoreError> {
        self.tx(|tx| write::reject(tx, sent, error, &self.instance))
    }

    /// Back at its place in the line, which the next batch reads from the start (D18).
    fn requeue(&self, key: &QueueKey) -> Result<bool, StoreError> {
        let back = self.tx(|tx| write::requeue(tx, key.as_bytes()))?;
        if back {
            self.forget_cursors();
        }
        Ok(back)
    }

    fn discard(&self, key: &QueueKey) -> Result<bool, StoreError> {
        self.tx(|tx| write::discard(tx, key.as_bytes()))
    }

    fn stats(&self, interface: &str) -> Result<Stats, StoreError> {
        self.with(|c| read::stats(c, interface))
    }

    fn set_backoff(&self, interface: &str, backoff: &Backoff) -> Result<(), StoreError> {
        self.with(|c| write::set_backoff(c, interface, backoff))
    }

    fn probe(&self) -> Result<(), StoreError> {
        if let Some(recent) = self.last_write.recent() {
            return recent;
        }
        let probed = self.with(|c| write::probe(c, &self.instance));
        self.last_write.note(&probed);
        match probed? {
            true => Ok(()),
            false => Err(StoreError::ProbeFailed),
        }
    }

    fn describe(&self) -> String {
        format!(
            "PostgreSQL {} (node {}, instance {}, leases of {} s, synchronous commit)",
            self.shown,
            self.node,
            self.instance,
            self.lease.as_secs()
        )
    }

    fn receipts(
        &self,
        request_id: &str,
        api_key: Option<&str>,
    ) -> Result<Vec<Receipt>, StoreError> {
        self.with(|c| read::receipts(c, request_id, api_key))
    }

    fn outcomes(
        &self,
        request: &crate::feed::Request<'_>,
    ) -> Result<Option<crate::feed::Page>, StoreError> {
        self.with(|c| outcomes::page(c, request))
    }

    fn keep_delivered(&self, keep: bool) {
        self.keep_delivered
            .store(keep, std::sync::atomic::Ordering::Relaxed);
    }

    fn replay(
        &self,
        window: &crate::replay::Window,
        dry_run: bool,
    ) -> Result<crate::replay::Replayed, StoreError> {
        self.tx(|tx| replay::replay(tx, window, dry_run))
    }

    fn kept_size(&self) -> Result<crate::replay::KeptSize, StoreError> {
        self.with(replay::size)
    }

    fn prune_kept(&self, before_ms: u64) -> Result<usize, StoreError> {
        self.tx(|tx| replay::prune_step(tx, before_ms))
    }

    fn audit(&self, record: &crate::audit::AuditRecord) -> Result<(), StoreError> {
        self.with(|c| audit::add(c, record))
    }

    fn audit_trail(
        &self,
        since_ms: u64,
        limit: usize,
    ) -> Result<Vec<crate::audit::AuditRecord>, StoreError> {
        self.with(|c| audit::trail(c, since_ms, limit))
    }

    fn prune_audit(&self, before_ms: u64) -> Result<usize, StoreError> {
        self.tx(|tx| audit::prune_step(tx, before_ms))
    }

    fn halt(&self) -> Option<crate::Halt> {
        Some(PostgresStore::halt(self))
    }

    fn nodes(&self) -> Result<Vec<crate::Node>, StoreError> {
        self.with(instance::nodes)
    }

    fn prune_step(&self, before_ms: u64) -> Result<usize, StoreError> {
        self.tx(|tx| {
            let before = crate::codes::stored_ms(before_ms);
            counts::fold(tx)?; // the hourly loop keeps the counter rows few, too
            Ok(read::prune_step(tx, before_ms)? + outcomes::prune_step(tx, before)?)
        })
    }
}
