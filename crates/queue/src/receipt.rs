//! Receipts (D38): what became of each record a request sent. A receipt is written with the
//! records, in the same transaction, and read back by `GET /requests/<id>` and
//! `ap-intake status request <id>`; it is kept for `[receipts] retention_days`.

use std::sync::Arc;

/// The head of a request's receipt: who sent it, when, through which interface.
#[derive(Debug, PartialEq, Eq)]
pub struct RequestInfo {
    /// The request's id (D4): the client's `x-request-id` or one the service made.
    pub request_id: String,
    /// The name of the API key that sent it; empty in sandbox (D21).
    pub api_key: String,
    /// The interface id.
    pub interface: &'static str,
    /// When the request was received (unix ms).
    pub received_at_ms: u64,
    /// Tells two requests with the same id and key apart: a client that reuses an id gets
    /// the receipt of its latest request, never a mixture.
    pub nonce: u64,
}

/// A record's place in its request's receipt.
#[derive(Debug, Clone)]
pub struct ReceiptLine {
    /// The request.
    pub request: Arc<RequestInfo>,
    /// The record's 0-based index in the request's `record` array.
    pub index: u32,
}

/// Where one record of a receipt stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceiptState {
    /// Queued, not yet taken by the platform.
    Pending,
    /// The platform accepted it.
    Delivered,
    /// The platform refused it (the reason says why).
    Rejected,
    /// It could not be read back from the queue (D29).
    Quarantined,
    /// A later record with the same key replaced it before it was delivered (D16).
    Superseded,
}

/// One record of a receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptRecord {
    /// Its index in the request's `record` array.
    pub index: u32,
    /// Its queue key (D15).
    pub key: String,
    /// Where it stands.
    pub state: ReceiptState,
    /// When it reached that state (unix ms), where known.
    pub updated_at_ms: Option<u64>,
    /// The platform's or the queue's reason for a rejected or quarantined record.
    pub reason: Option<String>,
}

/// A request's receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// The request's id.
    pub request_id: String,
    /// The API key that sent it (empty in sandbox).
    pub api_key: String,
    /// When it was received (unix ms).
    pub received_at_ms: u64,
    /// The interface id.
    pub interface: String,
    /// Each record it queued, by index.
    pub records: Vec<ReceiptRecord>,
}

/// Forgets receipts of requests received before `before_ms`, and what the queue kept for
/// them (`[receipts] retention_days`), step by step so no transaction is long; how many rows
/// went.
pub fn prune(store: &dyn super::Store, before_ms: u64) -> Result<usize, super::StoreError> {
    in_steps(|| store.prune_step(before_ms))
}

/// Forgets kept versions delivered before `before_ms`, step by step; how many went.
pub fn prune_kept(store: &dyn super::Store, before_ms: u64) -> Result<usize, super::StoreError> {
    in_steps(|| store.prune_kept(before_ms))
}

/// Forgets audit records made before `before_ms`, step by step; how many went.
pub fn prune_audit(store: &dyn super::Store, before_ms: u64) -> Result<usize, super::StoreError> {
    in_steps(|| store.prune_audit(before_ms))
}

/// Runs `step` until it removes nothing; how many rows went in all.
fn in_steps(
    mut step: impl FnMut() -> Result<usize, super::StoreError>,
) -> Result<usize, super::StoreError> {
    let mut total = 0;
    loop {
        match step()? {
            0 => return Ok(total),
            n => total += n,
        }
    }
}

/// How long each kind of record is kept.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    /// Receipts and the outcome feed (D38, D48).
    pub receipts: std::time::Duration,
    /// Audit records (D50).
    pub audit: std::time::Duration,
    /// Delivered XML for a replay (D49).
    pub delivered: std::time::Duration,
}

/// How often receipts past their retention are removed (and once at start).
const PRUNE_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

/// One kind of record the loop prunes: what the log calls it, how long it is kept, how.
type Pruned = (
    &'static str,
    std::time::Duration,
    fn(&dyn super::Store, u64) -> Result<usize, super::StoreError>,
);

/// Removes what is past its retention (`retention`: the delivered XML, audit records,
/// receipts with the outcome feed) at start and then every hour, until `stop` resolves. With
/// a zero retention nothing of that kind is kept, so everything is removed.
pub async fn keep_pruned(
    store: Arc<dyn super::Store>,
    retention: Retention,
    stop: impl std::future::Future<Output = ()>,
) {
    let kinds: [Pruned; 3] = [
        ("delivered XML", retention.delivered, prune_kept),
        ("audit records", retention.audit, prune_audit),
        ("receipts", retention.receipts, prune),
    ];
    let mut ticks = tokio::time::interval(PRUNE_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = &mut stop => return,
        }
        for (what, kept, prune) in kinds {
            let kept_ms = u64::try_from(kept.as_millis()).unwrap_or(u64::MAX);
            let before = super::now_ms().saturating_sub(kept_ms);
            let s = Arc::clone(&store);
            match tokio::task::spawn_blocking(move || prune(&*s, before)).await {
                Ok(Ok(0)) => {}
                Ok(Ok(rows)) => tracing::info!(rows, "{what} past their retention removed"),
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "{what} past their retention could not be removed; trying again in an hour")
                }
                Err(e) => tracing::error!(error = %e, "the pruning task of {what} failed"),
            }
        }
    }
}
