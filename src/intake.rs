//! The intake pipeline, free of HTTP: records in, an [`Outcome`] out, with every accepted
//! record durably queued before the outcome is returned (D17).

use crate::delivery::Waker;
use crate::interfaces::{Interface, KeyPart, Mode};
use crate::queue::{NewRecord, QueueKey, StoreError, Writer};
use crate::validate::Validator;
use crate::validate::envelope::{self, StructureError};
use crate::xml;
use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;

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
}

/// Bodies up to this size are checked on the async worker that received them: a few records
/// take tens of microseconds, less than a hand-off to the blocking pool. Larger bodies go to
/// the blocking pool so they never hold up other connections.
const INLINE_BODY_BYTES: usize = 16 * 1024;

/// Validation, transformation and queueing for all interfaces.
pub struct Intake {
    validator: Validator,
    writer: Writer,
    accounting_types: Vec<String>,
    max_records: usize,
    delivery: Waker,
}

impl Intake {
    /// An intake queueing through `writer` and waking `delivery` when records are stored.
    pub fn new(
        validator: Validator,
        writer: Writer,
        accounting_types: Vec<String>,
        max_records: usize,
        delivery: Waker,
    ) -> Self {
        Self {
            validator,
            writer,
            accounting_types,
            max_records,
            delivery,
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
        if !iface.needs_accounting_type {
            return Ok(None);
        }
        Ok(Some(envelope::accounting_type(
            query,
            &self.accounting_types,
        )?))
    }

    /// Validates and stores the records of `body`, then waits until they are durable.
    pub async fn submit(
        self: &Arc<Self>,
        iface: &'static Interface,
        accounting_type: Option<String>,
        body: bytes::Bytes,
    ) -> Result<Outcome, IntakeError> {
        let (outcome, accepted) = if body.len() <= INLINE_BODY_BYTES {
            self.check_records(iface, accounting_type.as_deref(), &body)?
        } else {
            let this = Arc::clone(self);
            tokio::task::spawn_blocking(move || {
                this.check_records(iface, accounting_type.as_deref(), &body)
            })
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))??
        };
        if !accepted.is_empty() {
            self.writer.store(accepted).await?;
            self.delivery.wake();
        }
        Ok(outcome)
    }

    /// The CPU part of [`Self::submit`]: parse, validate, transform. Returns the outcome and
    /// the records to queue.
    pub fn check_records(
        &self,
        iface: &Interface,
        accounting_type: Option<&str>,
        body: &[u8],
    ) -> Result<(Outcome, Vec<NewRecord>), IntakeError> {
        let records = envelope::records(body)?;
        if records.len() > self.max_records {
            return Err(IntakeError::TooManyRecords {
                count: records.len(),
                max: self.max_records,
            });
        }
        let total = records.len();
        let shape = self.validator.shape(iface);
        let lead: Vec<(&str, &str)> = accounting_type
            .map(|t| vec![("accountingType", t)])
            .unwrap_or_default();
        let mut errors = Vec::new();
        let mut failed = 0;
        let mut accepted = Vec::with_capacity(total);
        for (index, record) in records.iter().enumerate() {
            let violations = self.validator.check(iface, record);
            if violations.is_empty() {
                let key = queue_key(iface, shape, accounting_type, record)?;
                let xml = xml::record(shape, iface.xml_record, &lead, record);
                accepted.push(NewRecord {
                    key,
                    interface: iface.id,
                    xml,
                });
            } else {
                failed += 1;
                errors.extend(violations.into_iter().map(|v| ErrorEntry {
                    index,
                    path: v.pointer(),
                    error: v.message,
                }));
            }
        }
        cap_errors(&mut errors);
        if failed > 0 && iface.mode == Mode::AllOrNothing {
            // D3: payment confirmations are all-or-nothing; the counts stay 0.
            let outcome = Outcome {
                status: Status::Failed,
                total: 0,
                succeeded: 0,
                failed: 0,
                errors,
                message: "No items could be processed as the structure was invalid.".into(),
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
        };
        Ok((outcome, accepted))
    }
}

/// The primary key of a valid record (D15). Blank key fields take their schema default
/// (organization `main`).
fn queue_key(
    iface: &Interface,
    shape: &xml::Shape,
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

fn cap_errors(errors: &mut Vec<ErrorEntry>) {
    if errors.len() > MAX_ERROR_ENTRIES {
        let left_out = errors.len() - MAX_ERROR_ENTRIES;
        let index = errors[MAX_ERROR_ENTRIES].index;
        errors.truncate(MAX_ERROR_ENTRIES);
        errors.push(ErrorEntry {
            index,
            path: String::new(),
            error: format!("{left_out} more error(s) not shown"),
        });
    }
}
