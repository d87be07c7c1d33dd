//! [`Store`] on sled 0.34.

use super::codec;
use super::layout::{self, Count};
use super::sled_tx::{Lots, Tx, TxResult};
use super::{Backoff, Item, NewRecord, QueueKey, Sent, State, Stats, Store, StoreError};
use sled::Transactional;
use sled::transaction::TransactionError;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

/// The queue in a sled database under `<data_dir>/queue`.
pub struct SledStore {
    db: sled::Db,
    items: sled::Tree,
    pending: sled::Tree,
    rejected: sled::Tree,
    meta: sled::Tree,
    dir: PathBuf,
    /// sled's log file, kept open for `sync_data` (sled's own flush is not an fsync).
    log: File,
    /// When the last sync started: blobs written since then are fsync'd by the next one.
    last_sync: Mutex<SystemTime>,
    /// One writer at a time: transactions never conflict, and counters stay exact.
    writer: Mutex<()>,
}

impl SledStore {
    /// Opens (or creates) the queue in `data_dir`. Fails when another process holds it.
    pub fn open(data_dir: &Path) -> Result<Self, StoreError> {
        let dir = data_dir.join("queue");
        let db = open_db(&dir)?;
        let store = Self {
            items: db.open_tree("items")?,
            pending: db.open_tree("pending")?,
            rejected: db.open_tree("rejected")?,
            meta: db.open_tree("meta")?,
            log: File::open(dir.join("db"))?,
            db,
            dir,
            last_sync: Mutex::new(SystemTime::UNIX_EPOCH),
            writer: Mutex::new(()),
        };
        store.check_format()?;
        Ok(store)
    }

    /// Whether a queue exists in `data_dir` (without creating one).
    pub fn exists(data_dir: &Path) -> bool {
        data_dir.join("queue").join("db").is_file()
    }

    /// Runs `f` as one transaction over all trees, with the writer lock held.
    fn write<T>(&self, f: impl Fn(&Tx) -> TxResult<T>) -> Result<T, StoreError> {
        let _guard = self
            .writer
            .lock()
            .map_err(|_| StoreError::Unavailable("writer lock poisoned".into()))?;
        (&self.items, &self.pending, &self.rejected, &self.meta)
            .transaction(|(items, pending, rejected, meta)| {
                let tx = Tx::new(items, pending, rejected, meta);
                let out = f(&tx)?;
                tx.finish()?;
                Ok(out)
            })
            .map_err(|e| match e {
                TransactionError::Abort(reason) => StoreError::Corrupt {
                    key: "-".into(),
                    reason,
                },
                TransactionError::Storage(e) => StoreError::Db(e),
            })
    }

    fn decode(key: &[u8], bytes: &[u8]) -> Result<(Item, u64), StoreError> {
        codec::decode(bytes).map_err(|reason| StoreError::Corrupt {
            key: QueueKey::from_bytes(key).to_string(),
            reason,
        })
    }

    fn get_with_lot(&self, key: &[u8]) -> Result<Option<(Item, u64)>, StoreError> {
        self.items
            .get(key)?
            .map(|v| Self::decode(key, &v))
            .transpose()
    }

    /// Checks the format marker, writing it into a new queue.
    fn check_format(&self) -> Result<(), StoreError> {
        match self.meta.get(layout::FORMAT_KEY)? {
            Some(v) if *v == [FORMAT] => Ok(()),
            None if self.items.is_empty() && self.pending.is_empty() => {
                self.meta.insert(layout::FORMAT_KEY, &[FORMAT])?;
                Ok(())
            }
            found => Err(StoreError::Format {
                dir: self.dir.display().to_string(),
                found: found.map_or(1, |v| v.first().copied().unwrap_or(0)),
                expected: FORMAT,
            }),
        }
    }

    /// sled writes values over 128 KiB (a quarter segment) to files in `blobs/` without
    /// fsyncing them; sync those written since the last sync, and the directory itself.
    fn sync_blobs(&self, since: SystemTime) -> Result<(), StoreError> {
        let blobs = self.dir.join("blobs");
        let Ok(entries) = std::fs::read_dir(&blobs) else {
            return Ok(());
        };
        let mut any = false;
        for entry in entries.flatten() {
            let recent = entry
                .metadata()
                .and_then(|m| m.modified())
                .map(|t| t >= since)
                .unwrap_or(true);
            if recent {
                if let Ok(f) = File::open(entry.path()) {
                    f.sync_data()?;
                    any = true;
                }
            }
        }
        if any {
            File::open(&blobs)?.sync_all()?;
        }
        Ok(())
    }
}

/// The on-disk format this version reads and writes: 2 is the layout in `mod.rs` (lots in the
/// pending index); 1, unmarked, listed every pending key in an entry of its own.
const FORMAT: u8 = 2;

/// sled's page cache. Its default (1 GiB) would let a long queue grow the process to that
/// size; the delivery path reads the queue front to back, so a small cache serves it well.
const CACHE_BYTES: u64 = 128 * 1024 * 1024;

/// How long an open waits for a lock that is being released.
const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(3);

/// sled's background threads let go of its directory lock a moment after the database is
/// dropped, so an open right after a close (a restart in one process) retries briefly. A lock
/// held by a running service still fails, after [`LOCK_PATIENCE`].
fn open_db(dir: &Path) -> Result<sled::Db, StoreError> {
    let started = std::time::Instant::now();
    loop {
        let config = sled::Config::new()
            .path(dir)
            .mode(sled::Mode::HighThroughput)
            .cache_capacity(CACHE_BYTES);
        match config.open() {
            Err(sled::Error::Io(e))
                if e.to_string().contains("could not acquire lock")
                    && started.elapsed() < LOCK_PATIENCE =>
            {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            other => return Ok(other?),
        }
    }
}

impl Store for SledStore {
    fn upsert(&self, records: &[NewRecord], now_ms: u64) -> Result<(), StoreError> {
        let versions = records
            .iter()
            .map(|_| self.db.generate_id())
            .collect::<Result<Vec<_>, _>>()?;
        self.write(|tx| {
            let mut lots = Lots::default();
            for (rec, &version) in records.iter().zip(&versions) {
                let old = tx.item(&rec.key)?;
                // A pending key keeps its age and attempts: it stays where it is in the line.
                let (queued_at_ms, attempts, last_error) = match &old {
                    Some((o, _)) if o.state == State::Pending => {
                        (o.queued_at_ms, o.attempts, o.last_error.clone())
                    }
                    _ => (now_ms, 0, None),
                };
                let item = Item {
                    interface: rec.interface.to_string(),
                    version,
                    state: State::Pending,
                    queued_at_ms,
                    updated_at_ms: now_ms,
                    attempts,
                    last_error,
                    xml: rec.xml.clone(),
                };
                match old {
                    Some((o, lot)) if o.state == State::Pending && o.interface == rec.interface => {
                        tx.put(&rec.key, &item, lot)?;
                        continue;
                    }
                    Some((o, lot)) => tx.unindex(&rec.key, &o, lot)?,
                    None => {}
                }
                let lot = lots.place(rec.interface, queued_at_ms, version);
                tx.index(&rec.key, &item, lot, true)?;
            }
            Ok(())
        })
    }

    fn sync(&self) -> Result<(), StoreError> {
        let started = SystemTime::now();
        let since = self
            .last_sync
            .lock()
            .map(|t| *t)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        self.db.flush()?;
        self.log.sync_data()?;
        self.sync_blobs(since)?;
        if let Ok(mut t) = self.last_sync.lock() {
            *t = started;
        }
        Ok(())
    }

    fn get(&self, key: &QueueKey) -> Result<Option<Item>, StoreError> {
        Ok(self.get_with_lot(key.as_bytes())?.map(|(item, _)| item))
    }

    fn pending(&self, interface: &str, limit: usize) -> Result<Vec<(QueueKey, Item)>, StoreError> {
        let mut out = Vec::new();
        for entry in self.pending.scan_prefix(layout::prefix(interface)) {
            let (entry, keys) = entry?;
            let lot = layout::pending_lot(&entry);
            for key in self.lot_keys(&entry, &keys)? {
                if out.len() >= limit {
                    return Ok(out);
                }
                // The index and the items are written together; a mismatch would be a bug.
                if let Some((item, l)) = self.get_with_lot(&key)? {
                    if item.state == State::Pending && Some(l) == lot {
                        out.push((QueueKey::from_bytes(&key), item));
                    }
                }
            }
        }
        Ok(out)
    }

    fn keys(&self, state: State, interface: Option<&str>) -> Result<Vec<QueueKey>, StoreError> {
        let prefix = interface.map(layout::prefix).unwrap_or_default();
        match state {
            State::Pending => {
                let mut keys = Vec::new();
                for entry in self.pending.scan_prefix(prefix) {
                    let (entry, lot) = entry?;
                    keys.extend(
                        self.lot_keys(&entry, &lot)?
                            .iter()
                            .map(|k| QueueKey::from_bytes(k)),
                    );
                }
                Ok(keys)
            }
            State::Rejected => self
                .rejected
                .scan_prefix(prefix)
                .map(|e| Ok(QueueKey::from_bytes(layout::rejected_queue_key(&e?.0))))
                .collect(),
        }
    }

    fn delivered(&self, sent: &[Sent]) -> Result<usize, StoreError> {
        self.write(|tx| {
            let mut gone = 0;
            for s in sent {
                if let Some((item, lot)) = tx.sent_item(s)? {
                    tx.unindex(&s.key, &item, lot)?;
                    tx.items.remove(s.key.as_bytes())?;
                    tx.count(&item.interface, Count::Delivered, 1);
                    gone += 1;
                }
            }
            Ok(gone)
        })
    }

    fn failed(&self, sent: &[Sent], error: &str) -> Result<(), StoreError> {
        self.write(|tx| {
            for s in sent {
                if let Some((mut item, lot)) = tx.sent_item(s)? {
                    item.attempts += 1;
                    item.last_error = Some(error.to_string());
                    tx.put(&s.key, &item, lot)?;
                }
            }
            Ok(())
        })
    }

    fn reject(&self, sent: &Sent, error: &str) -> Result<bool, StoreError> {
        self.write(|tx| {
            let Some((mut item, lot)) = tx.sent_item(sent)? else {
                return Ok(false);
            };
            tx.unindex(&sent.key, &item, lot)?;
            item.state = State::Rejected;
            item.attempts += 1;
            item.last_error = Some(error.to_string());
            tx.index(&sent.key, &item, 0, false)?;
            Ok(true)
        })
    }

    fn requeue(&self, key: &QueueKey) -> Result<bool, StoreError> {
        self.write(|tx| {
            let Some((mut item, _)) = tx.item(key)?.filter(|(i, _)| i.state == State::Rejected)
            else {
                return Ok(false);
            };
            tx.unindex(key, &item, 0)?;
            item.state = State::Pending;
            item.attempts = 0;
            // Back to its place in the line: the lot it was queued in, named by its version
            // (the ids of lots are versions of their first records, so no other lot has it).
            tx.index(key, &item, item.version, false)?;
            Ok(true)
        })
    }

    fn stats(&self, interface: &str) -> Result<Stats, StoreError> {
        let count = |c| -> Result<u64, StoreError> {
            Ok(layout::decode_u64(
                self.meta.get(layout::count_key(interface, c))?.as_deref(),
            ))
        };
        let oldest_pending_ms = self
            .pending
            .scan_prefix(layout::prefix(interface))
            .next()
            .transpose()?
            .and_then(|(k, _)| layout::pending_queued_at(&k));
        let backoff = match self.meta.get(layout::backoff_key(interface))? {
            Some(b) => serde_json::from_slice(&b).map_err(|e| StoreError::Corrupt {
                key: format!("backoff {interface}"),
                reason: e.to_string(),
            })?,
            None => Backoff::default(),
        };
        Ok(Stats {
            pending: count(Count::Pending)?,
            rejected: count(Count::Rejected)?,
            delivered: count(Count::Delivered)?,
            oldest_pending_ms,
            backoff,
        })
    }

    fn set_backoff(&self, interface: &str, backoff: &Backoff) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(backoff).map_err(|e| StoreError::Corrupt {
            key: format!("backoff {interface}"),
            reason: e.to_string(),
        })?;
        self.meta.insert(layout::backoff_key(interface), bytes)?;
        Ok(())
    }

    fn probe(&self) -> Result<(), StoreError> {
        let now = super::now_ms().to_be_bytes();
        self.meta.insert(b"probe", &now)?;
        match self.meta.get(b"probe")? {
            Some(v) if *v == now => Ok(()),
            _ => Err(StoreError::Unavailable(
                "probe write did not read back".into(),
            )),
        }
    }

    fn items(&self) -> Result<Vec<(QueueKey, Item)>, StoreError> {
        self.items
            .iter()
            .map(|kv| {
                let (k, v) = kv?;
                Ok((QueueKey::from_bytes(&k), Self::decode(&k, &v)?.0))
            })
            .collect()
    }
}

impl SledStore {
    fn lot_keys(&self, entry: &[u8], lot: &[u8]) -> Result<Vec<Vec<u8>>, StoreError> {
        layout::decode_lot(lot).map_err(|reason| StoreError::Corrupt {
            key: format!("pending index {}", String::from_utf8_lossy(entry)),
            reason,
        })
    }
}
