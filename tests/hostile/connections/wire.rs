//! Raw clients for the connection tests: HTTP/1.1 requests on one kept socket, read one answer
//! at a time, and a minimal HTTP/2 client (frames by hand, HPACK literals without Huffman)
//! that can do what a well-behaved library would not.

use crate::common::{Reply, parse_raw};
use socket2::{Domain, SockAddr, Socket, Type};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// A TCP connection to `addr` from the loopback address `from` (127.0.0.2 is another client).
pub fn connect_from(from: [u8; 4], addr: SocketAddr) -> TcpStream {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    let local = SocketAddr::from((from, 0));
    socket.bind(&SockAddr::from(local)).unwrap();
    socket.connect(&SockAddr::from(addr)).unwrap();
    socket.into()
}

/// An HTTP/1.1 request with Host and Content-Length added.
pub fn request(method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Vec<u8> {
    let mut r = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    r.push_str("\r\n");
    r.push_str(body);
    r.into_bytes()
}

/// One client socket, read one answer at a time.
pub struct Http1 {
    pub sock: TcpStream,
    buf: Vec<u8>,
}

impl Http1 {
    pub fn new(sock: TcpStream) -> Self {
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Self {
            sock,
            buf: Vec::new(),
        }
    }

    pub fn open(addr: SocketAddr) -> Self {
        Self::new(TcpStream::connect(addr).unwrap())
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.sock.write_all(bytes).unwrap();
    }

    /// Sends, ignoring a connection the server already closed (the answer tells).
    pub fn try_send(&mut self, bytes: &[u8]) {
        let _ = self.sock.write_all(bytes);
    }

    /// The next answer (its head and its Content-Length body); panics when the connection
    /// ends first.
    pub fn answer(&mut self) -> Reply {
        self.try_answer().unwrap_or_else(|e| panic!("{e}"))
    }

    /// The next answer, or why there is none.
    pub fn try_answer(&mut self) -> Result<Reply, String> {
        let head_end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            self.fill("an answer head")?;
        };
        let head = parse_raw(&self.buf[..head_end]);
        let length: usize = head
            .header("content-length")
            .map_or(0, |v| v.parse().unwrap());
        while self.buf.len() < head_end + length {
            self.fill("an answer body")?;
        }
        let rest = self.buf.split_off(head_end + length);
        let answer = std::mem::replace(&mut self.buf, rest);
        Ok(parse_raw(&answer))
    }

    fn fill(&mut self, what: &str) -> Result<(), String> {
        let mut chunk = [0u8; 8192];
        match self.sock.read(&mut chunk) {
            Ok(0) => Err(format!(
                "connection closed before {what}: {:?}",
                self.text()
            )),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(())
            }
            Err(e) => Err(format!("no {what}: {e}; got {:?}", self.text())),
        }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.buf).into_owned()
    }

    /// Whether the server closes the connection within `within` with nothing more to say.
    pub fn closed_within(&mut self, within: Duration) -> bool {
        self.buf.is_empty() && closed_within(&mut self.sock, within)
    }
}

/// Whether the peer closes `sock` within `within` (any further bytes are dropped).
pub fn closed_within(sock: &mut TcpStream, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut chunk = [0u8; 8192];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        sock.set_read_timeout(Some(left)).unwrap();
        match sock.read(&mut chunk) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return true,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false;
            }
            Err(e) => panic!("{e}"),
        }
    }
}

/// Whether the server says something on `sock`, or closes it, within `within`.
pub fn readable(sock: &TcpStream, within: Duration) -> bool {
    sock.set_read_timeout(Some(within)).unwrap();
    let readable = match sock.peek(&mut [0u8; 1]) {
        Ok(_) => true,
        Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
    };
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    readable
}

/// Half-closes the sending side: the request is complete, nothing more will come.
pub fn half_close(sock: &TcpStream) {
    sock.shutdown(Shutdown::Write).unwrap();
}

// ---------------------------------------------------------------------------------------------
// HTTP/2

pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
pub const DATA: u8 = 0;
pub const HEADERS: u8 = 1;
pub const RST_STREAM: u8 = 3;
pub const SETTINGS: u8 = 4;
pub const GOAWAY: u8 = 7;
pub const END_STREAM: u8 = 1;
pub const END_HEADERS: u8 = 4;
pub const ACK: u8 = 1;
pub const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 3;
pub const SETTINGS_MAX_HEADER_LIST_SIZE: u16 = 6;
pub const REFUSED_STREAM: u32 = 7;

#[derive(Debug)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

impl Frame {
    /// The settings of a SETTINGS frame: (identifier, value).
    pub fn settings(&self) -> Vec<(u16, u32)> {
        self.payload
            .chunks(6)
            .map(|c| {
                (
                    u16::from_be_bytes([c[0], c[1]]),
                    u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
                )
            })
            .collect()
    }

    /// The error code of a RST_STREAM frame.
    pub fn error_code(&self) -> u32 {
        u32::from_be_bytes(self.payload[..4].try_into().unwrap())
    }
}

/// An HTTP/2 client connection over prior knowledge (plain TCP).
pub struct H2 {
    pub sock: TcpStream,
}

impl H2 {
    /// Sends the preface and an empty SETTINGS frame: all a client must send to hold a
    /// connection.
    /// A connection the server closed at once is no error here.
    pub fn preface(mut sock: TcpStream) -> Self {
        let settings = [0, 0, 0, SETTINGS, 0, 0, 0, 0, 0];
        let _ = sock.write_all(&[PREFACE, &settings[..]].concat());
        Self { sock }
    }

    pub fn frame(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
        let mut f = vec![len[1], len[2], len[3], kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        self.sock.write_all(&f).unwrap();
    }

    /// A POST's HEADERS on `stream` (the body follows in DATA frames).
    pub fn post_headers(&mut self, stream: u32, path: &str, headers: &[(&str, &str)]) {
        let mut block = Vec::new();
        let pseudo = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", "x"),
        ];
        for (name, value) in pseudo.iter().chain(headers) {
            literal(&mut block, &name.to_ascii_lowercase(), value);
        }
        self.frame(HEADERS, END_HEADERS, stream, &block);
    }

    /// The last DATA frame of `stream`'s body.
    pub fn body(&mut self, stream: u32, body: &[u8]) {
        self.frame(DATA, END_STREAM, stream, body);
    }

    /// The next frame, `None` when the server closed the connection; SETTINGS are
    /// acknowledged as they come.
    pub fn next(&mut self, within: Duration) -> Option<Frame> {
        self.sock.set_read_timeout(Some(within)).unwrap();
        let mut head = [0u8; 9];
        match self.sock.read_exact(&mut head) {
            Ok(()) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset
                ) =>
            {
                return None;
            }
            Err(e) => panic!("no frame within {within:?}: {e}"),
        }
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0u8; len];
        self.sock.read_exact(&mut payload).unwrap();
        let frame = Frame {
            kind: head[3],
            flags: head[4],
            stream: u32::from_be_bytes(head[5..9].try_into().unwrap()) & 0x7fff_ffff,
            payload,
        };
        if frame.kind == SETTINGS && frame.flags & ACK == 0 {
            self.frame(SETTINGS, ACK, 0, &[]);
        }
        Some(frame)
    }

    /// Frames until one matches, panicking if the connection ends or `within` passes first.
    pub fn until(&mut self, within: Duration, what: impl Fn(&Frame) -> bool) -> Frame {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left.max(Duration::from_millis(1))) {
                Some(f) if what(&f) => return f,
                Some(_) => {}
                None => panic!("connection closed first"),
            }
        }
    }

    /// The JSON body of `stream`'s answer (its DATA frames up to END_STREAM).
    pub fn answer_json(&mut self, stream: u32, within: Duration) -> serde_json::Value {
        let mut body = Vec::new();
        loop {
            let f = self.until(within, |f| f.stream == stream);
            assert_ne!(f.kind, RST_STREAM, "stream {stream} reset: {f:?}");
            if f.kind == DATA {
                body.extend_from_slice(&f.payload);
            }
            if f.flags & END_STREAM != 0 {
                return serde_json::from_slice(&body).unwrap();
            }
        }
    }

    /// Frames until the server closes the connection; `None` if it is still open after
    /// `within`.
    pub fn frames_until_closed(&mut self, within: Duration) -> Option<Vec<Frame>> {
        let deadline = Instant::now() + within;
        let mut frames = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            self.sock.set_read_timeout(Some(left)).unwrap();
            let mut first = [0u8; 1];
            match self.sock.peek(&mut first) {
                Ok(0) => return Some(frames),
                Ok(_) => frames.extend(self.next(left)),
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return Some(frames),
                Err(_) => return None,
            }
        }
    }
}

/// An HPACK "literal header field without indexing, new name", no Huffman coding.
pub fn literal(block: &mut Vec<u8>, name: &str, value: &str) {
    assert!(name.len() < 127 && value.len() < 127, "short strings only");
    block.push(0);
    block.push(name.len() as u8);
    block.extend_from_slice(name.as_bytes());
    block.push(value.len() as u8);
    block.extend_from_slice(value.as_bytes());
}

/// Reads the `:status` of the HEADERS frames of answers, as much of HPACK as that needs: the
/// static table's statuses, literals of the `:status` name (raw or Huffman digits) and the
/// dynamic table those literals fill.
#[derive(Default)]
pub struct Statuses {
    /// Statuses the server added to the dynamic table, the newest first.
    dynamic: Vec<u16>,
}

impl Statuses {
    /// The `:status` of an answer's HEADERS frame (END_HEADERS, no padding or priority).
    pub fn of(&mut self, frame: &Frame) -> u16 {
        assert_eq!(frame.kind, HEADERS, "{frame:?}");
        let block = &frame.payload;
        let first = block[0];
        if first & 0x80 != 0 {
            let index = usize::from(first & 0x7f);
            return match index {
                8..=14 => [200, 204, 206, 304, 400, 404, 500][index - 8],
                62.. => self.dynamic[index - 62],
                _ => panic!("not a status: {block:?}"),
            };
        }
        // A literal with the name `:status` (static index 8): indexed (0x48), not indexed
        // (0x08) or never indexed (0x18).
        assert!(matches!(first, 0x48 | 0x08 | 0x18), "{block:?}");
        let (huffman, len) = (block[1] & 0x80 != 0, usize::from(block[1] & 0x7f));
        let value = &block[2..2 + len];
        let text = if huffman {
            huffman_digits(value)
        } else {
            String::from_utf8(value.to_vec()).unwrap()
        };
        let status = text.parse().unwrap();
        if first == 0x48 {
            self.dynamic.insert(0, status);
        }
        status
    }
}

/// Decodes HPACK Huffman code (RFC 7541 appendix B) made only of digits: '0' to '2' have
/// 5-bit codes 00000 to 00010, '3' to '9' 6-bit codes 011001 to 011111; the rest is padding
/// of ones.
fn huffman_digits(bytes: &[u8]) -> String {
    let bits: Vec<u8> = bytes
        .iter()
        .flat_map(|b| (0..8).rev().map(move |i| (b >> i) & 1))
        .collect();
    let value = |bits: &[u8]| bits.iter().fold(0u8, |v, b| v << 1 | b);
    let mut text = String::new();
    let mut at = 0;
    while at + 5 <= bits.len() {
        let five = value(&bits[at..at + 5]);
        if five <= 2 {
            text.push(char::from(b'0' + five));
            at += 5;
        } else if at + 6 <= bits.len() && (25..=31).contains(&value(&bits[at..at + 6])) {
            text.push(char::from(b'3' + value(&bits[at..at + 6]) - 25));
            at += 6;
        } else {
            break; // padding
        }
    }
    assert!(bits[at..].iter().all(|b| *b == 1), "not digits: {bytes:?}");
    text
}
