//! Group commit (D17): concurrent requests share one flush.
//!
//! A writer stores its records, then calls [`GroupCommit::durable`] and waits for a sync that
//! started after that call. One thread runs the syncs: while one runs, every request that
//! arrives joins the next one. So a busy server syncs as often as the disk allows, not once
//! per request, and an idle one syncs at once.
//!
//! A sync costs CPU as well as disk time (sled's flush, `fdatasync`, waking the writers), and
//! on a fast disk back-to-back syncs would each cover one or two requests while taking CPU
//! from the requests themselves. So when the previous sync covered several requests (the
//! server is busy), the thread first waits [`GATHER`] for more to join. An idle server never
//! waits.

use super::{Store, StoreError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// How long a sync waits for more requests to join when the server is busy.
const GATHER: Duration = Duration::from_micros(500);

/// The answer to one waiting writer: `Err` carries the failed sync's message.
pub(crate) type Reply = oneshot::Sender<Result<(), String>>;

#[derive(Default)]
struct Waiting {
    /// Writers whose records are stored and who wait for the next sync.
    writers: Vec<Reply>,
    stopping: bool,
    /// The error of the latest sync, if it failed.
    last_error: Option<String>,
}

struct Shared {
    store: Arc<dyn Store>,
    waiting: Mutex<Waiting>,
    wake: Condvar,
    syncs: AtomicU64,
}

impl Shared {
    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Waiting>, StoreError> {
        self.waiting
            .lock()
            .map_err(|_| StoreError::Unavailable("sync thread failed".into()))
    }
}

/// The syncing thread and the writers that wait for it.
#[derive(Clone)]
pub struct GroupCommit {
    shared: Arc<Shared>,
    thread: Arc<Mutex<Option<std::thread::JoinHandle<()>>>>,
}

impl GroupCommit {
    /// Starts the sync thread for `store`.
    pub fn start(store: Arc<dyn Store>) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            store,
            waiting: Mutex::new(Waiting::default()),
            wake: Condvar::new(),
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
        let (reply, answer) = oneshot::channel();
        self.join(reply);
        match answer.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(StoreError::Unavailable(e)),
            Err(_) => Err(StoreError::Unavailable("sync thread stopped".into())),
        }
    }

    /// Answers `reply` once everything stored before this call is durable (at once with an
    /// error when stopping).
    pub(crate) fn join(&self, reply: Reply) {
        match self.shared.lock() {
            Ok(mut w) if !w.stopping => w.writers.push(reply),
            _ => {
                let _ = reply.send(Err("shutting down".into()));
                return;
            }
        }
        self.shared.wake.notify_one();
    }

    /// How many syncs have run: far fewer than requests when they share them.
    pub fn syncs(&self) -> u64 {
        self.shared.syncs.load(Ordering::Relaxed)
    }

    /// The error of the latest sync, if it failed (readiness check).
    pub fn last_error(&self) -> Option<String> {
        self.shared.lock().ok().and_then(|w| w.last_error.clone())
    }

    /// Syncs what is outstanding and stops the thread (waiting for it); later calls to
    /// [`Self::durable`] fail.
    pub fn stop(&self) {
        if let Ok(mut w) = self.shared.lock() {
            w.stopping = true;
        }
        self.shared.wake.notify_one();
        let thread = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

fn run(shared: &Shared) {
    let mut last_batch = 0;
    loop {
        let stopping = {
            let Ok(mut w) = shared.lock() else {
                return;
            };
            while w.writers.is_empty() && !w.stopping {
                w = match shared.wake.wait(w) {
                    Ok(w) => w,
                    Err(_) => return,
                };
            }
            w.stopping
        };
        if last_batch > 1 && !stopping {
            std::thread::sleep(GATHER);
        }
        // Every writer in the list stored its records before joining it, so this sync
        // covers them all; later ones wait for the next.
        let Ok(writers) = shared.lock().map(|mut w| std::mem::take(&mut w.writers)) else {
            return;
        };
        last_batch = writers.len();
        let result = shared.store.sync().map_err(|e| e.to_string());
        shared.syncs.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = &result {
            tracing::error!(error = %e, "queue sync failed; requests waiting on it get 503");
        }
        if let Ok(mut w) = shared.lock() {
            w.last_error = result.as_ref().err().cloned();
        }
        for writer in writers {
            let _ = writer.send(result.clone());
        }
        if stopping {
            return;
        }
    }
}
