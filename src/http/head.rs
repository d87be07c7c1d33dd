//! The early look at an HTTP/1.1 request head (D42): where it ends and what it declares, read
//! with httparse exactly as hyper reads it (the same parser, settings and field limit), then
//! held to RFC 9112 more strictly than hyper does. Every HTTP/1 request on a connection passes
//! here before hyper sees it (`conn.rs`), so a head refused here never reaches hyper.
//!
//! The verdict depends on the bytes only, never on how they were split into reads: a head is
//! judged on at most its first [`MAX_REQUEST_LINE`] bytes of request line and
//! [`MAX_HEADER_BLOCK`] bytes of fields, whatever follows.

use http::StatusCode;

/// The longest request line accepted, its line end included (longer: 414).
pub const MAX_REQUEST_LINE: usize = 8 * 1024;
/// The largest block of header fields accepted, the blank line included (larger: 431).
pub const MAX_HEADER_BLOCK: usize = 64 * 1024;
/// The most header fields accepted (more: 431); hyper's own limit, so both agree.
pub const MAX_FIELDS: usize = 100;

/// How a request's body is framed (RFC 9112 section 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    Empty,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// A complete head that passed.
#[derive(Debug)]
pub struct Head<'a> {
    /// Its length in the buffer, leading empty lines and the closing blank line included.
    pub len: usize,
    /// The method.
    pub method: &'a str,
    /// The request target.
    pub target: &'a str,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub version: u8,
    /// How the body is framed.
    pub framing: Framing,
    /// The values of its `Host` fields (at most one gets here).
    pub hosts: Vec<&'a [u8]>,
    /// Whether the connection may serve another request after this one (as hyper decides:
    /// HTTP/1.1 unless `Connection: close`, HTTP/1.0 only with `Connection: keep-alive`).
    pub keep_alive: bool,
    /// The client's `x-request-id`, when it is a sane one (D4).
    pub request_id: Option<&'a str>,
}

/// A head refused before hyper sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// 400, 414, 431 or 501.
    pub status: StatusCode,
    /// The failure body's message (D5).
    pub message: String,
    /// Why, in a few fixed words (for the log: nothing the client wrote).
    pub reason: &'static str,
    /// The client's `x-request-id`, when the head could be read that far.
    pub request_id: Option<String>,
    /// The request's path, when it could be read that far.
    pub path: Option<String>,
}

/// The early look's verdict on the bytes received so far.
#[derive(Debug)]
pub enum Look<'a> {
    /// The head is not complete yet, and nothing is wrong with it so far.
    Partial,
    /// A complete head that hyper may serve.
    Head(Head<'a>),
    /// A head that is refused.
    Refused(Refusal),
}

/// Looks at the start of `buf`, where a request head starts.
pub fn look(buf: &[u8]) -> Look<'_> {
    // Leading empty lines (RFC 9112 section 2.2) count towards the request line's limit.
    let blank = buf
        .iter()
        .position(|b| !matches!(b, b'\r' | b'\n'))
        .unwrap_or(buf.len());
    let line_end = memchr::memchr(b'\n', &buf[blank..]).map(|i| blank + i);
    let line_limit = MAX_REQUEST_LINE.min(buf.len());
    let (limit, over) = match line_end {
        Some(i) if i < MAX_REQUEST_LINE => {
            let limit = i + 1 + MAX_HEADER_BLOCK;
            (limit.min(buf.len()), buf.len() >= limit)
        }
        _ => (line_limit, buf.len() >= MAX_REQUEST_LINE),
    };
    let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let mut req = httparse::Request::new(&mut fields);
    match req.parse(&buf[..limit]) {
        Ok(httparse::Status::Complete(len)) => judge(&req, len),
        Ok(httparse::Status::Partial) if !over => Look::Partial,
        Ok(httparse::Status::Partial) if line_end.is_none_or(|i| i >= MAX_REQUEST_LINE) => refuse(
            StatusCode::URI_TOO_LONG,
            "request line too long",
            format!("the request line is longer than {MAX_REQUEST_LINE} bytes"),
        ),
        Ok(httparse::Status::Partial) => refuse(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "header block too large",
            format!("the request's header fields are larger than {MAX_HEADER_BLOCK} bytes"),
        ),
        Err(httparse::Error::TooManyHeaders) => refuse(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "too many header fields",
            format!("the request has more than {MAX_FIELDS} header fields"),
        ),
        Err(e) => refuse(
            StatusCode::BAD_REQUEST,
            "malformed head",
            format!("the request head is not valid HTTP/1.1: {e}"),
        ),
    }
}

fn refuse(status: StatusCode, reason: &'static str, message: String) -> Look<'static> {
    Look::Refused(Refusal {
        status,
        message,
        reason,
        request_id: None,
        path: None,
    })
}

/// What a complete head declares, held to RFC 9112 (D42) and D25.
fn judge<'a>(req: &httparse::Request<'_, 'a>, len: usize) -> Look<'a> {
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "malformed head",
            "the request head is not valid HTTP/1.1".into(),
        );
    };
    let fields = &*req.headers;
    let named = |name: &'static str| {
        fields
            .iter()
            .filter(move |f| f.name.eq_ignore_ascii_case(name))
            .map(|f| f.value)
    };
    let request_id = named("x-request-id")
        .next()
        .and_then(|v| std::str::from_utf8(v).ok())
        .filter(|v| super::RequestIds::is_id(v));
    let path = target.split('?').next().unwrap_or_default();
    let bad = |status: StatusCode, reason: &'static str, message: String| {
        Look::Refused(Refusal {
            status,
            message,
            reason,
            request_id: request_id.map(str::to_string),
            path: Some(path.chars().take(200).collect()),
        })
    };
    let hosts: Vec<&[u8]> = named("host").collect();
    if hosts.len() > 1 || (hosts.is_empty() && version == 1) {
        let message = match hosts.len() {
            0 => "the request has no Host header".to_string(),
            n => format!("the request has {n} Host headers; send one"),
        };
        return bad(StatusCode::BAD_REQUEST, "Host header count", message);
    }
    if http::Uri::try_from(target).is_err() {
        let message = "the request target is not a valid URI".to_string();
        return bad(StatusCode::BAD_REQUEST, "invalid target", message);
    }
    let framing = match framing(named("content-length"), named("transfer-encoding"), version) {
        Ok(f) => f,
        Err((status, reason, message)) => return bad(status, reason, message),
    };
    let said = |token: &str| {
        named("connection").any(|v| {
            v.split(|&b| b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
        })
    };
    let keep_alive = !said("close") && (version == 1 || said("keep-alive"));
    Look::Head(Head {
        len,
        method,
        target,
        version,
        framing,
        hosts,
        keep_alive,
        request_id,
    })
}

type Why = (StatusCode, &'static str, String);

/// The body's framing from its `Content-Length` and `Transfer-Encoding` fields.
fn framing<'a>(
    lengths: impl Iterator<Item = &'a [u8]>,
    codings: impl Iterator<Item = &'a [u8]> + Clone,
    version: u8,
) -> Result<Framing, Why> {
    let bad = |reason: &'static str, message: String| (StatusCode::BAD_REQUEST, reason, message);
    let mut lengths = lengths.peekable();
    if lengths.peek().is_some() && codings.clone().next().is_some() {
        // Whatever the values: hyper would read the body by one and drop the other.
        return Err(bad(
            "Content-Length with Transfer-Encoding",
            "the request has both Content-Length and Transfer-Encoding; send one".into(),
        ));
    }
    let mut length = None;
    for value in lengths {
        let Some(n) = digits(value) else {
            let shown: String = String::from_utf8_lossy(value).chars().take(40).collect();
            return Err(bad(
                "invalid Content-Length",
                format!("Content-Length {shown:?} is not a number of bytes"),
            ));
        };
        if length.is_some_and(|l| l != n) {
            return Err(bad(
                "two Content-Length values",
                "the request has two different Content-Length values".into(),
            ));
        }
        length = Some(n);
    }
    if codings.clone().next().is_none() {
        return Ok(length.map_or(Framing::Empty, Framing::Length));
    }
    if version == 0 {
        return Err(bad(
            "Transfer-Encoding in HTTP/1.0",
            "HTTP/1.0 has no Transfer-Encoding; send Content-Length".into(),
        ));
    }
    // hyper reads only the last coding of the last line: an empty one there is no `chunked`.
    let ends_empty = codings
        .clone()
        .last()
        .and_then(|v| v.rsplit(|&b| b == b',').next())
        .is_none_or(|c| c.trim_ascii().is_empty());
    let mut any = false;
    for coding in codings.flat_map(|v| v.split(|&b| b == b',')) {
        let coding = coding.trim_ascii();
        if coding.is_empty() {
            continue;
        }
        any = true;
        if !coding.eq_ignore_ascii_case(b"chunked") {
            // D25: a transfer coding other than chunked.
            let shown: String = String::from_utf8_lossy(coding).chars().take(40).collect();
            return Err((
                StatusCode::NOT_IMPLEMENTED,
                "transfer coding",
                format!("transfer encoding {shown} is not supported (supported: chunked)"),
            ));
        }
    }
    if !any {
        return Err(bad(
            "empty Transfer-Encoding",
            "the request's Transfer-Encoding names no coding".into(),
        ));
    }
    if ends_empty {
        return Err(bad(
            "empty Transfer-Encoding",
            "the request's Transfer-Encoding ends without a coding; end it with chunked".into(),
        ));
    }
    Ok(Framing::Chunked)
}

/// A `Content-Length` value as hyper reads it: digits only, at most hyper's largest length.
fn digits(value: &[u8]) -> Option<u64> {
    if value.is_empty() {
        return None;
    }
    let mut n = 0u64;
    for &b in value {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    // hyper keeps the two largest values for its own markers.
    (n <= u64::MAX - 2).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(buf: &[u8]) -> Option<u16> {
        match look(buf) {
            Look::Refused(r) => Some(r.status.as_u16()),
            _ => None,
        }
    }

    #[test]
    fn a_head_ends_at_its_blank_line_whatever_its_line_ends() {
        for head in [
            &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
            b"GET / HTTP/1.1\nHost: x\n\n",
            b"\r\n\nGET / HTTP/1.1\r\nHost: x\n\r\n",
        ] {
            let mut buf = head.to_vec();
            buf.extend_from_slice(b"body");
            match look(&buf) {
                Look::Head(h) => assert_eq!(h.len, head.len(), "{head:?}"),
                other => panic!("{head:?}: {other:?}"),
            }
        }
        assert!(matches!(
            look(b"GET / HTTP/1.1\r\nHost: x\r\n"),
            Look::Partial
        ));
    }

    #[test]
    fn limits_are_judged_on_the_first_bytes_only_d42() {
        let line = format!(
            "GET /{} HTTP/1.1\r\nHost: x\r\n\r\n",
            "a".repeat(MAX_REQUEST_LINE)
        );
        assert_eq!(status(line.as_bytes()), Some(414));
        assert_eq!(status(&line.as_bytes()[..MAX_REQUEST_LINE]), Some(414));
        assert_eq!(status(&line.as_bytes()[..MAX_REQUEST_LINE - 1]), None);
        let blank = [
            &b"\r\n".repeat(MAX_REQUEST_LINE / 2)[..],
            b"GET / HTTP/1.1\r\n",
        ]
        .concat();
        assert_eq!(
            status(&blank),
            Some(414),
            "empty lines count towards the line"
        );
        let field = format!(
            "GET / HTTP/1.1\r\nx: {}\r\n\r\n",
            "a".repeat(MAX_HEADER_BLOCK)
        );
        assert_eq!(status(field.as_bytes()), Some(431));
        // A byte httparse refuses within the limits decides, however much follows.
        let early = format!(
            "GET / HTTP/1.1\r\nx : 1\r\ny: {}\r\n\r\n",
            "a".repeat(MAX_HEADER_BLOCK)
        );
        assert_eq!(status(early.as_bytes()), Some(400));
        assert_eq!(status(&early.as_bytes()[..40]), Some(400));
    }

    #[test]
    fn transfer_encoding_must_end_with_chunked_as_hyper_reads_it() {
        let te = |lines: &str| format!("POST / HTTP/1.1\r\nHost: x\r\n{lines}\r\n");
        for refused in [
            "Transfer-Encoding: chunked,\r\n",
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: \r\n",
            "Transfer-Encoding: ,\r\n",
        ] {
            assert_eq!(status(te(refused).as_bytes()), Some(400), "{refused:?}");
        }
        for served in [
            "Transfer-Encoding: , chunked\r\n",
            "Transfer-Encoding: \r\nTransfer-Encoding: chunked\r\n",
        ] {
            assert_eq!(status(te(served).as_bytes()), None, "{served:?}");
        }
    }
}
