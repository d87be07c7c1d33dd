//! The queue writer's transactions, read from the admin listener's `/metrics`
//! (`ap_intake_queue_commit_seconds`): how many there were between two readings and how long
//! they took. Every request in a transaction waits for all of it (D17), so a latency tail
//! shows here as the share of slow transactions.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use std::net::SocketAddr;

pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// A client for a few reads of `/metrics`.
pub fn client() -> HttpClient {
    Client::builder(hyper_util::rt::TokioExecutor::new()).build_http()
}

/// The histogram's cumulative buckets so far: (upper bound in seconds, transactions). Empty
/// when `/metrics` could not be read.
pub async fn buckets(client: &HttpClient, admin: SocketAddr) -> Vec<(f64, u64)> {
    let uri: http::Uri = format!("http://{admin}/metrics").parse().expect("uri");
    let Ok(resp) = client.get(uri).await else {
        return Vec::new();
    };
    let Ok(body) = resp.into_body().collect().await else {
        return Vec::new();
    };
    String::from_utf8_lossy(&body.to_bytes())
        .lines()
        .filter_map(|l| {
            let (le, n) = l
                .strip_prefix("ap_intake_queue_commit_seconds_bucket{le=\"")?
                .split_once("\"} ")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, n.trim().parse().ok()?))
        })
        .collect()
}

/// The transactions between two readings of [`buckets`].
pub struct Commits {
    pub total: u64,
    /// Cumulative: (upper bound in seconds, transactions that took at most that long).
    within: Vec<(f64, u64)>,
}

impl Commits {
    pub fn between(before: &[(f64, u64)], after: &[(f64, u64)]) -> Option<Self> {
        if before.len() != after.len() || after.is_empty() {
            return None;
        }
        let within: Vec<(f64, u64)> = before
            .iter()
            .zip(after)
            .map(|(b, a)| (a.0, a.1.saturating_sub(b.1)))
            .collect();
        Some(Self {
            total: within.last()?.1,
            within,
        })
    }

    /// Transactions that took longer than `ms` (a bucket bound of the histogram).
    pub fn over_ms(&self, ms: f64) -> u64 {
        let within = self
            .within
            .iter()
            .find(|(le, _)| *le * 1000.0 >= ms - 1e-9)
            .map_or(self.total, |b| b.1);
        self.total - within
    }

    /// The bucket bound (ms) the slowest transaction stayed within.
    pub fn slowest_within_ms(&self) -> f64 {
        self.within
            .iter()
            .find(|(_, n)| *n == self.total)
            .map_or(f64::INFINITY, |b| b.0 * 1000.0)
    }

    /// One line: how many, and the share over 4, 8 and 16 ms.
    pub fn summary(&self) -> String {
        let share = |ms: f64| {
            let n = self.over_ms(ms);
            format!(
                "over {ms} ms {n} ({:.1} %)",
                100.0 * n as f64 / self.total.max(1) as f64
            )
        };
        format!(
            "queue transactions {}, {}, {}, {}, the slowest within {} ms",
            self.total,
            share(4.0),
            share(8.0),
            share(16.0),
            self.slowest_within_ms()
        )
    }
}
