//! The HTTP edge: the server loop ([`serve`]), one handler for all interfaces
//! ([`routes`]), authentication ([`auth`]) and the mapping of failures to answers ([`reply`]).
//!
//! warp 0.4 has no TLS of its own, so the routes become a service that this loop drives with
//! hyper-util over each accepted connection.

pub mod auth;
pub mod reply;
pub mod routes;

use crate::intake::Intake;
use auth::Auth;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;

/// What the handler needs, shared by all requests.
pub struct App {
    /// Validation and queueing.
    pub intake: Arc<Intake>,
    /// API keys.
    pub auth: Auth,
    /// Largest accepted body.
    pub max_body_bytes: u64,
    /// How long a body may take to arrive.
    pub body_timeout: Duration,
    /// Request identifiers.
    pub request_ids: RequestIds,
}

/// Request identifiers (D4): the client's `x-request-id` when it is a sane token, else a new
/// one: a random per-process prefix and a counter, unique across restarts.
pub struct RequestIds {
    prefix: String,
    next: AtomicU64,
}

impl Default for RequestIds {
    fn default() -> Self {
        let mut seed = [0u8; 4];
        let _ = getrandom::fill(&mut seed);
        Self {
            prefix: hex::encode(seed),
            next: AtomicU64::new(1),
        }
    }
}

impl RequestIds {
    /// The identifier of a request with these headers.
    pub fn for_request(&self, headers: &http::HeaderMap) -> String {
        let given = headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .filter(|v| {
                (1..=64).contains(&v.len())
                    && v.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
            });
        match given {
            Some(v) => v.to_string(),
            None => format!(
                "{}{:08x}",
                self.prefix,
                self.next.fetch_add(1, Ordering::Relaxed)
            ),
        }
    }
}

/// How long connections in flight may take to finish once shutdown starts.
pub const DRAIN_DEADLINE: Duration = Duration::from_secs(10);

/// Serves `app` on `listener` until `shutdown` completes, then lets connections in flight
/// finish (up to [`DRAIN_DEADLINE`]).
pub async fn serve(listener: TcpListener, app: Arc<App>, shutdown: impl Future<Output = ()>) {
    let service = warp::service(routes::routes(app));
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of file descriptors and the like: log, breathe, go on.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let svc = TowerToHyperService::new(service.clone());
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let builder = auto::Builder::new(TokioExecutor::new());
            let conn = builder.serve_connection(TokioIo::new(stream), svc);
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN_DEADLINE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the drain deadline; closing them");
    }
}
