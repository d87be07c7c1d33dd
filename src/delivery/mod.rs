//! Delivery to the platform (D18, D31, D32): one thread per interface (a *lane*), off tokio's
//! workers, each with its own backoff, so an endpoint that hangs or fails, or a store error
//! met on one interface, delays no other. A lane sends one XML document of up to
//! `batch_size` records at a time, oldest first. 2xx removes the records (if not replaced
//! meanwhile); network errors, 408, 429 and 5xx back the lane off and are retried forever;
//! 401, 403, 404, 405 and 407 pause it the same way without touching the records; 413
//! halves the batch; another 4xx is retried record by record to find the culprit, which is
//! parked as rejected with the platform's answer.

pub mod backoff;
pub mod clock;
mod lane;
mod net;
pub mod target;

use crate::interfaces::INTERFACES;
use crate::metrics::Metrics;
use crate::queue::Store;
use clock::Clock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use target::Target;

/// `[delivery]` settings: plain data, defined with the config so that `config` depends on
/// nothing above it.
pub use crate::config::DeliverySettings as Settings;

/// Wakes the lanes when there is new work (records stored, a record requeued).
#[derive(Clone)]
pub struct Waker(Arc<Vec<(&'static str, SyncSender<()>)>>);

impl Waker {
    /// A waker that wakes nothing (for an intake without delivery).
    pub fn none() -> Self {
        Self(Arc::new(Vec::new()))
    }

    /// Asks every lane to look at the queue now (a lane backing off stays put).
    pub fn wake(&self) {
        for (_, tx) in self.0.iter() {
            let _ = tx.try_send(()); // a wake-up already queued covers this one
        }
    }

    /// Asks the lane of one interface to look at the queue now: records stored through an
    /// interface join that interface's line only, so the other lanes have nothing new (and
    /// waking them would cost a read each, per request).
    pub fn wake_interface(&self, interface: &str) {
        for (_, tx) in self.0.iter().filter(|(id, _)| *id == interface) {
            let _ = tx.try_send(());
        }
    }
}

/// What every lane shares.
struct Shared {
    store: Arc<dyn Store>,
    /// Replaced by a reload (new credentials, CA, proxy; D34).
    target: Arc<crate::live::Live<Target>>,
    settings: Settings,
    stop: AtomicBool,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
}

impl Shared {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// The running lanes.
pub struct Worker {
    shared: Arc<Shared>,
    waker: Waker,
    done: Mutex<Receiver<()>>,
    lanes: usize,
}

impl Worker {
    /// Starts one lane per interface over `store`, sending to `target`; `clock` dates what is
    /// stored (the system clock but in tests).
    pub fn start(
        store: Arc<dyn Store>,
        target: Target,
        settings: Settings,
        metrics: Arc<Metrics>,
        clock: Arc<dyn Clock>,
    ) -> std::io::Result<(Self, Waker)> {
        let shared = Arc::new(Shared {
            store,
            target: Arc::new(crate::live::Live::new(target)),
            settings,
            stop: AtomicBool::new(false),
            metrics,
            clock,
        });
        let (done_tx, done) = sync_channel(INTERFACES.len());
        let mut wakers = Vec::with_capacity(INTERFACES.len());
        for iface in &INTERFACES {
            let (wake_tx, wake_rx) = sync_channel(1);
            wakers.push((iface.id, wake_tx));
            let lane = lane::Lane::new(iface, Arc::clone(&shared), wake_rx);
            let done_tx = done_tx.clone();
            std::thread::Builder::new()
                .name(format!("deliver-{}", iface.id))
                .spawn(move || {
                    lane.run();
                    let _ = done_tx.send(());
                })?;
        }
        let waker = Waker(Arc::new(wakers));
        Ok((
            Self {
                shared,
                waker: waker.clone(),
                done: Mutex::new(done),
                lanes: INTERFACES.len(),
            },
            waker,
        ))
    }

    /// Where deliveries go, for a reload to replace (D34): documents in flight finish with the
    /// old target, the next ones use the new.
    pub fn target(&self) -> Arc<crate::live::Live<Target>> {
        Arc::clone(&self.shared.target)
    }

    /// Stops the lanes, waiting up to `deadline` for deliveries in flight. A batch cut off
    /// stays pending and is sent again after the restart (at-least-once). False when some
    /// lane did not stop in time.
    pub fn stop(self, deadline: Duration) -> bool {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.waker.wake();
        let until = Instant::now() + deadline;
        let Ok(done) = self.done.lock() else {
            return false;
        };
        (0..self.lanes).all(|_| {
            let left = until.saturating_duration_since(Instant::now());
            done.recv_timeout(left).is_ok()
        })
    }
}

#[cfg(test)]
mod waker_tests {
    use super::Waker;
    use std::sync::Arc;
    use std::sync::mpsc::sync_channel;

    /// Records stored through one interface wake that interface's lane only: every other
    /// lane would spend a read of the queue per request on it.
    #[test]
    fn an_interface_wakes_its_own_lane_only() {
        let (gl_tx, gl_rx) = sync_channel(1);
        let (po_tx, po_rx) = sync_channel(1);
        let waker = Waker(Arc::new(vec![
            ("general-ledger-codes-v1", gl_tx),
            ("purchase-orders-v1", po_tx),
        ]));
        waker.wake_interface("general-ledger-codes-v1");
        assert!(gl_rx.try_recv().is_ok());
        assert!(
            po_rx.try_recv().is_err(),
            "another interface's lane was woken"
        );
        waker.wake();
        assert!(gl_rx.try_recv().is_ok() && po_rx.try_recv().is_ok());
    }
}
