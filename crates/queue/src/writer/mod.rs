//! The intake's way into the queue (D17): concurrent requests share one transaction, and so
//! one fsync (group commit).
//!
//! One thread takes every request that is waiting, stores all their records in one
//! [`Store::upsert`] (a transaction that is durable when it returns) and answers them. While
//! one transaction runs, the requests that arrive gather for the next, so a busy server runs
//! few, large transactions and an idle one runs each request at once. A large request is
//! written in chunks, and small requests go ahead of the chunks (never ahead of a record with
//! the same key), so no one waits long behind someone else's batch (D27).

mod choose;

use super::batch::{BatchThread, Serve};
use super::{NewRecord, Store, StoreError, now_ms};
use choose::{Job, only_small, take_oldest, take_small};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// One transaction takes at most this many records in arrival order, and a request's records
/// are split into chunks of this size: a large batch (10,000 records) never holds the queue
/// for one long transaction, and a request arriving meanwhile waits tens of milliseconds at
/// most (D27). Batching pays off long before this size.
const MAX_RECORDS_PER_TRANSACTION: usize = 250;
const CHUNK_RECORDS: usize = MAX_RECORDS_PER_TRANSACTION;

/// A transaction that takes this long is logged: every request in it waited as long for its
/// answer (D17), and a disk that slow is what an operator needs to know of first.
const SLOW_TRANSACTION: Duration = Duration::from_secs(1);

/// The answer to one waiting request.
type Reply = oneshot::Sender<Result<(), StoreError>>;

/// Told how long each transaction took (its fsync included) and how many records it stored.
pub type Observer = Box<dyn Fn(Duration, usize) + Send>;

struct QueueWriter {
    store: Arc<dyn Store>,
    transactions: Arc<AtomicU64>,
    observe: Observer,
    /// Transactions of small jobs only, in a row.
    small_rounds: u32,
}

/// The writing thread and the requests that wait for it.
#[derive(Clone)]
pub struct Writer {
    thread: BatchThread<Job>,
    transactions: Arc<AtomicU64>,
}

impl Writer {
    /// Starts the writing thread for `store`.
    pub fn start(store: Arc<dyn Store>) -> std::io::Result<Self> {
        Self::start_observed(store, Box::new(|_, _| {}))
    }

    /// Starts the writing thread for `store`, telling `observe` of every transaction (the
    /// service's `/metrics`).
    pub fn start_observed(store: Arc<dyn Store>, observe: Observer) -> std::io::Result<Self> {
        let transactions = Arc::new(AtomicU64::new(0));
        let writer = QueueWriter {
            store,
            transactions: Arc::clone(&transactions),
            observe,
            small_rounds: 0,
        };
        Ok(Self {
            thread: BatchThread::start("queue-write", writer)?,
            transactions,
        })
    }

    /// Stores `records` (later records of a key win, D16) and waits until they are durable.
    /// A large request is written in chunks of [`CHUNK_RECORDS`], in order. Only the first
    /// chunk is refused by the free-space rule; if the disk fails under a later one, the
    /// error says how many of the first records were stored ([`StoreError::Incomplete`]).
    pub async fn store(&self, records: Vec<NewRecord>) -> Result<(), StoreError> {
        let total = records.len();
        let failed = Arc::new(AtomicBool::new(false));
        let mut answers = Vec::with_capacity(total.div_ceil(CHUNK_RECORDS));
        for chunk in in_chunks(records, CHUNK_RECORDS) {
            let (reply, answer) = oneshot::channel();
            let len = chunk.len();
            let job = Job::new(chunk, reply, answers.is_empty(), Arc::clone(&failed));
            if self.thread.push(job).is_err() {
                failed.store(true, Ordering::Relaxed);
                answers.push((len, None));
                break;
            }
            answers.push((len, Some(answer)));
        }
        let mut stored = 0;
        for (len, answer) in answers {
            let result = match answer {
                Some(answer) => answer.await.unwrap_or(Err(StoreError::Stopping)),
                None => Err(StoreError::Stopping),
            };
            match result {
                Ok(()) => stored += len,
                Err(cause) if stored == 0 => return Err(cause),
                Err(cause) => {
                    return Err(StoreError::Incomplete {
                        stored,
                        total,
                        cause: Box::new(cause),
                    });
                }
            }
        }
        Ok(())
    }

    /// Transactions run so far, each one fsync: far fewer than requests when they share
    /// them.
    pub fn transactions(&self) -> u64 {
        self.transactions.load(Ordering::Relaxed)
    }

    /// Writes what is waiting and stops the thread (waiting for it); later calls to
    /// [`Self::store`] fail.
    pub fn stop(&self) {
        self.thread.stop();
    }
}

/// `items` in chunks of `size`, in order; none when there are no items. Split from the end, so
/// each item moves once: splitting from the front copies the rest every time, 16 MB of moves
/// for 10,000 records on the async worker that runs the request (D27).
fn in_chunks<T>(mut items: Vec<T>, size: usize) -> Vec<Vec<T>> {
    let size = size.max(1);
    let mut chunks = Vec::with_capacity(items.len().div_ceil(size));
    while items.len() > size {
        let last = (items.len() - 1) / size * size;
        chunks.push(items.split_off(last));
    }
    if !items.is_empty() {
        chunks.push(items);
    }
    chunks.reverse();
    chunks
}

/// Transactions of small jobs in a row before the oldest large job is served again: small
/// requests pass the chunks of a large one, which still progresses.
const SMALL_ROUNDS: u32 = 4;

impl Serve<Job> for QueueWriter {
    /// Small jobs first, when they can go without reordering a key, so a client's single
    /// record does not wait for the chunks of someone else's 10,000 (D27); else the oldest.
    /// With no large job waiting, every job goes: there is no one to take turns with, and
    /// the oldest alone would leave a fifth of the fsyncs to two 100-record requests.
    fn take(&mut self, waiting: &mut Vec<Job>) -> Vec<Job> {
        if only_small(waiting) {
            self.small_rounds = 0;
            return std::mem::take(waiting);
        }
        if self.small_rounds < SMALL_ROUNDS {
            let small = take_small(waiting);
            if !small.is_empty() {
                self.small_rounds += 1;
                return small;
            }
        }
        self.small_rounds = 0;
        take_oldest(waiting)
    }

    fn serve(&mut self, jobs: Vec<Job>) {
        self.write(jobs);
    }
}

impl QueueWriter {
    fn write(&self, jobs: Vec<Job>) {
        let (jobs, skipped): (Vec<Job>, Vec<Job>) = jobs
            .into_iter()
            .partition(|j| !j.failed.load(Ordering::Relaxed));
        for job in skipped {
            let _ = job.reply.send(Err(StoreError::EarlierPartFailed));
        }
        if jobs.is_empty() {
            return;
        }
        let mut jobs = jobs;
        let lengths: Vec<usize> = jobs.iter().map(|j| j.records.len()).collect();
        let mut records: Vec<NewRecord> = jobs
            .iter_mut()
            .flat_map(|j| std::mem::take(&mut j.records))
            .collect();
        let started = Instant::now();
        let result = if jobs.iter().any(|j| j.first) {
            self.store.upsert(&records, now_ms())
        } else {
            self.store.upsert_continued(&records, now_ms())
        };
        let took = started.elapsed();
        self.transactions.fetch_add(1, Ordering::Relaxed);
        (self.observe)(took, records.len());
        if took >= SLOW_TRANSACTION {
            tracing::warn!(
                took_ms = took.as_millis() as u64,
                records = records.len(),
                requests = jobs.len(),
                "storing records took over a second: the queue's disk is slow, and every \
                 request waits for it before its answer"
            );
        }
        match result {
            Ok(()) => {
                for job in jobs {
                    let _ = job.reply.send(Ok(()));
                }
            }
            // One request's records may be what fails: give each request its own
            // transaction, so the others are still stored.
            Err(_) if jobs.len() > 1 => {
                for (mut job, len) in jobs.into_iter().zip(lengths) {
                    job.records = records.drain(..len).collect();
                    self.write(vec![job]);
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "storing records failed; the request gets 503");
                if let Some(job) = jobs.into_iter().next() {
                    job.failed.store(true, Ordering::Relaxed);
                    let _ = job.reply.send(Err(e));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::choose::tests::{big, job};
    use super::*;
    use crate::{Mode, SqliteStore};

    #[test]
    fn chunks_keep_the_order_and_all_but_the_last_are_full() {
        for n in [0, 1, 249, 250, 251, 500, 501, 10_000] {
            let chunks = in_chunks((0..n).collect::<Vec<usize>>(), CHUNK_RECORDS);
            assert_eq!(chunks.len(), n.div_ceil(CHUNK_RECORDS), "{n}");
            if let Some((last, full)) = chunks.split_last() {
                assert!(full.iter().all(|c| c.len() == CHUNK_RECORDS), "{n}");
                assert!(!last.is_empty() && last.len() <= CHUNK_RECORDS, "{n}");
            }
            let joined: Vec<usize> = chunks.into_iter().flatten().collect();
            assert_eq!(joined, (0..n).collect::<Vec<_>>());
        }
    }

    /// A writer on a store in `dir`, for tests of which jobs it takes.
    fn chooser(dir: &std::path::Path) -> QueueWriter {
        QueueWriter {
            store: Arc::new(SqliteStore::open(dir, Mode::Serve, 0).unwrap()),
            transactions: Arc::default(),
            observe: Box::new(|_, _| {}),
            small_rounds: 0,
        }
    }

    #[test]
    fn large_jobs_still_progress_while_small_ones_keep_coming() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = chooser(dir.path());
        let mut waiting = vec![big("L1")];
        let mut rounds = 0;
        while waiting.iter().any(|j| j.records.len() > 1) {
            waiting.push(job(&format!("S{rounds}")).0);
            writer.take(&mut waiting);
            rounds += 1;
        }
        assert_eq!(rounds, SMALL_ROUNDS + 1);
    }

    #[test]
    fn with_no_large_job_waiting_every_waiting_job_goes() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = chooser(dir.path());
        // Requests of 100 records, five at a time: more than the oldest-first cap holds.
        for round in 0..SMALL_ROUNDS * 3 {
            let mut waiting: Vec<Job> = (0..5)
                .map(|i| {
                    let mut j = job(&format!("R{round}-{i}")).0;
                    j.records = vec![j.records[0].clone(); 100];
                    j
                })
                .collect();
            assert_eq!(writer.take(&mut waiting).len(), 5, "round {round}");
            assert!(waiting.is_empty());
        }
    }

    fn records(n: usize) -> Vec<NewRecord> {
        (0..n)
            .map(|i| job(&format!("R{i}")).0.records.remove(0))
            .collect()
    }

    #[test]
    fn a_request_refused_for_space_stores_nothing_and_later_parts_are_not_refused() {
        // D30: no room by the rule (every byte would have to stay free).
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(SqliteStore::open(dir.path(), Mode::Serve, u64::MAX).unwrap());
        let writer = Writer::start(Arc::clone(&store)).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let refused = runtime
            .block_on(writer.store(records(CHUNK_RECORDS * 2 + 10)))
            .unwrap_err();
        assert!(matches!(refused, StoreError::Full(_)), "{refused}");
        assert!(refused.to_string().starts_with("storage is full: "));
        let pending = || store.keys(crate::State::Pending, None).unwrap().len();
        assert_eq!(pending(), 0, "nothing of it stored");
        // The rest of a request already admitted is stored even so.
        store.upsert_continued(&records(3), now_ms()).unwrap();
        assert_eq!(pending(), 3);
        writer.stop();
    }

    #[test]
    fn the_observer_is_told_of_every_transaction_and_its_records() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(SqliteStore::open(dir.path(), Mode::Serve, 0).unwrap());
        let (told, seen) = std::sync::mpsc::channel();
        let writer = Writer::start_observed(
            store,
            Box::new(move |took, n| told.send((took, n)).unwrap()),
        )
        .unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        // A request larger than a chunk is two transactions, told in order.
        runtime
            .block_on(writer.store(records(CHUNK_RECORDS + 7)))
            .unwrap();
        writer.stop();
        let seen: Vec<(Duration, usize)> = seen.try_iter().collect();
        let sizes: Vec<usize> = seen.iter().map(|s| s.1).collect();
        assert_eq!(sizes, [CHUNK_RECORDS, 7]);
        assert!(seen.iter().all(|s| s.0 > Duration::ZERO), "{seen:?}");
        assert_eq!(writer.transactions(), 2);
    }
}
