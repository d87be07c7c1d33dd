//! HTTP/1, one request at a time (D42, D26). Every request's head is read here within the
//! header timeout (else 408) and judged by the early look (`head.rs`: 400, 414, 431, or 501 for
//! a transfer coding other than chunked, D25), each refusal answered with the JSON failure body
//! (D5) and the connection closed. A head that passes is served by hyper, given exactly that
//! request's bytes (`wire.rs`); the connection is kept for the next request when the client,
//! hyper and the routes keep it.

use super::conn::{Routes, Serving, tracked};
use super::early;
use super::head::{self, Look};
use super::idle::Activity;
use super::wire::{Message, Wire};
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

/// What became of the wait for a request's head.
enum Next {
    Head {
        len: usize,
        framing: head::Framing,
        keep_alive: bool,
    },
    Refused(head::Refusal),
    /// The stream ended (or failed) before a complete head.
    Ended,
}

/// Reads until the pending bytes hold a complete head, or one to refuse. The early look runs
/// when a line has ended or the head has just grown past a limit, not on every read, so a
/// client sending a byte at a time costs at most a look per line.
async fn next_head<IO: AsyncRead + Unpin>(wire: &mut Wire<IO>) -> Next {
    const LONGEST: usize = head::MAX_REQUEST_LINE + head::MAX_HEADER_BLOCK + 1;
    let (mut fresh, mut looked) = (0, 0);
    loop {
        let pending = wire.pending();
        let line_ended = memchr::memchr(b'\n', &pending[fresh.min(pending.len())..]).is_some();
        let crossed = |limit| pending.len() >= limit && looked < limit;
        if line_ended || crossed(head::MAX_REQUEST_LINE) || crossed(LONGEST) {
            looked = pending.len();
            match head::look(pending) {
                Look::Partial => {}
                Look::Refused(r) => return Next::Refused(r),
                Look::Head(h) => {
                    return Next::Head {
                        len: h.len,
                        framing: h.framing,
                        keep_alive: h.keep_alive,
                    };
                }
            }
        }
        match wire.fill().await {
            Ok(Some(at)) => fresh = at,
            Ok(None) => return Next::Ended,
            Err(e) => {
                tracing::debug!(error = %e, "connection failed while a request head arrived");
                return Next::Ended;
            }
        }
    }
}

/// Serves HTTP/1 on `wire`: request after request, each head judged here first.
pub(super) async fn serve<IO, S>(
    mut wire: Wire<IO>,
    mut serving: Serving<'_, S>,
    mut started: Instant,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Routes,
{
    let (peer, edge, timeout) = (serving.peer, serving.edge, serving.settings.header_timeout);
    let mut first = true;
    loop {
        let waited = tokio::select! {
            waited = tokio::time::timeout_at(started + timeout, next_head(&mut wire)) => waited,
            _ = serving.stop.wait_for(|stop| *stop) => break,
        };
        let (len, framing, keep_alive) = match waited {
            // As hyper does: the first request, or a later one begun, gets 408; an idle kept
            // connection just closes.
            Err(_) if first || !wire.pending().trim_ascii_start().is_empty() => {
                return early::header_timeout(wire.io_mut(), peer, timeout, edge).await;
            }
            Err(_) | Ok(Next::Ended) => break,
            Ok(Next::Refused(r)) => {
                return early::refuse(wire.io_mut(), &r, peer, edge, started).await;
            }
            Ok(Next::Head {
                len,
                framing,
                keep_alive,
            }) => (len, framing, keep_alive),
        };
        let activity = Activity::new(started);
        let message = Message::new(wire, len, framing);
        let (message, served) = serve_one(message, &mut serving, &activity).await;
        let complete = message.complete();
        wire = message.into_wire();
        if activity.lingers() {
            early::linger(wire.io_mut()).await;
        }
        let stopping = *serving.stop.borrow();
        if !(served && complete && keep_alive) || stopping {
            break;
        }
        first = false;
        started = Instant::now();
    }
    let _ = wire.io_mut().shutdown().await;
}

/// hyper serving one request; the message back, and whether hyper ended well.
async fn serve_one<IO, S>(
    message: Message<IO>,
    serving: &mut Serving<'_, S>,
    activity: &Arc<Activity>,
) -> (Message<IO>, bool)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Routes,
{
    let service = tracked(serving.service.clone(), serving.peer, Arc::clone(activity));
    let mut conn = hyper::server::conn::http1::Builder::new()
        // The request's end of stream (`wire.rs`) is no reason to drop its answer (D26).
        .half_close(true)
        .header_read_timeout(None)
        .serve_connection(TokioIo::new(message), service);
    let mut closing = false;
    let result = loop {
        let polled = std::future::poll_fn(|cx| conn.poll_without_shutdown(cx));
        tokio::select! {
            result = polled => break result,
            _ = serving.stop.wait_for(|stop| *stop), if !closing => {
                std::pin::Pin::new(&mut conn).graceful_shutdown();
                closing = true;
            }
        }
    };
    if let Err(e) = &result {
        tracing::debug!(peer = %serving.peer, error = %e, "request ended with an error");
    }
    let parts = conn.into_parts();
    // hyper never holds bytes past the request it was given; if it did, the connection ends.
    let served = result.is_ok() && parts.read_buf.is_empty();
    (parts.io.into_inner(), served)
}
