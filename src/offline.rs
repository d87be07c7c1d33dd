//! `ap-intake validate` (D38): request bodies checked offline, with the service's schemas,
//! rules and answers. Nothing is queued and nothing listens.

use crate::config::Config;
use crate::http::reply::{self, ApiError};
use crate::intake::{Checker, IntakeError, Outcome};
use crate::interfaces::{self, Interface};
use crate::validate::{SchemaError, Validator};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The request id in offline answers, where the service puts the request's id.
pub const REQUEST_ID: &str = "offline";

/// Why `validate` could not check at all (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    /// The interface path is not one of the nine.
    #[error("{0:?} is not an interface path, such as /general-ledger-codes/v1")]
    Interface(String),
    /// A file cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file (`-` for standard input).
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The schemas do not load.
    #[error(transparent)]
    Schema(#[from] SchemaError),
}

/// The answer the service would give to one body.
#[derive(Debug)]
pub struct Answer {
    /// The HTTP status it would have.
    pub status: u16,
    /// Its JSON body, exactly as the service writes it (request id [`REQUEST_ID`]).
    pub body: Vec<u8>,
    /// Whether every record is valid.
    pub valid: bool,
}

/// Checks bodies for one interface as the service configured by `config` would.
pub struct Offline {
    checker: Checker,
    iface: &'static Interface,
    query: Option<String>,
    max_body_bytes: u64,
}

impl Offline {
    /// For `interface` (a path) and, for accounting objects, `accounting_type`.
    pub fn new(
        config: &Config,
        interface: &str,
        accounting_type: Option<&str>,
    ) -> Result<Self, UsageError> {
        let iface = interfaces::by_path(interface)
            .ok_or_else(|| UsageError::Interface(interface.to_string()))?;
        let validator = Validator::load(config.schema_dir.as_deref())?;
        let query = accounting_type.map(|t| {
            form_urlencoded::Serializer::new(String::new())
                .append_pair("accountingType", t)
                .finish()
        });
        Ok(Self {
            checker: Checker::new(
                validator,
                config.accounting_types.clone(),
                config.max_records,
            ),
            iface,
            query,
            max_body_bytes: config.max_body_bytes,
        })
    }

    /// The answer to a body read from `path` (`-`: standard input).
    pub fn check_file(&self, path: &Path) -> Result<Answer, UsageError> {
        let read = |r: &mut dyn Read| -> std::io::Result<Vec<u8>> {
            let mut body = Vec::new();
            r.take(self.max_body_bytes.saturating_add(1))
                .read_to_end(&mut body)?;
            Ok(body)
        };
        let body = if path == Path::new("-") {
            read(&mut std::io::stdin().lock())
        } else {
            std::fs::File::open(path).and_then(|mut f| read(&mut f))
        }
        .map_err(|source| UsageError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(self.check(&body))
    }

    /// The answer to `body`: the service's, through the same checks in the same order.
    pub fn check(&self, body: &[u8]) -> Answer {
        let outcome = if body.len() as u64 > self.max_body_bytes {
            Err(ApiError::BodyTooLarge(self.max_body_bytes))
        } else {
            self.outcome(body).map_err(ApiError::Intake)
        };
        match outcome {
            Ok(o) => {
                let (status, body) = reply::outcome_body(&o, REQUEST_ID);
                Answer {
                    status: status.as_u16(),
                    body,
                    valid: o.failed == 0 && o.status == crate::intake::Status::Success,
                }
            }
            Err(e) => Answer {
                status: e.status().as_u16(),
                body: e.body(REQUEST_ID),
                valid: false,
            },
        }
    }

    fn outcome(&self, body: &[u8]) -> Result<Outcome, IntakeError> {
        let at = self
            .checker
            .check_query(self.iface, self.query.as_deref())?;
        let (outcome, _) = self
            .checker
            .check_records(self.iface, at.as_deref(), body)?;
        Ok(outcome)
    }
}

impl Answer {
    /// The answer for a terminal, in offline words (nothing is queued): the file and how
    /// many records are valid, then each error on a line.
    pub fn render(&self, file: &Path) -> String {
        let body: serde_json::Value = serde_json::from_slice(&self.body).unwrap_or_default();
        let count = |k: &str| body[k].as_u64().unwrap_or(0);
        let (total, succeeded) = (count("total"), count("succeeded"));
        let summary = match self.status {
            200 | 202 => format!("all {total} record(s) valid"),
            207 => format!("{succeeded} of {total} record(s) valid"),
            400 if total > 0 => format!("none of {total} record(s) valid"),
            status => format!(
                "refused ({status}): {}",
                body["message"].as_str().unwrap_or_default()
            ),
        };
        let mut out = format!("{}: {summary}\n", file.display());
        for e in body["errors"].as_array().into_iter().flatten() {
            let path = e["path"].as_str().unwrap_or_default();
            let at = if path.is_empty() { "" } else { " " };
            out.push_str(&format!(
                "  record {}{at}{path}: {}\n",
                e["index"],
                e["error"].as_str().unwrap_or_default()
            ));
        }
        out
    }
}
