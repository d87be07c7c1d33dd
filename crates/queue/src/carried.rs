//! What `move-to-postgres` carries from one engine to the other (D45, `moving.rs`): plain
//! rows, read by the embedded engine and written by the cluster's, so that neither engine
//! knows the other.

use crate::Backoff;

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
    /// The request id, client and index its version came from (D48), when it had a receipt.
    pub origin: Option<(String, String, i32)>,
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
    /// The audit trail (D50), carried whole.
    pub audit: Vec<crate::audit::AuditRecord>,
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
