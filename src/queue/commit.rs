//! Group commit (D17): concurrent requests share one flush.
//!
//! A writer stores its records, takes a ticket and waits until a sync that started after the
//! ticket was taken has finished. One thread runs the syncs back to back: while one runs,
//! every request that arrives takes a ticket that the next one covers. So a busy server syncs
//! as often as the disk allows, not once per request, and an idle one syncs at once.

use super::{Store, StoreError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use tokio::sync::watch;

#[derive(Debug, Clone, Default)]
struct Synced {
    /// Every ticket up to this one is durable.
    through: u64,
    /// The latest failed sync: tickets above `through` and up to this one failed with `error`.
    failed_through: u64,
    error: Option<String>,
}

#[derive(Default)]
struct Requests {
    issued: u64,
    stopping: bool,
}

struct Shared {
    store: Arc<dyn Store>,
    requests: Mutex<Requests>,
    wake: Condvar,
    synced: watch::Sender<Synced>,
    syncs: AtomicU64,
}

/// The syncing thread and the tickets that wait for it.
#[derive(Clone)]
pub struct GroupCommit {
    shared: Arc<Shared>,
    thread: Arc<Mutex<Option<std::thread::JoinHandle<()>>>>,
}

impl GroupCommit {
    /// Starts the sync thread for `store`.
    pub fn start(store: Arc<dyn Store>) -> std::io::Result<Self> {
        let (synced, _) = watch::channel(Synced::default());
        let shared = Arc::new(Shared {
            store,
            requests: Mutex::new(Requests::default()),
            wake: Condvar::new(),
            synced,
            syncs: AtomicU64::new(0),
        });
        let worker = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("queue-sync".into())
            .spawn(move || run(&worker))?;
        Ok(Self {
            shared,
            thread: Arc::new(Mutex::new(Some(thread))),
        })
    }

    /// Waits until everything stored before this call is durable.
    pub async fn durable(&self) -> Result<(), StoreError> {
        let ticket = {
            let mut r = self
                .shared
                .requests
                .lock()
                .map_err(|_| StoreError::Unavailable("sync thread failed".into()))?;
            if r.stopping {
                return Err(StoreError::Unavailable("shutting down".into()));
            }
            r.issued += 1;
            r.issued
        };
        self.shared.wake.notify_one();
        let mut rx = self.shared.synced.subscribe();
        let state = rx
            .wait_for(|s| s.through >= ticket || s.failed_through >= ticket)
            .await
            .map_err(|_| StoreError::Unavailable("sync thread stopped".into()))?;
        if state.through >= ticket {
            Ok(())
        } else {
            Err(StoreError::Unavailable(
                state.error.clone().unwrap_or_else(|| "sync failed".into()),
            ))
        }
    }

    /// How many syncs have run: far fewer than requests when they share them.
    pub fn syncs(&self) -> u64 {
        self.shared.syncs.load(Ordering::Relaxed)
    }

    /// The error of the latest sync, if it failed (readiness check).
    pub fn last_error(&self) -> Option<String> {
        self.shared.synced.borrow().error.clone()
    }

    /// Syncs what is outstanding and stops the thread (waiting for it); later calls to
    /// [`Self::durable`] fail.
    pub fn stop(&self) {
        if let Ok(mut r) = self.shared.requests.lock() {
            r.stopping = true;
        }
        self.shared.wake.notify_one();
        let thread = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

fn run(shared: &Shared) {
    let mut done = 0;
    loop {
        let (target, stopping) = {
            let Ok(mut r) = shared.requests.lock() else {
                return;
            };
            while r.issued == done && !r.stopping {
                r = match shared.wake.wait(r) {
                    Ok(r) => r,
                    Err(_) => return,
                };
            }
            (r.issued, r.stopping)
        };
        if target > done {
            let result = shared.store.sync();
            shared.syncs.fetch_add(1, Ordering::Relaxed);
            shared.synced.send_modify(|s| match &result {
                Ok(()) => {
                    s.through = target;
                    s.error = None;
                }
                Err(e) => {
                    tracing::error!(error = %e, "queue sync failed; requests waiting on it get 503");
                    s.failed_through = target;
                    s.error = Some(e.to_string());
                }
            });
            done = target;
        }
        if stopping {
            let _ = shared.store.sync();
            return;
        }
    }
}
