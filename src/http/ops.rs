//! The admin listener (loopback by default): `/healthz`, `/readyz` and `/metrics` for the
//! operator's monitoring. Served by warp on its own port, apart from the ERP-facing one.

use crate::metrics::Metrics;
use crate::queue::Store;
use http::StatusCode;
use serde_json::json;
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;
use warp::Filter;
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
/// of D30) and is not known to be damaged (D29), and the schemas are compiled.
async fn ready(ops: Arc<Ops>) -> Response {
    let store = Arc::clone(&ops.store);
    let storage = match tokio::task::spawn_blocking(move || store.probe()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let schemas_ok = ops.schemas == crate::interfaces::INTERFACES.len();
    let body = json!({
        "status": if storage.is_ok() && schemas_ok { "ready" } else { "not ready" },
        "storage": storage.as_ref().map_or_else(|e| e.clone(), |()| "writable".into()),
        "schemas": format!("{} of {} compiled", ops.schemas, crate::interfaces::INTERFACES.len()),
    });
    let status = if storage.is_ok() && schemas_ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json_reply(status, body)
}

async fn metrics(ops: Arc<Ops>) -> Response {
    let store = Arc::clone(&ops.store);
    let text = tokio::task::spawn_blocking(move || ops.metrics.render(store.as_ref()))
        .await
        .unwrap_or_default();
    let mut r = Response::new(text.into());
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        ),
    );
    r
}

/// Serves the admin routes on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    ops: Arc<Ops>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let with = move || {
        let ops = Arc::clone(&ops);
        warp::any().map(move || Arc::clone(&ops))
    };
    let healthz =
        warp::path!("healthz").map(|| json_reply(StatusCode::OK, json!({"status": "ok"})));
    let readyz = warp::path!("readyz").and(with()).then(ready);
    let metrics = warp::path!("metrics").and(with()).then(metrics);
    let routes = warp::get()
        .and(healthz.or(readyz).unify().or(metrics).unify())
        .recover(|_| async {
            Ok::<_, Infallible>(json_reply(
                StatusCode::NOT_FOUND,
                json!({"status": "FAILED", "message": "GET /healthz, /readyz or /metrics"}),
            ))
        })
        .unify();
    warp::serve(routes)
        .incoming(listener)
        .graceful(shutdown)
        .run()
        .await;
}
