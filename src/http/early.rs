//! Answers written on a connection before hyper takes it over: 408 when the first request's
//! head does not arrive in time, 501 when it declares a transfer coding other than chunked
//! (D25), which hyper would refuse with a bare 400. Both close the connection.

use super::App;
use super::reply;
use crate::interfaces;
use http::header::TRANSFER_ENCODING;
use http::{HeaderMap, HeaderName, HeaderValue};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

/// After a refusal the client may still be sending its body; reading and dropping it for a
/// while lets the connection close cleanly instead of being reset, which makes a client that
/// sends its whole body before reading lose the answer (D26). As nginx's lingering close:
/// at most this long in all ...
const LINGER_TIME: Duration = Duration::from_secs(5);
/// ... at most this long without a byte ...
const LINGER_GAP: Duration = Duration::from_secs(1);
/// ... and at most this many bytes.
const LINGER_BYTES: usize = 64 << 20;

/// 408: the first request's head did not arrive within `timeout`.
pub async fn header_timeout<IO>(io: &mut IO, peer: SocketAddr, timeout: Duration, app: &App)
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let request_id = app.request_ids.fresh();
    let message = format!(
        "the request headers were not received within {} seconds",
        timeout.as_secs()
    );
    write_and_close(io, "408 Request Timeout", &message, &request_id).await;
    if app.request_log.answered(408) {
        tracing::info!(request_id, %peer, status = 408, "request headers timed out");
    }
}

/// The first request, refused for its transfer coding.
pub struct Refusal {
    request_id: String,
    interface: &'static str,
    message: String,
    started: Instant,
}

/// The refusal of the first request in `head` when its `Transfer-Encoding` names a coding
/// other than `chunked` (D25); `None` for anything else, HTTP/2 included.
pub fn unsupported_coding(head: &[u8], started: Instant, app: &App) -> Option<Refusal> {
    let end = memchr::memmem::find(head, b"\r\n\r\n")?;
    let mut lines = head[..end].split(|&b| b == b'\n');
    let request_line = lines.next()?;
    let headers = parse_headers(lines);
    let coding = headers
        .get_all(TRANSFER_ENCODING)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .find(|c| !c.is_empty() && !c.eq_ignore_ascii_case(b"chunked"))?;
    let path = request_line
        .split(|&b| b == b' ')
        .nth(1)
        .and_then(|t| t.split(|&b| b == b'?').next())
        .and_then(|p| std::str::from_utf8(p).ok())
        .unwrap_or_default();
    Some(Refusal {
        request_id: app.request_ids.for_request(&headers),
        interface: interfaces::by_path(path).map_or("-", |i| i.id),
        message: format!(
            "transfer encoding {} is not supported (supported: chunked)",
            String::from_utf8_lossy(coding)
        ),
        started,
    })
}

/// Header lines as a map; lines that are no valid header are skipped (hyper would refuse
/// them, but the transfer coding decides first).
fn parse_headers<'a>(lines: impl Iterator<Item = &'a [u8]>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for line in lines {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let name = HeaderName::from_bytes(line[..colon].trim_ascii());
        let value = HeaderValue::from_bytes(line[colon + 1..].trim_ascii());
        if let (Ok(name), Ok(value)) = (name, value) {
            headers.append(name, value);
        }
    }
    headers
}

impl Refusal {
    /// Answers 501 and closes, logged and counted like any request.
    pub async fn answer<IO>(self, io: &mut IO, peer: SocketAddr, app: &App)
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let Self {
            request_id,
            interface,
            message,
            started,
        } = self;
        write_and_close(io, "501 Not Implemented", &message, &request_id).await;
        linger(io).await;
        let elapsed = started.elapsed().as_secs_f64();
        app.metrics.request(interface, 501, 0, 0, elapsed);
        if app.request_log.answered(501) {
            let latency_ms = format_args!("{:.3}", elapsed * 1000.0);
            tracing::info!(request_id, %peer, key = "-", interface, status = 501, accepted = 0,
                failed = 0, %latency_ms, "request");
        }
    }
}

/// Writes a failure answer (D5) saying `Connection: close` and shuts the sending side down.
async fn write_and_close<IO>(io: &mut IO, status: &str, message: &str, request_id: &str)
where
    IO: AsyncWrite + Unpin,
{
    let body = reply::failure_body(message, request_id);
    let head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\nx-request-id: {request_id}\r\n\r\n",
        body.len()
    );
    let _ = io.write_all(head.as_bytes()).await;
    let _ = io.write_all(&body).await;
    let _ = io.shutdown().await;
}

/// Reads and drops what the client still sends after the answer, until it closes, pauses for
/// [`LINGER_GAP`], or [`LINGER_TIME`] or [`LINGER_BYTES`] are reached.
pub async fn linger<IO: AsyncRead + Unpin>(io: &mut IO) {
    let drop_input = async {
        let mut chunk = vec![0u8; 64 * 1024];
        let mut seen = 0;
        while seen < LINGER_BYTES {
            match tokio::time::timeout(LINGER_GAP, io.read(&mut chunk)).await {
                Ok(Ok(n)) if n > 0 => seen += n,
                _ => return,
            }
        }
    };
    let _ = tokio::time::timeout(LINGER_TIME, drop_input).await;
}
