//! The HTTP edge: the server loop ([`serve`]), one handler for all interfaces
//! ([`routes`]), authentication ([`auth`]) and the mapping of failures to answers ([`reply`]).
//!
//! warp 0.4 has no TLS of its own, so the routes become a service that this loop drives with
//! hyper over each accepted connection. The three layers each own what the others cannot:
//! this loop (and `conn.rs`) owns the socket: TLS, the per-address and total caps, timeouts
//! before hyper has a request (`early.rs`, `idle.rs`, D26), and the early look at every HTTP/1
//! request head before hyper reads it (`h1.rs`, `head.rs`, `wire.rs`, `message.rs`, D42);
//! hyper owns HTTP/1 framing (bodies, chunks) and the h2 crate HTTP/2's (streams; `h2.rs`
//! serves them, since hyper's server never answers `Expect: 100-continue`); the warp filter in
//! `routes.rs` owns what a request means (path, method, key, media type, body, D3-D5). The
//! admin listener (`ops.rs`) runs through the same loop with its own routes.

pub mod auth;
pub mod body;
mod chunked;
pub mod conn;
pub mod console;
mod credentials;
mod early;
pub mod feed;
pub mod forwarded;
mod h1;
mod h2;
pub mod head;
pub mod idle;
pub mod ids;
mod message;
pub mod oauth2;
pub mod ops;
pub mod peers;
pub mod receipts;
pub mod reply;
pub mod routes;
pub mod tls;
mod wire;

use crate::intake::Intake;
use crate::metrics::Metrics;
use crate::telemetry::RequestLog;
use auth::Auth;
use conn::ConnSettings;
use hyper_util::service::TowerToHyperService;
pub use ids::RequestIds;
use peers::Peers;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

/// What the connection knows about a request, handed to the routes as a request extension.
#[derive(Debug, Clone, Copy)]
pub struct ConnInfo {
    /// The connection's peer: the client, or a reverse proxy.
    pub peer: std::net::SocketAddr,
    /// The client's address: the peer's, or behind a trusted proxy the one it names
    /// (`forwarded.rs`). What is kept per address (log limits, D44) is kept per this.
    pub client: std::net::IpAddr,
    /// HTTP/1.x (where `Connection: close` is meaningful), not HTTP/2.
    pub http1: bool,
}

impl ConnInfo {
    /// The client as a log line names it: the peer's address and port, or the address a
    /// trusted proxy named.
    pub fn shown(&self) -> String {
        if self.client == self.peer.ip().to_canonical() {
            self.peer.to_string()
        } else {
            self.client.to_string()
        }
    }
}

/// What the handler needs, shared by all requests.
pub struct App {
    /// Validation and queueing.
    pub intake: Arc<Intake>,
    /// API keys; a reload replaces them (D34).
    pub auth: Arc<crate::live::Live<Auth>>,
    /// Largest accepted body.
    pub max_body_bytes: u64,
    /// How long a body may take to arrive.
    pub body_timeout: Duration,
    /// The in-flight memory budget (D27), shared with the intake.
    pub budget: Arc<crate::budget::Budget>,
    /// Request identifiers.
    pub request_ids: RequestIds,
    /// Counters and latency.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Which requests get a log line, and their counts for the summary line (D36).
    pub request_log: Arc<crate::telemetry::RequestLog>,
    /// `/openapi.json` and `/docs/` (D38).
    pub console: console::Console,
    /// The queue, for receipts (D38).
    pub store: Arc<dyn crate::queue::Store>,
    /// Whether requests keep receipts (`[receipts] retention_days` above zero).
    pub receipts: bool,
    /// The authorization server's endpoints (D47), when `[oauth2]` has a signing key.
    pub oauth2: Option<Arc<oauth2::Endpoints>>,
    /// The intake listener serves HTTPS (for URLs the metadata names).
    pub tls: bool,
}

/// What a listener's connections need for the answers they write themselves (`early.rs`):
/// request ids, the request log (D36, D44) and, on the intake listener, the metrics.
pub struct Edge {
    /// Ids of answers written before the routes.
    pub request_ids: RequestIds,
    /// The request log and its counts.
    pub request_log: Arc<RequestLog>,
    /// Request counters; `None` on the admin listener, whose requests are not counted.
    pub metrics: Option<Arc<Metrics>>,
}

/// How long connections in flight may take to finish once shutdown starts.
pub const DRAIN_DEADLINE: Duration = Duration::from_secs(10);

/// Serves `routes` on `listener` until `shutdown` completes, then lets connections in flight
/// finish (up to [`DRAIN_DEADLINE`]). At most `max_connections` are served at once, each
/// counted from before its accept to its close, TLS handshake and HTTP/2 preface included;
/// further ones wait in the listen queue. One client address holds at most
/// `settings.max_connections_per_ip` of them; a further connection from it is closed at once
/// (D26). A trusted reverse proxy is not capped so.
pub async fn serve<T>(
    listener: TcpListener,
    routes: T,
    edge: Edge,
    settings: ConnSettings,
    max_connections: usize,
    shutdown: impl Future<Output = ()>,
) where
    T: Clone + Send + 'static,
    TowerToHyperService<T>: conn::Routes,
{
    let peers = Peers::new(settings.max_connections_per_ip);
    let settings = Arc::new(settings);
    let edge = Arc::new(edge);
    let slots = Arc::new(Semaphore::new(max_connections));
    // Each connection holds a receiver: the sender learns when the last one has ended.
    let (stop, _) = watch::channel(false);
    let spawn = |stream, peer: std::net::SocketAddr, slot| {
        // A trusted proxy carries many clients on its connections: it is not capped per
        // address (the slots still count it).
        let admitted = if settings.trusted_proxies.trusts(peer.ip()) {
            None
        } else {
            match peers.admit(peer.ip()) {
                Some(admitted) => Some(admitted),
                None => return, // dropping the stream closes it; the slot is free again
            }
        };
        let service = TowerToHyperService::new(routes.clone());
        let stop = stop.subscribe();
        let (settings, edge) = (Arc::clone(&settings), Arc::clone(&edge));
        tokio::spawn(async move {
            let serving = conn::Serving {
                peer,
                settings: &settings,
                edge: &edge,
                service,
                stop,
            };
            conn::serve(stream, serving).await;
            drop((admitted, slot));
        });
    };
    tokio::pin!(shutdown);
    loop {
        let ((stream, peer), slot) = tokio::select! {
            accepted = accept(&listener, &slots) => match accepted {
                Some(accepted) => accepted,
                None => break,
            },
            () = &mut shutdown => break,
        };
        spawn(stream, peer, slot);
    }
    // Connections the kernel completed but this loop had not taken yet would be reset with
    // the listener, their requests unanswered: they are taken in too (while slots last) and
    // get the stop's grace like the others (D40: a halted service answers 503, it does not
    // cut requests).
    for (stream, peer, slot) in backlog(listener, &slots) {
        spawn(stream, peer, slot);
    }
    let _ = stop.send(true);
    if tokio::time::timeout(DRAIN_DEADLINE, stop.closed())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the drain deadline; closing them");
    }
}

/// Closes `listener`, first taking every connection the kernel has completed for it, each
/// with a free slot while there is one. Taken with accept(2) itself: tokio's `accept` might
/// not have seen the readiness of the last ones yet.
fn backlog(
    listener: TcpListener,
    slots: &Arc<Semaphore>,
) -> Vec<(
    tokio::net::TcpStream,
    std::net::SocketAddr,
    OwnedSemaphorePermit,
)> {
    let mut taken = Vec::new();
    let Ok(listener) = listener.into_std() else {
        return taken;
    };
    while let Ok(slot) = Arc::clone(slots).try_acquire_owned() {
        let Ok((stream, peer)) = listener.accept() else {
            break; // WouldBlock: none left
        };
        let stream = stream
            .set_nonblocking(true)
            .and_then(|()| tokio::net::TcpStream::from_std(stream));
        if let Ok(stream) = stream {
            taken.push((stream, peer, slot));
        }
    }
    taken
}

/// A free slot, then the next connection; `None` when the slots are closed.
async fn accept(
    listener: &TcpListener,
    slots: &Arc<Semaphore>,
) -> Option<(
    (tokio::net::TcpStream, std::net::SocketAddr),
    OwnedSemaphorePermit,
)> {
    // The slot is taken before accepting, so a connection over the cap waits in the kernel's
    // listen queue instead of being accepted and left unserved.
    let slot = Arc::clone(slots).acquire_owned().await.ok()?;
    loop {
        match listener.accept().await {
            Ok(conn) => return Some((conn, slot)),
            Err(e) => {
                // Out of file descriptors and the like: log, breathe, go on.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
