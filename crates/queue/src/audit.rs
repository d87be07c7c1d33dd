//! The audit trail (D50): what operators did to the queue and the service, who did it and
//! what it changed. Records are only ever added; the retention loop is the one thing that
//! removes them (`[audit] retention_days`). The store keeps them as it gets them: what an
//! action's arguments and changes say is the service's (JSON text).

/// One operator action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    /// Unique across stores: a record carried from one store to another (a restore, a move
    /// to PostgreSQL) is the same record, added once.
    pub id: String,
    /// When (unix ms).
    pub at_ms: u64,
    /// The Unix user's name, as resolved when the record was made.
    pub actor: String,
    /// The Unix user's id; `None` where the actor is not a user (a signal).
    pub uid: Option<u32>,
    /// What was done: `requeue`, `drop`, `backup`, ...
    pub action: String,
    /// Its arguments (a JSON object).
    pub args: String,
    /// What it changed (a JSON object: counts, keys up to a bound).
    pub changed: String,
}

/// Audit records removed in one pruning step.
pub const PRUNE_STEP: i64 = 5000;
