//! The durable queue: at most one pending item per primary key (D16), stored before the client
//! is answered (D17), drained by the delivery worker (D18). A crate of its own below the
//! service: it knows nothing of HTTP, validation or the config file ([`options`] is what it
//! needs of the config).
//!
//! Storage sits behind the narrow [`Store`] trait, which speaks of keys, items and states
//! only; [`open`] picks the implementation the configuration names. [`SqliteStore`] is the
//! embedded one (D28; its schema is in `sqlite/mod.rs`) and `tests/it/store_suite/` the suite
//! every implementation must pass. [`Writer`] stores the records of concurrent requests in
//! one transaction, so they share one fsync (group commit, D17).
//!
//! Its types ([`Item`], [`State`], [`Stats`], [`Backoff`], [`Node`], the receipts) are the
//! store's words, not formats: they are not serialized. What leaves the process is the
//! service's own wire types (`status/wire.rs`, `admin/wire.rs`), and the engines store
//! columns of their own.

#![forbid(unsafe_code)]
#![cfg_attr(
    test,
    allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        reason = "unit tests stop loudly on a broken expectation"
    )
)]

pub mod audit;
mod batch;
pub mod carried;
pub mod codes;
pub mod feed;
pub mod halt;
pub mod moving;
pub mod options;
/// Queue keys (D15) are the core's: what a record's primary key is.
pub use ap_intake_core::key;
pub mod pg;
mod pool;
pub mod receipt;
pub mod recent;
pub mod replay;
pub mod space;
pub mod sqlite;
pub mod stop;
pub mod writer;

pub use halt::{Halt, Halted};
pub use key::QueueKey;
pub use pg::PostgresStore;
pub use sqlite::SqliteStore;
pub use stop::Stop;
pub use writer::Writer;

/// How a store is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The service: create the queue when absent, check it (bounded, D29), quarantine rows
    /// no version can deliver, and keep it in shape in the background.
    Serve,
    /// An operator command on a stopped service: the queue must exist; checked like `Serve`;
    /// no background work.
    Inspect,
}

/// Where a queued item stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Waiting for delivery to the platform.
    Pending,
    /// Refused by the platform; parked until an operator requeues it (D18).
    Rejected,
    /// Could not be read back or turned into a delivery; parked until an operator requeues
    /// or drops it (D29).
    Quarantined,
}

/// One queued record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// Identifier of the interface the latest version came through.
    pub interface: String,
    /// Grows with every upsert of the key.
    pub version: u64,
    /// Pending, rejected or quarantined.
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
    /// Its line in the receipt of the request that sent it (D38); `None` keeps no receipt.
    pub receipt: Option<receipt::ReceiptLine>,
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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Backoff {
    /// Failed deliveries in a row.
    pub failures: u32,
    /// Nothing is sent before this time (unix ms).
    pub next_attempt_ms: u64,
    /// The latest failure.
    pub last_error: Option<String>,
    /// When it happened (unix ms).
    pub last_error_ms: Option<u64>,
    /// The platform's answer concerns the configuration (401, 403, 404, 405, 407): delivery
    /// of the interface is paused until it accepts again (D32).
    pub paused: bool,
    /// The latest successful delivery (unix ms).
    pub last_success_ms: Option<u64>,
}

/// What `status` shows of one interface.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Items waiting for delivery.
    pub pending: u64,
    /// Items parked after a rejection.
    pub rejected: u64,
    /// Items parked because they could not be read (D29).
    pub quarantined: u64,
    /// Items delivered since the queue was created.
    pub delivered: u64,
    /// When the oldest pending item was queued (unix ms).
    pub oldest_pending_ms: Option<u64>,
    /// Retry state.
    pub backoff: Backoff,
}

/// The engine a failure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// The embedded store (D28).
    Sqlite,
    /// The shared database (D39).
    Postgres,
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Sqlite => "SQLite",
            Self::Postgres => "PostgreSQL",
        })
    }
}

/// An engine's own error, kept as the cause of a [`StoreError`] (its type stays in its
/// engine: callers see it only as an error).
pub type Source = Box<dyn std::error::Error + Send + Sync>;

/// A storage failure, by cause, in the product's words: no engine type appears here, and
/// each engine maps its errors to these once, by their codes and types (`sqlite/fault.rs`,
/// `pg/fault.rs`). A request that meets one is answered 503 (D5, D17); the words the client
/// reads are the edge's (`http/reply.rs`).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No room to store (D30): below `min_free_bytes`, or the disk itself is full.
    #[error("storage is full: {0}")]
    Full(String),
    /// The store's file is damaged (D29).
    #[error(
        "the queue database {path} is damaged: {detail} (stop the service and run \
         `ap-intake check-store`; README: \"Damaged queue\")"
    )]
    Damaged {
        /// The file.
        path: String,
        /// What the engine found.
        detail: String,
    },
    /// One stored item could not be decoded.
    #[error("queue item {key} is corrupt: {reason}")]
    Corrupt {
        /// The item's key.
        key: String,
        /// Why.
        reason: String,
    },
    /// The data directory holds a queue written before D28.
    #[error(
        "{0} holds a queue in the format of earlier versions of ap-intake (sled), which this \
         version does not read: run the previous version until `ap-intake status` shows nothing \
         pending, stop it, then move {0} away and start this version (D28)"
    )]
    OldFormat(String),
    /// Storing a request failed part-way: its first `stored` records are stored, the rest
    /// are not (the request's later parts are never written after a failure).
    #[error(
        "{cause}; the first {stored} of the request's {total} records were stored before it, \
         the others were not: resend the request (records already stored are replaced, not \
         duplicated)"
    )]
    Incomplete {
        /// Records stored, the first of the request.
        stored: usize,
        /// Records in the request.
        total: usize,
        /// What failed.
        cause: Box<StoreError>,
    },
    /// There is no queue where one was expected (operator commands never create one).
    #[error("no queue at {0}")]
    Missing(String),
    /// Another process holds the store longer than we wait.
    #[error(
        "the queue in {0} is in use by another process (is another ap-intake running with this \
         data directory?)"
    )]
    Busy(String),
    /// Flushing a store file to disk failed (D40): what the kernel held may be gone, so the
    /// store takes no more writes and the service stops, to recover at its next start.
    #[error(
        "flushing {path} to disk failed ({detail}): nothing more is acknowledged and the \
         service stops, to recover the queue from its write-ahead log at the next start"
    )]
    FlushFailed {
        /// The file.
        path: String,
        /// What the system said.
        detail: String,
    },
    /// A file operation failed.
    #[error("queue storage: {0}")]
    Io(#[from] std::io::Error),
    /// The queue's writer has stopped (the service is stopping): nothing more is stored.
    #[error("the queue is stopping")]
    Stopping,
    /// A later part of a request, not written because an earlier part failed.
    #[error("an earlier part of the request was not stored")]
    EarlierPartFailed,
    /// The queue cannot be opened where it should be: a file SQLite cannot open, or cannot
    /// keep a write-ahead log for.
    #[error("cannot open the queue {at}: {detail}")]
    CannotOpen {
        /// The file.
        at: String,
        /// Why.
        detail: String,
    },
    /// A file the command would write is there already (a backup never replaces one).
    #[error("{0} exists; a backup never replaces a file: choose another name")]
    Exists(String),
    /// The engine failed an operation for a cause none of the other variants names.
    #[error("{engine} failed on {at}: {}", chain(.source.as_ref()))]
    Engine {
        /// Which engine.
        engine: Engine,
        /// The file or the database (without its password).
        at: String,
        /// The engine's own error.
        #[source]
        source: Source,
    },
    /// The queue (a file, or a PostgreSQL database) was written by a newer version, with a
    /// schema this one cannot read; nothing is read or written.
    #[error(
        "{path} has queue schema {version}, written by a newer ap-intake; this version reads \
         schema {reads}: upgrade it to the version that wrote it (README, Upgrading)"
    )]
    NewerSchema {
        /// The file, or the database (its URL without the password).
        path: String,
        /// Its schema.
        version: i64,
        /// The schema this version reads.
        reads: i64,
    },
    /// The database cannot be reached: refused, timed out, gone (D39: intake answers 503,
    /// delivery waits, both resume when it is back).
    #[error("the queue database {at} cannot be reached: {}", chain(.source.as_ref()))]
    Unreachable {
        /// The database (without its password).
        at: String,
        /// The connection's error.
        #[source]
        source: Source,
    },
    /// The database's TLS certificate is not one the store trusts (TLS is verified whatever
    /// `sslmode` says).
    #[error(
        "the queue database {at} presented a certificate that is not trusted ({}); \
         trust its CA with [storage.postgres] ca_file, or use sslmode=disable on a network \
         you trust",
        chain(.source.as_ref())
    )]
    Untrusted {
        /// The database (without its password).
        at: String,
        /// The TLS error.
        #[source]
        source: Source,
    },
    /// The database refused this node's credentials.
    #[error("the queue database {at} refused the credentials: {}", chain(.source.as_ref()))]
    Denied {
        /// The database (without its password).
        at: String,
        /// The database's answer.
        #[source]
        source: Source,
    },
    /// The `[storage.postgres]` settings cannot be used as they are.
    #[error("[storage.postgres]: {0}")]
    Settings(String),
    /// A move to PostgreSQL committed without every key it moved (D45).
    #[error(
        "after the move the cluster holds {present} of the {moved} keys moved; run \
         move-to-postgres again"
    )]
    MovedShort {
        /// Keys the cluster holds.
        present: i64,
        /// Keys moved.
        moved: usize,
    },
    /// The store's last write failed a moment ago, as it said then (readiness from it,
    /// `recent.rs`).
    #[error("{0}")]
    LastWriteFailed(String),
    /// The readiness probe's write did not read back.
    #[error("the queue's probe write did not read back")]
    ProbeFailed,
    /// A bug: a lock poisoned by a panic, a task that did not finish.
    #[error("internal error of the queue: {0}")]
    Internal(String),
}

/// A node of a cluster that shares the queue (D39): one running process (D41).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Its name (`[storage.postgres] node`): a label, which two processes may share.
    pub name: String,
    /// The id this process drew when it started, which its leases are kept by (D41).
    pub instance: String,
    /// When it started (unix ms).
    pub started_at_ms: u64,
    /// When it last renewed its leases (unix ms, the database's clock).
    pub last_seen_ms: u64,
    /// Keys it holds for delivery now.
    pub leases: u64,
    /// Seen within its lease period: running, as far as the database can tell. A process
    /// gone without a clean stop stays listed, not live, until it is pruned.
    pub live: bool,
}

/// The queue's storage.
pub trait Store: Send + Sync + 'static {
    /// Inserts records, replacing the item of a key that has one (D16); a replaced rejected
    /// item becomes pending again. Later records of one call win over earlier ones with the
    /// same key. Durable when it returns Ok (D17): the service answers 202 on that alone.
    fn upsert(&self, records: &[NewRecord], now_ms: u64) -> Result<(), StoreError>;

    /// [`Store::upsert`] for the rest of a request whose first part was stored: the
    /// free-space rule (D30) does not refuse it, so a request once admitted is stored whole
    /// unless the disk itself fails.
    fn upsert_continued(&self, records: &[NewRecord], now_ms: u64) -> Result<(), StoreError> {
        self.upsert(records, now_ms)
    }

    /// Closes the store at the service's stop; every later call fails with
    /// [`StoreError::Stopping`]. SQLite stops its checkpoints, writes its log back into the
    /// file and closes it (after a failed flush it writes nothing back, D40); PostgreSQL
    /// releases this process's leases at once (D41) and closes its connections. Nothing
    /// written needs it: every write is durable when it returns. A store dropped unclosed
    /// does the same as it goes.
    fn close(&self) -> Result<(), StoreError>;

    /// The item of one key.
    fn get(&self, key: &QueueKey) -> Result<Option<Item>, StoreError>;

    /// Up to `limit` pending items of an interface, oldest first: in the order their keys
    /// were queued (a resent pending key keeps its place, D16; a requeued one goes back to
    /// its place, and is taken before anything queued after it). SQLite keeps that order
    /// whatever the wall clock does (D31); PostgreSQL orders by the queued time, then the
    /// order of queueing, and takes an item another node put back behind this process's last
    /// batch (its requeue, its lapsed lease) within `lease_secs` (ARCHITECTURE.md).
    ///
    /// The items are leased to this store (D39, D41): until it settles them, its lease
    /// lapses or it is dropped, no other store on the same queue gets them, whatever its node
    /// name; this store gets them again (a retry). Dropping the store ends its leases at
    /// once. SQLite's lease is trivial (one process holds the queue); PostgreSQL keeps it per
    /// opened store, for `lease_secs`, renewed while the service runs.
    fn take(&self, interface: &str, limit: usize) -> Result<Vec<(QueueKey, Item)>, StoreError>;

    /// The keys in `state`, of one interface or all.
    fn keys(&self, state: State, interface: Option<&str>) -> Result<Vec<QueueKey>, StoreError>;

    /// Removes delivered items whose version is still the one sent, and counts them; a key
    /// replaced meanwhile stays pending for another delivery (D18). Returns how many went.
    /// Like `failed` and `reject`, it settles only what this store holds (or nobody does): an
    /// item another store took after this one's lease lapsed is the holder's to settle (D41).
    fn delivered(&self, sent: &[Sent]) -> Result<usize, StoreError>;

    /// Counts a failed attempt on the items still at the version sent.
    fn failed(&self, sent: &[Sent], error: &str) -> Result<(), StoreError>;

    /// Parks an item the platform refused, if it is still at the version sent.
    fn reject(&self, sent: &Sent, error: &str) -> Result<bool, StoreError>;

    /// Puts a rejected or quarantined item back in the pending queue, at the place it had.
    /// False if it was neither.
    fn requeue(&self, key: &QueueKey) -> Result<bool, StoreError>;

    /// Removes a rejected or quarantined item for good. False if it was neither.
    fn discard(&self, key: &QueueKey) -> Result<bool, StoreError>;

    /// Counts, oldest pending item and retry state of one interface.
    fn stats(&self, interface: &str) -> Result<Stats, StoreError>;

    /// Stores the retry state of one interface.
    fn set_backoff(&self, interface: &str, backoff: &Backoff) -> Result<(), StoreError>;

    /// Whether the storage takes writes (readiness, D29, D30): known damage, a failed flush
    /// and the outcome of a write within [`recent::PROBE_EVERY`] answer at once; only a store
    /// that has written nothing for that long writes a marker and reads it back. A busy
    /// queue is never written to for this.
    fn probe(&self) -> Result<(), StoreError>;

    /// What the store is and how it keeps data, in a line for the start-up log.
    fn describe(&self) -> String;

    /// The receipts of the requests with this id (D38): only `api_key`'s when given (the
    /// HTTP endpoint), every key's otherwise (the operator's `status request`).
    fn receipts(
        &self,
        request_id: &str,
        api_key: Option<&str>,
    ) -> Result<Vec<receipt::Receipt>, StoreError>;

    /// A page of the outcome feed (D48): the client's outcomes in the states asked for,
    /// after the cursor, oldest first ([`feed::merge`]). `None` when the cursor is not one
    /// this engine writes (the other engine's, after a move).
    fn outcomes(&self, request: &feed::Request<'_>) -> Result<Option<feed::Page>, StoreError>;

    /// Whether `delivered` keeps the XML of each key's delivered version for a replay
    /// (`[retention] delivered_days` above zero, D49); off until set.
    fn keep_delivered(&self, keep: bool);

    /// Queues again the kept versions `window` names (D49), each key whose version is
    /// pending or parked left alone; with `dry_run`, says what it would do and changes
    /// nothing. One transaction: an intake of the same key meanwhile is never overwritten.
    fn replay(
        &self,
        window: &replay::Window,
        dry_run: bool,
    ) -> Result<replay::Replayed, StoreError>;

    /// How many keys have a kept version, and the bytes of their XML.
    fn kept_size(&self) -> Result<replay::KeptSize, StoreError>;

    /// One step of removing kept versions delivered before `before_ms`, oldest first (at
    /// most [`replay::PRUNE_STEP`]); how many went.
    fn prune_kept(&self, before_ms: u64) -> Result<usize, StoreError>;

    /// Adds a record to the audit trail (D50); one with an id the trail has is added once.
    fn audit(&self, record: &audit::AuditRecord) -> Result<(), StoreError>;

    /// The audit trail from `since_ms` on, oldest first, at most `limit` records.
    fn audit_trail(
        &self,
        since_ms: u64,
        limit: usize,
    ) -> Result<Vec<audit::AuditRecord>, StoreError>;

    /// One step of removing audit records made before `before_ms`, oldest first (at most
    /// [`audit::PRUNE_STEP`]); how many went, 0 when none is left.
    fn prune_audit(&self, before_ms: u64) -> Result<usize, StoreError>;

    /// The nodes sharing this queue (D39): every running process, and those gone without a
    /// clean stop until they are pruned (D41); none for a store only one service uses.
    fn nodes(&self) -> Result<Vec<Node>, StoreError> {
        Ok(Vec::new())
    }

    /// The store's [`Halt`], for a store whose flushes can fail under it (D40) or whose
    /// schema a newer node can migrate (PostgreSQL); the service stops when it trips.
    fn halt(&self) -> Option<Halt> {
        None
    }

    /// One step of forgetting receipts of requests received before `before_ms`, and what
    /// the queue kept for them, in one transaction: at most [`codes::PRUNE_REQUESTS`]
    /// receipts and [`codes::PRUNE_SETTLED`] settled rows, the oldest first (by when the
    /// request was received, and when the version was settled). How many rows
    /// went; 0 when nothing older is left. [`receipt::prune`] runs the steps.
    fn prune_step(&self, before_ms: u64) -> Result<usize, StoreError>;
}

/// An error and its causes on one line, a cause whose text is already there left out: what
/// a log line or a client message says of an engine's error.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Opens the store the configuration names, for the service ([`Mode::Serve`]: created when
/// absent, checked, D29) or for an operator command on a stopped one ([`Mode::Inspect`]).
pub fn open(
    storage: &options::Storage,
    data_dir: &std::path::Path,
    mode: Mode,
) -> Result<std::sync::Arc<dyn Store>, StoreError> {
    match &storage.backend {
        options::Backend::Sqlite => Ok(std::sync::Arc::new(SqliteStore::open(
            data_dir,
            mode,
            storage.min_free_bytes,
        )?)),
        options::Backend::Postgres(pg) => Ok(std::sync::Arc::new(PostgresStore::open(pg, mode)?)),
    }
}
