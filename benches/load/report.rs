//! Latency summaries and the report's lines.

use std::collections::BTreeMap;
use std::time::Duration;

/// What one side of the run (service or in-process) achieved.
#[derive(Default)]
pub struct Run {
    pub requests: u64,
    pub records: u64,
    pub elapsed: Duration,
    /// Latencies in microseconds.
    pub latencies: Vec<u32>,
    /// Failed requests by kind (a status, "connection", ...): how many, and the first one's
    /// detail, so a failed run says why (a full disk answers 503 at once, say).
    pub failures: BTreeMap<String, (u64, String)>,
}

impl Run {
    pub fn merge(&mut self, other: Run) {
        self.requests += other.requests;
        self.records += other.records;
        self.latencies.extend(other.latencies);
        for (kind, (n, detail)) in other.failures {
            self.failures.entry(kind).or_insert((0, detail)).0 += n;
        }
    }

    /// Failed requests, of every kind.
    pub fn errors(&self) -> u64 {
        self.failures.values().map(|(n, _)| n).sum()
    }

    /// Counts one failed request.
    pub fn fail(&mut self, failure: Failure) {
        let entry = self
            .failures
            .entry(failure.kind)
            .or_insert((0, failure.detail));
        entry.0 += 1;
    }

    pub fn requests_per_sec(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }

    pub fn records_per_sec(&self) -> f64 {
        self.records as f64 / self.elapsed.as_secs_f64()
    }

    /// The `p` quantile (0 to 1) of sorted latencies in microseconds, in milliseconds.
    pub fn percentile(sorted: &[u32], p: f64) -> f64 {
        if sorted.is_empty() {
            return 0.0;
        }
        let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
        sorted[i] as f64 / 1000.0
    }

    pub fn print(&mut self, label: &str) {
        self.latencies.sort_unstable();
        let l = &self.latencies;
        println!(
            "{label:<18} {:>9.0} req/s {:>10.0} records/s   latency ms p50 {:.2} p90 {:.2} p99 {:.2} max {:.2}   errors {}",
            self.requests_per_sec(),
            self.records_per_sec(),
            Self::percentile(l, 0.50),
            Self::percentile(l, 0.90),
            Self::percentile(l, 0.99),
            l.last().copied().unwrap_or(0) as f64 / 1000.0,
            self.errors()
        );
        for (kind, (n, detail)) in &self.failures {
            println!("  failed: {n} x {kind}, the first: {detail}");
        }
    }
}

/// Why one request failed.
pub struct Failure {
    pub kind: String,
    pub detail: String,
}

impl Failure {
    /// `detail` cut to a line's length.
    pub fn new(kind: impl Into<String>, detail: impl AsRef<str>) -> Self {
        let detail: String = detail.as_ref().chars().take(200).collect();
        Failure {
            kind: kind.into(),
            detail,
        }
    }
}
