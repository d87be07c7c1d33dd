//! A connection's bytes, handed to hyper one judged HTTP/1 request at a time (D42).
//!
//! [`Wire`] holds the stream and what was read from it but not yet handed on; heads are read
//! and judged there ([`Wire::poll_head`], `head.rs`). hyper reads the connection through a
//! `Message` (`message.rs`): a judged head, then its body as the head frames it (`Content-Length` bytes, or
//! a chunked body up to its end), and only then, when hyper asks for more, the next head,
//! once the early look has judged it. So hyper never parses a head the early look has not
//! judged, and one hyper connection (its buffers) serves every request of the connection. A
//! next head that is refused, does not arrive within the header timeout, or never comes ends
//! the stream for hyper, which closes without a word; `h1.rs` then answers as `Stop` says.

use super::head::{self, Framing, Look, Refusal};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How much is read from the stream at a time while a head is awaited.
const READ_CHUNK: usize = 16 * 1024;

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
    pub(super) fn consume(&mut self, n: usize) {
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
    pub(super) fn keep(&mut self, bytes: &[u8]) {
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
