//! The intake's way into the queue (D17): concurrent requests share one sled transaction, then
//! one sync.
//!
//! sled starts every transaction by sealing its current log buffer and handing it to its IO
//! threads, so the cost of a transaction hardly depends on its size. One thread therefore takes
//! every request that is waiting, stores all their records in one [`Store::upsert`] and passes
//! them on to the [`GroupCommit`] thread, which answers them once the records are durable.
//! While one transaction runs, the requests that arrive gather for the next, so a busy server
//! runs few, large transactions and an idle one runs each request at once.

use super::batch::{BatchThread, Serve};
use super::commit::{GroupCommit, Reply};
use super::{NewRecord, Store, StoreError, now_ms};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::oneshot;

/// One transaction takes at most this many records; more wait for the next.
const MAX_RECORDS_PER_TRANSACTION: usize = 5_000;

struct Job {
    records: Vec<NewRecord>,
    reply: Reply,
}

struct QueueWriter {
    store: Arc<dyn Store>,
    commit: GroupCommit,
    transactions: Arc<AtomicU64>,
}

/// The writing thread and the requests that wait for it.
#[derive(Clone)]
pub struct Writer {
    thread: BatchThread<Job>,
    transactions: Arc<AtomicU64>,
}

impl Writer {
    /// Starts the writing thread for `store`, handing what it wrote to `commit`.
    pub fn start(store: Arc<dyn Store>, commit: GroupCommit) -> std::io::Result<Self> {
        let transactions = Arc::new(AtomicU64::new(0));
        let writer = QueueWriter {
            store,
            commit,
            transactions: Arc::clone(&transactions),
        };
        Ok(Self {
            thread: BatchThread::start("queue-write", writer)?,
            transactions,
        })
    }

    /// Stores `records` (later records of a key win, D16) and waits until they are durable.
    pub async fn store(&self, records: Vec<NewRecord>) -> Result<(), StoreError> {
        let (reply, answer) = oneshot::channel();
        self.thread
            .push(Job { records, reply })
            .map_err(|_| StoreError::Unavailable("shutting down".into()))?;
        match answer.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(StoreError::Unavailable(e)),
            Err(_) => Err(StoreError::Unavailable("queue writer stopped".into())),
        }
    }

    /// Transactions run so far: far fewer than requests when they share them.
    pub fn transactions(&self) -> u64 {
        self.transactions.load(Ordering::Relaxed)
    }

    /// Writes what is waiting, hands it to the sync stage and stops the thread (waiting for
    /// it); later calls to [`Self::store`] fail. Stop the [`GroupCommit`] after this.
    pub fn stop(&self) {
        self.thread.stop();
    }
}

impl Serve<Job> for QueueWriter {
    fn take(&mut self, waiting: &mut Vec<Job>) -> Vec<Job> {
        take_some(waiting)
    }

    fn serve(&mut self, jobs: Vec<Job>) {
        self.write(jobs);
    }
}

/// The oldest waiting jobs, up to [`MAX_RECORDS_PER_TRANSACTION`] records (at least one job).
fn take_some(waiting: &mut Vec<Job>) -> Vec<Job> {
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

impl QueueWriter {
    fn write(&self, mut jobs: Vec<Job>) {
        let lengths: Vec<usize> = jobs.iter().map(|j| j.records.len()).collect();
        let mut records: Vec<NewRecord> = jobs
            .iter_mut()
            .flat_map(|j| std::mem::take(&mut j.records))
            .collect();
        let result = self.store.upsert(&records, now_ms());
        self.transactions.fetch_add(1, Ordering::Relaxed);
        match result {
            Ok(()) => {
                for job in jobs {
                    self.commit.join(job.reply);
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
                for job in jobs {
                    let _ = job.reply.send(Err(e.to_string()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::{QueueKey, SledStore};

    fn job(code: &str) -> (Job, oneshot::Receiver<Result<(), String>>) {
        let (reply, answer) = oneshot::channel();
        let records = vec![NewRecord {
            key: QueueKey::new("gl-code", &["main", code]).unwrap(),
            interface: "general-ledger-codes-v1",
            xml: format!("<gl_code>{code}</gl_code>"),
        }];
        (Job { records, reply }, answer)
    }

    #[test]
    fn a_transaction_takes_the_oldest_jobs_up_to_the_record_cap() {
        let mut waiting: Vec<Job> = (0..3).map(|i| job(&i.to_string()).0).collect();
        waiting[0].records = (0..MAX_RECORDS_PER_TRANSACTION - 1)
            .map(|_| waiting[1].records[0].clone())
            .collect();
        assert_eq!(take_some(&mut waiting).len(), 2);
        assert_eq!(waiting.len(), 1);
        // A job over the cap on its own still goes.
        waiting[0].records = vec![waiting[0].records[0].clone(); MAX_RECORDS_PER_TRANSACTION + 1];
        assert_eq!(take_some(&mut waiting).len(), 1);
        assert!(waiting.is_empty());
    }

    #[test]
    fn a_request_whose_records_cannot_be_stored_fails_alone() {
        let dir = tempfile::tempdir().unwrap();
        {
            // A stored item that cannot be decoded: upserting its key fails.
            let db = sled::open(dir.path().join("queue")).unwrap();
            db.open_tree("meta")
                .unwrap()
                .insert("format", &[2])
                .unwrap();
            let bad = QueueKey::new("gl-code", &["main", "BAD"]).unwrap();
            db.open_tree("items")
                .unwrap()
                .insert(bad.as_bytes(), &b"garbage"[..])
                .unwrap();
            db.flush().unwrap();
        }
        let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
        let commit = GroupCommit::start(Arc::clone(&store)).unwrap();
        let writer = QueueWriter {
            store: Arc::clone(&store),
            commit: commit.clone(),
            transactions: Arc::default(),
        };
        let (a, a_answer) = job("A");
        let (bad, bad_answer) = job("BAD");
        let (c, c_answer) = job("C");
        writer.write(vec![a, bad, c]);
        assert_eq!(a_answer.blocking_recv().unwrap(), Ok(()));
        assert_eq!(c_answer.blocking_recv().unwrap(), Ok(()));
        let refused = bad_answer.blocking_recv().unwrap().unwrap_err();
        assert!(refused.contains("corrupt"), "{refused}");
        for code in ["A", "C"] {
            let key = QueueKey::new("gl-code", &["main", code]).unwrap();
            assert!(store.get(&key).unwrap().is_some(), "{code} stored");
        }
        // One combined transaction, then one per request.
        assert_eq!(writer.transactions.load(Ordering::Relaxed), 4);
        commit.stop();
    }
}
