//! Prometheus metrics, served on the admin listener's `/metrics`.

use crate::interfaces::INTERFACES;
use crate::queue::Store;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    interface: String,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InterfaceLabel {
    interface: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    interface: String,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabels {
    interface: String,
    kind: &'static str,
}

type Latency = Family<InterfaceLabel, Histogram, fn() -> Histogram>;

/// Every metric of the service.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    records_accepted: Family<InterfaceLabel, Counter>,
    records_rejected: Family<InterfaceLabel, Counter>,
    latency: Latency,
    commits: Histogram,
    commit_records: Histogram,
    queue: Family<QueueLabels, Gauge>,
    delivery_attempts: Family<InterfaceLabel, Counter>,
    delivery_failures: Family<FailureLabels, Counter>,
    delivered: Family<InterfaceLabel, Counter>,
    paused: Family<InterfaceLabel, Gauge>,
    oldest_pending: Family<InterfaceLabel, Gauge>,
    ready: Gauge,
    /// Documents and records delivered since the last summary line (D44).
    since_summary: [std::sync::atomic::AtomicU64; 2],
}

fn latency_histogram() -> Histogram {
    // 0.5 ms to about 16 s.
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

fn label(interface: &str) -> InterfaceLabel {
    InterfaceLabel {
        interface: interface.to_string(),
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut m = Self {
            registry: Registry::with_prefix("ap_intake"),
            requests: Family::default(),
            records_accepted: Family::default(),
            records_rejected: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            commits: latency_histogram(),
            // 1 to 8,192: requests of up to 100 records share a transaction, as many as wait;
            // larger ones are written 250 records at a time.
            commit_records: Histogram::new(exponential_buckets(1.0, 2.0, 14)),
            queue: Family::default(),
            delivery_attempts: Family::default(),
            delivery_failures: Family::default(),
            delivered: Family::default(),
            paused: Family::default(),
            oldest_pending: Family::default(),
            ready: Gauge::default(),
            since_summary: Default::default(),
        };
        let r = &mut m.registry;
        r.register(
            "requests",
            "Requests by interface and HTTP status",
            m.requests.clone(),
        );
        r.register(
            "records_accepted",
            "Records validated and queued",
            m.records_accepted.clone(),
        );
        r.register(
            "records_rejected",
            "Records that failed validation",
            m.records_rejected.clone(),
        );
        r.register(
            "request_duration_seconds",
            "Time to answer a request",
            m.latency.clone(),
        );
        r.register(
            "queue_commit_seconds",
            "Time the queue took to store each transaction of records, its fsync included: \
             every request in it waited as long for its answer (a slow disk shows here first)",
            m.commits.clone(),
        );
        r.register(
            "queue_commit_records",
            "Records stored by each transaction of the queue: how many share one fsync \
             (requests that arrive while one commits wait for the next and are stored together)",
            m.commit_records.clone(),
        );
        r.register(
            "queue_records",
            "Records in the queue by state",
            m.queue.clone(),
        );
        r.register(
            "delivery_attempts",
            "Documents sent to the platform",
            m.delivery_attempts.clone(),
        );
        r.register(
            "delivery_failures",
            "Documents not delivered: retry (network, 408, 429, 5xx), paused (401, 403, 404, 405, 407), too_large (413) or rejected (other 4xx)",
            m.delivery_failures.clone(),
        );
        r.register(
            "delivery_paused",
            "1 while the platform refuses the configuration for the interface (D32)",
            m.paused.clone(),
        );
        r.register(
            "queue_oldest_pending_age_seconds",
            "Age of the oldest pending record of the interface, 0 when none is pending (the \
             alert rules warn past an hour, D46)",
            m.oldest_pending.clone(),
        );
        r.register(
            "ready",
            "1 when /readyz answers 200 (the queue takes a real write, has met no damage, the \
             schemas are compiled), 0 otherwise",
            m.ready.clone(),
        );
        r.register(
            "delivered_records",
            "Records the platform accepted",
            m.delivered.clone(),
        );
        // Every series an interface can have exists from the start, at zero: a rule over
        // `increase(...)` then sees the first failure as one, and /metrics names every family
        // the alert rules read before anything happened (D46).
        for iface in &INTERFACES {
            let l = label(iface.id);
            let _ = m.records_accepted.get_or_create(&l);
            let _ = m.records_rejected.get_or_create(&l);
            let _ = m.delivery_attempts.get_or_create(&l);
            let _ = m.delivered.get_or_create(&l);
            for kind in FAILURE_KINDS {
                let _ = m.delivery_failures.get_or_create(&FailureLabels {
                    interface: iface.id.to_string(),
                    kind,
                });
            }
        }
        m
    }
}

/// The kinds of `ap_intake_delivery_failures_total`.
pub const FAILURE_KINDS: [&str; 4] = ["retry", "paused", "too_large", "rejected"];

impl Metrics {
    /// One answered request; `interface` is `-` when the path is unknown.
    pub fn request(
        &self,
        interface: &str,
        status: u16,
        accepted: usize,
        failed: usize,
        seconds: f64,
    ) {
        self.requests
            .get_or_create(&RequestLabels {
                interface: interface.to_string(),
                status,
            })
            .inc();
        self.records_accepted
            .get_or_create(&label(interface))
            .inc_by(accepted as u64);
        self.records_rejected
            .get_or_create(&label(interface))
            .inc_by(failed as u64);
        self.latency
            .get_or_create(&label(interface))
            .observe(seconds);
    }

    /// One transaction of the queue writer, which took `took` and stored `records`.
    pub fn commit(&self, took: std::time::Duration, records: usize) {
        self.commits.observe(took.as_secs_f64());
        self.commit_records.observe(records as f64);
    }

    /// One document sent to the platform.
    pub fn attempt(&self, interface: &str) {
        self.delivery_attempts
            .get_or_create(&label(interface))
            .inc();
    }

    /// A document that was not delivered; `kind` is `retry`, `paused`, `too_large` or
    /// `rejected`.
    pub fn failure(&self, interface: &str, kind: &'static str) {
        debug_assert!(FAILURE_KINDS.contains(&kind), "{kind}");
        self.delivery_failures
            .get_or_create(&FailureLabels {
                interface: interface.to_string(),
                kind,
            })
            .inc();
    }

    /// A document of `records` records the platform accepted.
    pub fn delivered(&self, interface: &str, records: usize) {
        self.delivered
            .get_or_create(&label(interface))
            .inc_by(records as u64);
        let [documents, total] = &self.since_summary;
        documents.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        total.fetch_add(records as u64, std::sync::atomic::Ordering::Relaxed);
    }

    /// Documents and records delivered since the last call (the summary line's, D44).
    pub fn take_deliveries(&self) -> (u64, u64) {
        let [documents, total] = &self.since_summary;
        let take =
            |c: &std::sync::atomic::AtomicU64| c.swap(0, std::sync::atomic::Ordering::Relaxed);
        (take(documents), take(total))
    }

    /// The text exposition, with the queue gauges read from `store` now and `ready`, what
    /// `/readyz` says at this moment.
    pub fn render(&self, store: &dyn Store, ready: bool, format: Format) -> String {
        self.ready.set(i64::from(ready));
        let now_ms = crate::queue::now_ms();
        for iface in &INTERFACES {
            if let Ok(s) = store.stats(iface.id) {
                let age_ms = s.oldest_pending_ms.map_or(0, |t| now_ms.saturating_sub(t));
                self.oldest_pending
                    .get_or_create(&label(iface.id))
                    .set(i64::try_from(age_ms / 1000).unwrap_or(i64::MAX));
                let states = [
                    ("pending", s.pending),
                    ("rejected", s.rejected),
                    ("quarantined", s.quarantined),
                ];
                self.paused
                    .get_or_create(&label(iface.id))
                    .set(i64::from(s.backoff.paused));
                for (state, n) in states {
                    self.queue
                        .get_or_create(&QueueLabels {
                            interface: iface.id.to_string(),
                            state,
                        })
                        .set(n as i64);
                }
            }
        }
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        match format {
            Format::OpenMetrics => out,
            Format::Text => text_format(&out),
        }
    }
}

/// The two exposition formats a scraper may ask for (`Accept`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0, which Prometheus asks for first.
    OpenMetrics,
    /// The Prometheus text format 0.0.4, for everything else: `promtool check metrics`, older
    /// scrapers, curl.
    Text,
}

impl Format {
    /// What an `Accept` header asks for: OpenMetrics when it rates
    /// `application/openmetrics-text` above `text/plain`, the text format otherwise.
    pub fn accepted(accept: Option<&str>) -> Self {
        let rated = |media: &str| -> f32 {
            accept
                .unwrap_or_default()
                .split(',')
                .filter_map(|part| {
                    let mut params = part.split(';');
                    let name = params.next()?.trim();
                    if !name.eq_ignore_ascii_case(media) {
                        return None;
                    }
                    let q = params
                        .filter_map(|p| p.trim().strip_prefix("q="))
                        .find_map(|q| q.trim().parse::<f32>().ok());
                    Some(q.unwrap_or(1.0))
                })
                .fold(0.0, f32::max)
        };
        let open = rated("application/openmetrics-text");
        if open > 0.0 && open >= rated("text/plain") {
            Self::OpenMetrics
        } else {
            Self::Text
        }
    }

    /// The `Content-Type` of an answer in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Self::Text => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// OpenMetrics text turned into the Prometheus text format: a counter's HELP and TYPE name its
/// samples (`..._total`), and the OpenMetrics-only lines (`# UNIT`, `# EOF`) go.
fn text_format(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len() + 64 * counters.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let described = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|tag| line.strip_prefix(tag).map(|rest| (tag, rest)));
        if let Some((tag, rest)) = described {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            if counters.contains(name) && !name.ends_with("_total") {
                out.push_str(&format!("{tag}{name}_total {text}\n"));
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::Format;

    #[test]
    fn the_format_is_the_one_the_accept_header_rates_higher() {
        let cases = [
            (None, Format::Text),
            (Some("*/*"), Format::Text),
            (Some("text/plain; version=0.0.4"), Format::Text),
            (
                Some("application/openmetrics-text; version=1.0.0"),
                Format::OpenMetrics,
            ),
            (
                Some("application/openmetrics-text;q=0.5, text/plain;q=0.9"),
                Format::Text,
            ),
            (
                Some("text/plain;q=0.5, Application/OpenMetrics-Text;version=1.0.0"),
                Format::OpenMetrics,
            ),
            (Some("application/openmetrics-text;q=0"), Format::Text),
        ];
        for (accept, format) in cases {
            assert_eq!(Format::accepted(accept), format, "{accept:?}");
        }
    }
}
