//! `ap-intake status` (D22): what the queue holds per interface, built the same way from the
//! running service (over the admin socket) or from the data directory of a stopped one.
//! [`Report`] is the report as the service works with it; what `status --json` prints and
//! the admin socket carries is its wire form, [`wire::Report`].

use crate::delivery::target::sink_dir;
use crate::interfaces::INTERFACES;
use crate::queue::{Store, StoreError, now_ms};

pub mod receipt;
mod render;
pub mod wire;
pub use render::render;
use std::path::Path;

/// Where a report came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The running service answered on its admin socket.
    Service,
    /// The service is stopped; the data directory was read directly.
    DataDirectory,
}

/// The whole report (`status --json` prints its [`wire::Report`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Running service or data directory.
    pub source: Source,
    /// When the report was made (unix ms).
    pub generated_at_ms: u64,
    /// One entry per interface, in the spec's order.
    pub interfaces: Vec<InterfaceReport>,
    /// What the sandbox sink received (D21), when there is a sink.
    pub sandbox_sink: Option<SinkReport>,
    /// The nodes sharing the queue (D39, PostgreSQL); empty for one service's own queue.
    pub nodes: Vec<crate::queue::Node>,
    /// Node names that two or more live processes carry (D41), in order: their leases stay
    /// apart, but status and logs cannot tell them apart by name.
    pub duplicate_node_names: Vec<String>,
    /// What is kept of delivered versions for a replay (D49): keys, and bytes of XML.
    pub kept: crate::queue::replay::KeptSize,
}

/// One interface's line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceReport {
    /// Identifier, as in logs and the platform path.
    pub interface: String,
    /// The path clients POST to.
    pub path: String,
    /// Waiting for delivery.
    pub pending: u64,
    /// Parked after the platform refused them.
    pub rejected: u64,
    /// Parked because they could not be read back (D29).
    pub quarantined: u64,
    /// Delivered so far.
    pub delivered: u64,
    /// Age of the oldest pending record, in seconds.
    pub oldest_pending_age_secs: Option<u64>,
    /// Failed deliveries in a row.
    pub failures: u32,
    /// The last delivery error.
    pub last_error: Option<String>,
    /// When it happened (unix ms).
    pub last_error_ms: Option<u64>,
    /// When the next attempt is due (unix ms), if deliveries are backing off.
    pub next_retry_ms: Option<u64>,
    /// `flowing`, `backing off` (the platform or the network failed) or `paused` (the
    /// platform refused the configuration: credentials, URL, proxy; D32).
    pub delivery: String,
    /// The latest successful delivery (unix ms).
    pub last_success_ms: Option<u64>,
}

/// Documents and records the sandbox sink holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkReport {
    /// The directory.
    pub dir: String,
    /// Documents received.
    pub documents: u64,
    /// Records in them.
    pub records: u64,
    /// File name of the latest document.
    pub latest: Option<String>,
}

/// The report of the queue in `store` (and the sink in `data_dir`).
pub fn build(store: &dyn Store, data_dir: &Path, source: Source) -> Result<Report, StoreError> {
    let now = now_ms();
    let interfaces = INTERFACES
        .iter()
        .map(|iface| {
            let s = store.stats(iface.id)?;
            Ok(InterfaceReport {
                interface: iface.id.to_string(),
                path: iface.path.to_string(),
                pending: s.pending,
                rejected: s.rejected,
                quarantined: s.quarantined,
                delivered: s.delivered,
                oldest_pending_age_secs: s.oldest_pending_ms.map(|t| now.saturating_sub(t) / 1000),
                failures: s.backoff.failures,
                last_error: s.backoff.last_error,
                last_error_ms: s.backoff.last_error_ms,
                next_retry_ms: (s.backoff.next_attempt_ms > now)
                    .then_some(s.backoff.next_attempt_ms),
                delivery: match (s.backoff.paused, s.backoff.failures) {
                    (true, _) => "paused",
                    (false, 0) => "flowing",
                    (false, _) => "backing off",
                }
                .to_string(),
                last_success_ms: s.backoff.last_success_ms,
            })
        })
        .collect::<Result<_, StoreError>>()?;
    let nodes = store.nodes()?;
    Ok(Report {
        source,
        generated_at_ms: now,
        interfaces,
        sandbox_sink: sink_report(data_dir),
        duplicate_node_names: shared_names(&nodes),
        nodes,
        kept: store.kept_size()?,
    })
}

/// The names of live nodes that another live node carries too (D41), sorted.
fn shared_names(nodes: &[crate::queue::Node]) -> Vec<String> {
    let mut live = std::collections::BTreeMap::<&str, usize>::new();
    for n in nodes.iter().filter(|n| n.live) {
        *live.entry(n.name.as_str()).or_default() += 1;
    }
    live.into_iter()
        .filter(|(_, count)| *count > 1)
        .map(|(name, _)| name.to_string())
        .collect()
}

fn sink_report(data_dir: &Path) -> Option<SinkReport> {
    let dir = sink_dir(data_dir);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.ends_with(".xml") && !n.starts_with('.'))
        .collect();
    names.sort();
    // `<ms>-<seq>-<interface>-<records>.xml`
    let records = names
        .iter()
        .filter_map(|n| {
            n.trim_end_matches(".xml")
                .rsplit('-')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    Some(SinkReport {
        dir: dir.display().to_string(),
        documents: names.len() as u64,
        records,
        latest: names.last().cloned(),
    })
}

/// A duration in seconds for people: `45s`, `12m 5s`, `3h 20m`, `2d 4h`.
pub fn human_secs(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m {}s", secs / 60, secs % 60),
        3600..86400 => format!("{}h {}m", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d {}h", secs / 86400, secs % 86400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_for_people() {
        assert_eq!(human_secs(5), "5s");
        assert_eq!(human_secs(725), "12m 5s");
        assert_eq!(human_secs(12_000), "3h 20m");
        assert_eq!(human_secs(187_200), "2d 4h");
    }
}
