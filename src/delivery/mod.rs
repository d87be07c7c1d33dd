//! Delivery to the platform (D18, D31, D32): one *lane* per interface, run on a thread of its
//! own (off tokio's workers) while it has work, each with its own backoff, so an endpoint
//! that hangs or fails, or a store error met on one interface, delays no other. A lane sends one XML document of up to
//! `batch_size` records at a time, oldest first. 2xx removes the records (if not replaced
//! meanwhile); network errors, 408, 429 and 5xx back the lane off and are retried forever;
//! 401, 403, 404, 405 and 407 pause it the same way without touching the records; 413
//! halves the batch; another 4xx is retried record by record to find the culprit, which is
//! parked as rejected with the platform's answer.

pub mod backoff;
pub mod clock;
mod lane;
mod lanes;
mod net;
pub mod target;

use crate::metrics::Metrics;
use crate::queue::{Stop, Store};
use clock::Clock;
use lanes::Lanes;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;
use target::Target;

/// `[delivery]` settings: plain data, defined with the config so that `config` depends on
/// nothing above it.
pub use crate::config::DeliverySettings as Settings;

/// Wakes the lanes when there is new work (records stored, a record requeued), starting a
/// thread for a parked one. It does not keep the lanes (nor the store they hold) alive once
/// the worker has stopped.
#[derive(Clone)]
pub struct Waker(Weak<Lanes>);

impl Waker {
    /// A waker that wakes nothing (for an intake without delivery).
    pub fn none() -> Self {
        Self(Weak::new())
    }

    /// Asks every lane to look at the queue now (after a requeue; to stop). A lane backing
    /// off wakes, but waits for its retry.
    pub fn wake(&self) {
        if let Some(lanes) = self.0.upgrade() {
            (0..lanes.slots.len()).for_each(|i| lanes.wake(i));
        }
    }

    /// Asks the lane of one interface to look at the queue now: records stored through an
    /// interface join that interface's line only, so the other lanes have nothing new (and
    /// waking them would cost a read each, per request). A lane backing off is not woken:
    /// it reads the queue anyway when its retry is due, and while the platform is down
    /// every stored request would otherwise wake it for nothing.
    pub fn wake_interface(&self, interface: &str) {
        if let Some(lanes) = self.0.upgrade() {
            for (i, slot) in lanes.slots.iter().enumerate() {
                if slot.interface == interface && !slot.backing_off.load(Ordering::Relaxed) {
                    lanes.wake(i);
                }
            }
        }
    }
}

/// What every lane shares.
struct Shared {
    store: Arc<dyn Store>,
    /// Replaced by a reload (new credentials, CA, proxy; D34).
    target: Arc<crate::live::Live<Target>>,
    settings: Settings,
    /// The service's one stop signal.
    stop: Stop,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
}

impl Shared {
    fn stopping(&self) -> bool {
        self.stop.is_signalled()
    }
}

/// The lanes and their threads.
pub struct Worker {
    shared: Arc<Shared>,
    lanes: Arc<Lanes>,
}

impl Worker {
    /// Starts the delivery of every interface over `store`, sending to `target`; `clock`
    /// dates what is stored (the system clock but in tests). A lane gets a thread when its
    /// interface has records (`lanes.rs`). Every thread ends soon after `stop` is given;
    /// [`Worker::stop`] gives it and waits for them.
    pub fn start(
        store: Arc<dyn Store>,
        target: Target,
        settings: Settings,
        metrics: Arc<Metrics>,
        clock: Arc<dyn Clock>,
        stop: Stop,
    ) -> std::io::Result<(Self, Waker)> {
        let shared = Arc::new(Shared {
            store,
            target: Arc::new(crate::live::Live::new(target)),
            settings,
            stop,
            metrics,
            clock,
        });
        let lanes = Lanes::start(Arc::clone(&shared))?;
        let waker = Waker(Arc::downgrade(&lanes));
        Ok((Self { shared, lanes }, waker))
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
        self.shared.stop.signal();
        self.lanes.stop();
        self.lanes.wait(deadline)
    }
}

#[cfg(test)]
mod waker_tests {
    use super::target::{SandboxSink, Target};
    use super::{Settings, Waker, Worker};
    use crate::config::BackoffPolicy;
    use crate::interfaces::INTERFACES;
    use crate::metrics::Metrics;
    use crate::queue::{Mode, NewRecord, QueueKey, SqliteStore, Store};
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    const GL: &str = "general-ledger-codes-v1";

    /// Delivery over a real queue in `dir`, to the sandbox sink there.
    fn worker(dir: &std::path::Path) -> (Worker, Waker, Arc<dyn Store>) {
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir, Mode::Serve, 0).unwrap());
        let settings = Settings {
            batch_size: 100,
            backoff: BackoffPolicy {
                base: Duration::from_millis(100),
                cap: Duration::from_secs(1),
            },
        };
        let (worker, waker) = Worker::start(
            Arc::clone(&store),
            Target::Sandbox(SandboxSink::new(dir)),
            settings,
            Arc::new(Metrics::default()),
            Arc::new(super::clock::SystemClock),
            crate::queue::Stop::new(),
        )
        .unwrap();
        (worker, waker, store)
    }

    fn running(worker: &Worker) -> Vec<&'static str> {
        let lanes = &worker.lanes;
        (0..lanes.slots.len())
            .filter(|&i| !lanes.parked(i))
            .map(|i| lanes.slots[i].interface)
            .collect()
    }

    fn eventually(what: &str, mut done: impl FnMut() -> bool) {
        let until = Instant::now() + Duration::from_secs(15);
        while !done() {
            assert!(Instant::now() < until, "timed out waiting until {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// An idle service runs no lane thread; records stored through one interface start
    /// that interface's lane only (every other lane would spend a read of the queue per
    /// request), which parks again once its line has stayed empty.
    #[test]
    fn an_interface_wakes_its_own_lane_only_and_an_idle_lane_parks() {
        let dir = tempfile::tempdir().unwrap();
        let (worker, waker, _store) = worker(dir.path());
        std::thread::sleep(Duration::from_millis(200));
        assert!(running(&worker).is_empty(), "lanes run on an empty queue");
        waker.wake_interface(GL);
        assert_eq!(running(&worker), [GL]);
        let woken = Instant::now();
        eventually("the lane parks", || running(&worker).is_empty());
        assert!(woken.elapsed() >= super::lanes::IDLE, "parked too soon");
        assert!(worker.stop(Duration::from_secs(5)));
    }

    /// Records that arrive without a wake-up (another node of a cluster, D39; a start with a
    /// queue) are found by the watch, whose lane starts and delivers them.
    #[test]
    fn the_watch_starts_a_lane_for_records_nobody_announced() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path(), Mode::Serve, 0).unwrap();
        let record = NewRecord {
            key: QueueKey::new("gl-code", &["main", "4000"]).unwrap(),
            interface: INTERFACES.iter().find(|i| i.id == GL).unwrap().id,
            xml: "<GLCode/>".into(),
            receipt: None,
        };
        store.upsert(&[record], 1).unwrap();
        drop(store);
        let (worker, _waker, store) = worker(dir.path());
        eventually("the record is delivered", || {
            store.stats(GL).unwrap().pending == 0
        });
        assert_eq!(store.stats(GL).unwrap().delivered, 1);
        assert!(worker.stop(Duration::from_secs(5)));
    }

    /// A lane backing off is left alone by intake (it reads the queue when its retry is
    /// due), but stopping and requeueing still wake it.
    #[test]
    fn intake_leaves_a_lane_that_backs_off_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (worker, waker, _store) = worker(dir.path());
        let lanes = &worker.lanes;
        let gl = lanes.slots.iter().position(|s| s.interface == GL).unwrap();
        lanes.slots[gl].backing_off.store(true, Ordering::Relaxed);
        waker.wake_interface(GL);
        assert!(running(&worker).is_empty(), "woken while backing off");
        waker.wake();
        assert_eq!(
            running(&worker).len(),
            INTERFACES.len(),
            "requeue wakes every lane"
        );
        let lanes = Arc::clone(&worker.lanes);
        assert!(worker.stop(Duration::from_secs(5)));
        assert!(
            (0..lanes.slots.len()).all(|i| lanes.parked(i)),
            "a lane still runs after the stop"
        );
        drop(lanes);
        waker.wake(); // after the stop: nothing to wake, no thread started
    }
}
