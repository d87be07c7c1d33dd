//! `move-to-postgres` (D45): the embedded queue of a stopped service carried into a
//! PostgreSQL cluster in one transaction: every item not yet delivered (pending, rejected,
//! quarantined, with its version, its place in line and its attempts), the retry state and
//! the receipts. The embedded queue is left as it was, marked as moved; a key the cluster
//! holds already keeps whichever version is newer (D15). A second run copies nothing twice:
//! the marked queue is not read again, and every statement of the copy leaves what the
//! cluster holds as it is when it has it already.

use crate::{Backoff, PostgresStore, StoreError};
use std::path::Path;

/// One item as the embedded queue holds it.
#[derive(Debug, Clone)]
pub struct Exported {
    /// Its key's bytes.
    pub key: Vec<u8>,
    /// Its interface.
    pub interface: String,
    /// Its state's code (`codes.rs`).
    pub state: i16,
    /// Its version.
    pub version: i64,
    /// When it became pending (unix ms).
    pub queued_at: i64,
    /// When its version was stored (unix ms).
    pub updated_at: i64,
    /// Delivery attempts so far.
    pub attempts: i32,
    /// The last delivery failure, rejection or quarantine.
    pub last_error: Option<String>,
    /// Its XML element.
    pub xml: String,
    /// When it was rejected, quarantined or requeued (unix ms).
    pub state_at: Option<i64>,
}

/// A request's receipt as the embedded queue holds it.
#[derive(Debug, Clone)]
pub struct ExportedReceipt {
    /// The request's id.
    pub request_id: String,
    /// The API key's name.
    pub api_key: String,
    /// Tells two requests with one id and key apart.
    pub nonce: i64,
    /// The interface.
    pub interface: String,
    /// When it was received (unix ms).
    pub received_at: i64,
    /// (index, key, version) of each record.
    pub lines: Vec<(i32, Vec<u8>, i64)>,
}

/// A version that left the queue: delivered, or dropped by an operator (D38).
#[derive(Debug, Clone)]
pub struct ExportedSettled {
    /// The key's bytes.
    pub key: Vec<u8>,
    /// The version.
    pub version: i64,
    /// Its `settled` code (`codes.rs`).
    pub state: i16,
    /// When (unix ms).
    pub at: i64,
    /// Why it was dropped.
    pub reason: Option<String>,
}

/// Everything the move carries, items in each interface's delivery order.
#[derive(Debug, Default)]
pub struct Export {
    /// The items.
    pub items: Vec<Exported>,
    /// Retry state per interface.
    pub backoffs: Vec<(String, Backoff)>,
    /// The receipts.
    pub receipts: Vec<ExportedReceipt>,
    /// The settled versions the receipts refer to.
    pub settled: Vec<ExportedSettled>,
}

/// What a move did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Moved {
    /// Items copied, by state: pending, rejected, quarantined.
    pub items: [u64; 3],
    /// Keys the cluster held in a newer version, which it kept.
    pub kept_newer: u64,
    /// Receipts copied (a request the cluster has a receipt of keeps its own).
    pub receipts: u64,
    /// When the embedded queue was moved before: nothing was copied this time.
    pub moved_before_ms: Option<u64>,
}

/// Moves the embedded queue in `data_dir` into `cluster`. The service must be stopped: the
/// data directory's lock refuses the move otherwise ([`StoreError::Busy`]).
pub fn move_to_postgres(data_dir: &Path, cluster: &PostgresStore) -> Result<Moved, StoreError> {
    let Some((export, moved_before, _lock)) = crate::sqlite::export::read(data_dir)? else {
        return Err(StoreError::Missing(
            data_dir
                .join(crate::sqlite::FILE_NAME)
                .display()
                .to_string(),
        ));
    };
    if let Some(at) = moved_before {
        return Ok(Moved {
            moved_before_ms: Some(at),
            ..Moved::default()
        });
    }
    let moved = cluster.import(&export)?;
    crate::sqlite::export::mark_moved(data_dir, crate::now_ms())?;
    Ok(moved)
}

/// Undelivered items of an embedded queue in `data_dir` never moved to PostgreSQL: a
/// service started on PostgreSQL refuses to leave them behind unseen (D45). 0 when there is
/// no embedded queue, it was moved, or it holds nothing.
pub fn left_behind(data_dir: &Path) -> Result<u64, StoreError> {
    crate::sqlite::export::left_behind(data_dir)
}
