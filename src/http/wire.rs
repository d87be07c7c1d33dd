//! A connection's bytes, handed to hyper one HTTP/1 request at a time (D42).
//!
//! [`Wire`] holds the stream and what was read from it but not yet handed on. A request's head
//! is read and judged there (`head.rs`); hyper then gets a [`Message`]: that head, then its
//! body as the head frames it (`Content-Length` bytes, or a chunked body up to its end), then
//! end of stream. So hyper never parses a head the early look has not judged, and the bytes
//! after the request stay in the `Wire` for the next early look. With hyper's half-close
//! setting, that end of stream is what a client that half-closed after its request sends:
//! hyper answers and hands the stream back.

use super::chunked::Chunked;
use super::head::Framing;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

/// How much is read from the stream at a time while a head is awaited.
const READ_CHUNK: usize = 16 * 1024;

/// How much of a body is read from the stream at a time at most.
const BODY_READ: usize = 64 * 1024;

/// A stream and the bytes read from it but not yet handed on.
pub struct Wire<IO> {
    io: IO,
    buf: Vec<u8>,
    start: usize,
}

impl<IO> Wire<IO> {
    /// Nothing read yet.
    pub fn new(io: IO) -> Self {
        Self {
            io,
            buf: Vec::new(),
            start: 0,
        }
    }

    /// The bytes read and not yet handed on.
    pub fn pending(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// Hands on the first `n` pending bytes.
    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start >= self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
    }

    /// The stream itself (pending bytes stay pending).
    pub fn io_mut(&mut self) -> &mut IO {
        &mut self.io
    }

    /// Reads more from the stream; the new bytes are the pending ones from the returned
    /// offset on; `None` at the end of the stream.
    pub async fn fill(&mut self) -> io::Result<Option<usize>>
    where
        IO: AsyncRead + Unpin,
    {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        let before = self.buf.len();
        self.buf.reserve(READ_CHUNK);
        match self.io.read_buf(&mut self.buf).await? {
            0 => Ok(None),
            _ => Ok(Some(before)),
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

/// One request as hyper reads it: its head (pending in the wire), its body, then the end.
pub struct Message<IO> {
    wire: Wire<IO>,
    head: usize,
    body: Body,
}

enum Body {
    /// Bytes left of a `Content-Length` body (0: none).
    Length(u64),
    Chunked(Chunked),
}

impl<IO> Message<IO> {
    /// The request whose head is the first `head` pending bytes of `wire`.
    pub fn new(wire: Wire<IO>, head: usize, framing: Framing) -> Self {
        let body = match framing {
            Framing::Empty => Body::Length(0),
            Framing::Length(n) => Body::Length(n),
            Framing::Chunked => Body::Chunked(Chunked::default()),
        };
        Self { wire, head, body }
    }

    /// Whether hyper has been given the whole request, well framed (so the next pending byte
    /// starts the next request).
    pub fn complete(&self) -> bool {
        self.head == 0
            && match &self.body {
                Body::Length(left) => *left == 0,
                Body::Chunked(c) => c.complete(),
            }
    }

    fn ended(&self) -> bool {
        match &self.body {
            Body::Length(left) => *left == 0,
            Body::Chunked(c) => c.done(),
        }
    }

    /// The wire back, with what follows the request pending.
    pub fn into_wire(self) -> Wire<IO> {
        self.wire
    }
}

/// How many of `bytes`, the next ones of `body`, belong to it.
fn take(body: &mut Body, bytes: &[u8]) -> usize {
    match body {
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

impl<IO: AsyncRead + Unpin> AsyncRead for Message<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.head > 0 {
            let pending = this.wire.pending();
            let n = this.head.min(pending.len()).min(buf.remaining());
            buf.put_slice(&pending[..n]);
            this.wire.consume(n);
            this.head -= n;
            return Poll::Ready(Ok(()));
        }
        if this.ended() || buf.remaining() == 0 {
            return Poll::Ready(Ok(())); // the end of this request
        }
        if !this.wire.pending().is_empty() {
            let room = buf.remaining().min(this.wire.pending().len());
            let offered = &this.wire.buf[this.wire.start..this.wire.start + room];
            let n = take(&mut this.body, offered);
            buf.put_slice(&offered[..n]);
            this.wire.consume(n);
            return Poll::Ready(Ok(()));
        }
        // Straight from the stream into hyper's buffer; what follows the request is kept. The
        // part of hyper's buffer read into is zeroed first (safe code cannot read into
        // uninitialised memory), so a read takes at most [`BODY_READ`].
        let room = match &this.body {
            Body::Length(left) => usize::try_from(*left).unwrap_or(usize::MAX),
            Body::Chunked(_) => usize::MAX,
        }
        .min(buf.remaining())
        .min(BODY_READ);
        let read = {
            let dst = buf.initialize_unfilled_to(room);
            let mut into = ReadBuf::new(dst);
            match Pin::new(&mut this.wire.io).poll_read(cx, &mut into) {
                Poll::Ready(Ok(())) => into.filled().len(),
                other => return other,
            }
        };
        let got = &buf.initialize_unfilled_to(room)[..read];
        let n = take(&mut this.body, got);
        this.wire.buf.extend_from_slice(&got[n..]);
        buf.advance(n);
        Poll::Ready(Ok(()))
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
