//! The intake pipeline, free of HTTP: records in, an [`Outcome`] out, with every accepted
//! record durably queued before the outcome is returned (D17).

use crate::budget::{Budget, BudgetError, Charge};
use crate::delivery::Waker;
use crate::interfaces::{Interface, KeyPart, Mode};
use crate::queue::receipt::{ReceiptLine, RequestInfo};
use crate::queue::{NewRecord, QueueKey, StoreError, Writer};
use crate::shape::Shape;
use crate::validate::Validator;
use crate::validate::cost;
use crate::validate::envelope::{self, StructureError};
use crate::validate::messages::{Step, Violation, sort_in_document_order};
use crate::xml;
use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::Semaphore;
use tokio::time::Instant;

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
    /// The envelope or the query is wrong (400).
    #[error(transparent)]
    Structure(#[from] StructureError),
    /// More records than `limits.max_records` (413).
    #[error("the request has {count} records; at most {max} are accepted per request")]
    TooManyRecords {
        /// Records sent.
        count: usize,
        /// The configured limit.
        max: usize,
    },
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
    validator: Validator,
    writer: Writer,
    accounting_types: Vec<String>,
    max_records: usize,
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
            validator,
            writer,
            accounting_types,
            max_records: limits.max_records,
            delivery,
            budget: limits.budget,
            cpu: Semaphore::new(cores),
        }
    }

    /// The compiled schemas.
    pub fn validator(&self) -> &Validator {
        &self.validator
    }

    /// Checks the query of a request before its body is read: the `accountingType` of an
    /// accounting-objects request.
    pub fn check_query(
        &self,
        iface: &Interface,
        query: Option<&str>,
    ) -> Result<Option<String>, IntakeError> {
        // D38: a parameter the interface does not know (`dryRun`, a misspelling) is refused,
        // never silently ignored.
        let known: &[&str] = if iface.needs_accounting_type {
            &["accountingType"]
        } else {
            &[]
        };
        envelope::known_query_parameters(query, known)?;
        if !iface.needs_accounting_type {
            return Ok(None);
        }
        Ok(Some(envelope::accounting_type(
            query,
            &self.accounting_types,
        )?))
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
            self.check_records(iface, accounting_type.as_deref(), &body, receipt.as_ref())?
        } else {
            self.off_the_workers(move |this| {
                this.check_records(iface, accounting_type.as_deref(), &body, receipt.as_ref())
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
            self.writer.store(accepted).await?;
            self.delivery.wake();
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

    /// The CPU part of [`Self::submit`]: parse, validate, transform. Returns the outcome and
    /// the records to queue.
    pub fn check_records(
        &self,
        iface: &Interface,
        accounting_type: Option<&str>,
        body: &[u8],
        receipt: Option<&Arc<RequestInfo>>,
    ) -> Result<(Outcome, Vec<NewRecord>), IntakeError> {
        let (records, duplicates) = envelope::records(body)?;
        if records.len() > self.max_records {
            return Err(IntakeError::TooManyRecords {
                count: records.len(),
                max: self.max_records,
            });
        }
        let total = records.len();
        let shape = self.validator.shape(iface).ok_or_else(|| {
            IntakeError::Internal(format!("interface {} has no schema loaded", iface.id))
        })?;
        let lead: Vec<(&str, &str)> = accounting_type
            .map(|t| vec![("accountingType", t)])
            .unwrap_or_default();
        let mut duplicates = duplicates.into_iter().peekable();
        let mut errors = Errors::default();
        let mut failed = 0;
        let mut accepted = Vec::with_capacity(total);
        for (index, record) in records.iter().enumerate() {
            let mut violations = self.validator.check(iface, record);
            let mut unshown = 0;
            let mut any_duplicate = false;
            while let Some(d) = duplicates.next_if(|d| d.record == index) {
                any_duplicate = true;
                match d.steps {
                    Some(steps) => violations.push(duplicate_key(steps)),
                    None => unshown += 1,
                }
            }
            if any_duplicate {
                sort_in_document_order(record, &mut violations);
            }
            if violations.is_empty() && unshown == 0 {
                let key = queue_key(iface, shape, accounting_type, record)?;
                let xml = xml::record(shape, iface.xml_record, &lead, record);
                accepted.push(NewRecord {
                    key,
                    interface: iface.id,
                    xml,
                    receipt: receipt.map(|r| ReceiptLine {
                        request: Arc::clone(r),
                        index: u32::try_from(index).unwrap_or(u32::MAX),
                    }),
                });
            } else {
                failed += 1;
                for v in violations {
                    errors.push(ErrorEntry {
                        index,
                        path: v.pointer(),
                        error: v.message,
                    });
                }
                errors.left_out(index, unshown);
            }
        }
        let errors = errors.finish();
        if failed > 0 && iface.mode == Mode::AllOrNothing {
            // D3: payment confirmations are all-or-nothing; the counts stay 0.
            let outcome = Outcome {
                status: Status::Failed,
                total: 0,
                succeeded: 0,
                failed: 0,
                errors,
                message: "No items could be processed as the structure was invalid.".into(),
                dry_run: false,
            };
            return Ok((outcome, Vec::new()));
        }
        let succeeded = accepted.len();
        let (status, message) = match (succeeded, failed) {
            (_, 0) => (Status::Success, format!("{succeeded} record(s) queued")),
            (0, _) => (
                Status::Failed,
                format!("{failed} of {total} records failed validation"),
            ),
            _ => (
                Status::Partial,
                format!("{succeeded} record(s) queued, {failed} record(s) failed validation"),
            ),
        };
        let outcome = Outcome {
            status,
            total,
            succeeded,
            failed,
            errors,
            message,
            dry_run: false,
        };
        Ok((outcome, accepted))
    }
}

/// The violation of a key repeated inside a record (D24); `steps` ends with the key.
fn duplicate_key(steps: Vec<Step>) -> Violation {
    let key = match steps.last() {
        Some(Step::Key(k)) => k.clone(),
        _ => String::new(),
    };
    Violation::new(steps, format!("duplicate key [{key}] is not permitted"))
}

/// The primary key of a valid record (D15). Blank key fields take their schema default
/// (organization `main`).
fn queue_key(
    iface: &Interface,
    shape: &Shape,
    accounting_type: Option<&str>,
    record: &Value,
) -> Result<QueueKey, StoreError> {
    let parts: Vec<String> = iface
        .key
        .iter()
        .map(|part| match part {
            KeyPart::AccountingType => accounting_type.unwrap_or_default().to_string(),
            KeyPart::Field(name) => match record.get(*name) {
                Some(Value::String(s)) if !s.is_empty() => s.clone(),
                Some(Value::Number(n)) => n.to_string(),
                _ => shape.default_of(name).unwrap_or_default().to_string(),
            },
        })
        .collect();
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    QueueKey::new(iface.key_space, &parts).map_err(|e| StoreError::Unavailable(e.to_string()))
}

/// The errors of a response: the first [`MAX_ERROR_ENTRIES`] kept, the rest counted, and a
/// last entry saying how many were left out (D2).
#[derive(Default)]
struct Errors {
    shown: Vec<ErrorEntry>,
    left_out: usize,
    first_left_out: Option<usize>,
}

impl Errors {
    fn push(&mut self, entry: ErrorEntry) {
        if self.shown.len() < MAX_ERROR_ENTRIES {
            self.shown.push(entry);
        } else {
            self.left_out(entry.index, 1);
        }
    }

    fn left_out(&mut self, index: usize, n: usize) {
        if n > 0 {
            self.left_out += n;
            self.first_left_out.get_or_insert(index);
        }
    }

    fn finish(mut self) -> Vec<ErrorEntry> {
        if let Some(index) = self.first_left_out {
            self.shown.push(ErrorEntry {
                index,
                path: String::new(),
                error: format!("{} more error(s) not shown", self.left_out),
            });
        }
        self.shown
    }
}
