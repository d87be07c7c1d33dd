//! `GET /requests/<request id>` (D38): the receipt of a request, for the key that sent it.

use super::App;
use super::reply::{self, ApiError};
use crate::intake::IntakeError;
use crate::queue::StoreError;
use crate::queue::receipt::Receipt;
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use warp::reply::Response;

/// The answer to `GET /requests/<id>`, authenticated like the interfaces (D20).
pub async fn answer(
    app: &App,
    method: &Method,
    id: &str,
    headers: &HeaderMap,
    request_id: &str,
) -> Response {
    let response = match lookup(app, method, id, headers).await {
        Ok(receipt) => reply::json(StatusCode::OK, &crate::status::receipt::Shown::of(&receipt)),
        Err(e) => e.response(request_id),
    };
    counted(app, response, request_id)
}

/// The answer of a read (a receipt, the outcome feed, D38, D48) with its request id, counted
/// in the metrics.
pub(super) fn counted(app: &App, mut response: Response, request_id: &str) -> Response {
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
        return Err(ApiError::MethodNotAllowed(method.to_string(), "GET, HEAD"));
    }
    let key = app
        .auth
        .get()
        .admit_following(headers, None)
        .await?
        .unwrap_or_default();
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
