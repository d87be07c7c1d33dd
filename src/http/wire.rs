//! A connection's bytes, handed to hyper one judged HTTP/1 request at a time (D42).
//!
//! [`Wire`] holds the stream and what was read from it but not yet handed on; heads are read
//! and judged there ([`Wire::poll_head`], `head.rs`). hyper reads the connection through a
//! [`Message`]: a judged head, then its body as the head frames it (`Content-Length` bytes, or
//! a chunked body up to its end), and only then, when hyper asks for more, the next head,
//! once the early look has judged it. So hyper never parses a head the early look has not
//! judged, and one hyper connection (its buffers) serves every request of the connection. A
//! next head that is refused, does not arrive within the header timeout, or never comes ends
//! the stream for hyper, which closes without a word; `h1.rs` then answers as [`Stop`] says.

use super::chunked::Chunked;
use super::head::{self, Framing, Look, Refusal};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// How much is read from the stream at a time while a head is awaited.
const READ_CHUNK: usize = 16 * 1024;

/// How much of a body is read from the stream at a time at most.
const BODY_READ: usize = 64 * 1024;

/// The longest a head can grow before the early look decides it.
const LONGEST: usize = head::MAX_REQUEST_LINE + head::MAX_HEADER_BLOCK + 1;

/// A stream and the bytes read from it but not yet handed on: `buf[start..end]`. The buffer
/// stays initialised as it grows, so reading into it zeroes nothing.
pub struct Wire<IO> {
    io: IO,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

/// What a wait for a head found.
pub enum Next {
    /// A head that passed: its length and framing.
    Head {
        /// Bytes of the head, its blank line included.
        len: usize,
        /// How its body is framed.
        framing: Framing,
    },
    /// A head the early look refused.
    Refused(Refusal),
    /// The stream ended (or failed) before a complete head.
    Ended,
}

/// Where a wait for a head stands: the early look runs when a line has ended or the head has
/// just grown past a limit, not on every read, so a client sending a byte at a time costs at
/// most a look per line.
#[derive(Default)]
pub struct HeadWait {
    /// Pending bytes already searched for a line end.
    scanned: usize,
    /// Pending bytes at the last look.
    looked: usize,
}

impl<IO> Wire<IO> {
    /// Nothing read yet.
    pub fn new(io: IO) -> Self {
        Self {
            io,
            buf: Vec::new(),
            start: 0,
            end: 0,
        }
    }

    /// The bytes read and not yet handed on.
    pub fn pending(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Hands on the first `n` pending bytes.
    fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        }
    }

    /// Makes room for `n` more bytes behind the pending ones (which move to the front).
    fn make_room(&mut self, n: usize) {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        if self.buf.len() < self.end + n {
            self.buf.resize(self.end + n, 0);
        }
    }

    /// Keeps `bytes` behind the pending ones.
    fn keep(&mut self, bytes: &[u8]) {
        self.make_room(bytes.len());
        self.buf[self.end..self.end + bytes.len()].copy_from_slice(bytes);
        self.end += bytes.len();
    }

    /// The stream itself (pending bytes stay pending).
    pub fn io_mut(&mut self) -> &mut IO {
        &mut self.io
    }

    /// Reads more from the stream behind the pending bytes; `None` at the end of the stream.
    pub fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<usize>>>
    where
        IO: AsyncRead + Unpin,
    {
        self.make_room(READ_CHUNK);
        let mut into = ReadBuf::new(&mut self.buf[self.end..self.end + READ_CHUNK]);
        ready!(Pin::new(&mut self.io).poll_read(cx, &mut into))?;
        let n = into.filled().len();
        let before = self.end - self.start;
        self.end += n;
        Poll::Ready(Ok((n > 0).then_some(before)))
    }

    /// Reads until the pending bytes hold a complete head, or one to refuse.
    pub fn poll_head(&mut self, cx: &mut Context<'_>, wait: &mut HeadWait) -> Poll<Next>
    where
        IO: AsyncRead + Unpin,
    {
        loop {
            let pending = self.pending();
            let from = wait.scanned.min(pending.len());
            let line_ended = memchr::memchr(b'\n', &pending[from..]).is_some();
            let crossed = |limit| pending.len() >= limit && wait.looked < limit;
            if line_ended || crossed(head::MAX_REQUEST_LINE) || crossed(LONGEST) {
                wait.looked = pending.len();
                match head::look(pending) {
                    Look::Partial => {}
                    Look::Refused(r) => return Poll::Ready(Next::Refused(r)),
                    Look::Head(h) => {
                        return Poll::Ready(Next::Head {
                            len: h.len,
                            framing: h.framing,
                        });
                    }
                }
            }
            wait.scanned = pending.len();
            match ready!(self.poll_fill(cx)) {
                Ok(Some(at)) => wait.scanned = at,
                Ok(None) => return Poll::Ready(Next::Ended),
                Err(e) => {
                    tracing::debug!(error = %e, "connection failed while a request head arrived");
                    return Poll::Ready(Next::Ended);
                }
            }
        }
    }
}

/// Pending bytes first, then the stream (HTTP/2 is handed over whole).
impl<IO: AsyncRead + Unpin> AsyncRead for Wire<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let pending = this.pending();
        if pending.is_empty() {
            return Pin::new(&mut this.io).poll_read(cx, buf);
        }
        let n = pending.len().min(buf.remaining());
        buf.put_slice(&pending[..n]);
        this.consume(n);
        Poll::Ready(Ok(()))
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Wire<IO> {
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
            ready!(Pin::new(&mut wire.io).poll_read(cx, &mut into))?;
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
