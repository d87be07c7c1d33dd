//! Receiving a request body: within `max_body_bytes` (413), charged to the in-flight budget as
//! it arrives (D27), and decoded on the fly when it is gzip (D25), the limit applying to the
//! decoded bytes so that a small bomb is stopped as soon as it passes it.

use super::reply::ApiError;
use crate::budget::{Budget, BudgetError, Charge};
use bytes::{Buf, Bytes};
use futures_util::{Stream, StreamExt};
use std::io::Write;
use tokio::time::Instant;

/// The content codings a body may have (D25).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    /// As sent.
    Identity,
    /// `Content-Encoding: gzip`.
    Gzip,
}

/// Compressed input is fed to the decoder in slices of this size, so one slice cannot
/// inflate much past the limit before it is checked (gzip expands at most about 1,032:1).
const INFLATE_SLICE: usize = 1024;

/// Reads the whole body by `deadline` (408 after it, D5). `limit` bounds the bytes as
/// received and, for gzip, as decoded. Bytes beyond what the request was admitted with are
/// charged as `Budget::resize` allows (D27). `declared`: the Content-Length, at most `limit`,
/// which the request was admitted with.
#[allow(
    clippy::too_many_arguments,
    reason = "the request's parts, each used once"
)]
pub async fn read(
    body: &mut (impl Stream<Item = Result<impl Buf, warp::Error>> + Unpin + Send),
    coding: Coding,
    declared: Option<u64>,
    limit: u64,
    budget: &Budget,
    charge: &mut Charge,
    deadline: Instant,
    timeout: std::time::Duration,
) -> Result<Bytes, ApiError> {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let declared = declared.map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX));
    let mut sink = Sink::new(coding, declared.min(limit));
    let mut received = 0usize;
    loop {
        let next = match tokio::time::timeout_at(deadline, body.next()).await {
            Ok(next) => next,
            // Held back by the budget, the client could not send in time: our doing (D27).
            Err(_) if charge.waited() => return Err(BudgetError::Busy.into()),
            Err(_) => return Err(ApiError::BodyTimeout(timeout.as_secs())),
        };
        let Some(chunk) = next else { break };
        let mut chunk = chunk.map_err(|e| ApiError::BodyRead(e.to_string()))?;
        received += chunk.remaining();
        if received > limit {
            return Err(ApiError::BodyTooLarge(limit as u64));
        }
        while chunk.has_remaining() {
            let part = chunk.chunk();
            let n = part.len();
            let before = sink.len();
            sink.write(part, limit)?;
            if sink.len() > before {
                budget
                    .resize(charge, charge.bytes().max(sink.len()), deadline)
                    .await?;
            }
            chunk.advance(n);
        }
    }
    sink.finish(limit)
}

/// Where the body's bytes go: kept as they are, or through the gzip decoder.
enum Sink {
    Identity(Vec<u8>),
    Gzip(Box<flate2::write::GzDecoder<Vec<u8>>>),
}

impl Sink {
    /// A sink for a body of `declared` bytes. A plain body's buffer is its declared size from
    /// the start: grown by doubling instead, a body of tens of MiB would be copied whole into
    /// each larger buffer, each copy on an async worker in one go, holding up every other
    /// request waiting for that worker (D27). The memory is charged already (the request was
    /// admitted for its declared length) and is touched only as the bytes arrive.
    fn new(coding: Coding, declared: usize) -> Self {
        match coding {
            Coding::Identity => Self::Identity(Vec::with_capacity(declared)),
            Coding::Gzip => Self::Gzip(Box::new(flate2::write::GzDecoder::new(Vec::new()))),
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::Identity(v) => v.len(),
            Self::Gzip(d) => d.get_ref().len(),
        }
    }

    fn write(&mut self, part: &[u8], limit: usize) -> Result<(), ApiError> {
        match self {
            Self::Identity(v) => v.extend_from_slice(part),
            Self::Gzip(d) => {
                for slice in part.chunks(INFLATE_SLICE) {
                    d.write_all(slice).map_err(gzip_error)?;
                    if d.get_ref().len() > limit {
                        return Err(ApiError::BodyTooLarge(limit as u64));
                    }
                }
            }
        }
        Ok(())
    }

    fn finish(self, limit: usize) -> Result<Bytes, ApiError> {
        let out = match self {
            Self::Identity(v) => v,
            Self::Gzip(d) => d.finish().map_err(gzip_error)?,
        };
        if out.len() > limit {
            return Err(ApiError::BodyTooLarge(limit as u64));
        }
        Ok(Bytes::from(out))
    }
}

fn gzip_error(e: std::io::Error) -> ApiError {
    ApiError::BodyRead(format!("the gzip body cannot be decoded: {e}"))
}
