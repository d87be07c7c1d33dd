//! The [`Store`] trait on [`SqliteStore`]: reads on the reader connections, changes on the
//! writer, unreadable rows quarantined where they are met (D29).

use super::read::{self, Unreadable};
use super::{SqliteStore, audit, outcomes, receipts, replay, write};
use crate::receipt::Receipt;
use crate::{Backoff, Item, NewRecord, QueueKey, Sent, State, Stats, Store, StoreError};

impl SqliteStore {
    /// Quarantines what `rows` could not read, logging each; returns the readable items.
    fn sift(
        &self,
        interface: &str,
        rows: Vec<Result<(QueueKey, Item), Unreadable>>,
    ) -> Result<Vec<(QueueKey, Item)>, StoreError> {
        let (good, bad): (Vec<_>, Vec<_>) = rows.into_iter().partition(Result::is_ok);
        let bad: Vec<Unreadable> = bad.into_iter().filter_map(Result::err).collect();
        if !bad.is_empty() {
            for (rowid, reason) in &bad {
                tracing::warn!(interface, row = rowid, %reason,
                    "a queued item cannot be read; it is quarantined (see `ap-intake status`)");
            }
            self.write(false, |tx, _| write::quarantine(tx, interface, &bad))?;
        }
        Ok(good.into_iter().filter_map(Result::ok).collect())
    }
}

impl Store for SqliteStore {
    fn upsert(&self, records: &[NewRecord], now_ms: u64) -> Result<(), StoreError> {
        self.write(true, |tx, version| {
            write::upsert(tx, records, now_ms, version)
        })
    }

    fn upsert_continued(&self, records: &[NewRecord], now_ms: u64) -> Result<(), StoreError> {
        self.write(false, |tx, version| {
            write::upsert(tx, records, now_ms, version)
        })
    }

    fn close(&self) -> Result<(), StoreError> {
        self.close_files()
    }

    fn get(&self, key: &QueueKey) -> Result<Option<Item>, StoreError> {
        match self.read(|c| read::get(c, key))? {
            None => Ok(None),
            Some(Ok((_, item))) => Ok(Some(item)),
            Some(Err((_, reason))) => Err(StoreError::Corrupt {
                key: key.to_string(),
                reason,
            }),
        }
    }

    fn take(&self, interface: &str, limit: usize) -> Result<Vec<(QueueKey, Item)>, StoreError> {
        let rows = self.read(|c| read::line(c, interface, limit))?;
        self.sift(interface, rows)
    }

    fn keys(&self, state: State, interface: Option<&str>) -> Result<Vec<QueueKey>, StoreError> {
        self.read(|c| read::keys(c, state, interface))
    }

    fn delivered(&self, sent: &[Sent]) -> Result<usize, StoreError> {
        let keep = self
            .keep_delivered
            .load(std::sync::atomic::Ordering::Relaxed);
        self.write(false, |tx, _| write::delivered(tx, sent, keep))
    }

    fn failed(&self, sent: &[Sent], error: &str) -> Result<(), StoreError> {
        self.write(false, |tx, _| write::failed(tx, sent, error))
    }

    fn reject(&self, sent: &Sent, error: &str) -> Result<bool, StoreError> {
        self.write(false, |tx, _| write::reject(tx, sent, error))
    }

    fn requeue(&self, key: &QueueKey) -> Result<bool, StoreError> {
        self.write(false, |tx, _| write::requeue(tx, key))
    }

    fn discard(&self, key: &QueueKey) -> Result<bool, StoreError> {
        self.write(false, |tx, _| write::discard(tx, key))
    }

    fn stats(&self, interface: &str) -> Result<Stats, StoreError> {
        self.read(|c| read::stats(c, interface))
    }

    fn set_backoff(&self, interface: &str, backoff: &Backoff) -> Result<(), StoreError> {
        self.write(false, |tx, _| write::set_backoff(tx, interface, backoff))
    }

    fn probe(&self) -> Result<(), StoreError> {
        if let Some(detail) = self.damage() {
            return Err(StoreError::Damaged {
                path: self.path().display().to_string(),
                detail,
            });
        }
        self.recheck()?;
        // Free space is a fact of the moment (D30), known without a write.
        self.space_check()?;
        if let Some(recent) = self.recent_write() {
            return recent;
        }
        match self.write(true, |tx, _| write::probe(tx, crate::now_ms()))? {
            true => Ok(()),
            false => Err(StoreError::ProbeFailed),
        }
    }

    fn describe(&self) -> String {
        match self.settings() {
            Ok(s) => format!(
                "SQLite {} (journal {}, synchronous {}, checkpoint every {} ms, auto_vacuum {})",
                self.path().display(),
                s.journal_mode,
                s.synchronous,
                s.background_checkpoint.map_or(0, |d| d.as_millis()),
                s.auto_vacuum
            ),
            Err(e) => format!("SQLite {} ({e})", self.path().display()),
        }
    }

    fn receipts(
        &self,
        request_id: &str,
        api_key: Option<&str>,
    ) -> Result<Vec<Receipt>, StoreError> {
        self.read(|c| receipts::receipts(c, request_id, api_key))
    }

    fn outcomes(
        &self,
        request: &crate::feed::Request<'_>,
    ) -> Result<Option<crate::feed::Page>, StoreError> {
        self.read(|c| outcomes::page(c, request))
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
        // Grows the queue: the free-space rule (D30) applies as to any intake.
        self.write(!dry_run, |tx, version| {
            replay::replay(tx, window, dry_run, version)
        })
    }

    fn kept_size(&self) -> Result<crate::replay::KeptSize, StoreError> {
        self.read(replay::size)
    }

    fn prune_kept(&self, before_ms: u64) -> Result<usize, StoreError> {
        self.write(false, |tx, _| replay::prune_step(tx, before_ms))
    }

    fn audit(&self, record: &crate::audit::AuditRecord) -> Result<(), StoreError> {
        // An operator's action is recorded even when the disk is nearly full (D30 refuses
        // intake, not the record of what an admin did about it).
        self.write(false, |tx, _| audit::add(tx, record))
    }

    fn audit_trail(
        &self,
        since_ms: u64,
        limit: usize,
    ) -> Result<Vec<crate::audit::AuditRecord>, StoreError> {
        self.read(|c| audit::trail(c, since_ms, limit))
    }

    fn prune_audit(&self, before_ms: u64) -> Result<usize, StoreError> {
        self.write(false, |tx, _| audit::prune_step(tx, before_ms))
    }

    fn halt(&self) -> Option<crate::Halt> {
        Some(self.halt.clone())
    }

    fn prune_step(&self, before_ms: u64) -> Result<usize, StoreError> {
        self.write(false, |tx, _| {
            let before = crate::codes::stored_ms(before_ms);
            Ok::<_, rusqlite::Error>(
                receipts::prune_step(tx, before_ms)? + outcomes::prune_step(tx, before)?,
            )
        })
    }
}
