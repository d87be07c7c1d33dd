//! The intake pipeline, free of HTTP: records in, an [`Outcome`] out, with every accepted
//! record durably queued before the outcome is returned (D17).

pub use ap_intake_core::check::{
    Accepted, CheckError, Checker, ErrorEntry, MAX_ERROR_ENTRIES, Outcome, Status,
};

use crate::budget::{Budget, BudgetError, Charge};
use crate::delivery::Waker;
use crate::interfaces::Interface;
use crate::queue::receipt::{ReceiptLine, RequestInfo};
use crate::queue::{NewRecord, StoreError, Writer};
use crate::validate::Validator;
use crate::validate::cost;
use std::sync::Arc;
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// What to do with the valid records of a request.
#[derive(Debug, Clone)]
pub enum Take {
    /// Queue them, keeping the request's receipt when given (D38).
    Queue(Option<Arc<RequestInfo>>),
    /// Validate only: `POST /validate/<path>` (D38).
    DryRun,
}

/// Why a request was refused as a whole.
#[derive(Debug, thiserror::Error)]
pub enum IntakeError {
    /// The core's refusal: the envelope or the query is wrong (400), too many records (413),
    /// an interface without a schema (500).
    #[error(transparent)]
    Check(#[from] CheckError),
    /// The queue could not store the records (503); nothing was reported queued.
    #[error(transparent)]
    Storage(#[from] StoreError),
    /// The in-flight memory budget has no room, or never will (503, 413; D27).
    #[error(transparent)]
    Budget(#[from] BudgetError),
    /// A bug: the work on a blocking thread panicked or was cancelled (500).
    #[error("internal error: {0}")]
    Internal(String),
}

/// Bodies up to this size are checked on the async worker that received them: a few records
/// take tens of microseconds, less than a hand-off to the blocking pool, and with numbers read
/// without expansion (D23) and nesting bounded (D27) no body this small can take long. Larger
/// bodies go to the blocking pool so they never hold up other connections (D27).
const INLINE_BODY_BYTES: usize = 16 * 1024;

/// ... and whose estimated peak (`validate::cost::Cost::peak`) is at most this: ten ordinary
/// records, not 16 KiB of rows that each miss every required field.
const INLINE_PEAK_BYTES: usize = 512 * 1024;

/// Validation, transformation and queueing for all interfaces.
pub struct Intake {
    checker: Checker,
    writer: Writer,
    delivery: Waker,
    budget: Arc<Budget>,
    /// Large bodies are parsed by at most this many blocking threads at once, one per core:
    /// more would only share the cores with the async workers that answer everyone else.
    cpu: Semaphore,
}

/// The limits an [`Intake`] applies to each request.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Most records per request (413 beyond).
    pub max_records: usize,
    /// The in-flight memory budget shared by all requests (D27).
    pub budget: Arc<Budget>,
}

impl Intake {
    /// An intake queueing through `writer` and waking `delivery` when records are stored.
    pub fn new(
        validator: Validator,
        writer: Writer,
        accounting_types: Vec<String>,
        limits: Limits,
        delivery: Waker,
    ) -> Self {
        let cores = std::thread::available_parallelism().map_or(2, usize::from);
        Self {
            checker: Checker::new(validator, accounting_types, limits.max_records),
            writer,
            delivery,
            budget: limits.budget,
            cpu: Semaphore::new(cores),
        }
    }

    /// The checks every request goes through (the CPU part of [`Self::submit`]).
    pub fn checker(&self) -> &Checker {
        &self.checker
    }

    /// Validates and stores the records of `body`, then waits until they are durable.
    /// `charge` holds what the request was admitted with; before parsing starts it is set to
    /// what parsing is estimated to take, as `Budget::resize` allows until `deadline` (D27).
    pub async fn submit(
        self: &Arc<Self>,
        iface: &'static Interface,
        accounting_type: Option<String>,
        body: bytes::Bytes,
        charge: &mut Charge,
        deadline: Instant,
        take: Take,
    ) -> Result<Outcome, IntakeError> {
        let receipt = match &take {
            Take::Queue(r) => r.clone(),
            Take::DryRun => None,
        };
        let small = body.len() <= INLINE_BODY_BYTES;
        let cost = if small {
            cost::cost(&body)
        } else {
            let body = body.clone();
            self.off_the_workers(move |_| cost::cost(&body)).await?
        };
        // A small body whose records could each break thousands of rules (16 KiB of empty
        // rows) still goes to the pool: the estimate says how much work it may be.
        let inline = small && cost.peak(body.len()) <= INLINE_PEAK_BYTES;
        self.budget
            .resize(charge, cost.charge(body.len()), deadline)
            .await?;
        let (mut outcome, accepted) = if inline {
            self.checker
                .check_records(iface, accounting_type.as_deref(), &body)?
        } else {
            self.off_the_workers(move |this| {
                this.checker
                    .check_records(iface, accounting_type.as_deref(), &body)
            })
            .await??
        };
        if let Take::DryRun = take {
            outcome.dry_run = true;
            if outcome.status == Status::Success {
                outcome.message = format!("{} record(s) valid, none queued", outcome.succeeded);
            }
            return Ok(outcome);
        }
        if !accepted.is_empty() {
            let records = to_queue(iface, accepted, receipt.as_ref());
            self.writer.store(records).await?;
            self.delivery.wake_interface(iface.id);
        }
        Ok(outcome)
    }

    /// Runs `work` on the blocking pool, at most one job per core at a time.
    async fn off_the_workers<T: Send + 'static>(
        self: &Arc<Self>,
        work: impl FnOnce(&Self) -> T + Send + 'static,
    ) -> Result<T, IntakeError> {
        let _slot = self
            .cpu
            .acquire()
            .await
            .map_err(|e| IntakeError::Internal(e.to_string()))?;
        let this = Arc::clone(self);
        tokio::task::spawn_blocking(move || work(&this))
            .await
            .map_err(|e| IntakeError::Internal(e.to_string()))
    }
}

/// The accepted records of a request as the queue takes them, each with its line in the
/// request's receipt when one is kept (D38).
pub fn to_queue(
    iface: &'static Interface,
    accepted: Vec<Accepted>,
    receipt: Option<&Arc<RequestInfo>>,
) -> Vec<NewRecord> {
    accepted
        .into_iter()
        .map(|a| NewRecord {
            key: a.key,
            interface: iface.id,
            xml: a.xml,
            receipt: receipt.map(|r| ReceiptLine {
                request: Arc::clone(r),
                index: u32::try_from(a.index).unwrap_or(u32::MAX),
            }),
        })
        .collect()
}
