//! One connection: the TLS handshake (bounded), then HTTP/2 (when the client starts with its
//! preface) or HTTP/1.
//!
//! HTTP/1 is served in `h1.rs`, each request's head judged by the early look before hyper
//! reads it (D42). HTTP/2 has no header timer in hyper, so that connection is watched with
//! [`super::idle`] (D26).

use super::early;
use super::idle::{Activity, Tracked};
use super::wire::Wire;
use super::{ConnInfo, Edge};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;

/// How a connection is accepted.
pub struct ConnSettings {
    /// TLS, or plain HTTP when `None`; a reload replaces the certificate (D34) for the
    /// connections that follow.
    pub tls: Arc<crate::live::Live<Option<tokio_rustls::TlsAcceptor>>>,
    /// Bound on the TLS handshake.
    pub handshake_timeout: Duration,
    /// Bound on receiving a request's head; on HTTP/2, on a connection without a request in
    /// flight (D26).
    pub header_timeout: Duration,
    /// Most concurrent HTTP/2 streams per connection (D26).
    pub max_streams_per_connection: u32,
    /// Most connections per client address (D26), enforced by the server loop.
    pub max_connections_per_ip: usize,
    /// Reverse proxies that name the client (`[server] trusted_proxies`).
    pub trusted_proxies: Arc<super::forwarded::TrustedProxies>,
}

/// How an HTTP/2 connection starts (RFC 9113 section 3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How long an idle HTTP/2 connection told to go away (GOAWAY, then a PING whose answer lets
/// hyper close it) may take to answer before it is dropped: a client that ignores the PING
/// would otherwise keep it open.
const GOAWAY_GRACE: Duration = Duration::from_secs(1);

/// The routes as a service of requests whose bodies are `B`.
pub trait RoutesFor<B>:
    hyper::service::Service<
        http::Request<B>,
        Response = warp::reply::Response,
        Error = std::convert::Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + Sync
    + Unpin
    + 'static
{
}

impl<B, T> RoutesFor<B> for T where
    T: hyper::service::Service<
            http::Request<B>,
            Response = warp::reply::Response,
            Error = std::convert::Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + Sync
        + Unpin
        + 'static
{
}

/// The routes as a connection drives them: hyper on HTTP/1, `h2.rs` on HTTP/2.
pub trait Routes: RoutesFor<hyper::body::Incoming> + RoutesFor<super::h2::RequestBody> {}

impl<T> Routes for T where T: RoutesFor<hyper::body::Incoming> + RoutesFor<super::h2::RequestBody> {}

/// What one connection is served with.
pub struct Serving<'a, S> {
    /// The client's address.
    pub peer: SocketAddr,
    /// Timeouts and caps.
    pub settings: &'a ConnSettings,
    /// Ids, the log and the metrics of answers written here.
    pub edge: &'a Edge,
    /// The routes.
    pub service: S,
    /// Turns true when the server shuts down.
    pub stop: watch::Receiver<bool>,
}

/// Serves one accepted connection to the end.
pub async fn serve<S: Routes>(stream: TcpStream, serving: Serving<'_, S>) {
    let _ = stream.set_nodelay(true);
    let peer = serving.peer;
    let tls = serving.settings.tls.get();
    let Some(acceptor) = tls.as_ref() else {
        return serve_io(stream, serving).await;
    };
    let timeout = serving.settings.handshake_timeout;
    let failed = match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => return serve_io(tls, serving).await,
        Ok(Err(e)) => e.to_string(),
        Err(_) => "timed out".to_string(),
    };
    if serving.edge.request_log.handshake_failed(peer.ip()) {
        tracing::info!(%peer, error = failed, "TLS handshake failed");
    }
}

async fn serve_io<IO, S>(io: IO, serving: Serving<'_, S>)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Routes,
{
    let started = Instant::now();
    let mut wire = Wire::new(io);
    let timeout = serving.settings.header_timeout;
    let mut stop = serving.stop.clone();
    match until(preface(&mut wire), started + timeout, &mut stop).await {
        Waited::Came(Ok(true)) => serve_h2(wire, serving, started).await,
        Waited::Came(Ok(false)) => super::h1::serve(wire, serving, started).await,
        Waited::Came(Err(e)) => {
            tracing::debug!(peer = %serving.peer, error = %e, "connection failed before a request arrived");
        }
        Waited::TimedOut => {
            early::header_timeout(wire.io_mut(), serving.peer, timeout, serving.edge).await;
        }
        Waited::Stopped => {}
    }
}

/// How long a connection taken in before the server stopped may still take to send its
/// request: enough for one already on its way, which then gets its answer (503 from a halted
/// store, D40; served as usual at a clean stop) instead of a closed connection.
pub(super) const STOP_GRACE: Duration = Duration::from_millis(250);

/// What waiting for the start of a request came to.
pub(super) enum Waited<T> {
    /// It came.
    Came(T),
    /// Not by the header timeout.
    TimedOut,
    /// Not within [`STOP_GRACE`] of the server's stop.
    Stopped,
}

/// Awaits `start` (a request's first bytes or head) until `deadline`, and once the server
/// stops, for at most [`STOP_GRACE`] more.
pub(super) async fn until<F: Future>(
    start: F,
    deadline: Instant,
    stop: &mut watch::Receiver<bool>,
) -> Waited<F::Output> {
    tokio::pin!(start);
    tokio::select! {
        came = tokio::time::timeout_at(deadline, &mut start) => {
            return came.map_or(Waited::TimedOut, Waited::Came);
        }
        _ = stop.wait_for(|stop| *stop) => {}
    }
    let grace = Instant::now() + STOP_GRACE;
    match tokio::time::timeout_at(deadline.min(grace), start).await {
        Ok(came) => Waited::Came(came),
        Err(_) if deadline <= grace => Waited::TimedOut,
        Err(_) => Waited::Stopped,
    }
}

/// Reads until the first bytes tell HTTP/2's preface from an HTTP/1 request (or the stream
/// ends: HTTP/1, whose early look then has nothing to judge).
async fn preface<IO: AsyncRead + Unpin>(wire: &mut Wire<IO>) -> io::Result<bool> {
    loop {
        let pending = wire.pending();
        if pending.len() >= H2_PREFACE.len() || !H2_PREFACE.starts_with(pending) {
            return Ok(pending.starts_with(H2_PREFACE));
        }
        if std::future::poll_fn(|cx| wire.poll_fill(cx))
            .await?
            .is_none()
        {
            return Ok(false);
        }
    }
}

/// HTTP/2 (`h2.rs`), closed when no request has been in flight for the header timeout.
async fn serve_h2<IO, S>(wire: Wire<IO>, serving: Serving<'_, S>, started: Instant)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Routes,
{
    let settings = serving.settings;
    let activity = Activity::new(started);
    let trusted = Arc::clone(&settings.trusted_proxies);
    let service = tracked(
        serving.service,
        serving.peer,
        trusted,
        Arc::clone(&activity),
        None,
    );
    let conn = super::h2::Connection::new(wire, service, settings.max_streams_per_connection);
    let idle = Some((activity.as_ref(), settings.header_timeout));
    let shut_down = |c: Pin<&mut super::h2::Connection<_, _>>| c.get_mut().graceful_shutdown();
    if let Err(e) = drive(conn, shut_down, serving.stop, idle, started).await {
        tracing::debug!(peer = %serving.peer, error = %e, "connection ended with an error");
    }
}

/// `Connection: close`, as the routes write it.
const CLOSE: http::HeaderValue = http::HeaderValue::from_static("close");

/// warp's response body, which warp does not name publicly.
pub(super) type WarpBody = <warp::reply::Response as BodyOf>::Body;

pub(super) trait BodyOf {
    type Body;
}

impl<B> BodyOf for http::Response<B> {
    type Body = B;
}

/// The future of one call of [`tracked`]: boxed, so hyper can hand the stream back after it.
pub(super) type Call = Pin<
    Box<
        dyn Future<Output = Result<http::Response<Tracked<WarpBody>>, std::convert::Infallible>>
            + Send,
    >,
>;

/// The routes with the peer's and the client's address and the protocol as a request
/// extension, each request
/// counted in flight until its response body is dropped. A request whose target is not a path
/// (`CONNECT host:port`, `OPTIONS *`, `GET http://host`) reaches them with the target `*`,
/// or `/` for an absolute URI without a path, so no route needs to know those forms.
pub(super) fn tracked<B, S>(
    service: S,
    peer: SocketAddr,
    trusted: Arc<super::forwarded::TrustedProxies>,
    activity: Arc<Activity>,
    judged: Option<Arc<AtomicUsize>>,
) -> impl hyper::service::Service<
    http::Request<B>,
    Response = http::Response<Tracked<WarpBody>>,
    Error = std::convert::Infallible,
    Future = Call,
> + Clone
+ Send
+ Sync
+ Unpin
+ 'static
where
    B: hyper::body::Body + 'static,
    S: RoutesFor<B>,
{
    let calls = Arc::new(AtomicUsize::new(0));
    hyper::service::service_fn(move |mut req: http::Request<B>| {
        let info = ConnInfo {
            peer,
            client: trusted.client(peer.ip(), req.headers()),
            http1: req.version() < http::Version::HTTP_2,
        };
        req.extensions_mut().insert(info);
        if req.uri().path_and_query().is_none() {
            *req.uri_mut() = path_less(req.uri());
        }
        let busy = activity.begin();
        // On HTTP/1 hyper is given only heads the early look judged (`message.rs`); a request
        // beyond them would be bytes it has not judged.
        let calls = calls.fetch_add(1, Ordering::Relaxed) + 1;
        if judged
            .as_ref()
            .is_some_and(|j| calls > j.load(Ordering::Relaxed))
        {
            let refused = early::unjudged();
            return Box::pin(async move { Ok(refused.map(|b| Tracked::new(b, busy))) }) as Call;
        }
        let call = hyper::service::Service::call(&service, req);
        let activity = Arc::clone(&activity);
        Box::pin(async move {
            let response = call.await?;
            // The routes say close only when the body was left unread (D26).
            if response.headers().get(http::header::CONNECTION) == Some(&CLOSE) {
                activity.close_after_body();
            }
            Ok(response.map(|body| Tracked::new(body, busy)))
        }) as Call
    })
}

/// The target a request without a path reaches the routes with (warp needs a path).
fn path_less(uri: &http::Uri) -> http::Uri {
    let path = if uri.scheme().is_some() { "/" } else { "*" };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(http::uri::PathAndQuery::from_static(path));
    if path == "*" {
        parts.scheme = None;
        parts.authority = None;
    }
    http::Uri::from_parts(parts).unwrap_or_else(|_| http::Uri::from_static("*"))
}

/// Runs an HTTP/2 connection until it ends: gracefully on server shutdown, once no request
/// has been in flight for the header timeout, and at once when a connection told to go away
/// stays idle for [`GOAWAY_GRACE`] more (D26).
async fn drive<C, E>(
    conn: C,
    shut_down: impl Fn(Pin<&mut C>),
    mut stop: watch::Receiver<bool>,
    idle: Option<(&Activity, Duration)>,
    started: Instant,
) -> Result<(), E>
where
    C: Future<Output = Result<(), E>>,
{
    tokio::pin!(conn);
    let mut closing: Option<Instant> = None;
    loop {
        let idle_expired = async {
            match idle {
                Some((activity, timeout)) => match closing {
                    None => activity.idle_for(timeout, started).await,
                    Some(since) => activity.idle_for(GOAWAY_GRACE, since).await,
                },
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            result = conn.as_mut() => return result,
            _ = stop.wait_for(|stop| *stop), if closing.is_none() => {
                shut_down(conn.as_mut());
                closing = Some(Instant::now());
            }
            () = idle_expired => {
                if closing.is_some() {
                    tracing::debug!("closing an idle HTTP/2 connection that did not go away");
                    return Ok(());
                }
                tracing::debug!("closing an HTTP/2 connection without a request in flight");
                shut_down(conn.as_mut());
                closing = Some(Instant::now());
            }
        }
    }
}
