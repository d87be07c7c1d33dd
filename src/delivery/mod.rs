//! The delivery worker (D18): one thread, off tokio's workers, that drains the queue to the
//! platform. Each round it sends at most one batch per interface whose backoff has passed: one
//! XML document of up to `batch_size` records, oldest first. 2xx removes the records (if not
//! replaced meanwhile); network errors, 408, 429 and 5xx back the interface off and are retried
//! forever; another 4xx is retried record by record to find the culprit, which is parked as
//! rejected with the platform's answer.

pub mod backoff;
pub mod target;

use crate::interfaces::{INTERFACES, Interface};
use crate::metrics::Metrics;
use crate::queue::{Backoff, Item, QueueKey, Sent, Store, StoreError, now_ms};
use crate::xml;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use target::{Answer, Target};

/// `[delivery]` settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Most records per document.
    pub batch_size: usize,
    /// Retry delays.
    pub backoff: backoff::Policy,
}

/// How long an idle worker sleeps before it looks again without being woken.
const IDLE: Duration = Duration::from_secs(5);

/// Wakes the worker when there is new work (records stored, a record requeued).
#[derive(Clone)]
pub struct Waker(Option<SyncSender<()>>);

impl Waker {
    /// A waker that wakes nothing (for an intake without delivery).
    pub fn none() -> Self {
        Self(None)
    }

    /// Asks the worker to look at the queue now.
    pub fn wake(&self) {
        if let Some(tx) = &self.0 {
            let _ = tx.try_send(()); // a wake-up already queued covers this one
        }
    }
}

/// The running worker thread.
pub struct Worker {
    stop: Arc<AtomicBool>,
    waker: Waker,
    done: Mutex<Receiver<()>>,
}

impl Worker {
    /// Starts the worker over `store`, sending to `target`.
    pub fn start(
        store: Arc<dyn Store>,
        target: Target,
        settings: Settings,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<(Self, Waker)> {
        let (wake_tx, wake_rx) = sync_channel(1);
        let (done_tx, done) = sync_channel(1);
        let stop = Arc::new(AtomicBool::new(false));
        let waker = Waker(Some(wake_tx));
        let ctx = Ctx {
            store,
            target,
            settings,
            stop: Arc::clone(&stop),
            metrics,
        };
        std::thread::Builder::new()
            .name("delivery".into())
            .spawn(move || {
                ctx.run(&wake_rx);
                let _ = done_tx.send(());
            })?;
        Ok((
            Self {
                stop,
                waker: waker.clone(),
                done: Mutex::new(done),
            },
            waker,
        ))
    }

    /// Stops the worker, waiting up to `deadline` for a delivery in flight. A batch cut off
    /// stays pending and is sent again after the restart (at-least-once).
    pub fn stop(self, deadline: Duration) -> bool {
        self.stop.store(true, Ordering::Relaxed);
        self.waker.wake();
        self.done
            .lock()
            .map(|done| done.recv_timeout(deadline).is_ok())
            .unwrap_or(false)
    }
}

struct Ctx {
    store: Arc<dyn Store>,
    target: Target,
    settings: Settings,
    stop: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
}

type Batch = Vec<(QueueKey, Item)>;

impl Ctx {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn run(&self, wake: &Receiver<()>) {
        while !self.stopping() {
            let wait = match self.round() {
                Ok(Some(wait)) => wait,
                Ok(None) => continue, // sent something: look again at once
                Err(e) => {
                    tracing::error!(error = %e, "delivery: queue storage failed; retrying");
                    Duration::from_secs(1)
                }
            };
            match wake.recv_timeout(wait) {
                Ok(()) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    /// One batch for every interface that is due. `None` when something was sent, else how
    /// long to wait until an interface is due.
    fn round(&self) -> Result<Option<Duration>, StoreError> {
        let now = now_ms();
        let mut wait = IDLE;
        let mut sent = false;
        for iface in &INTERFACES {
            if self.stopping() {
                break;
            }
            let backoff = self.store.stats(iface.id)?.backoff;
            if backoff.next_attempt_ms > now {
                wait = wait.min(Duration::from_millis(backoff.next_attempt_ms - now));
                continue;
            }
            let batch = self.store.pending(iface.id, self.settings.batch_size)?;
            if !batch.is_empty() {
                self.deliver(iface, &batch, backoff)?;
                sent = true;
            }
        }
        Ok((!sent).then_some(wait))
    }

    fn deliver(
        &self,
        iface: &Interface,
        batch: &Batch,
        mut backoff: Backoff,
    ) -> Result<(), StoreError> {
        match self.attempt(iface, batch)? {
            Answer::Delivered | Answer::Rejected { .. } if backoff.failures > 0 => {
                // The platform answers again.
                backoff.failures = 0;
                backoff.next_attempt_ms = 0;
                self.store.set_backoff(iface.id, &backoff)?;
            }
            Answer::Retry { error, retry_after } => {
                backoff.failures = backoff.failures.saturating_add(1);
                let delay = self.settings.backoff.delay(backoff.failures, retry_after);
                let now = now_ms();
                backoff.next_attempt_ms = now + delay.as_millis() as u64;
                backoff.last_error = Some(error.clone());
                backoff.last_error_ms = Some(now);
                self.store.set_backoff(iface.id, &backoff)?;
                tracing::warn!(interface = iface.id, records = batch.len(), failures = backoff.failures,
                    retry_in_ms = delay.as_millis() as u64, %error, "delivery failed; will retry");
            }
            _ => {}
        }
        Ok(())
    }

    /// Sends `batch` as one document and settles it in the queue. A refused batch of several
    /// records is sent again record by record, so only the culprits are parked.
    fn attempt(&self, iface: &Interface, batch: &Batch) -> Result<Answer, StoreError> {
        let sent: Vec<Sent> = batch
            .iter()
            .map(|(key, item)| Sent::of(key, item))
            .collect();
        let doc = xml::document(iface, batch.iter().map(|(_, i)| i.xml.as_bytes()));
        self.metrics.attempt(iface.id);
        let answer = self.target.send(iface, &doc, batch.len());
        if matches!(answer, Answer::Rejected { .. }) {
            self.metrics.failure(iface.id, "rejected");
        }
        match &answer {
            Answer::Delivered => {
                let gone = self.store.delivered(&sent)?;
                self.metrics.delivered(iface.id, batch.len());
                tracing::info!(
                    interface = iface.id,
                    records = batch.len(),
                    removed = gone,
                    "delivered"
                );
            }
            Answer::Retry { error, .. } => {
                self.metrics.failure(iface.id, "retry");
                self.store.failed(&sent, error)?;
            }
            Answer::Rejected { error } if batch.len() == 1 => {
                self.store.reject(&sent[0], error)?;
                tracing::warn!(interface = iface.id, key = %batch[0].0, %error, "platform rejected the record; parked");
            }
            Answer::Rejected { error } => {
                tracing::warn!(interface = iface.id, records = batch.len(), %error,
                    "platform rejected a batch; sending its records one by one");
                for one in batch {
                    if self.stopping() {
                        break;
                    }
                    if let retry @ Answer::Retry { .. } = self.attempt(iface, &vec![one.clone()])? {
                        return Ok(retry);
                    }
                }
            }
        }
        Ok(answer)
    }
}
