//! A request's records checked as the service answers them, without HTTP or a queue: the query,
//! the envelope, every record against its schema and rules, and for each valid record its
//! primary key (D15) and XML (D19). The service queues what [`Checker::check_records`]
//! accepts; `ap-intake validate` and the fuzz target stop at the answer.

mod checker;

pub use checker::Checker;

use crate::key::QueueKey;
use crate::validate::envelope::StructureError;
use serde::Serialize;

/// At most this many error entries per response; a last one says how many were left out (D2).
pub const MAX_ERROR_ENTRIES: usize = 1000;

/// The answer's `status` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Status {
    /// Every record queued (202).
    Success,
    /// Some queued, some failed validation (207).
    Partial,
    /// Nothing queued (400 and every other failure).
    Failed,
}

/// One entry of `errors` (D1, D2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorEntry {
    /// 0-based position of the record in `objects.object.record`.
    pub index: usize,
    /// JSON Pointer of the offending value inside the record.
    pub path: String,
    /// The exact message.
    pub error: String,
}

/// The result of a request whose structure was sound (D3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// SUCCESS, PARTIAL or FAILED.
    pub status: Status,
    /// Records counted (0 when an all-or-nothing request failed).
    pub total: usize,
    /// Records queued.
    pub succeeded: usize,
    /// Distinct failing records.
    pub failed: usize,
    /// Every violation, by index then document order.
    pub errors: Vec<ErrorEntry>,
    /// Human summary.
    pub message: String,
    /// A dry run (D38): nothing was queued, and a request whose records are all valid is
    /// answered 200, not 202.
    pub dry_run: bool,
}

/// A valid record, ready to queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// Its position in the request (D1).
    pub index: usize,
    /// Its primary key (D15).
    pub key: QueueKey,
    /// Its XML element (D19).
    pub xml: String,
}

/// Why a request's records were refused as a whole.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The envelope or the query is wrong (400).
    #[error(transparent)]
    Structure(#[from] StructureError),
    /// More records than the limit (413).
    #[error("the request has {count} records; at most {max} are accepted per request")]
    TooManyRecords {
        /// Records sent.
        count: usize,
        /// The configured limit.
        max: usize,
    },
    /// An interface without a loaded schema: a bug (500).
    #[error("interface {0} has no schema loaded")]
    NoSchema(&'static str),
}
