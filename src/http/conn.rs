//! One connection: the TLS handshake (bounded), the first request's head (bounded, 408 when it
//! does not arrive), then hyper serving the routes. Later requests on a kept-alive connection
//! are bounded by hyper's own header timer, which closes an idle connection.

use super::reply;
use super::{App, ConnInfo};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::Watcher;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

/// How a connection is accepted.
pub struct ConnSettings {
    /// TLS, or plain HTTP when `None`.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// Bound on the TLS handshake.
    pub handshake_timeout: Duration,
    /// Bound on receiving a request's head.
    pub header_timeout: Duration,
}

/// A request head larger than this is left to hyper (which answers 431).
const HEAD_PREREAD_LIMIT: usize = 64 * 1024;

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

/// Serves one accepted connection to the end.
pub async fn serve<S>(
    stream: TcpStream,
    peer: SocketAddr,
    settings: &ConnSettings,
    app: &App,
    service: S,
    watcher: Watcher,
) where
    S: Routes,
{
    let _ = stream.set_nodelay(true);
    match &settings.tls {
        None => serve_io(stream, peer, settings, app, service, watcher).await,
        Some(acceptor) => {
            match tokio::time::timeout(settings.handshake_timeout, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => serve_io(tls, peer, settings, app, service, watcher).await,
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
    watcher: Watcher,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Routes,
{
    let head = match tokio::time::timeout(settings.header_timeout, read_head(&mut io)).await {
        Ok(Ok(head)) if head.is_empty() => return, // closed before sending anything
        Ok(Ok(head)) => head,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "connection failed before a request arrived");
            return;
        }
        Err(_) => {
            let request_id = app.request_ids.fresh();
            let message = format!(
                "the request headers were not received within {} seconds",
                settings.header_timeout.as_secs()
            );
            let body = reply::failure_body(&message, &request_id);
            let response = format!(
                "HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\nx-request-id: {request_id}\r\n\r\n",
                body.len()
            );
            let _ = io.write_all(response.as_bytes()).await;
            let _ = io.write_all(&body).await;
            let _ = io.shutdown().await;
            tracing::info!(request_id, %peer, status = 408, "request headers timed out");
            return;
        }
    };
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(settings.header_timeout);
    builder.http2().timer(TokioTimer::new());
    // The routes learn the client's address and protocol from a request extension.
    let service =
        hyper::service::service_fn(move |mut req: http::Request<hyper::body::Incoming>| {
            let info = ConnInfo {
                peer,
                http1: req.version() < http::Version::HTTP_2,
            };
            req.extensions_mut().insert(info);
            service.call(req)
        });
    let conn = builder.serve_connection(TokioIo::new(Prefixed { head, pos: 0, io }), service);
    if let Err(e) = watcher.watch(conn).await {
        tracing::debug!(%peer, error = %e, "connection ended with an error");
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
struct Prefixed<IO> {
    head: Vec<u8>,
    pos: usize,
    io: IO,
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
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Prefixed<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}
