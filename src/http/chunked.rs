//! Where a chunked body ends (RFC 9112 section 7.1), found byte by byte with the state machine
//! of hyper's decoder (`proto/h1/decode.rs`, hyper 1.x), so the connection knows where the
//! next head starts and judges it before hyper reads it (`message.rs`). Decoding stays hyper's:
//! this only counts. Where hyper would refuse a byte, so does this, and the connection ends
//! there.

/// hyper's bound on chunk extension bytes in one body.
const EXTENSIONS_LIMIT: u64 = 16 * 1024;

/// Follows one chunked body.
#[derive(Debug, Clone)]
pub struct Chunked {
    state: State,
    size: u64,
    extensions: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Start,
    Size,
    SizeLws,
    Extension,
    SizeLf,
    Body,
    BodyCr,
    BodyLf,
    Trailer,
    TrailerLf,
    EndCr,
    EndLf,
    /// The body ended.
    End,
    /// A byte hyper refuses: the body ends there, in error.
    Invalid,
}

impl Default for Chunked {
    fn default() -> Self {
        Self {
            state: State::Start,
            size: 0,
            extensions: 0,
        }
    }
}

impl Chunked {
    /// Whether the body has ended (or broken off at a byte hyper refuses).
    pub fn done(&self) -> bool {
        matches!(self.state, State::End | State::Invalid)
    }

    /// Whether the body ended as hyper would accept it.
    pub fn complete(&self) -> bool {
        self.state == State::End
    }

    /// Takes the next bytes of the stream; returns how many of them belong to the body (all
    /// of them unless it ends among them).
    pub fn feed(&mut self, bytes: &[u8]) -> usize {
        let mut i = 0;
        while i < bytes.len() && !self.done() {
            if self.state == State::Body {
                let left = usize::try_from(self.size).unwrap_or(usize::MAX);
                let n = left.min(bytes.len() - i);
                i += n;
                self.size -= n as u64;
                if self.size == 0 {
                    self.state = State::BodyCr;
                }
                continue;
            }
            self.state = self.step(bytes[i]);
            i += 1;
        }
        i
    }

    fn step(&mut self, b: u8) -> State {
        use State::*;
        let hex = |b: u8| char::from(b).to_digit(16).map(u64::from);
        match (self.state, b) {
            (Start, b) => match hex(b) {
                Some(d) => {
                    self.size = d;
                    Size
                }
                None => Invalid,
            },
            (Size, b) if hex(b).is_some() => {
                let grown = self.size.checked_mul(16).zip(hex(b));
                match grown.and_then(|(s, d)| s.checked_add(d)) {
                    Some(size) => {
                        self.size = size;
                        Size
                    }
                    None => Invalid,
                }
            }
            (Size | SizeLws, b'\t' | b' ') => SizeLws,
            (Size | SizeLws, b';') => Extension,
            (Size | SizeLws | Extension, b'\r') => SizeLf,
            (Extension, b'\n') => Invalid,
            (Extension, _) => {
                self.extensions += 1;
                if self.extensions >= EXTENSIONS_LIMIT {
                    Invalid
                } else {
                    Extension
                }
            }
            (SizeLf, b'\n') if self.size == 0 => EndCr,
            (SizeLf, b'\n') => Body,
            (BodyCr, b'\r') => BodyLf,
            (BodyLf, b'\n') => Start,
            (Trailer, b'\r') => TrailerLf,
            (Trailer, _) => Trailer,
            (TrailerLf, b'\n') => EndCr,
            (EndCr, b'\r') => EndLf,
            (EndCr, _) => Trailer,
            (EndLf, b'\n') => End,
            (End, _) => End,
            _ => Invalid,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end_of(stream: &[u8]) -> (usize, bool) {
        let mut c = Chunked::default();
        let n = c.feed(stream);
        (n, c.complete())
    }

    #[test]
    fn a_body_ends_after_its_last_chunk_and_trailers() {
        let body = b"5\r\nhello\r\nA;ext=1\r\n0123456789\r\n0\r\n\r\n";
        let mut stream = body.to_vec();
        stream.extend_from_slice(b"GET / HTTP/1.1\r\n");
        assert_eq!(end_of(&stream), (body.len(), true));
        let trailers = b"3 \r\nabc\r\n0\r\nx-t: 1\r\ny: 2\r\n\r\n";
        assert_eq!(
            end_of(&[&trailers[..], b"next"].concat()),
            (trailers.len(), true)
        );
    }

    #[test]
    fn byte_by_byte_is_the_same_as_at_once() {
        let body = b"1f\r\n0123456789012345678901234567890\r\n0\r\n\r\nrest";
        let mut c = Chunked::default();
        let mut taken = 0;
        for b in body {
            taken += c.feed(std::slice::from_ref(b));
        }
        assert_eq!(taken, body.len() - 4);
        assert!(c.complete());
    }

    #[test]
    fn what_hyper_refuses_ends_the_body_there() {
        for bad in [
            &b"x\r\n"[..],
            b"5\nhello",
            b"5\r\nhelloX\r\n",
            b"0\r\n\r\r",
            b"5;a\nb\r\n",
            b"fffffffffffffffff\r\n",
        ] {
            let mut c = Chunked::default();
            let n = c.feed(bad);
            assert!(c.done() && !c.complete(), "{bad:?}");
            assert!(n <= bad.len(), "{bad:?}");
        }
    }
}
