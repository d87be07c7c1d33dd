//! One connection: the TLS handshake (bounded), the first request's head (bounded, 408 when it
//! does not arrive; 501 for a transfer coding other than chunked), then hyper serving the
//! routes. Later HTTP/1 requests on a kept-alive connection are bounded by hyper's own header
//! timer, which closes an idle connection; HTTP/2 has no such timer, so the connection is
//! watched here with [`super::idle`] (D26).

use super::early;
use super::idle::{Activity, Tracked};
use super::{App, ConnInfo};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
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
}

/// A request head larger than this is left to hyper (which answers 431); HTTP/2 header lists
/// have the same bound.
const HEAD_PREREAD_LIMIT: usize = 64 * 1024;

/// How an HTTP/2 connection starts (the whole preface is 24 bytes; the first head read always
/// holds this much of it, as it ends at the first blank line).
const H2_PREFACE_START: &[u8] = b"PRI * HTTP/2.0\r\n\r\n";

/// How long an idle HTTP/2 connection told to go away (GOAWAY, then a PING whose answer lets
/// hyper close it) may take to answer before it is dropped: a client that ignores the PING
/// would otherwise keep it open.
const GOAWAY_GRACE: Duration = Duration::from_secs(1);

/// The routes as hyper drives them over one connection.
pub trait Routes:
    hyper::service::Service<
        http::Request<hyper::body::Incoming>,
        Response = warp::reply::Response,
        Error = std::convert::Infallible,
        Future: Send + 'static,
    > + Send
    + 'static
{
}

impl<T> Routes for T where
    T: hyper::service::Service<
            http::Request<hyper::body::Incoming>,
            Response = warp::reply::Response,
            Error = std::convert::Infallible,
            Future: Send + 'static,
        > + Send
        + 'static
{
}

/// Serves one accepted connection to the end; `stop` turns true when the server shuts down.
pub async fn serve<S>(
    stream: TcpStream,
    peer: SocketAddr,
    settings: &ConnSettings,
    app: &App,
    service: S,
    stop: watch::Receiver<bool>,
) where
    S: Routes,
{
    let _ = stream.set_nodelay(true);
    let tls = settings.tls.get();
    match tls.as_ref() {
        None => serve_io(stream, peer, settings, app, service, stop).await,
        Some(acceptor) => {
            match tokio::time::timeout(settings.handshake_timeout, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => serve_io(tls, peer, settings, app, service, stop).await,
                Ok(Err(e)) => tracing::info!(%peer, error = %e, "TLS handshake refused"),
                Err(_) => tracing::info!(%peer, "TLS handshake timed out"),
            }
        }
    }
}

async fn serve_io<IO, S>(
    mut io: IO,
    peer: SocketAddr,
    settings: &ConnSettings,
    app: &App,
    service: S,
    stop: watch::Receiver<bool>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Routes,
{
    let started = Instant::now();
    let head = match tokio::time::timeout(settings.header_timeout, read_head(&mut io)).await {
        Ok(Ok(head)) if head.is_empty() => return, // closed before sending anything
        Ok(Ok(head)) => head,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "connection failed before a request arrived");
            return;
        }
        Err(_) => return early::header_timeout(&mut io, peer, settings.header_timeout, app).await,
    };
    // hyper answers a bare 400 to a last coding other than chunked, before the routes could
    // say 501 (D25). Only the first request is checked here: later ones on a kept-alive
    // connection still get hyper's 400, and the routes' 501 for `gzip, chunked`.
    if let Some(refusal) = early::unsupported_coding(&head, started, app) {
        return refusal.answer(&mut io, peer, app).await;
    }
    let h2 = head.starts_with(H2_PREFACE_START);
    let activity = Activity::new(started);
    let service = tracked(service, peer, Arc::clone(&activity));
    let builder = builder(settings);
    let home = Arc::new(Mutex::new(None));
    let io = Prefixed::new(head, io, Arc::clone(&home));
    let conn = builder.serve_connection(TokioIo::new(io), service);
    let idle = h2.then(|| (activity.as_ref(), settings.header_timeout));
    let shut_down = |c: Pin<&mut _>| auto::Connection::graceful_shutdown(c);
    if let Err(e) = drive(conn, shut_down, stop, idle, started).await {
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
    // hyper is done with the stream and has sent its last answer: with a body still on its
    // way, closing now would reset the connection and the client could lose that answer.
    let returned = home.lock().ok().and_then(|mut h| h.take());
    if let (true, Some(mut io)) = (activity.lingers(), returned) {
        early::linger(&mut io).await;
    }
}

/// `Connection: close`, as the routes write it.
const CLOSE: http::HeaderValue = http::HeaderValue::from_static("close");

/// hyper's settings for one connection (D26).
fn builder(settings: &ConnSettings) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(settings.header_timeout)
        // A client that half-closes after its request still gets the answer (D26).
        .half_close(true);
    let streams = settings.max_streams_per_connection;
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(streams)
        // Streams opened and reset before they are served count against the connection, so
        // a rapid-reset client cannot queue work without bound.
        .max_pending_accept_reset_streams(usize::try_from(streams).unwrap_or(usize::MAX))
        .max_header_list_size(u32::try_from(HEAD_PREREAD_LIMIT).unwrap_or(u32::MAX));
    builder
}

/// warp's response body, which warp does not name publicly.
type WarpBody = <warp::reply::Response as BodyOf>::Body;

trait BodyOf {
    type Body;
}

impl<B> BodyOf for http::Response<B> {
    type Body = B;
}

/// The routes with the client's address and protocol as a request extension, each request
/// counted in flight until its response body is dropped.
fn tracked<S: Routes>(
    service: S,
    peer: SocketAddr,
    activity: Arc<Activity>,
) -> impl hyper::service::Service<
    http::Request<hyper::body::Incoming>,
    Response = http::Response<Tracked<WarpBody>>,
    Error = std::convert::Infallible,
    Future: Send + 'static,
> + Send
+ 'static {
    hyper::service::service_fn(move |mut req: http::Request<hyper::body::Incoming>| {
        let info = ConnInfo {
            peer,
            http1: req.version() < http::Version::HTTP_2,
        };
        req.extensions_mut().insert(info);
        let busy = activity.begin();
        let call = service.call(req);
        let activity = Arc::clone(&activity);
        async move {
            let response = call.await?;
            // The routes say close only when the body was left unread (D26).
            if response.headers().get(http::header::CONNECTION) == Some(&CLOSE) {
                activity.close_after_body();
            }
            Ok(response.map(|body| Tracked::new(body, busy)))
        }
    })
}

/// Runs the connection until it ends: gracefully on server shutdown; for HTTP/2 (`idle` given)
/// also once no request has been in flight for the header timeout, and at once when a
/// connection told to go away stays idle for [`GOAWAY_GRACE`] more (D26).
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

/// Reads until the end of the first request head (or the h2 preface), EOF, or the limit.
async fn read_head<IO: AsyncRead + Unpin>(io: &mut IO) -> io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = io.read(&mut chunk).await?;
        if n == 0 {
            return Ok(head);
        }
        head.extend_from_slice(&chunk[..n]);
        if head.windows(4).any(|w| w == b"\r\n\r\n") || head.len() >= HEAD_PREREAD_LIMIT {
            return Ok(head);
        }
    }
}

/// A stream whose first bytes were already read: hyper reads them again, then the stream.
/// When hyper drops it, the stream goes back `home` instead of closing, so the connection can
/// linger after an early answer.
struct Prefixed<IO> {
    head: Vec<u8>,
    pos: usize,
    io: Option<IO>,
    home: Home<IO>,
}

/// Where a stream goes when hyper is done with it.
type Home<IO> = Arc<Mutex<Option<IO>>>;

impl<IO> Prefixed<IO> {
    fn new(head: Vec<u8>, io: IO, home: Home<IO>) -> Self {
        Self {
            head,
            pos: 0,
            io: Some(io),
            home,
        }
    }

    fn io(&mut self) -> io::Result<Pin<&mut IO>>
    where
        IO: Unpin,
    {
        match self.io.as_mut() {
            Some(io) => Ok(Pin::new(io)),
            None => Err(io::ErrorKind::NotConnected.into()),
        }
    }
}

impl<IO> Drop for Prefixed<IO> {
    fn drop(&mut self) {
        if let (Some(io), Ok(mut home)) = (self.io.take(), self.home.lock()) {
            *home = Some(io);
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Prefixed<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.pos < this.head.len() {
            let n = (this.head.len() - this.pos).min(buf.remaining());
            buf.put_slice(&this.head[this.pos..this.pos + n]);
            this.pos += n;
            if this.pos == this.head.len() {
                this.head = Vec::new();
                this.pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        this.io()?.poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Prefixed<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().io()?.poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().io()?.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().io()?.poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().io()?.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.as_ref().is_some_and(IO::is_write_vectored)
    }
}
