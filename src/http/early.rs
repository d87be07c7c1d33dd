//! Answers written on an HTTP/1 connection before hyper is given a request: 408 when a
//! request's head does not arrive in time (D26), and the early look's refusals (D42: 400,
//! 414, 431; D25: 501), each with the JSON failure body (D5). All close the connection.

use super::Edge;
use super::head::Refusal;
use super::reply;
use crate::interfaces;
use http::{HeaderValue, StatusCode, header};
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

/// 408: a request's head did not arrive within `timeout`.
pub async fn header_timeout<IO>(io: &mut IO, peer: SocketAddr, timeout: Duration, edge: &Edge)
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let request_id = edge.request_ids.fresh();
    let message = format!(
        "the request headers were not received within {} seconds",
        timeout.as_secs()
    );
    write_and_close(io, StatusCode::REQUEST_TIMEOUT, &message, &request_id).await;
    if let Some(m) = &edge.metrics {
        m.request("-", 408, 0, 0, timeout.as_secs_f64());
    }
    if edge.request_log.answered(408, Some(peer.ip())) {
        tracing::info!(request_id, %peer, status = 408, "request headers timed out");
    }
}

/// Answers a head the early look refused, closes, and logs and counts it like any request.
pub async fn refuse<IO>(io: &mut IO, r: &Refusal, peer: SocketAddr, edge: &Edge, started: Instant)
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let request_id = r
        .request_id
        .clone()
        .unwrap_or_else(|| edge.request_ids.fresh());
    write_and_close(io, r.status, &r.message, &request_id).await;
    linger(io).await;
    let status = r.status.as_u16();
    let interface = r
        .path
        .as_deref()
        .and_then(interfaces::by_path)
        .map_or("-", |i| i.id);
    let elapsed = started.elapsed().as_secs_f64();
    if let Some(m) = &edge.metrics {
        m.request(interface, status, 0, 0, elapsed);
    }
    if edge.request_log.answered(status, Some(peer.ip())) {
        let latency_ms = format_args!("{:.3}", elapsed * 1000.0);
        tracing::info!(request_id, %peer, key = "-", interface, status, reason = r.reason,
            %latency_ms, "request refused before its body");
    }
}

/// The answer to a request hyper found among bytes the early look did not judge as a head;
/// `message.rs` never gives it any, so this only closes the connection should that ever change.
pub fn unjudged() -> warp::reply::Response {
    let body = reply::failure_body("the request head was not judged; send it again", "-");
    let mut r = warp::reply::Response::new(body.into());
    *r.status_mut() = StatusCode::BAD_REQUEST;
    let headers = r.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// Writes a failure answer (D5) saying `Connection: close` and shuts the sending side down.
async fn write_and_close<IO>(io: &mut IO, status: StatusCode, message: &str, request_id: &str)
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
