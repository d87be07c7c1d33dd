//! The admin listener (loopback by default): `/healthz`, `/readyz` and `/metrics` for the
//! operator's monitoring, on its own port apart from the ERP-facing one, through the same
//! connection loop and rules (`super::serve`: header timeout, connection caps, the early look
//! of D42) with these routes.

use super::auth::Auth;
use crate::live::Live;
use crate::metrics::{Format, Metrics};
use crate::queue::Store;
use http::{Method, StatusCode};
use serde_json::json;
use std::convert::Infallible;
use std::sync::Arc;
use warp::Filter;
use warp::path::FullPath;
use warp::reply::Response;

/// What the checks look at.
pub struct Ops {
    /// The queue.
    pub store: Arc<dyn Store>,
    /// The metrics to render.
    pub metrics: Arc<Metrics>,
    /// Schemas compiled at start-up. The service does not start unless every interface's
    /// schema compiles (`Validator::load`), and schemas are never reloaded, so readiness
    /// reports what start-up established rather than checking again.
    pub schemas: usize,
    /// Who may call: not ready while bearer tokens cannot be checked at all (D47).
    pub auth: Arc<Live<Auth>>,
}

impl Ops {
    /// Every interface's schema is compiled.
    fn schemas_compiled(&self) -> bool {
        self.schemas == crate::interfaces::INTERFACES.len()
    }
}

fn json_reply(status: StatusCode, body: serde_json::Value) -> Response {
    let mut r = warp::reply::json(&body).into_response_with(status);
    r.headers_mut()
        .insert("cache-control", http::HeaderValue::from_static("no-store"));
    r
}

trait WithStatus {
    fn into_response_with(self, status: StatusCode) -> Response;
}

impl<T: warp::Reply> WithStatus for T {
    fn into_response_with(self, status: StatusCode) -> Response {
        let mut r = self.into_response();
        *r.status_mut() = status;
        r
    }
}

/// Ready when the queue takes a real write (a committed transaction, with the free-space rule
/// of D30) and is not known to be damaged (D29), the schemas are compiled, and bearer tokens
/// can be checked (the identity provider's key set has been had once, D47).
async fn ready(ops: Arc<Ops>) -> Response {
    let store = Arc::clone(&ops.store);
    let storage = match tokio::task::spawn_blocking(move || store.probe()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let schemas_ok = ops.schemas_compiled();
    let tokens = ops.auth.get().not_ready();
    let ok = storage.is_ok() && schemas_ok && tokens.is_none();
    let mut body = json!({
        "status": if ok { "ready" } else { "not ready" },
        "storage": storage.as_ref().map_or_else(|e| e.clone(), |()| "writable".into()),
        "schemas": format!("{} of {} compiled", ops.schemas, crate::interfaces::INTERFACES.len()),
    });
    if let Some(why) = tokens {
        body["tokens"] = json!(why);
    }
    let status = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json_reply(status, body)
}

/// The metrics in the format the scraper asks for (`Accept`): OpenMetrics for Prometheus,
/// the text format 0.0.4 for everything else.
async fn metrics(ops: Arc<Ops>, accept: Option<String>) -> Response {
    let format = Format::accepted(accept.as_deref());
    let text = tokio::task::spawn_blocking(move || {
        // What /readyz would answer now, for the alert rules (D46).
        let ready = ops.store.probe().is_ok()
            && ops.schemas_compiled()
            && ops.auth.get().not_ready().is_none();
        ops.metrics.render(ops.store.as_ref(), ready, format)
    })
    .await
    .unwrap_or_default();
    let mut r = Response::new(text.into());
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(format.content_type()),
    );
    r
}

/// Most connections the admin listener serves at once (monitoring needs a few; the intake
/// listener's `max_connections_per_ip` applies too).
pub const MAX_CONNECTIONS: usize = 32;

/// The methods each admin path serves.
const ALLOW: &str = "GET, HEAD";

/// The admin routes: GET (or HEAD) `/healthz`, `/readyz`, `/metrics`; 405 with `Allow` for any
/// other method on them (D42), 404 elsewhere.
pub fn routes(ops: Arc<Ops>) -> impl Filter<Extract = (Response,), Error = Infallible> + Clone {
    warp::method()
        .and(warp::path::full())
        .and(warp::header::headers_cloned())
        .and(warp::any().map(move || Arc::clone(&ops)))
        .then(
            |method: Method, path: FullPath, headers: http::HeaderMap, ops: Arc<Ops>| async move {
                // `*` is a target without a path (`CONNECT host:port`, `OPTIONS *`, `conn.rs`).
                let known = ["/healthz", "/readyz", "/metrics", "*"].contains(&path.as_str());
                if known && method != Method::GET && method != Method::HEAD {
                    let message = format!("method {method} is not allowed; use {ALLOW}");
                    let mut r = json_reply(
                        StatusCode::METHOD_NOT_ALLOWED,
                        json!({"status": "FAILED", "message": message}),
                    );
                    r.headers_mut()
                        .insert(http::header::ALLOW, http::HeaderValue::from_static(ALLOW));
                    return r;
                }
                match path.as_str() {
                    "/healthz" => json_reply(StatusCode::OK, json!({"status": "ok"})),
                    "/readyz" => ready(ops).await,
                    "/metrics" => {
                        let accept = headers
                            .get(http::header::ACCEPT)
                            .and_then(|v| v.to_str().ok());
                        metrics(ops, accept.map(str::to_string)).await
                    }
                    _ => json_reply(
                        StatusCode::NOT_FOUND,
                        json!({"status": "FAILED", "message": "GET /healthz, /readyz or /metrics"}),
                    ),
                }
            },
        )
}
