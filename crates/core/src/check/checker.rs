//! The CPU part of the intake, shared by the service, `ap-intake validate` (D38) and the fuzz
//! target: the query, the envelope, every record against its schema and rules, the queue key
//! and the XML of each valid record, and the [`Outcome`] the client is answered with.

use super::{Accepted, CheckError, ErrorEntry, MAX_ERROR_ENTRIES, Outcome, Status};
use crate::interfaces::{Interface, KeyPart, Mode};
use crate::key::{KeyError, QueueKey};
use crate::shape::Shape;
use crate::tree::{Ref, Tree};
use crate::validate::Validator;
use crate::validate::messages::{Step, Violation, sort_in_document_order};
use crate::validate::written::AsWritten;
use crate::validate::{envelope, fast};
use crate::xml;

/// The schemas and the limits that decide a request's answer.
pub struct Checker {
    validator: Validator,
    accounting_types: Vec<String>,
    max_records: usize,
}

impl Checker {
    /// Checks with `validator`, accepting `accounting_types` and at most `max_records`
    /// records per request.
    pub fn new(validator: Validator, accounting_types: Vec<String>, max_records: usize) -> Self {
        Self {
            validator,
            accounting_types,
            max_records,
        }
    }

    /// The compiled schemas.
    pub fn validator(&self) -> &Validator {
        &self.validator
    }

    /// Checks the query of a request before its body is read: the `accountingType` of an
    /// accounting-objects request, and no parameter the interface does not have.
    pub fn check_query(
        &self,
        iface: &Interface,
        query: Option<&str>,
    ) -> Result<Option<String>, CheckError> {
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

    /// Parse, validate, transform. Returns the outcome and the records to queue.
    ///
    /// A request whose every record is valid is usually taken by the fast path
    /// ([`crate::validate::fast`]); anything else, and anything the fast path is unsure of,
    /// by [`Self::check_records_slow`]. Both give the same answer (D14).
    pub fn check_records(
        &self,
        iface: &Interface,
        accounting_type: Option<&str>,
        body: &[u8],
    ) -> Result<(Outcome, Vec<Accepted>), CheckError> {
        if let Some(checked) = self.check_records_fast(iface, accounting_type, body) {
            return Ok(checked);
        }
        self.check_records_slow(iface, accounting_type, body)
    }

    /// The fast path alone: the outcome and records of a request whose every record it can
    /// show valid, else `None` (the reference path is then asked). Public so tests and
    /// benchmarks can see which requests it takes.
    pub fn check_records_fast(
        &self,
        iface: &Interface,
        accounting_type: Option<&str>,
        body: &[u8],
    ) -> Option<(Outcome, Vec<Accepted>)> {
        if !self.validator.has_fast_path(iface) {
            return None;
        }
        let shape = self.validator.shape(iface)?;
        let lead: Vec<(&str, &str)> = accounting_type
            .map(|t| vec![("accountingType", t)])
            .unwrap_or_default();
        let mut accepted = Vec::new();
        let total = fast::each_record(body, self.max_records, |index, record| {
            if !self.validator.fast_accepts(iface, record) {
                return false;
            }
            // A key the queue refuses is the reference path's error to give.
            let Ok(key) = queue_key(iface, shape, accounting_type, record) else {
                return false;
            };
            accepted.push(Accepted {
                index,
                key,
                xml: xml::record(shape, iface.xml_record, &lead, record),
            });
            true
        })?;
        let outcome = outcome(total, accepted.len(), 0, Vec::new());
        Some((outcome, accepted))
    }

    /// The reference path: serde_json, boon and the message code. Every refusal is worded
    /// here; public so tests can show that [`Self::check_records`] answers as it does.
    pub fn check_records_slow(
        &self,
        iface: &Interface,
        accounting_type: Option<&str>,
        body: &[u8],
    ) -> Result<(Outcome, Vec<Accepted>), CheckError> {
        let (records, duplicates) = envelope::records(body)?;
        if records.len() > self.max_records {
            return Err(CheckError::TooManyRecords {
                count: records.len(),
                max: self.max_records,
            });
        }
        let total = records.len();
        let shape = self
            .validator
            .shape(iface)
            .ok_or(CheckError::NoSchema(iface.id))?;
        let lead: Vec<(&str, &str)> = accounting_type
            .map(|t| vec![("accountingType", t)])
            .unwrap_or_default();
        let written = AsWritten::new(body);
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
            let shown = MAX_ERROR_ENTRIES.saturating_sub(errors.shown.len());
            written.reword(index, record, &mut violations, shown);
            let mut key = None;
            if violations.is_empty() && unshown == 0 {
                match queue_key(iface, shape, accounting_type, record) {
                    Ok(k) => key = Some(k),
                    // Validation refuses control characters, so this cannot happen; were it
                    // to, the record is the client's to fix, not the queue's to fail on.
                    Err(e) => violations.push(Violation::new(Vec::new(), e.to_string())),
                }
            }
            if let Some(key) = key {
                let xml = xml::record(shape, iface.xml_record, &lead, record);
                accepted.push(Accepted { index, key, xml });
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
        Ok((outcome(total, accepted.len(), failed, errors), accepted))
    }
}

/// The outcome of a per-record request (D3).
fn outcome(total: usize, succeeded: usize, failed: usize, errors: Vec<ErrorEntry>) -> Outcome {
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
    Outcome {
        status,
        total,
        succeeded,
        failed,
        errors,
        message,
        dry_run: false,
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
fn queue_key<T: Tree>(
    iface: &Interface,
    shape: &Shape,
    accounting_type: Option<&str>,
    record: &T,
) -> Result<QueueKey, KeyError> {
    let parts: Vec<&str> = iface
        .key
        .iter()
        .map(|part| match part {
            KeyPart::AccountingType => accounting_type.unwrap_or_default(),
            KeyPart::Field(name) => match record.member(name).map(Tree::get_ref) {
                Some(Ref::String(s)) if !s.is_empty() => s,
                Some(Ref::Number(n)) => n,
                _ => shape.default_of(name).unwrap_or_default(),
            },
        })
        .collect();
    QueueKey::new(iface.key_space, &parts)
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
