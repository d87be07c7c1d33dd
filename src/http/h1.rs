//! HTTP/1 (D42, D26). Every request's head is read within the header timeout (else 408) and
//! judged by the early look (`head.rs`: 400, 414, 431, or 501 for a transfer coding other
//! than chunked, D25) before hyper reads it: the first one here, the later ones as hyper asks
//! for them (`message.rs`). A refusal is answered with the JSON failure body (D5) and the
//! connection closed. One hyper connection serves the requests that pass, kept alive as the
//! client, hyper and the routes say.

use super::conn::{Routes, Serving, Waited, tracked, until};
use super::early;
use super::idle::Activity;
use super::message::{Message, Stop};
use super::wire::{HeadWait, Next, Wire};
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

/// Serves HTTP/1 on `wire`, whose first bytes arrived from `started` on.
pub(super) async fn serve<IO, S>(mut wire: Wire<IO>, mut serving: Serving<'_, S>, started: Instant)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Routes,
{
    let (peer, edge, timeout) = (serving.peer, serving.edge, serving.settings.header_timeout);
    let mut wait = HeadWait::default();
    let first = std::future::poll_fn(|cx| wire.poll_head(cx, &mut wait));
    let (len, framing) = match until(first, started + timeout, &mut serving.stop).await {
        // As hyper does: a first request whose head does not come in time gets 408.
        Waited::TimedOut => {
            return early::header_timeout(wire.io_mut(), peer, timeout, edge).await;
        }
        Waited::Stopped | Waited::Came(Next::Ended) => return,
        Waited::Came(Next::Refused(r)) => {
            return early::refuse(wire.io_mut(), &r, peer, edge, started).await;
        }
        Waited::Came(Next::Head { len, framing }) => (len, framing),
    };
    // A request that came after the stop is served alone: hyper's graceful shutdown would
    // close a connection it has not begun to read.
    let stopping = *serving.stop.borrow();
    let judged = Arc::new(AtomicUsize::new(0));
    let message = Message::new(wire, len, framing, timeout, Arc::clone(&judged));
    let activity = Activity::new(started);
    let trusted = Arc::clone(&serving.settings.trusted_proxies);
    let service = tracked(
        serving.service,
        peer,
        trusted,
        Arc::clone(&activity),
        Some(judged),
    );
    let mut conn = hyper::server::conn::http1::Builder::new()
        // The client may half-close after its request; its answer still goes out (D26).
        .half_close(true)
        // The header timeout is the early look's, for every request (`message.rs`).
        .header_read_timeout(None)
        .keep_alive(!stopping)
        .serve_connection(TokioIo::new(message), service);
    let mut closing = stopping;
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
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
    let (mut wire, stop) = conn.into_parts().io.into_inner().into_parts();
    match stop {
        Some(Stop::Refused(r, since)) => {
            return early::refuse(wire.io_mut(), &r, peer, edge, since).await;
        }
        // A later request begun and not finished in time gets 408; an idle kept connection
        // just closes (as hyper does).
        Some(Stop::TimedOut { begun: true }) => {
            return early::header_timeout(wire.io_mut(), peer, timeout, edge).await;
        }
        _ => {}
    }
    // hyper is done and has sent its last answer: with a body still on its way, closing now
    // would reset the connection and the client could lose that answer.
    if activity.lingers() {
        early::linger(wire.io_mut()).await;
    }
    let _ = wire.io_mut().shutdown().await;
}
