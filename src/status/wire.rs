//! The status report as it leaves the process (D22): the document `ap-intake status --json`
//! prints, which the admin socket carries too (`admin/wire.rs`). It is an operator contract:
//! scripts and monitoring read these names, so they are spelled here, apart from the
//! report's own types ([`super::Report`]) and the queue's ([`crate::queue::Node`]), and a
//! renamed field there changes nothing here. `tests/it/status/wire.rs` compares the document
//! with a committed copy (`tests/it/golden/`).
//!
//! Version 1 is the document as it was before it carried a version, plus `version`. A change
//! that removes, renames or retypes a field is a new version; a new field with a default is
//! not. A document without `version` (from a service of an earlier release, over the admin
//! socket) is read as version 1.

use serde::{Deserialize, Serialize};

/// The version of the document this release writes, and the highest it reads.
pub const VERSION: u32 = 1;

fn version_1() -> u32 {
    1
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// The document's format ([`VERSION`]).
    #[serde(default = "version_1")]
    pub version: u32,
    /// `service` or `data_directory`.
    pub source: Source,
    /// When the report was made (unix ms).
    pub generated_at_ms: u64,
    /// One entry per interface, in the spec's order.
    pub interfaces: Vec<Interface>,
    /// What the sandbox sink received (D21); `null` when there is no sink.
    pub sandbox_sink: Option<Sink>,
    /// The nodes sharing the queue (D39, PostgreSQL); left out when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<Node>,
    /// Node names two or more live processes carry (D41); left out when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub duplicate_node_names: Vec<String>,
    /// Keys whose last delivered XML is kept for a replay (D49); left out when none is.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub kept_keys: u64,
    /// The bytes of that XML; left out when none is kept.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub kept_bytes: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Where a report came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The running service answered on its admin socket.
    Service,
    /// The service is stopped; the data directory was read directly.
    DataDirectory,
}

/// One interface's entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interface {
    /// Identifier, as in logs and the platform path.
    pub interface: String,
    /// The path clients POST to.
    pub path: String,
    /// Waiting for delivery.
    pub pending: u64,
    /// Parked after the platform refused them.
    pub rejected: u64,
    /// Parked because they could not be read back (D29).
    #[serde(default)]
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
    /// `flowing`, `backing off` or `paused` (D32).
    #[serde(default)]
    pub delivery: String,
    /// The latest successful delivery (unix ms).
    #[serde(default)]
    pub last_success_ms: Option<u64>,
}

/// Documents and records the sandbox sink holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sink {
    /// The directory.
    pub dir: String,
    /// Documents received.
    pub documents: u64,
    /// Records in them.
    pub records: u64,
    /// File name of the latest document.
    pub latest: Option<String>,
}

/// A node of a cluster sharing the queue (D39): one running process (D41).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// Its name (`[storage.postgres] node`).
    pub name: String,
    /// The id the process drew when it started (D41).
    #[serde(default)]
    pub instance: String,
    /// When it started (unix ms).
    pub started_at_ms: u64,
    /// When it last renewed its leases (unix ms, the database's clock).
    pub last_seen_ms: u64,
    /// Keys it holds for delivery now.
    pub leases: u64,
    /// Seen within its lease period.
    #[serde(default = "live_by_default")]
    pub live: bool,
}

/// Reports of versions before D41 listed every node without saying: take it as live.
fn live_by_default() -> bool {
    true
}

impl From<&super::Report> for Report {
    fn from(r: &super::Report) -> Self {
        Self {
            version: VERSION,
            source: r.source.into(),
            generated_at_ms: r.generated_at_ms,
            interfaces: r.interfaces.iter().map(Interface::from).collect(),
            sandbox_sink: r.sandbox_sink.as_ref().map(Sink::from),
            nodes: r.nodes.iter().map(Node::from).collect(),
            duplicate_node_names: r.duplicate_node_names.clone(),
            kept_keys: r.kept.keys,
            kept_bytes: r.kept.bytes,
        }
    }
}

impl From<Report> for super::Report {
    fn from(r: Report) -> Self {
        Self {
            source: r.source.into(),
            generated_at_ms: r.generated_at_ms,
            interfaces: r.interfaces.into_iter().map(Into::into).collect(),
            sandbox_sink: r.sandbox_sink.map(Into::into),
            nodes: r.nodes.into_iter().map(Into::into).collect(),
            duplicate_node_names: r.duplicate_node_names,
            kept: crate::queue::replay::KeptSize {
                keys: r.kept_keys,
                bytes: r.kept_bytes,
            },
        }
    }
}

impl From<super::Source> for Source {
    fn from(s: super::Source) -> Self {
        match s {
            super::Source::Service => Self::Service,
            super::Source::DataDirectory => Self::DataDirectory,
        }
    }
}

impl From<Source> for super::Source {
    fn from(s: Source) -> Self {
        match s {
            Source::Service => Self::Service,
            Source::DataDirectory => Self::DataDirectory,
        }
    }
}

impl From<&super::InterfaceReport> for Interface {
    fn from(i: &super::InterfaceReport) -> Self {
        Self {
            interface: i.interface.clone(),
            path: i.path.clone(),
            pending: i.pending,
            rejected: i.rejected,
            quarantined: i.quarantined,
            delivered: i.delivered,
            oldest_pending_age_secs: i.oldest_pending_age_secs,
            failures: i.failures,
            last_error: i.last_error.clone(),
            last_error_ms: i.last_error_ms,
            next_retry_ms: i.next_retry_ms,
            delivery: i.delivery.clone(),
            last_success_ms: i.last_success_ms,
        }
    }
}

impl From<Interface> for super::InterfaceReport {
    fn from(i: Interface) -> Self {
        Self {
            interface: i.interface,
            path: i.path,
            pending: i.pending,
            rejected: i.rejected,
            quarantined: i.quarantined,
            delivered: i.delivered,
            oldest_pending_age_secs: i.oldest_pending_age_secs,
            failures: i.failures,
            last_error: i.last_error,
            last_error_ms: i.last_error_ms,
            next_retry_ms: i.next_retry_ms,
            delivery: i.delivery,
            last_success_ms: i.last_success_ms,
        }
    }
}

impl From<&super::SinkReport> for Sink {
    fn from(s: &super::SinkReport) -> Self {
        Self {
            dir: s.dir.clone(),
            documents: s.documents,
            records: s.records,
            latest: s.latest.clone(),
        }
    }
}

impl From<Sink> for super::SinkReport {
    fn from(s: Sink) -> Self {
        Self {
            dir: s.dir,
            documents: s.documents,
            records: s.records,
            latest: s.latest,
        }
    }
}

impl From<&crate::queue::Node> for Node {
    fn from(n: &crate::queue::Node) -> Self {
        Self {
            name: n.name.clone(),
            instance: n.instance.clone(),
            started_at_ms: n.started_at_ms,
            last_seen_ms: n.last_seen_ms,
            leases: n.leases,
            live: n.live,
        }
    }
}

impl From<Node> for crate::queue::Node {
    fn from(n: Node) -> Self {
        Self {
            name: n.name,
            instance: n.instance,
            started_at_ms: n.started_at_ms,
            last_seen_ms: n.last_seen_ms,
            leases: n.leases,
            live: n.live,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report of an earlier release (no `version`, no fields added since) reads as
    /// version 1 with the defaults those fields had.
    #[test]
    fn a_report_without_a_version_reads_as_version_1() {
        let old = r#"{"source":"service","generated_at_ms":5,"interfaces":[{"interface":"i",
            "path":"/i/v1","pending":1,"rejected":0,"delivered":2,"oldest_pending_age_secs":null,
            "failures":0,"last_error":null,"last_error_ms":null,"next_retry_ms":null}],
            "sandbox_sink":null,"nodes":[{"name":"a","started_at_ms":1,"last_seen_ms":2,"leases":0}]}"#;
        let r: Report = serde_json::from_str(old).unwrap();
        assert_eq!(r.version, 1);
        assert_eq!(r.interfaces[0].quarantined, 0);
        assert_eq!(r.interfaces[0].delivery, "");
        assert!(r.nodes[0].live, "a node of a report before D41 is live");
        assert!(r.duplicate_node_names.is_empty());
    }

    /// Domain to wire and back loses nothing.
    #[test]
    fn the_report_goes_to_the_wire_and_back_whole() {
        let report = super::super::Report {
            source: super::super::Source::Service,
            generated_at_ms: 7,
            interfaces: vec![super::super::InterfaceReport {
                interface: "i".into(),
                path: "/i/v1".into(),
                pending: 1,
                rejected: 2,
                quarantined: 3,
                delivered: 4,
                oldest_pending_age_secs: Some(5),
                failures: 6,
                last_error: Some("e".into()),
                last_error_ms: Some(8),
                next_retry_ms: Some(9),
                delivery: "backing off".into(),
                last_success_ms: Some(10),
            }],
            sandbox_sink: Some(super::super::SinkReport {
                dir: "/d".into(),
                documents: 1,
                records: 2,
                latest: Some("l".into()),
            }),
            nodes: vec![crate::queue::Node {
                name: "n".into(),
                instance: "0123".into(),
                started_at_ms: 1,
                last_seen_ms: 2,
                leases: 3,
                live: false,
            }],
            duplicate_node_names: vec!["n".into()],
            kept: crate::queue::replay::KeptSize { keys: 4, bytes: 5 },
        };
        let wire = Report::from(&report);
        let text = serde_json::to_string(&wire).unwrap();
        let back: Report = serde_json::from_str(&text).unwrap();
        assert_eq!(back, wire);
        assert_eq!(super::super::Report::from(back), report);
    }
}
