//! The durable queue: at most one pending item per primary key (D16), stored before the client
//! is answered (D17).
//!
//! Storage sits behind the narrow [`Store`] trait; [`SledStore`] is the implementation and
//! `tests/store_suite.rs` the suite every implementation must pass. [`GroupCommit`] shares one
//! flush among concurrent requests.
//!
//! On-disk layout (sled, in `<data_dir>/queue`):
//!
//! ```text
//! tree "items"   key:   QueueKey bytes   space 0x00 part 0x00 part ...   (key.rs)
//!                value: Item as JSON     interface, version, state, times, attempts, xml
//! ```
//!
//! `version` comes from sled's persistent id generator and grows with every upsert, so a
//! delivery can tell whether the item it sent is still the latest one.

pub mod commit;
pub mod key;
pub mod sled_store;

pub use commit::GroupCommit;
pub use key::QueueKey;
pub use sled_store::SledStore;

use serde::{Deserialize, Serialize};

/// Where a queued item stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Waiting for delivery to the platform.
    Pending,
    /// Refused by the platform; parked until an operator requeues it (D18).
    Rejected,
}

/// One queued record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    /// Identifier of the interface the latest version came through.
    pub interface: String,
    /// Grows with every upsert of the key.
    pub version: u64,
    /// Pending or rejected.
    pub state: State,
    /// When the key became pending (unix ms); kept across resends.
    pub queued_at_ms: u64,
    /// When the latest version was stored (unix ms).
    pub updated_at_ms: u64,
    /// Delivery attempts so far.
    pub attempts: u32,
    /// Not to be sent before this time (unix ms).
    pub next_attempt_ms: u64,
    /// The last delivery failure, for `status`.
    pub last_error: Option<String>,
    /// The record's XML element (D19).
    pub xml: String,
}

/// A record to queue.
#[derive(Debug, Clone)]
pub struct NewRecord {
    /// Its primary key (D15).
    pub key: QueueKey,
    /// Identifier of the interface it came through.
    pub interface: &'static str,
    /// Its XML element.
    pub xml: String,
}

/// A storage failure. The request that hit it is answered 503 (D5, D17).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// sled reported an error.
    #[error("queue database: {0}")]
    Db(#[from] sled::Error),
    /// A file operation (fsync) failed.
    #[error("queue storage: {0}")]
    Io(#[from] std::io::Error),
    /// A stored item could not be decoded.
    #[error("queue item {key} is corrupt: {reason}")]
    Corrupt {
        /// The item's key.
        key: String,
        /// Why.
        reason: String,
    },
    /// The storage is shutting down or a background task failed.
    #[error("queue storage unavailable: {0}")]
    Unavailable(String),
}

/// The queue's storage.
pub trait Store: Send + Sync + 'static {
    /// Inserts records, replacing the pending item of a key that has one (D16). Later records
    /// of one call win over earlier ones with the same key. Not yet durable: see [`Store::sync`].
    fn upsert(&self, records: &[NewRecord], now_ms: u64) -> Result<(), StoreError>;

    /// Makes everything written so far durable (flushed and fsync'd).
    fn sync(&self) -> Result<(), StoreError>;

    /// The item of one key.
    fn get(&self, key: &QueueKey) -> Result<Option<Item>, StoreError>;

    /// All items, in key order.
    fn items(&self) -> Result<Vec<(QueueKey, Item)>, StoreError>;
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
