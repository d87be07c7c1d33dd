//! Every answer of the intake, mapped to HTTP in one place.

use super::auth::Denied;
use crate::budget::{self, BudgetError};
use crate::intake::{CheckError, ErrorEntry, IntakeError, Outcome, Status};
use crate::queue::StoreError;
use crate::validate::envelope::EXPECTED_FORMAT;
use http::{HeaderValue, StatusCode, header};
use serde::Serialize;
use warp::reply::Response;

/// Why a request failed before or outside validation.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No interface at this path (404; a trailing slash is another path, D5).
    #[error("no interface at {0}")]
    NotFound(String),
    /// No receipt of that request for this key (404, D38).
    #[error(
        "no receipt of request {0} for this API key (unknown id, sent with another key, or \
         older than the retention)"
    )]
    NoReceipt(String),
    /// A request target that is no path, for a method other than CONNECT and OPTIONS (400).
    #[error("the request target is not a path; send a path such as /general-ledger-codes/v1")]
    NotAPath,
    /// A method the path does not take (405, D42): POST on interface paths, GET on receipts
    /// and the console.
    #[error("method {0} is not allowed; use {1}")]
    MethodNotAllowed(String, &'static str),
    /// Authentication failed (401, 403).
    #[error(transparent)]
    Denied(#[from] Denied),
    /// The body is not declared as JSON (415).
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// The body is larger than `limits.max_body_bytes` (413).
    #[error("the request body is larger than {0} bytes")]
    BodyTooLarge(u64),
    /// The body did not arrive within `server.body_timeout_secs` (408).
    #[error("the request body was not received within {0} seconds")]
    BodyTimeout(u64),
    /// The connection failed while the body was read (400).
    #[error("the request body could not be read: {0}")]
    BodyRead(String),
    /// A transfer coding other than chunked (501, D25).
    #[error("{0}")]
    NotImplemented(String),
    /// The in-flight budget refused the body while it arrived (503 or 413, D27).
    #[error(transparent)]
    Budget(#[from] BudgetError),
    /// A query of the outcome feed it cannot answer (400, D48).
    #[error(transparent)]
    FeedQuery(#[from] super::feed::QueryError),
    /// Something unexpected (500, logged with the request id).
    #[error("unexpected server error; if it persists, report the request id")]
    Internal(String),
    /// Validation, limits or storage refused the request.
    #[error(transparent)]
    Intake(#[from] IntakeError),
}

/// The common response body (spec "Common response body", D3, D4).
#[derive(Serialize)]
struct Body<'a> {
    status: Status,
    total: usize,
    succeeded: usize,
    failed: usize,
    errors: &'a [ErrorEntry],
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    expected_format: Option<&'a str>,
    request_id: &'a str,
}

/// The short body of other failures (D5).
#[derive(Serialize)]
struct Short<'a> {
    status: Status,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_id: Option<&'a str>,
}

/// The short failure body (D5) as bytes, for answers written outside hyper.
pub fn failure_body(message: &str, request_id: &str) -> Vec<u8> {
    serde_json::to_vec(&Short {
        status: Status::Failed,
        message,
        request_id: Some(request_id),
    })
    .unwrap_or_default()
}

/// A JSON answer.
pub(super) fn json<T: Serialize>(status: StatusCode, body: &T) -> Response {
    json_bytes(status, to_vec(body))
}

fn to_vec<T: Serialize>(body: &T) -> Vec<u8> {
    serde_json::to_vec(body).unwrap_or_default()
}

fn json_bytes(status: StatusCode, bytes: Vec<u8>) -> Response {
    let mut r = Response::new(bytes.into());
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// 202 (200 for a dry run, D38), 207 or 400 for a request whose structure was sound.
pub fn outcome(o: &Outcome, request_id: &str) -> Response {
    let (status, body) = outcome_body(o, request_id);
    json_bytes(status, body)
}

/// The status and body of [`outcome`], also for `ap-intake validate`.
pub fn outcome_body(o: &Outcome, request_id: &str) -> (StatusCode, Vec<u8>) {
    let status = match o.status {
        Status::Success if o.dry_run => StatusCode::OK,
        Status::Success => StatusCode::ACCEPTED,
        Status::Partial => StatusCode::MULTI_STATUS,
        Status::Failed => StatusCode::BAD_REQUEST,
    };
    let body = Body {
        status: o.status,
        total: o.total,
        succeeded: o.succeeded,
        failed: o.failed,
        errors: &o.errors,
        message: &o.message,
        expected_format: None,
        request_id,
    };
    (status, to_vec(&body))
}

impl ApiError {
    /// The HTTP status of this failure.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::NotFound(_) | Self::NoReceipt(_) => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed(..) => StatusCode::METHOD_NOT_ALLOWED,
            Self::Denied(Denied::Forbidden { .. } | Denied::InsufficientScope { .. }) => {
                StatusCode::FORBIDDEN
            }
            Self::Denied(Denied::RateLimited { .. }) => StatusCode::TOO_MANY_REQUESTS,
            Self::Denied(Denied::KeysUnavailable(_)) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Denied(_) => StatusCode::UNAUTHORIZED,
            Self::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::BodyTooLarge(_)
            | Self::Intake(IntakeError::Check(CheckError::TooManyRecords { .. }))
            | Self::Budget(BudgetError::TooLarge { .. })
            | Self::Intake(IntakeError::Budget(BudgetError::TooLarge { .. })) => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            Self::Budget(BudgetError::Busy)
            | Self::Intake(IntakeError::Budget(BudgetError::Busy)) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Self::NotImplemented(_) => StatusCode::NOT_IMPLEMENTED,
            Self::Intake(
                IntakeError::Internal(_) | IntakeError::Check(CheckError::NoSchema(_)),
            ) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            Self::BodyRead(_)
            | Self::NotAPath
            | Self::FeedQuery(_)
            | Self::Intake(IntakeError::Check(CheckError::Structure(_))) => StatusCode::BAD_REQUEST,
            Self::Intake(IntakeError::Storage(_)) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The response: the common body for structure failures (D3), exactly status and message
    /// for 401 and 403 (D4), status, message and request id otherwise (D5).
    pub fn body(&self, request_id: &str) -> Vec<u8> {
        let message = self.to_string();
        match self {
            Self::Intake(IntakeError::Check(CheckError::Structure(e))) => {
                let errors = [ErrorEntry {
                    index: 0,
                    path: e.path().to_owned(),
                    error: message.clone(),
                }];
                let body = Body {
                    status: Status::Failed,
                    total: 0,
                    succeeded: 0,
                    failed: 0,
                    errors: &errors,
                    message: &message,
                    expected_format: Some(EXPECTED_FORMAT),
                    request_id,
                };
                to_vec(&body)
            }
            Self::Denied(denied)
                if !matches!(
                    denied,
                    Denied::RateLimited { .. } | Denied::KeysUnavailable(_)
                ) =>
            {
                to_vec(&Short {
                    status: Status::Failed,
                    message: &message,
                    request_id: None,
                })
            }
            // D30 names a full disk; other storage failures are logged with the request id
            // and the client gets the generic text.
            Self::Intake(IntakeError::Storage(e)) => to_vec(&Short {
                status: Status::Failed,
                message: &match e {
                    StoreError::Full(_) => format!("{e}; nothing was queued, retry later"),
                    // D40: the client learns why the service goes away.
                    StoreError::FlushFailed { .. } => "the queue's disk failed to flush; \
                        nothing was queued, and the service restarts to recover: retry later"
                        .to_string(),
                    StoreError::Incomplete { .. } => e.to_string(),
                    _ => "the queue cannot store records right now; nothing was queued, \
                              retry later"
                        .to_string(),
                },
                request_id: Some(request_id),
            }),
            // The cause is logged with the request id; the client gets the generic text.
            Self::Intake(IntakeError::Internal(_)) => to_vec(&Short {
                status: Status::Failed,
                message: &Self::Internal(String::new()).to_string(),
                request_id: Some(request_id),
            }),
            _ => to_vec(&Short {
                status: Status::Failed,
                message: &message,
                request_id: Some(request_id),
            }),
        }
    }

    /// The response: [`Self::body`] with its status and headers.
    pub fn response(&self, request_id: &str) -> Response {
        let mut r = json_bytes(self.status(), self.body(request_id));
        match self {
            Self::Denied(Denied::RateLimited { retry_after, .. }) => {
                let secs = super::auth::retry_after_secs(*retry_after).to_string();
                if let Ok(v) = HeaderValue::from_str(&secs) {
                    r.headers_mut().insert(header::RETRY_AFTER, v);
                }
            }
            // D47: the provider's keys are fetched every 30 s while there are none.
            Self::Denied(Denied::KeysUnavailable(_)) => {
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("30"));
            }
            // RFC 9110 section 15.5.2: every 401 names how to authenticate; a client with
            // an authenticator set (Java's HttpClient behind a proxy) refuses one without.
            // RFC 6750 section 3: a token's 401 and 403 say what was wrong with it.
            Self::Denied(denied) => {
                if let Some(v) = denied
                    .challenge()
                    .and_then(|c| HeaderValue::from_str(&c).ok())
                {
                    r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
                }
            }
            Self::MethodNotAllowed(_, allowed) => {
                r.headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static(allowed));
            }
            Self::Intake(IntakeError::Storage(_)) => {
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            }
            Self::Budget(BudgetError::Busy)
            | Self::Intake(IntakeError::Budget(BudgetError::Busy)) => {
                let secs = budget::RETRY_AFTER.as_secs().to_string();
                if let Ok(v) = HeaderValue::from_str(&secs) {
                    r.headers_mut().insert(header::RETRY_AFTER, v);
                }
            }
            _ => {}
        }
        r
    }
}
