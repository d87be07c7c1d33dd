//! Group commit (D17): concurrent requests share one flush.
//!
//! A request whose records are stored joins the sync thread's next batch and waits for that
//! sync: every request that arrives while one sync runs is covered by the next. So a busy
//! server syncs as often as the disk allows, not once per request, and an idle one syncs at
//! once.
//!
//! A sync costs CPU as well as disk time (sled's flush, `fdatasync`, waking the writers), and
//! on a fast disk back-to-back syncs would each cover one or two requests while taking CPU
//! from the requests themselves. So when the previous sync covered several requests (the
//! server is busy), the thread first waits [`GATHER`] for more to join. An idle server never
//! waits.

use super::Store;
use super::batch::{BatchThread, Serve};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// How long a sync waits for more requests to join when the server is busy.
const GATHER: Duration = Duration::from_micros(500);

/// The answer to one waiting request: `Err` carries the failed sync's message.
pub(crate) type Reply = oneshot::Sender<Result<(), String>>;

/// What the sync thread and its handles share.
#[derive(Default)]
struct SyncStats {
    syncs: AtomicU64,
    /// The error of the latest sync, if it failed.
    last_error: Mutex<Option<String>>,
}

struct Syncer {
    store: Arc<dyn Store>,
    stats: Arc<SyncStats>,
    last_batch: usize,
}

impl Serve<Reply> for Syncer {
    fn before_take(&mut self, stopping: bool) {
        if self.last_batch > 1 && !stopping {
            std::thread::sleep(GATHER);
        }
    }

    // Every request in the batch stored its records before joining it, so this sync covers
    // them all; later ones wait for the next.
    fn serve(&mut self, batch: Vec<Reply>) {
        self.last_batch = batch.len();
        let result = self.store.sync().map_err(|e| e.to_string());
        self.stats.syncs.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = &result {
            tracing::error!(error = %e, "queue sync failed; requests waiting on it get 503");
        }
        if let Ok(mut last) = self.stats.last_error.lock() {
            *last = result.as_ref().err().cloned();
        }
        for reply in batch {
            let _ = reply.send(result.clone());
        }
    }
}

/// The syncing thread and the requests that wait for it.
#[derive(Clone)]
pub struct GroupCommit {
    thread: BatchThread<Reply>,
    stats: Arc<SyncStats>,
}

impl GroupCommit {
    /// Starts the sync thread for `store`.
    pub fn start(store: Arc<dyn Store>) -> std::io::Result<Self> {
        let stats = Arc::new(SyncStats::default());
        let syncer = Syncer {
            store,
            stats: Arc::clone(&stats),
            last_batch: 0,
        };
        Ok(Self {
            thread: BatchThread::start("queue-sync", syncer)?,
            stats,
        })
    }

    /// Answers `reply` once everything stored before this call is durable (at once with an
    /// error when stopping).
    pub(crate) fn join(&self, reply: Reply) {
        if let Err(reply) = self.thread.push(reply) {
            let _ = reply.send(Err("shutting down".into()));
        }
    }

    /// How many syncs have run: far fewer than requests when they share them.
    pub fn syncs(&self) -> u64 {
        self.stats.syncs.load(Ordering::Relaxed)
    }

    /// The error of the latest sync, if it failed (readiness check).
    pub fn last_error(&self) -> Option<String> {
        self.stats.last_error.lock().ok().and_then(|e| e.clone())
    }

    /// Syncs for the requests waiting and stops the thread (waiting for it); requests that
    /// join later are answered with an error.
    pub fn stop(&self) {
        self.thread.stop();
    }
}
