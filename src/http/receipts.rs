//! `GET /requests/<request id>` (D38): the receipt of a request, for the key that sent it.

use super::App;
use super::reply::{self, ApiError};
use crate::intake::IntakeError;
use crate::queue::StoreError;
use crate::queue::receipt::{Receipt, ReceiptRecord, ReceiptState};
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use serde::Serialize;
use std::time::{Duration, UNIX_EPOCH};
use warp::reply::Response;

/// The answer to `GET /requests/<id>`, authenticated like the interfaces (D20).
pub async fn answer(
    app: &App,
    method: &Method,
    id: &str,
    headers: &HeaderMap,
    request_id: &str,
) -> Response {
    let mut response = match lookup(app, method, id, headers).await {
        Ok(receipt) => reply::json(StatusCode::OK, &Shown::of(&receipt)),
        Err(e) => e.response(request_id),
    };
    if let Ok(v) = HeaderValue::from_str(request_id) {
        response.headers_mut().insert("x-request-id", v);
    }
    app.metrics
        .request("-", response.status().as_u16(), 0, 0, 0.0);
    response
}

async fn lookup(
    app: &App,
    method: &Method,
    id: &str,
    headers: &HeaderMap,
) -> Result<Receipt, ApiError> {
    if method != Method::GET && method != Method::HEAD {
        return Err(ApiError::MethodNotAllowed(method.to_string(), "GET"));
    }
    let presented = headers.get("x-api-key").map(HeaderValue::as_bytes);
    let key = app
        .auth
        .get()
        .identify(presented)?
        .unwrap_or_default()
        .to_string();
    // Only ids a request can have (D4) are looked up; anything else was never sent.
    if !super::RequestIds::is_id(id) {
        return Err(ApiError::NoReceipt(shown_id(id)));
    }
    let store = std::sync::Arc::clone(&app.store);
    let owned = id.to_string();
    let found = tokio::task::spawn_blocking(move || store.receipts(&owned, Some(&key)))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .map_err(|e: StoreError| ApiError::Intake(IntakeError::Storage(e)))?;
    found
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::NoReceipt(id.to_string()))
}

/// An id as echoed in a message: at most 64 characters.
fn shown_id(id: &str) -> String {
    id.chars().take(64).collect()
}

/// The receipt as clients see it: times in RFC 3339 (UTC), the interface by its path.
#[derive(Serialize)]
struct Shown<'a> {
    request_id: &'a str,
    received_at: String,
    interface: &'a str,
    records: Vec<ShownRecord<'a>>,
}

#[derive(Serialize)]
struct ShownRecord<'a> {
    index: u32,
    key: &'a str,
    state: ReceiptState,
    updated_at: Option<String>,
    reason: Option<&'a str>,
}

impl<'a> Shown<'a> {
    fn of(r: &'a Receipt) -> Self {
        let interface = crate::interfaces::INTERFACES
            .iter()
            .find(|i| i.id == r.interface)
            .map_or(r.interface.as_str(), |i| i.path);
        Self {
            request_id: &r.request_id,
            received_at: rfc3339(r.received_at_ms),
            interface,
            records: r.records.iter().map(ShownRecord::of).collect(),
        }
    }
}

impl<'a> ShownRecord<'a> {
    fn of(r: &'a ReceiptRecord) -> Self {
        Self {
            index: r.index,
            key: &r.key,
            state: r.state,
            updated_at: r.updated_at_ms.map(rfc3339),
            reason: r.reason.as_deref(),
        }
    }
}

/// Unix milliseconds as RFC 3339 in UTC, to the millisecond.
pub fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}
