//! One interface's delivery (D31): its own thread while it has work (`lanes.rs`), its own
//! backoff on the monotonic clock, its own batch size (halved on 413, D32).

use super::Shared;
use super::lanes::IDLE;
use super::target::Answer;
use crate::interfaces::Interface;
use crate::queue::{Backoff, Item, QueueKey, Sent, StoreError};
use crate::xml;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// A lane whose line has stayed empty this long parks, and its thread ends.
const PARK_AFTER: Duration = IDLE;
/// How long a lane waits after the store failed before it tries again.
const STORE_RETRY: Duration = Duration::from_secs(1);
/// A lane that keeps delivering records its last success this often at most.
const SUCCESS_EVERY: Duration = Duration::from_secs(10);

type Batch = Vec<(QueueKey, Item)>;

pub(super) struct Lane {
    iface: &'static Interface,
    shared: Arc<Shared>,
    wake: Receiver<()>,
    /// Set while it waits for a retry: intake does not wake it then ([`super::Waker`]).
    backing_off: Arc<AtomicBool>,
    /// Records per document: `batch_size`, or less after a 413.
    limit: usize,
    backoff: Backoff,
    /// Nothing is sent before this (monotonic: a wall-clock jump changes nothing).
    due: Instant,
    /// When the last success was stored.
    success_stored: Option<Instant>,
    /// The stored retry state has been read (at the lane's first run).
    resumed: bool,
}

impl Lane {
    pub fn new(
        iface: &'static Interface,
        shared: Arc<Shared>,
        wake: Receiver<()>,
        backing_off: Arc<AtomicBool>,
    ) -> Self {
        let limit = shared.settings.batch_size;
        Self {
            iface,
            shared,
            wake,
            backing_off,
            limit,
            backoff: Backoff::default(),
            due: Instant::now(),
            success_stored: None,
            resumed: false,
        }
    }

    /// The stored retry state, its time clamped to at most the backoff cap from now (D31): a
    /// retry time stored before the wall clock went back does not stall the lane.
    fn resume(&mut self) {
        self.backoff = match self.shared.store.stats(self.iface.id) {
            Ok(s) => s.backoff,
            Err(e) => {
                tracing::warn!(interface = self.iface.id, error = %e, "cannot read the retry state; starting afresh");
                Backoff::default()
            }
        };
        let wall = self.shared.clock.wall_ms();
        let wait = Duration::from_millis(self.backoff.next_attempt_ms.saturating_sub(wall));
        self.due = Instant::now() + wait.min(self.shared.settings.backoff.cap);
    }

    /// Delivers until the worker stops or the line has stayed empty for `PARK_AFTER`.
    pub fn run(&mut self) {
        if !self.resumed {
            self.resume();
            self.resumed = true;
        }
        let mut empty_since = None;
        while !self.shared.stopping() {
            let now = Instant::now();
            if now < self.due {
                self.backing_off.store(true, Ordering::Relaxed);
                self.sleep(self.due - now);
                self.backing_off.store(false, Ordering::Relaxed);
                continue;
            }
            match self.shared.store.take(self.iface.id, self.limit) {
                Ok(batch) if batch.is_empty() => {
                    let idle = now.duration_since(*empty_since.get_or_insert(now));
                    if idle >= PARK_AFTER {
                        return;
                    }
                    self.sleep(PARK_AFTER - idle);
                }
                Ok(batch) => {
                    empty_since = None;
                    if let Err(e) = self.deliver(&batch) {
                        self.store_failed(&e);
                    }
                }
                Err(e) => self.store_failed(&e),
            }
        }
    }

    /// Takes a wake-up that came meanwhile (new records, perhaps).
    pub fn woken(&self) -> bool {
        self.wake.try_recv().is_ok()
    }

    /// Waits until `d` has passed, a wake-up comes or the worker stops.
    fn sleep(&self, d: Duration) {
        if let Err(RecvTimeoutError::Disconnected) = self.wake.recv_timeout(d) {
            std::thread::sleep(d.min(STORE_RETRY));
        }
    }

    fn store_failed(&mut self, e: &StoreError) {
        tracing::error!(interface = self.iface.id, error = %e, "delivery: queue storage failed; retrying");
        self.due = Instant::now() + STORE_RETRY;
    }

    fn deliver(&mut self, batch: &Batch) -> Result<(), StoreError> {
        match self.attempt(batch)? {
            Answer::Delivered => self.flowing(true),
            // The platform answers and judges the records: no backoff, but no success either.
            Answer::Rejected { .. } => self.flowing(false),
            Answer::Retry { error, retry_after } => self.back_off(batch, error, retry_after, false),
            Answer::Paused { error, .. } => self.back_off(batch, error, None, true),
            Answer::TooLarge { error } => {
                self.limit = (batch.len() / 2).max(1);
                tracing::warn!(interface = self.iface.id, records = batch.len(), limit = self.limit,
                    %error, "the platform found the document too large; sending smaller ones");
                Ok(())
            }
        }
    }

    /// The platform answers about the records: end any backoff, grow the batch back, and
    /// when it took them (`delivered`), note the success.
    fn flowing(&mut self, delivered: bool) -> Result<(), StoreError> {
        self.limit = (self.limit * 2).min(self.shared.settings.batch_size);
        let was_failing = self.backoff.failures > 0 || self.backoff.paused;
        if was_failing {
            tracing::info!(
                interface = self.iface.id,
                "the platform accepts deliveries again"
            );
        }
        let stale = delivered
            && self
                .success_stored
                .is_none_or(|t| t.elapsed() >= SUCCESS_EVERY);
        self.backoff.failures = 0;
        self.backoff.next_attempt_ms = 0;
        self.backoff.paused = false;
        if delivered {
            self.backoff.last_success_ms = Some(self.shared.clock.wall_ms());
        }
        if was_failing || stale {
            self.shared
                .store
                .set_backoff(self.iface.id, &self.backoff)?;
            self.success_stored = Some(Instant::now());
        }
        Ok(())
    }

    /// A retry later (D18), or a pause for the configuration (D32): the same capped backoff.
    fn back_off(
        &mut self,
        batch: &Batch,
        error: String,
        retry_after: Option<Duration>,
        paused: bool,
    ) -> Result<(), StoreError> {
        let changed = paused != self.backoff.paused
            || self.backoff.failures == 0
            || self.backoff.last_error.as_deref() != Some(error.as_str());
        self.backoff.failures = self.backoff.failures.saturating_add(1);
        let delay = self
            .shared
            .settings
            .backoff
            .delay(self.backoff.failures, retry_after);
        let wall = self.shared.clock.wall_ms();
        self.due = Instant::now() + delay;
        self.backoff.next_attempt_ms = wall.saturating_add(delay.as_millis() as u64);
        self.backoff.last_error = Some(error.clone());
        self.backoff.last_error_ms = Some(wall);
        self.backoff.paused = paused;
        self.shared
            .store
            .set_backoff(self.iface.id, &self.backoff)?;
        let (id, failures) = (self.iface.id, self.backoff.failures);
        let retry_in_ms = delay.as_millis() as u64;
        match (paused, changed) {
            (true, true) => tracing::warn!(interface = id, %error, retry_in_ms,
                "the platform refuses the configuration (credentials, URL or proxy); delivery of this interface is paused, its records stay queued"),
            (true, false) => {
                tracing::debug!(interface = id, %error, retry_in_ms, "delivery still paused")
            }
            (false, _) => {
                tracing::warn!(interface = id, records = batch.len(), failures, retry_in_ms,
                %error, "delivery failed; will retry")
            }
        }
        Ok(())
    }

    /// Sends `batch` as one document and settles it in the queue. A refused batch of several
    /// records is sent again record by record, so only the culprits are parked.
    fn attempt(&self, batch: &Batch) -> Result<Answer, StoreError> {
        let (iface, shared) = (self.iface, &self.shared);
        let sent: Vec<Sent> = batch.iter().map(|(k, item)| Sent::of(k, item)).collect();
        let doc = xml::document(iface, batch.iter().map(|(_, i)| i.xml.as_bytes()));
        shared.metrics.attempt(iface.id);
        let answer = shared.target.get().send(iface, &doc, batch.len());
        match &answer {
            Answer::Delivered => {
                let gone = shared.store.delivered(&sent)?;
                shared.metrics.delivered(iface.id, batch.len());
                // Routine: the per-minute summary counts deliveries at info (D44).
                tracing::debug!(
                    interface = iface.id,
                    records = batch.len(),
                    removed = gone,
                    "delivered"
                );
            }
            Answer::Retry { error, .. } => {
                shared.metrics.failure(iface.id, "retry");
                shared.store.failed(&sent, error)?;
            }
            Answer::Paused { .. } => shared.metrics.failure(iface.id, "paused"),
            Answer::TooLarge { error } if batch.len() == 1 => {
                shared.metrics.failure(iface.id, "rejected");
                self.park(&batch[0].0, &sent[0], error)?;
                return Ok(Answer::Rejected {
                    error: error.clone(),
                });
            }
            Answer::TooLarge { .. } => shared.metrics.failure(iface.id, "too_large"),
            Answer::Rejected { error } if batch.len() == 1 => {
                shared.metrics.failure(iface.id, "rejected");
                self.park(&batch[0].0, &sent[0], error)?;
            }
            Answer::Rejected { error } => {
                shared.metrics.failure(iface.id, "rejected");
                tracing::warn!(interface = iface.id, records = batch.len(), %error,
                    "platform rejected a batch; sending its records one by one");
                for one in batch {
                    if shared.stopping() {
                        break;
                    }
                    let answer = self.attempt(&vec![one.clone()])?;
                    if let Answer::Retry { .. } | Answer::Paused { .. } = answer {
                        return Ok(answer);
                    }
                }
            }
        }
        Ok(answer)
    }

    fn park(&self, key: &QueueKey, sent: &Sent, error: &str) -> Result<(), StoreError> {
        self.shared.store.reject(sent, error)?;
        tracing::warn!(interface = self.iface.id, %key, %error, "platform rejected the record; parked");
        Ok(())
    }
}
