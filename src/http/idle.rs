//! What a connection is doing, for closing HTTP/2 connections that start no request (D26).
//!
//! hyper has no header timer for HTTP/2: a client that sends the preface and nothing more, or
//! that keeps a connection open between requests, would hold its slot forever. The routes'
//! wrapper counts requests in flight, from the call until the response body is dropped (sent
//! or reset), and the connection is closed when none has been in flight for a while.

use hyper::body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;

/// Requests in flight on one connection and when the last one ended.
pub struct Activity {
    state: Mutex<State>,
}

struct State {
    in_flight: usize,
    idle_since: Instant,
    /// An answer said `Connection: close` with the request's body unread (D26).
    linger: bool,
}

impl Activity {
    /// Idle since `since` (when the connection started waiting for its first request).
    pub fn new(since: Instant) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                in_flight: 0,
                idle_since: since,
                linger: false,
            }),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A request starts; it ends when the returned guard is dropped.
    pub fn begin(self: &Arc<Self>) -> Busy {
        self.state().in_flight += 1;
        Busy(Arc::clone(self))
    }

    /// An answer closes the connection before the client has sent all of its body: the
    /// connection lingers once hyper is done with it (D26).
    pub fn close_after_body(&self) {
        self.state().linger = true;
    }

    /// Whether the connection should linger before it closes.
    pub fn lingers(&self) -> bool {
        self.state().linger
    }

    /// When the connection became idle, or `None` while a request is in flight.
    fn idle_since(&self) -> Option<Instant> {
        let state = self.state();
        (state.in_flight == 0).then_some(state.idle_since)
    }

    /// Resolves once no request has been in flight for `limit`, counting from `floor` at the
    /// earliest.
    pub async fn idle_for(&self, limit: Duration, floor: Instant) {
        loop {
            let deadline = match self.idle_since() {
                Some(since) if since.max(floor) + limit <= Instant::now() => return,
                Some(since) => since.max(floor) + limit,
                // Busy: look again later; a request's end is not worth a wake-up of its own.
                None => Instant::now() + limit,
            };
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// A request in flight.
pub struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.in_flight = state.in_flight.saturating_sub(1);
        if state.in_flight == 0 {
            state.idle_since = Instant::now();
        }
    }
}

/// A response body that keeps its request in flight until it is dropped.
pub struct Tracked<B> {
    body: B,
    _busy: Busy,
}

impl<B> Tracked<B> {
    /// `body`, its request in flight while it lives.
    pub fn new(body: B, busy: Busy) -> Self {
        Self { body, _busy: busy }
    }
}

impl<B: Body + Unpin> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn idle_only_counts_while_nothing_is_in_flight() {
        let started = Instant::now();
        let activity = Activity::new(started);
        let busy = activity.begin();
        let limit = Duration::from_millis(100);
        let waiting = tokio::spawn({
            let activity = Arc::clone(&activity);
            async move { activity.idle_for(limit, started).await }
        });
        tokio::time::sleep(limit * 4).await;
        assert!(
            !waiting.is_finished(),
            "a request in flight is not idleness"
        );
        drop(busy);
        let ended = Instant::now();
        tokio::time::timeout(limit * 20, waiting)
            .await
            .unwrap()
            .unwrap();
        assert!(ended.elapsed() >= limit);
    }
}
