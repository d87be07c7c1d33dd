//! The intake's way into the queue (D17): concurrent requests share one transaction, and so
//! one fsync (group commit).
//!
//! One thread takes every request that is waiting, stores all their records in one
//! [`Store::upsert`] (a transaction that is durable when it returns) and answers them. While
//! one transaction runs, the requests that arrive gather for the next, so a busy server runs
//! few, large transactions and an idle one runs each request at once. A large request is
//! written in chunks, and small requests go ahead of the chunks (never ahead of a record with
//! the same key), so no one waits long behind someone else's batch (D27).

use super::batch::{BatchThread, Serve};
use super::{NewRecord, Store, StoreError, now_ms};
use std::collections::HashSet;
use std::hash::{DefaultHasher, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tokio::sync::oneshot;

/// One transaction takes at most this many records in arrival order, and a request's records
/// are split into chunks of this size: a large batch (10,000 records) never holds the queue
/// for one long transaction, and a request arriving meanwhile waits tens of milliseconds at
/// most (D27). Batching pays off long before this size.
const MAX_RECORDS_PER_TRANSACTION: usize = 250;
const CHUNK_RECORDS: usize = MAX_RECORDS_PER_TRANSACTION;

/// A job of at most this many records may join a transaction ahead of larger jobs that
/// arrived before it, when it shares no key with them (per-key order, D16/D18).
const SMALL_JOB_RECORDS: usize = 100;

/// The answer to one waiting request.
type Reply = oneshot::Sender<Result<(), StoreError>>;

struct Job {
    records: Vec<NewRecord>,
    /// A hash of each record's key, sorted: what [`take_small`] compares, so choosing a
    /// transaction costs little however many records wait (D27).
    hashes: Vec<u64>,
    reply: Reply,
    /// The first chunk of its request: subject to the free-space rule (D30). Later chunks
    /// are not, so a request admitted is stored whole unless the disk itself fails.
    first: bool,
    /// Set when a chunk of the request failed: its later chunks are not written, so what is
    /// stored of a request is always its first records.
    failed: Arc<AtomicBool>,
}

impl Job {
    fn new(records: Vec<NewRecord>, reply: Reply, first: bool, failed: Arc<AtomicBool>) -> Self {
        let mut hashes: Vec<u64> = records
            .iter()
            .map(|r| {
                let mut h = DefaultHasher::new();
                h.write(r.key.as_bytes());
                h.finish()
            })
            .collect();
        hashes.sort_unstable();
        Self {
            records,
            hashes,
            reply,
            first,
            failed,
        }
    }

    /// May go ahead of larger jobs: the first chunk of a request of at most
    /// [`SMALL_JOB_RECORDS`] records.
    fn small(&self) -> bool {
        self.first && self.records.len() <= SMALL_JOB_RECORDS
    }

    /// Whether the two jobs may share a key (a hash collision says yes: the job then keeps
    /// its place, which is always allowed).
    fn shares_key_with(&self, other: &Job) -> bool {
        let (few, many) = if self.hashes.len() <= other.hashes.len() {
            (&self.hashes, &other.hashes)
        } else {
            (&other.hashes, &self.hashes)
        };
        few.iter().any(|h| many.binary_search(h).is_ok())
    }
}

struct QueueWriter {
    store: Arc<dyn Store>,
    transactions: Arc<AtomicU64>,
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
        let transactions = Arc::new(AtomicU64::new(0));
        let writer = QueueWriter {
            store,
            transactions: Arc::clone(&transactions),
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
    pub async fn store(&self, mut records: Vec<NewRecord>) -> Result<(), StoreError> {
        let total = records.len();
        let failed = Arc::new(AtomicBool::new(false));
        let mut answers = Vec::with_capacity(total.div_ceil(CHUNK_RECORDS));
        while !records.is_empty() {
            let rest = records.split_off(records.len().min(CHUNK_RECORDS));
            let (reply, answer) = oneshot::channel();
            let len = records.len();
            let job = Job::new(records, reply, answers.is_empty(), Arc::clone(&failed));
            if self.thread.push(job).is_err() {
                failed.store(true, Ordering::Relaxed);
                answers.push((len, None));
                break;
            }
            answers.push((len, Some(answer)));
            records = rest;
        }
        let mut stored = 0;
        for (len, answer) in answers {
            let result = match answer {
                Some(answer) => answer.await.unwrap_or_else(|_| {
                    Err(StoreError::Unavailable("queue writer stopped".into()))
                }),
                None => Err(StoreError::Unavailable("shutting down".into())),
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

/// Transactions of small jobs in a row before the oldest large job is served again: small
/// requests pass the chunks of a large one, which still progresses.
const SMALL_ROUNDS: u32 = 4;

impl Serve<Job> for QueueWriter {
    /// Small jobs first, when they can go without reordering a key, so a client's single
    /// record does not wait for the chunks of someone else's 10,000 (D27); else the oldest.
    fn take(&mut self, waiting: &mut Vec<Job>) -> Vec<Job> {
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

/// The oldest waiting jobs, up to [`MAX_RECORDS_PER_TRANSACTION`] records (at least one job).
fn take_oldest(waiting: &mut Vec<Job>) -> Vec<Job> {
    let mut records = 0;
    let n = waiting
        .iter()
        .take_while(|j| {
            records += j.records.len();
            records <= MAX_RECORDS_PER_TRANSACTION
        })
        .count()
        .max(1)
        .min(waiting.len());
    waiting.drain(..n).collect()
}

/// The small waiting jobs that share no key with the jobs ahead of them that stay, in arrival
/// order: they may be written before those without changing any key's order (D16, D18).
///
/// Runs before every transaction with the waiting list locked, so its cost must not grow with
/// every record waiting: under a flood of 10,000-record requests hundreds of chunks wait, and
/// hashing all their keys each time held the writer for most of its time (BENCHMARKS.md,
/// D27). It compares the sorted key hashes made when the jobs were queued, by job or by key,
/// whichever is less work.
fn take_small(waiting: &mut Vec<Job>) -> Vec<Job> {
    let Some(last) = waiting.iter().rposition(Job::small) else {
        return Vec::new();
    };
    let ahead = &waiting[..=last];
    let (mut candidate_records, mut staying_jobs, mut ahead_records) = (0, 0, 0);
    for job in ahead {
        ahead_records += job.records.len();
        if job.small() {
            candidate_records += job.records.len();
        } else {
            staying_jobs += 1;
        }
    }
    let taken = if candidate_records.saturating_mul(staying_jobs) <= ahead_records {
        free_by_job(ahead)
    } else {
        free_by_key(ahead)
    };
    let mut taken: Vec<Job> = taken.into_iter().rev().map(|i| waiting.remove(i)).collect();
    taken.reverse(); // in arrival order: upserts apply later records last (D16)
    taken
}

/// [`take_small`]'s choice, comparing each small job with every job ahead of it that stays:
/// little work for a few small jobs behind many large ones.
fn free_by_job(ahead: &[Job]) -> Vec<usize> {
    let mut staying: Vec<&Job> = Vec::new();
    let mut free = Vec::new();
    for (i, job) in ahead.iter().enumerate() {
        // A later chunk of a request never passes the chunks before it.
        if job.small() && !staying.iter().any(|s| s.shares_key_with(job)) {
            free.push(i);
        } else {
            staying.push(job);
        }
    }
    free
}

/// [`take_small`]'s choice, looking up the keys of the jobs that stay among the small jobs'
/// keys: little work for many small jobs.
fn free_by_key(ahead: &[Job]) -> Vec<usize> {
    let wanted: HashSet<u64> = ahead
        .iter()
        .filter(|j| j.small())
        .flat_map(|j| j.hashes.iter().copied())
        .collect();
    let mut blocked: HashSet<u64> = HashSet::new();
    let mut free = Vec::new();
    for (i, job) in ahead.iter().enumerate() {
        if job.small() && !job.hashes.iter().any(|h| blocked.contains(h)) {
            free.push(i);
        } else {
            blocked.extend(job.hashes.iter().filter(|h| wanted.contains(h)));
        }
    }
    free
}

impl QueueWriter {
    fn write(&self, jobs: Vec<Job>) {
        let (jobs, skipped): (Vec<Job>, Vec<Job>) = jobs
            .into_iter()
            .partition(|j| !j.failed.load(Ordering::Relaxed));
        for job in skipped {
            let _ = job.reply.send(Err(StoreError::Unavailable(
                "an earlier part of the request was not stored".into(),
            )));
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
        let result = if jobs.iter().any(|j| j.first) {
            self.store.upsert(&records, now_ms())
        } else {
            self.store.upsert_continued(&records, now_ms())
        };
        self.transactions.fetch_add(1, Ordering::Relaxed);
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
    use super::*;
    use crate::queue::{Mode, QueueKey, SqliteStore};

    fn job(code: &str) -> (Job, oneshot::Receiver<Result<(), StoreError>>) {
        let (reply, answer) = oneshot::channel();
        let records = vec![NewRecord {
            key: QueueKey::new("gl-code", &["main", code]).unwrap(),
            interface: "general-ledger-codes-v1",
            xml: format!("<gl_code>{code}</gl_code>"),
            receipt: None,
        }];
        (Job::new(records, reply, true, Arc::default()), answer)
    }

    #[test]
    fn the_oldest_jobs_go_up_to_the_record_cap() {
        let mut waiting: Vec<Job> = (0..3).map(|i| job(&i.to_string()).0).collect();
        waiting[0].records = (0..MAX_RECORDS_PER_TRANSACTION - 1)
            .map(|_| waiting[1].records[0].clone())
            .collect();
        assert_eq!(take_oldest(&mut waiting).len(), 2);
        assert_eq!(waiting.len(), 1);
        // A job over the cap on its own still goes.
        waiting[0].records = vec![waiting[0].records[0].clone(); MAX_RECORDS_PER_TRANSACTION + 1];
        assert_eq!(take_oldest(&mut waiting).len(), 1);
        assert!(waiting.is_empty());
    }

    fn keys(jobs: &[Job]) -> Vec<String> {
        jobs.iter().map(|j| j.records[0].key.to_string()).collect()
    }

    fn big(code: &str) -> Job {
        let (j, _) = job(code);
        let records = vec![j.records[0].clone(); MAX_RECORDS_PER_TRANSACTION];
        Job::new(records, j.reply, true, Arc::default())
    }

    /// The choice as first written: every key of every job that stays, in one set.
    fn free_reference(waiting: &[Job]) -> Vec<usize> {
        let mut passed: HashSet<&[u8]> = HashSet::new();
        let mut free = Vec::new();
        for (i, job) in waiting.iter().enumerate() {
            if job.small()
                && job
                    .records
                    .iter()
                    .all(|r| !passed.contains(r.key.as_bytes()))
            {
                free.push(i);
            } else {
                passed.extend(job.records.iter().map(|r| r.key.as_bytes()));
            }
        }
        free
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
        /// Both ways of choosing small jobs pick exactly the jobs that share no key with a job
        /// ahead that stays (D16): later chunks, and jobs of a few, about a hundred and a few
        /// hundred records over 400 keys.
        #[test]
        fn both_ways_of_choosing_small_jobs_agree_with_comparing_every_key(
            jobs in proptest::collection::vec(
                (proptest::bool::weighted(0.8),
                 proptest::prop_oneof![
                     proptest::collection::vec(0u16..400, 1..=3),
                     proptest::collection::vec(0u16..400, 95..=105),
                     proptest::collection::vec(0u16..400, 150..=250),
                 ]),
                0..24,
            )
        ) {
            let waiting: Vec<Job> = jobs
                .into_iter()
                .map(|(first, codes)| {
                    let (j, _) = job("x");
                    let records = codes
                        .iter()
                        .map(|c| job(&format!("K{c}")).0.records.remove(0))
                        .collect();
                    Job::new(records, j.reply, first, Arc::default())
                })
                .collect();
            let expected = free_reference(&waiting);
            proptest::prop_assert_eq!(free_by_job(&waiting), expected.clone());
            proptest::prop_assert_eq!(free_by_key(&waiting), expected.clone());
            let mut taken = waiting;
            let small = take_small(&mut taken);
            proptest::prop_assert_eq!(small.len(), expected.len());
        }
    }

    #[test]
    fn small_jobs_go_ahead_of_large_ones_unless_they_share_a_key() {
        // Two chunks of a large request, a small job with another key, a small job resending
        // a key of the second chunk, one more small job.
        let mut waiting = vec![big("L1"), big("L2"), job("S").0, job("L2").0, job("T").0];
        let small = take_small(&mut waiting);
        assert_eq!(keys(&small), ["gl-code:main/S", "gl-code:main/T"]);
        // The resend of L2 stays behind L2's chunk: per key, in order.
        assert_eq!(
            keys(&waiting),
            ["gl-code:main/L1", "gl-code:main/L2", "gl-code:main/L2"]
        );
    }

    #[test]
    fn large_jobs_still_progress_while_small_ones_keep_coming() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(SqliteStore::open(dir.path(), Mode::Serve, 0).unwrap());
        let mut writer = QueueWriter {
            store,
            transactions: Arc::default(),
            small_rounds: 0,
        };
        let mut waiting = vec![big("L1")];
        let mut rounds = 0;
        while waiting.iter().any(|j| j.records.len() > 1) {
            waiting.push(job(&format!("S{rounds}")).0);
            writer.take(&mut waiting);
            rounds += 1;
        }
        assert_eq!(rounds, SMALL_ROUNDS + 1);
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
        assert!(store.items().unwrap().is_empty(), "nothing of it stored");
        // The rest of a request already admitted is stored even so.
        store.upsert_continued(&records(3), now_ms()).unwrap();
        assert_eq!(store.items().unwrap().len(), 3);
        writer.stop();
    }
}
