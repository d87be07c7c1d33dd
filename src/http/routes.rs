//! One handler for all interfaces. Everything that can be decided from the request line and
//! headers (path, method, key, content type, declared length, query) is decided before the
//! body is read (D20).

use super::App;
use super::reply::{self, ApiError};
use crate::interfaces::{self, Interface};
use bytes::{Buf, Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use http::{HeaderMap, HeaderValue, Method, header};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;
use warp::Filter;
use warp::path::FullPath;
use warp::reply::Response;

/// The filter serving every request.
pub fn routes(app: Arc<App>) -> impl Filter<Extract = (Response,), Error = Infallible> + Clone {
    let fallback = Arc::clone(&app);
    warp::method()
        .and(warp::path::full())
        .and(warp::query::raw().or(warp::any().map(String::new)).unify())
        .and(warp::header::headers_cloned())
        .and(warp::body::stream())
        .and(warp::any().map(move || Arc::clone(&app)))
        .then(handle)
        .recover(move |rejection: warp::Rejection| {
            // Only reachable if warp itself refuses the request (its body already taken).
            let request_id = fallback.request_ids.fresh();
            tracing::error!(request_id, ?rejection, "request rejected by the HTTP layer");
            let mut r = ApiError::Internal(format!("{rejection:?}")).response(&request_id);
            if let Ok(v) = HeaderValue::from_str(&request_id) {
                r.headers_mut().insert("x-request-id", v);
            }
            async move { Ok::<_, Infallible>(r) }
        })
        .unify()
}

async fn handle(
    method: Method,
    path: FullPath,
    query: String,
    headers: HeaderMap,
    body: impl Stream<Item = Result<impl Buf, warp::Error>> + Unpin + Send,
    app: Arc<App>,
) -> Response {
    let started = Instant::now();
    let request_id = app.request_ids.for_request(&headers);
    let mut key_name = None;
    let iface = interfaces::by_path(path.as_str());
    let result = accept(
        &app,
        &method,
        path.as_str(),
        iface,
        &query,
        &headers,
        body,
        &mut key_name,
    )
    .await;
    let mut response = match &result {
        Ok(o) => reply::outcome(o, &request_id),
        Err(e) => e.response(&request_id),
    };
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert("x-request-id", v);
    }
    let (accepted, failed) = result.as_ref().map_or((0, 0), |o| (o.succeeded, o.failed));
    let status = response.status().as_u16();
    let interface = iface.map_or("-", |i| i.id);
    let key = key_name.as_deref().unwrap_or("-");
    let elapsed = started.elapsed().as_secs_f64();
    app.metrics.request(interface, status, accepted, failed, elapsed);
    let latency_ms = format_args!("{:.3}", elapsed * 1000.0);
    match &result {
        Err(ApiError::Intake(crate::intake::IntakeError::Storage(e))) => tracing::error!(
            request_id, key, interface, status, error = %e, %latency_ms,
            "request failed: queue storage"),
        _ => tracing::info!(
            request_id, key, interface, status, accepted, failed, %latency_ms, "request"),
    }
    response
}

#[allow(clippy::too_many_arguments)]
async fn accept(
    app: &App,
    method: &Method,
    path: &str,
    iface: Option<&'static Interface>,
    query: &str,
    headers: &HeaderMap,
    body: impl Stream<Item = Result<impl Buf, warp::Error>> + Unpin + Send,
    key_name: &mut Option<String>,
) -> Result<crate::intake::Outcome, ApiError> {
    let iface = iface.ok_or_else(|| ApiError::NotFound(path.to_string()))?;
    if method != Method::POST {
        return Err(ApiError::MethodNotAllowed(method.to_string()));
    }
    let presented = headers.get("x-api-key").map(HeaderValue::as_bytes);
    *key_name = app.auth.check(presented, iface)?.map(str::to_string);
    check_content_type(headers)?;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > app.max_body_bytes) {
        return Err(ApiError::BodyTooLarge(app.max_body_bytes));
    }
    let query = (!query.is_empty()).then_some(query);
    let accounting_type = app.intake.check_query(iface, query)?;
    let body = tokio::time::timeout(app.body_timeout, read_body(body, app.max_body_bytes))
        .await
        .map_err(|_| ApiError::BodyTimeout(app.body_timeout.as_secs()))??;
    Ok(app.intake.submit(iface, accounting_type, body).await?)
}

/// A JSON media type, compared case-insensitively with parameters allowed (D5).
fn check_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Err(ApiError::UnsupportedMediaType(
            "Content-Type is missing; send application/json".into(),
        ));
    };
    let text = value.to_str().unwrap_or_default();
    let media = text.split(';').next().unwrap_or_default().trim();
    if media.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else {
        Err(ApiError::UnsupportedMediaType(format!(
            "Content-Type {text:?} is not supported; send application/json"
        )))
    }
}

async fn read_body(
    mut body: impl Stream<Item = Result<impl Buf, warp::Error>> + Unpin + Send,
    limit: u64,
) -> Result<Bytes, ApiError> {
    let mut out = BytesMut::new();
    while let Some(chunk) = body.next().await {
        let mut chunk = chunk.map_err(|e| ApiError::BodyRead(e.to_string()))?;
        if out.len() as u64 + chunk.remaining() as u64 > limit {
            return Err(ApiError::BodyTooLarge(limit));
        }
        while chunk.has_remaining() {
            let part = chunk.chunk();
            out.extend_from_slice(part);
            let n = part.len();
            chunk.advance(n);
        }
    }
    Ok(out.freeze())
}
