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
pub struct Waker(Arc<Vec<Bell>>);

/// How a lane is woken: its channel (one wake-up queued covers any number), and whether it
/// is backing off, when a wake-up from intake would only cost it a context switch.
struct Bell {
    interface: &'static str,
    tx: SyncSender<()>,
    backing_off: Arc<AtomicBool>,
}

impl Bell {
    fn ring(&self) {
        let _ = self.tx.try_send(()); // a wake-up already queued covers this one
    }
}

impl Waker {
    /// A waker that wakes nothing (for an intake without delivery).
    pub fn none() -> Self {
        Self(Arc::new(Vec::new()))
    }

    /// Asks every lane to look at the queue now (a lane backing off stays put).
    pub fn wake(&self) {
        self.0.iter().for_each(Bell::ring);
    }

    /// Asks the lane of one interface to look at the queue now: records stored through an
    /// interface join that interface's line only, so the other lanes have nothing new (and
    /// waking them would cost a read each, per request). A lane backing off is not woken:
    /// it reads the queue anyway when its retry is due, and while the platform is down
    /// every stored request would otherwise wake it for nothing.
    pub fn wake_interface(&self, interface: &str) {
        self.0
            .iter()
            .filter(|b| b.interface == interface && !b.backing_off.load(Ordering::Relaxed))
            .for_each(Bell::ring);
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
            let backing_off = Arc::new(AtomicBool::new(false));
            wakers.push(Bell {
                interface: iface.id,
                tx: wake_tx,
                backing_off: Arc::clone(&backing_off),
            });
            let lane = lane::Lane::new(iface, Arc::clone(&shared), wake_rx, backing_off);
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
    use super::{Bell, Waker};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc::{SyncSender, sync_channel};

    fn bell(interface: &'static str, tx: SyncSender<()>) -> Bell {
        Bell {
            interface,
            tx,
            backing_off: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Records stored through one interface wake that interface's lane only: every other
    /// lane would spend a read of the queue per request on it.
    #[test]
    fn an_interface_wakes_its_own_lane_only() {
        let (gl_tx, gl_rx) = sync_channel(1);
        let (po_tx, po_rx) = sync_channel(1);
        let waker = Waker(Arc::new(vec![
            bell("general-ledger-codes-v1", gl_tx),
            bell("purchase-orders-v1", po_tx),
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

    /// A lane backing off is left alone by intake (it reads the queue when its retry is
    /// due), but stopping and requeueing still wake it.
    #[test]
    fn intake_leaves_a_lane_that_backs_off_alone() {
        let (tx, rx) = sync_channel(1);
        let gl = bell("general-ledger-codes-v1", tx);
        let backing_off = Arc::clone(&gl.backing_off);
        let waker = Waker(Arc::new(vec![gl]));
        backing_off.store(true, Ordering::Relaxed);
        waker.wake_interface("general-ledger-codes-v1");
        assert!(rx.try_recv().is_err(), "woken while backing off");
        waker.wake();
        assert!(rx.try_recv().is_ok(), "stop and requeue must still wake it");
        backing_off.store(false, Ordering::Relaxed);
        waker.wake_interface("general-ledger-codes-v1");
        assert!(rx.try_recv().is_ok());
    }
}
