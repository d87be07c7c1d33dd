//! The connection as hyper reads it on HTTP/1 (D42): a judged head, its body as the head
//! frames it, then, when hyper asks for more, the next head once the early look has judged it
//! (`wire.rs`). A next head that is refused, late or missing ends the stream for hyper.

use super::chunked::Chunked;
use super::head::{Framing, Refusal};
use super::wire::{HeadWait, Next, Wire};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// How much of a body is read from the stream at a time at most.
const BODY_READ: usize = 64 * 1024;

/// Why the stream ended for hyper before the connection did.
pub enum Stop {
    /// The next head was refused; it began at that instant.
    Refused(Refusal, Instant),
    /// No complete head within the header timeout; `begun` when some of it had arrived.
    TimedOut {
        /// Whether bytes of a head had arrived.
        begun: bool,
    },
    /// The stream ended, or a body broke off where hyper refuses it.
    Ended,
}

/// The connection as hyper reads it: judged requests, one after another.
pub struct Message<IO> {
    wire: Wire<IO>,
    phase: Phase,
    header_timeout: Duration,
    timer: Pin<Box<Sleep>>,
    /// Heads judged and handed on, for the routes' wrapper to check against.
    judged: Arc<AtomicUsize>,
    stop: Option<Stop>,
}

enum Phase {
    /// Bytes of a judged head still to hand on, then its body.
    Head(usize, Body),
    Body(Body),
    /// The next head, awaited since an instant.
    Awaiting(HeadWait, Instant),
}

enum Body {
    /// Bytes left of a `Content-Length` body (0: none).
    Length(u64),
    Chunked(Chunked),
}

impl Body {
    fn of(framing: Framing) -> Self {
        match framing {
            Framing::Empty => Body::Length(0),
            Framing::Length(n) => Body::Length(n),
            Framing::Chunked => Body::Chunked(Chunked::default()),
        }
    }

    fn ended(&self) -> bool {
        match self {
            Body::Length(left) => *left == 0,
            Body::Chunked(c) => c.done(),
        }
    }

    /// How many of `bytes`, the next ones of the body, belong to it.
    fn take(&mut self, bytes: &[u8]) -> usize {
        match self {
            Body::Length(left) => {
                let n = usize::try_from(*left)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                *left -= n as u64;
                n
            }
            Body::Chunked(c) => c.feed(bytes),
        }
    }
}

impl<IO> Message<IO> {
    /// The connection whose first head, judged, is the first `head` pending bytes of `wire`;
    /// `judged` counts it and every head after it.
    pub fn new(
        wire: Wire<IO>,
        head: usize,
        framing: Framing,
        header_timeout: Duration,
        judged: Arc<AtomicUsize>,
    ) -> Self {
        judged.fetch_add(1, Ordering::Relaxed);
        Self {
            wire,
            phase: Phase::Head(head, Body::of(framing)),
            header_timeout,
            timer: Box::pin(tokio::time::sleep(header_timeout)),
            judged,
            stop: None,
        }
    }

    /// The wire back, and why the stream ended for hyper, if it ended before the connection.
    pub fn into_parts(self) -> (Wire<IO>, Option<Stop>) {
        (self.wire, self.stop)
    }
}

impl<IO: AsyncRead + Unpin> Message<IO> {
    /// Hands on body bytes, from the pending ones or straight from the stream into hyper's
    /// buffer; what follows the request is kept in the wire.
    fn read_body(
        wire: &mut Wire<IO>,
        body: &mut Body,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !wire.pending().is_empty() {
            let room = buf.remaining().min(wire.pending().len());
            let offered = &wire.pending()[..room];
            let n = body.take(offered);
            buf.put_slice(&offered[..n]);
            wire.consume(n);
            return Poll::Ready(Ok(()));
        }
        // The part of hyper's buffer read into is zeroed first (safe code cannot read into
        // uninitialised memory), so a read takes at most [`BODY_READ`].
        let room = match body {
            Body::Length(left) => usize::try_from(*left).unwrap_or(usize::MAX),
            Body::Chunked(_) => usize::MAX,
        }
        .min(buf.remaining())
        .min(BODY_READ);
        let read = {
            let mut into = ReadBuf::new(buf.initialize_unfilled_to(room));
            ready!(Pin::new(wire.io_mut()).poll_read(cx, &mut into))?;
            into.filled().len()
        };
        let got = &buf.initialize_unfilled_to(room)[..read];
        let n = body.take(got);
        wire.keep(&got[n..]);
        buf.advance(n);
        Poll::Ready(Ok(()))
    }

    /// The next head, judged; `None` when the stream ends for hyper (see `self.stop`).
    fn poll_next_head(&mut self, cx: &mut Context<'_>) -> Poll<Option<(usize, Body)>> {
        let Phase::Awaiting(wait, since) = &mut self.phase else {
            return Poll::Ready(None);
        };
        let since = *since;
        match self.wire.poll_head(cx, wait) {
            Poll::Ready(Next::Head { len, framing }) => {
                self.judged.fetch_add(1, Ordering::Relaxed);
                return Poll::Ready(Some((len, Body::of(framing))));
            }
            Poll::Ready(Next::Refused(r)) => self.stop = Some(Stop::Refused(r, since)),
            Poll::Ready(Next::Ended) => self.stop = Some(Stop::Ended),
            Poll::Pending => {
                ready!(self.timer.as_mut().poll(cx));
                let begun = !self.wire.pending().trim_ascii_start().is_empty();
                self.stop = Some(Stop::TimedOut { begun });
            }
        }
        Poll::Ready(None)
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Message<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.stop.is_some() || buf.remaining() == 0 {
                return Poll::Ready(Ok(())); // the end of the stream, for hyper
            }
            match &mut this.phase {
                Phase::Head(left, _) if *left > 0 => {
                    let pending = this.wire.pending();
                    let n = (*left).min(pending.len()).min(buf.remaining());
                    buf.put_slice(&pending[..n]);
                    this.wire.consume(n);
                    *left -= n;
                    return Poll::Ready(Ok(()));
                }
                Phase::Head(_, body) => {
                    let body = std::mem::replace(body, Body::Length(0));
                    this.phase = Phase::Body(body);
                }
                Phase::Body(body) if !body.ended() => {
                    return Self::read_body(&mut this.wire, body, cx, buf);
                }
                Phase::Body(Body::Chunked(c)) if !c.complete() => {
                    // A byte hyper refuses: nothing after it can be told apart.
                    this.stop = Some(Stop::Ended);
                }
                Phase::Body(_) => {
                    // hyper asks for more once it has answered: the next request's head.
                    let now = Instant::now();
                    this.timer.as_mut().reset(now + this.header_timeout);
                    this.phase = Phase::Awaiting(HeadWait::default(), now);
                }
                Phase::Awaiting(..) => match ready!(this.poll_next_head(cx)) {
                    Some((len, body)) => this.phase = Phase::Head(len, body),
                    None => return Poll::Ready(Ok(())),
                },
            }
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Message<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().wire).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().wire).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().wire).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().wire).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.wire.is_write_vectored()
    }
}
