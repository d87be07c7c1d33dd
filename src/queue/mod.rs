//! The durable queue: at most one pending item per primary key (D16), stored before the client
//! is answered (D17), drained by the delivery worker (D18).
//!
//! Storage sits behind the narrow [`Store`] trait; [`SledStore`] is the implementation and
//! `tests/store_suite/` the suite every implementation must pass. [`Writer`] stores the records
//! of concurrent requests in one transaction and [`GroupCommit`] makes them durable with one
//! sync.
//!
//! On-disk layout (sled, in `<data_dir>/queue`; encodings in `layout.rs` and `codec.rs`):
//!
//! ```text
//! items     QueueKey                           -> Item and its lot: the record's latest version
//! pending   interface 0x00 queued_at(8) lot(8) -> the lot's QueueKeys   delivery order, oldest first
//! rejected  interface 0x00 QueueKey            -> ()                    parked by the platform
//! meta      "format"                           -> 2
//!           "count" 0 interface 0 kind         -> u64                   pending/rejected/delivered
//!           "backoff" 0 interface              -> Backoff (JSON): failures, next attempt
//! ```
//!
//! A *lot* is the keys of one interface that one upsert queued at one time (at most 512): the
//! pending index has one entry per lot rather than one per key, so queueing a record costs one
//! tree insert, not two, and a resend of a pending key leaves the index alone. A lot is named
//! by the version of its first record; an item records the lot that lists it, and a lot loses
//! keys as they are delivered, rejected or move to another interface, and goes when empty.
//!
//! Every change to an item, its index entry and the counters is one sled transaction, so a
//! crash leaves them consistent. `version` comes from sled's persistent id generator and grows
//! with every upsert: a delivery removes an item only if the version it sent is still the
//! latest (D16, D18).

mod batch;
mod codec;
pub mod commit;
pub mod key;
mod layout;
pub mod sled_store;
mod sled_tx;
pub mod writer;

pub use commit::GroupCommit;
pub use key::QueueKey;
pub use sled_store::SledStore;
pub use writer::Writer;

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
    /// Delivery attempts of this key so far.
    pub attempts: u32,
    /// The last delivery failure or the platform's rejection.
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

/// The version of a key that a delivery sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// The key.
    pub key: QueueKey,
    /// The version sent.
    pub version: u64,
}

impl Sent {
    /// The delivery of `item`, the current version of `key`.
    pub fn of(key: &QueueKey, item: &Item) -> Self {
        Self {
            key: key.clone(),
            version: item.version,
        }
    }
}

/// The retry state of one interface's deliveries, kept so a restart neither forgets nor
/// hammers (D18).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backoff {
    /// Failed deliveries in a row.
    pub failures: u32,
    /// Nothing is sent before this time (unix ms).
    pub next_attempt_ms: u64,
    /// The latest failure.
    pub last_error: Option<String>,
    /// When it happened (unix ms).
    pub last_error_ms: Option<u64>,
}

/// What `status` shows of one interface.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Items waiting for delivery.
    pub pending: u64,
    /// Items parked after a rejection.
    pub rejected: u64,
    /// Items delivered since the queue was created.
    pub delivered: u64,
    /// When the oldest pending item was queued (unix ms).
    pub oldest_pending_ms: Option<u64>,
    /// Retry state.
    pub backoff: Backoff,
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
    /// The queue was written in a format this version does not read.
    #[error(
        "the queue in {dir} has format {found}; this version of ap-intake reads format {expected} \
         (start the version that wrote it and let it deliver, or move the directory away)"
    )]
    Format {
        /// The queue directory.
        dir: String,
        /// The format found.
        found: u8,
        /// The format this version reads.
        expected: u8,
    },
    /// The storage is shutting down or a background task failed.
    #[error("queue storage unavailable: {0}")]
    Unavailable(String),
}

/// The queue's storage.
pub trait Store: Send + Sync + 'static {
    /// Inserts records, replacing the item of a key that has one (D16); a replaced rejected
    /// item becomes pending again. Later records of one call win over earlier ones with the
    /// same key. Not yet durable: see [`Store::sync`].
    fn upsert(&self, records: &[NewRecord], now_ms: u64) -> Result<(), StoreError>;

    /// Makes everything written so far durable (flushed and fsync'd).
    fn sync(&self) -> Result<(), StoreError>;

    /// The item of one key.
    fn get(&self, key: &QueueKey) -> Result<Option<Item>, StoreError>;

    /// Up to `limit` pending items of an interface, oldest first.
    fn pending(&self, interface: &str, limit: usize) -> Result<Vec<(QueueKey, Item)>, StoreError>;

    /// The keys in `state`, of one interface or all.
    fn keys(&self, state: State, interface: Option<&str>) -> Result<Vec<QueueKey>, StoreError>;

    /// Removes delivered items whose version is still the one sent, and counts them; a key
    /// replaced meanwhile stays pending for another delivery (D18). Returns how many went.
    fn delivered(&self, sent: &[Sent]) -> Result<usize, StoreError>;

    /// Counts a failed attempt on the items still at the version sent.
    fn failed(&self, sent: &[Sent], error: &str) -> Result<(), StoreError>;

    /// Parks an item the platform refused, if it is still at the version sent.
    fn reject(&self, sent: &Sent, error: &str) -> Result<bool, StoreError>;

    /// Puts a rejected item back in the pending queue. False if it was not rejected.
    fn requeue(&self, key: &QueueKey) -> Result<bool, StoreError>;

    /// Counts, oldest pending item and retry state of one interface.
    fn stats(&self, interface: &str) -> Result<Stats, StoreError>;

    /// Stores the retry state of one interface.
    fn set_backoff(&self, interface: &str, backoff: &Backoff) -> Result<(), StoreError>;

    /// Writes and reads back a marker: the storage accepts writes (readiness check).
    fn probe(&self) -> Result<(), StoreError>;

    /// Every item, in key order (for inspection and tests; the delivery path uses
    /// [`Store::pending`]).
    fn items(&self) -> Result<Vec<(QueueKey, Item)>, StoreError>;
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
