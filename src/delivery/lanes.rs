//! The nine lanes and the threads that run them. A lane holds a thread only while its
//! interface has work: a lane whose line has stayed empty for a while parks (its state, such
//! as a halved batch size, stays in its slot) and its thread ends; intake's wake-up or the
//! watch starts it again. The *watch* (thread `deliver-watch`) looks at the parked lanes
//! every `IDLE` for records that arrived without a wake-up (another node of a PostgreSQL
//! cluster, D39; a start with a queue). An idle service so keeps one delivery thread, not
//! nine, and the memory each thread holds (stack, allocator pages, an SQLite read buffer).

use super::Shared;
use super::lane::Lane;
use crate::interfaces::INTERFACES;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{SyncSender, sync_channel};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How often the watch looks at the parked lanes (and how long an idle lane waits before it
/// looks again by itself).
pub(super) const IDLE: Duration = Duration::from_secs(5);

/// One interface's lane: how it is woken, and the lane itself while no thread runs it.
pub(super) struct Slot {
    pub interface: &'static str,
    /// One wake-up queued covers any number.
    tx: SyncSender<()>,
    /// Set while the lane waits for a retry: a wake-up from intake would only cost it a
    /// context switch.
    pub backing_off: Arc<AtomicBool>,
    state: Mutex<SlotState>,
}

struct SlotState {
    /// The lane while it is parked; taken by the thread that runs it.
    lane: Option<Lane>,
    /// A thread runs (or is about to run) the lane.
    running: bool,
}

impl Slot {
    fn ring(&self) {
        let _ = self.tx.try_send(()); // a wake-up already queued covers this one
    }
}

/// Every lane, what they share, and how many threads run.
pub(super) struct Lanes {
    pub slots: Vec<Slot>,
    shared: Arc<Shared>,
    /// Lane threads and the watch still running; [`Lanes::wait`] waits for none.
    threads: Mutex<usize>,
    exited: Condvar,
}

impl Lanes {
    /// One parked lane per interface, and the watch, which starts those with records.
    pub fn start(shared: Arc<Shared>) -> std::io::Result<Arc<Self>> {
        let mut slots = Vec::with_capacity(INTERFACES.len());
        for iface in &INTERFACES {
            let (tx, rx) = sync_channel(1);
            let backing_off = Arc::new(AtomicBool::new(false));
            let lane = Lane::new(iface, Arc::clone(&shared), rx, Arc::clone(&backing_off));
            slots.push(Slot {
                interface: iface.id,
                tx,
                backing_off,
                state: Mutex::new(SlotState {
                    lane: Some(lane),
                    running: false,
                }),
            });
        }
        let lanes = Arc::new(Self {
            slots,
            shared,
            threads: Mutex::new(1),
            exited: Condvar::new(),
        });
        let this = Arc::clone(&lanes);
        let spawned = std::thread::Builder::new()
            .name("deliver-watch".into())
            .spawn(move || this.run_watch());
        if let Err(e) = spawned {
            lanes.exit();
            return Err(e);
        }
        Ok(lanes)
    }

    /// Wakes the lane of slot `i`, starting a thread for it when it is parked.
    pub fn wake(self: &Arc<Self>, i: usize) {
        let Some(slot) = self.slots.get(i) else {
            return;
        };
        slot.ring();
        self.run(i);
    }

    /// Wakes every running lane, so that all see the stop soon (the watch sleeps on it).
    pub fn stop(&self) {
        self.slots.iter().for_each(Slot::ring);
    }

    /// Waits up to `deadline` for every thread to end; false when some did not.
    pub fn wait(&self, deadline: Duration) -> bool {
        let until = Instant::now() + deadline;
        let mut n = self.threads.lock().unwrap_or_else(PoisonError::into_inner);
        while *n > 0 {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            n = match self.exited.wait_timeout(n, left) {
                Ok((n, _)) => n,
                Err(e) => e.into_inner().0,
            };
        }
        true
    }

    /// Starts a thread for the lane of slot `i` unless one runs it or the worker stops.
    fn run(self: &Arc<Self>, i: usize) {
        let Some(slot) = self.slots.get(i) else {
            return;
        };
        {
            let mut state = slot.state.lock().unwrap_or_else(PoisonError::into_inner);
            if state.running || self.shared.stopping() {
                return;
            }
            state.running = true;
        }
        self.enter();
        let this = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name(format!("deliver-{}", slot.interface))
            .spawn(move || this.drive(i));
        if let Err(e) = spawned {
            // The lane stays in its slot; the watch tries again at its next look.
            tracing::error!(interface = slot.interface, error = %e, "cannot start a delivery thread; retrying");
            slot.state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .running = false;
            self.exit();
        }
    }

    /// A lane's thread: runs the lane until it parks or the worker stops.
    fn drive(&self, i: usize) {
        if let Some(slot) = self.slots.get(i) {
            let taken = slot
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .lane
                .take();
            if let Some(mut lane) = taken {
                loop {
                    lane.run();
                    let mut state = slot.state.lock().unwrap_or_else(PoisonError::into_inner);
                    // A wake-up that came while the lane was deciding to park is work that
                    // no other thread will do: the waker saw this one running.
                    if !self.shared.stopping() && lane.woken() {
                        continue;
                    }
                    state.lane = Some(lane);
                    state.running = false;
                    break;
                }
            }
        }
        self.exit();
    }

    /// The watch: every `IDLE`, starts the parked lanes whose interface has records pending.
    fn run_watch(self: &Arc<Self>) {
        while !self.shared.stopping() {
            for (i, slot) in self.slots.iter().enumerate() {
                if self.parked(i) && self.has_work(slot.interface) {
                    self.run(i);
                }
            }
            if self.shared.stop.wait_timeout(IDLE) {
                break;
            }
        }
        self.exit();
    }

    /// No thread runs the lane of slot `i`.
    pub fn parked(&self, i: usize) -> bool {
        self.slots.get(i).is_some_and(|s| {
            !s.state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .running
        })
    }

    /// Records pending for `interface`; a store that fails counts as work, so that the lane
    /// reports the failure and retries it as it would while running.
    fn has_work(&self, interface: &str) -> bool {
        self.shared
            .store
            .stats(interface)
            .map_or(true, |s| s.pending > 0)
    }

    fn enter(&self) {
        *self.threads.lock().unwrap_or_else(PoisonError::into_inner) += 1;
    }

    fn exit(&self) {
        let mut n = self.threads.lock().unwrap_or_else(PoisonError::into_inner);
        *n = n.saturating_sub(1);
        self.exited.notify_all();
    }
}
