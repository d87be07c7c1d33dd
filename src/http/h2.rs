//! HTTP/2, served with the h2 crate rather than hyper's server, for one thing hyper's lacks:
//! `Expect: 100-continue` (hyperium/hyper#2743). RFC 9110 section 10.1.1 wants an immediate
//! answer to a request that expects it: `100 Continue`, or a final status decided from the
//! head. Java's HttpClient, which speaks HTTP/2 on https by default, otherwise sends nothing
//! until the body timeout (408). As hyper does on HTTP/1, the 100 goes out when the routes
//! first read the body, so a 401, 403, 413 or 415 decided from the head is sent without one
//! and the body is never asked for.
//!
//! The rest is what hyper's HTTP/2 server did for the routes: its window sizes, the stream
//! cap and reset limits (D26), connection-specific response headers removed, `Date` and
//! `Content-Length` added, a request whose client resets its stream dropped, response
//! bodies sent as the peer's flow control allows. `conn.rs` drives the connection (shutdown,
//! idle close); each stream is served on a task of its own.

use super::head;
use bytes::{Buf, Bytes};
use http::{HeaderValue, Request, Response, StatusCode, header};
use hyper::body::{Body, Frame, SizeHint};
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite};

/// Flow-control windows and frame size as hyper's server sets them: the protocol's 64 KiB
/// default window would cap a 32 MiB upload at one window per round trip.
const WINDOW: u32 = 1024 * 1024;
const MAX_FRAME: u32 = 16 * 1024;
/// Response bytes buffered per stream before the peer's window opens.
const MAX_SEND_BUFFER: usize = 400 * 1024;
/// Streams the server itself may reset for protocol errors before it closes the connection.
const MAX_LOCAL_RESETS: usize = 1024;
/// HTTP/2 header lists have the bound of an HTTP/1 head's fields (D42).
const MAX_HEADER_LIST: usize = head::MAX_HEADER_BLOCK;

type Reply = Arc<Mutex<::h2::server::SendResponse<Bytes>>>;

/// What serves the streams: the routes (`conn::tracked`).
pub(super) trait Streams: Clone + Send + Unpin + 'static {
    /// The answers' body.
    type Body: Body<Data = Bytes, Error: Send> + Send + 'static;
    /// One call.
    type Call: Future<Output = Result<Response<Self::Body>, std::convert::Infallible>>
        + Send
        + 'static;
    /// Answers `req`.
    fn answer(&self, req: Request<RequestBody>) -> Self::Call;
}

impl<T, B> Streams for T
where
    T: hyper::service::Service<
            Request<RequestBody>,
            Response = Response<B>,
            Error = std::convert::Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + Unpin
        + 'static,
    B: Body<Data = Bytes, Error: Send> + Send + 'static,
{
    type Body = B;
    type Call = T::Future;

    fn answer(&self, req: Request<RequestBody>) -> Self::Call {
        self.call(req)
    }
}

fn lock(reply: &Reply) -> MutexGuard<'_, ::h2::server::SendResponse<Bytes>> {
    reply.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One HTTP/2 connection: its handshake, then every stream handed to `service` on a task of
/// its own. Completes when the connection ends; [`Connection::graceful_shutdown`] sends
/// GOAWAY and lets the streams in flight finish.
pub(super) struct Connection<IO, S> {
    state: State<IO>,
    service: S,
    /// Shutdown asked for during the handshake: sent once it is done.
    shut_down: bool,
}

enum State<IO> {
    Handshaking(::h2::server::Handshake<IO, Bytes>),
    Serving(::h2::server::Connection<IO, Bytes>),
}

impl<IO, S> Connection<IO, S>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    /// The connection on `io`, whose client has sent the preface, with at most `streams`
    /// streams at once.
    pub fn new(io: IO, service: S, streams: u32) -> Self {
        let handshake = ::h2::server::Builder::new()
            .initial_window_size(WINDOW)
            .initial_connection_window_size(WINDOW)
            .max_frame_size(MAX_FRAME)
            .max_send_buffer_size(MAX_SEND_BUFFER)
            .max_concurrent_streams(streams)
            // Streams opened and reset before they are served count against the connection,
            // so a rapid-reset client cannot queue work without bound.
            .max_pending_accept_reset_streams(usize::try_from(streams).unwrap_or(usize::MAX))
            .max_local_error_reset_streams(Some(MAX_LOCAL_RESETS))
            .max_header_list_size(u32::try_from(MAX_HEADER_LIST).unwrap_or(u32::MAX))
            .handshake(io);
        Self {
            state: State::Handshaking(handshake),
            service,
            shut_down: false,
        }
    }

    /// GOAWAY: no new streams; the ones in flight finish.
    pub fn graceful_shutdown(&mut self) {
        self.shut_down = true;
        if let State::Serving(conn) = &mut self.state {
            conn.graceful_shutdown();
        }
    }
}

impl<IO, S> Future for Connection<IO, S>
where
    IO: AsyncRead + AsyncWrite + Unpin,
    S: Streams,
{
    type Output = Result<(), ::h2::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            match &mut this.state {
                State::Handshaking(handshake) => {
                    let mut conn = ready!(Pin::new(handshake).poll(cx))?;
                    if this.shut_down {
                        conn.graceful_shutdown();
                    }
                    this.state = State::Serving(conn);
                }
                State::Serving(conn) => match ready!(conn.poll_accept(cx)) {
                    Some(Ok((req, reply))) => {
                        tokio::spawn(stream(this.service.clone(), req, reply));
                    }
                    Some(Err(e)) => return Poll::Ready(Err(e)),
                    None => return Poll::Ready(Ok(())),
                },
            }
        }
    }
}

/// Serves one stream: the routes' answer to its request, then the answer's body as the
/// peer's window allows. A client that resets the stream before the answer drops the call.
async fn stream<S: Streams>(
    service: S,
    req: Request<::h2::RecvStream>,
    reply: ::h2::server::SendResponse<Bytes>,
) {
    let reply = Arc::new(Mutex::new(reply));
    let (parts, recv) = req.into_parts();
    let owed = expects_continue(&parts.headers) && !recv.is_end_stream();
    let body = RequestBody {
        size: content_length(&parts.headers),
        recv,
        data_done: false,
        continue_owed: owed.then(|| Arc::clone(&reply)),
    };
    let call = service.answer(Request::from_parts(parts, body));
    let mut call = std::pin::pin!(call);
    let answered = poll_fn(|cx| {
        if let Poll::Ready(answered) = call.as_mut().poll(cx) {
            return Poll::Ready(Some(answered));
        }
        match lock(&reply).poll_reset(cx) {
            Poll::Ready(_) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    })
    .await;
    let Some(Ok(response)) = answered else {
        return; // reset by the client (the routes never fail)
    };
    let (mut head, body) = response.into_parts();
    for name in CONNECTION_HEADERS {
        head.headers.remove(name);
    }
    head.headers
        .entry(header::DATE)
        .or_insert_with(|| date(std::time::SystemTime::now()));
    let end = body.is_end_stream();
    if let (false, Some(len)) = (end, body.size_hint().exact()) {
        head.headers
            .entry(header::CONTENT_LENGTH)
            .or_insert_with(|| HeaderValue::from(len));
    }
    let sent = lock(&reply).send_response(Response::from_parts(head, ()), end);
    match sent {
        Ok(tx) if !end => send_body(body, tx).await,
        Ok(_) => {}
        Err(e) => tracing::debug!(error = %e, "an HTTP/2 answer could not be sent"),
    }
}

/// Headers that mean something only on one HTTP/1 connection, which HTTP/2 forbids (RFC 9113
/// section 8.2.2); the routes' `Connection: close` is one.
const CONNECTION_HEADERS: [header::HeaderName; 5] = [
    header::CONNECTION,
    header::HeaderName::from_static("keep-alive"),
    header::HeaderName::from_static("proxy-connection"),
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

fn date(now: std::time::SystemTime) -> HeaderValue {
    HeaderValue::from_str(&httpdate::fmt_http_date(now))
        .unwrap_or(HeaderValue::from_static("Thu, 01 Jan 1970 00:00:00 GMT"))
}

/// `Expect: 100-continue`, the one expectation there is (RFC 9110 section 10.1.1).
fn expects_continue(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(header::EXPECT)
        .iter()
        .any(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

fn content_length(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// Sends `body` on `tx`, each chunk as the peer's window opens; a body that fails resets the
/// stream.
async fn send_body<B>(body: B, mut tx: ::h2::SendStream<Bytes>)
where
    B: Body<Data = Bytes>,
{
    let mut body = std::pin::pin!(body);
    loop {
        let frame = poll_fn(|cx| {
            if let Poll::Ready(reason) = tx.poll_reset(cx) {
                return Poll::Ready(Err(reason.map_or_else(|e| e.to_string(), |r| r.to_string())));
            }
            body.as_mut().poll_frame(cx).map(Ok)
        })
        .await;
        let frame = match frame {
            Ok(Some(Ok(frame))) => frame,
            Ok(None) => {
                let _ = tx.send_data(Bytes::new(), true);
                return;
            }
            Ok(Some(Err(_))) => return tx.send_reset(::h2::Reason::INTERNAL_ERROR),
            Err(reset) => {
                tracing::debug!(reason = reset, "the client reset an HTTP/2 stream");
                return;
            }
        };
        let frame = match frame.into_data() {
            Ok(data) => {
                let end = body.is_end_stream();
                if send_data(&mut tx, data, end).await.is_err() || end {
                    return;
                }
                continue;
            }
            Err(frame) => frame,
        };
        if let Ok(trailers) = frame.into_trailers() {
            let _ = tx.send_trailers(trailers);
            return;
        }
    }
}

/// Sends `data` in pieces as the stream's window opens, the last one ending the stream when
/// `end`.
async fn send_data(
    tx: &mut ::h2::SendStream<Bytes>,
    mut data: Bytes,
    end: bool,
) -> Result<(), ::h2::Error> {
    if data.is_empty() {
        return tx.send_data(data, end);
    }
    while data.has_remaining() {
        tx.reserve_capacity(data.len());
        let open = match poll_fn(|cx| tx.poll_capacity(cx)).await {
            Some(open) => open?,
            None => return Err(::h2::Error::from(::h2::Reason::CANCEL)),
        };
        if open == 0 {
            continue;
        }
        let piece = data.split_to(open.min(data.len()));
        tx.send_data(piece, end && data.is_empty())?;
    }
    Ok(())
}

/// A request's body as the routes read it. The first read sends the `100 Continue` the
/// client is waiting for, if it asked for one.
pub struct RequestBody {
    recv: ::h2::RecvStream,
    /// What its Content-Length says is left to come.
    size: Option<u64>,
    data_done: bool,
    /// The stream's answer while a `100 Continue` is owed.
    continue_owed: Option<Reply>,
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = ::h2::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ::h2::Error>>> {
        let this = self.get_mut();
        if let Some(reply) = this.continue_owed.take() {
            let go_on = Response::builder().status(StatusCode::CONTINUE).body(());
            if let Ok(go_on) = go_on {
                // Fails only once the stream is gone, which the read below then says.
                let _ = lock(&reply).send_informational(go_on);
            }
        }
        if !this.data_done {
            match ready!(this.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    let _ = this.recv.flow_control().release_capacity(data.len());
                    this.size = this.size.map(|n| n.saturating_sub(data.len() as u64));
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                // An early answer's reset (RFC 9113 section 8.1): the body just ends.
                Some(Err(e)) if e.reason() == Some(::h2::Reason::NO_ERROR) => {
                    return Poll::Ready(None);
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => this.data_done = true,
            }
        }
        match ready!(this.recv.poll_trailers(cx)) {
            Ok(trailers) => Poll::Ready(trailers.map(|t| Ok(Frame::trailers(t)))),
            Err(e) => Poll::Ready(Some(Err(e))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.recv.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        match self.size {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}
