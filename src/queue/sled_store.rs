//! [`Store`] on sled 0.34.

use super::{Item, NewRecord, QueueKey, State, Store, StoreError};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

/// The queue in a sled database under `<data_dir>/queue`.
pub struct SledStore {
    db: sled::Db,
    items: sled::Tree,
    dir: PathBuf,
    /// sled's log file, kept open for `sync_data` (sled's own flush is not an fsync).
    log: File,
    /// When the last sync started: blobs written since then are fsync'd by the next one.
    last_sync: Mutex<SystemTime>,
}

impl SledStore {
    /// Opens (or creates) the queue in `data_dir`. Fails when another process holds it.
    pub fn open(data_dir: &Path) -> Result<Self, StoreError> {
        let dir = data_dir.join("queue");
        let db = sled::Config::new()
            .path(&dir)
            .mode(sled::Mode::HighThroughput)
            .open()?;
        let items = db.open_tree("items")?;
        let log = File::open(dir.join("db"))?;
        Ok(Self {
            db,
            items,
            dir,
            log,
            last_sync: Mutex::new(SystemTime::UNIX_EPOCH),
        })
    }

    fn decode(key: &[u8], bytes: &[u8]) -> Result<Item, StoreError> {
        serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt {
            key: QueueKey::from_bytes(key).to_string(),
            reason: e.to_string(),
        })
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

impl Store for SledStore {
    fn upsert(&self, records: &[NewRecord], now_ms: u64) -> Result<(), StoreError> {
        for rec in records {
            let version = self.db.generate_id()?;
            let mut failure = None;
            self.items.fetch_and_update(rec.key.as_bytes(), |old| {
                let old = old.and_then(|b| serde_json::from_slice::<Item>(b).ok());
                // A pending key keeps its age and retry schedule (a resend must not make a
                // struggling delivery hammer the platform); anything else starts afresh.
                let (queued_at_ms, attempts, next_attempt_ms, last_error) = match old {
                    Some(o) if o.state == State::Pending => {
                        (o.queued_at_ms, o.attempts, o.next_attempt_ms, o.last_error)
                    }
                    _ => (now_ms, 0, 0, None),
                };
                let item = Item {
                    interface: rec.interface.to_string(),
                    version,
                    state: State::Pending,
                    queued_at_ms,
                    updated_at_ms: now_ms,
                    attempts,
                    next_attempt_ms,
                    last_error,
                    xml: rec.xml.clone(),
                };
                match serde_json::to_vec(&item) {
                    Ok(bytes) => Some(bytes),
                    Err(e) => {
                        failure = Some(e.to_string());
                        None
                    }
                }
            })?;
            if let Some(reason) = failure {
                return Err(StoreError::Corrupt {
                    key: rec.key.to_string(),
                    reason,
                });
            }
        }
        Ok(())
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
        self.items
            .get(key.as_bytes())?
            .map(|v| Self::decode(key.as_bytes(), &v))
            .transpose()
    }

    fn items(&self) -> Result<Vec<(QueueKey, Item)>, StoreError> {
        self.items
            .iter()
            .map(|kv| {
                let (k, v) = kv?;
                Ok((QueueKey::from_bytes(&k), Self::decode(&k, &v)?))
            })
            .collect()
    }
}
