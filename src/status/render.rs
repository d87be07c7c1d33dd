//! The status report as text for people: by default a table that fits 100 columns with what
//! an admin asks first; `--wide` adds every column and the whole last error.

use super::{InterfaceReport, Report, Source, human_secs};
use std::fmt::Write;

/// The width the default table keeps to.
const WIDTH: usize = 100;

/// The report as a table; `wide` keeps every column and the whole error.
pub fn render(r: &Report, wide: bool) -> String {
    let mut out = String::new();
    let from = match r.source {
        Source::Service => "the running service",
        Source::DataDirectory => "the data directory (the service is not running)",
    };
    let _ = writeln!(out, "Queue status, from {from}\n");
    if wide {
        table_wide(&mut out, r);
    } else {
        table(&mut out, r);
    }
    nodes(&mut out, r);
    notes(&mut out, r);
    out
}

/// The cluster's nodes (D39): every process, who is alive and what each holds (D41), and a
/// warning when two live processes carry one name.
fn nodes(out: &mut String, r: &Report) {
    if r.nodes.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\n{:<24} {:<8} {:>14} {:>20} {:>8}",
        "NODE", "INSTANCE", "STARTED", "LAST SEEN", "LEASES"
    );
    let ago = |ms: u64| human_secs(r.generated_at_ms.saturating_sub(ms) / 1000) + " ago";
    for n in &r.nodes {
        // Not seen within its lease: its leases have lapsed; it stays listed until pruned.
        let seen = match n.live {
            true => ago(n.last_seen_ms),
            false => format!("{} (gone)", ago(n.last_seen_ms)),
        };
        let _ = writeln!(
            out,
            "{:<24} {:<8} {:>14} {:>20} {:>8}",
            n.name,
            n.instance.get(..8).unwrap_or(&n.instance),
            ago(n.started_at_ms),
            seen,
            n.leases
        );
    }
    if r.kept.keys > 0 {
        let _ = writeln!(
            out,
            "kept for replay: the last delivered version of {} keys, {} bytes of XML (D49)",
            r.kept.keys, r.kept.bytes
        );
    }
    for name in &r.duplicate_node_names {
        let count = r.nodes.iter().filter(|n| n.live && &n.name == name).count();
        let _ = writeln!(
            out,
            "WARNING: node name {name:?} is used by {count} running processes (D41). Each delivers\n\
             only what it leased, but status and logs show them under one name: give each\n\
             node a name of its own ([storage.postgres] node, default: the host name)."
        );
    }
}

/// `https://host/path: reason` as `reason (https://host/path)`: the reason first.
fn reason_first(error: &str) -> String {
    match error.split_once(": ") {
        Some((url, reason)) if url.starts_with("http://") || url.starts_with("https://") => {
            format!("{reason} ({url})")
        }
        _ => error.to_string(),
    }
}

fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut s: String = text.chars().take(max.saturating_sub(1)).collect();
    s.push('…');
    s
}

fn delivery(i: &InterfaceReport) -> &str {
    match i.delivery.as_str() {
        "paused" => "PAUSED",
        "" => "-",
        other => other,
    }
}

fn age(secs: Option<u64>) -> String {
    secs.map_or("-".into(), human_secs)
}

fn table(out: &mut String, r: &Report) {
    let line = |path: &str, pending: &str, oldest: &str, rej: &str, quar: &str, del: &str| {
        format!("{path:<24} {pending:>8} {oldest:>8} {rej:>8} {quar:>5}  {del:<11} ")
    };
    let head = line(
        "INTERFACE",
        "PENDING",
        "OLDEST",
        "REJECTED",
        "QUAR.",
        "DELIVERY",
    );
    let room = WIDTH.saturating_sub(head.chars().count()).max(10);
    let _ = writeln!(out, "{head}LAST ERROR");
    for i in &r.interfaces {
        let error = i.last_error.as_deref().map_or("-".into(), reason_first);
        let row = line(
            &i.path,
            &i.pending.to_string(),
            &age(i.oldest_pending_age_secs),
            &i.rejected.to_string(),
            &i.quarantined.to_string(),
            delivery(i),
        );
        let _ = writeln!(out, "{row}{}", cut(&error, room));
    }
}

fn table_wide(out: &mut String, r: &Report) {
    let _ = writeln!(
        out,
        "{:<24} {:>8} {:>14} {:>8} {:>11} {:>10}  {:<11} {:<12} {:<12} LAST ERROR",
        "INTERFACE",
        "PENDING",
        "OLDEST PENDING",
        "REJECTED",
        "QUARANTINED",
        "DELIVERED",
        "DELIVERY",
        "NEXT RETRY",
        "LAST SUCCESS"
    );
    for i in &r.interfaces {
        // A stopped service retries nothing: its next retry is not news (D22).
        let retry = match (r.source, i.next_retry_ms) {
            (Source::Service, Some(t)) => format!(
                "in {}",
                human_secs(t.saturating_sub(r.generated_at_ms).div_ceil(1000))
            ),
            _ => "-".into(),
        };
        let success = i.last_success_ms.map_or("-".into(), |t| {
            format!(
                "{} ago",
                human_secs(r.generated_at_ms.saturating_sub(t) / 1000)
            )
        });
        let error = i.last_error.as_deref().map_or("-".into(), reason_first);
        let _ = writeln!(
            out,
            "{:<24} {:>8} {:>14} {:>8} {:>11} {:>10}  {:<11} {:<12} {:<12} {}",
            i.path,
            i.pending,
            age(i.oldest_pending_age_secs),
            i.rejected,
            i.quarantined,
            i.delivered,
            delivery(i),
            retry,
            success,
            error
        );
    }
}

/// `text` as lines of at most [`WIDTH`] columns, broken at spaces, after a blank line.
fn note(out: &mut String, text: &str) {
    let mut line = String::new();
    out.push('\n');
    for word in text.split(' ') {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > WIDTH {
            let _ = writeln!(out, "{line}");
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    let _ = writeln!(out, "{line}");
}

fn notes(out: &mut String, r: &Report) {
    for i in r.interfaces.iter().filter(|i| i.delivery == "paused") {
        note(
            out,
            &format!(
                "{}: delivery PAUSED: the platform refuses the configuration ({}). Check \
             [platform] url and credentials; delivery resumes by itself once it accepts.",
                i.path,
                i.last_error.as_deref().map_or("-".into(), reason_first)
            ),
        );
    }
    if r.interfaces.iter().any(|i| i.rejected > 0) {
        note(
            out,
            "REJECTED records were refused by the platform: `ap-intake status rejected` lists \
             them with the platform's reason; `ap-intake requeue KEY` sends one again.",
        );
    }
    for i in r.interfaces.iter().filter(|i| i.quarantined > 0) {
        note(
            out,
            &format!(
                "{}: {} record(s) QUARANTINED: stored but unreadable, never delivered as they \
                 are. `ap-intake status quarantined` lists them; `ap-intake requeue KEY` or \
                 `ap-intake drop KEY` settles each.",
                i.path, i.quarantined
            ),
        );
    }
    if let Some(s) = &r.sandbox_sink {
        let latest = s
            .latest
            .as_ref()
            .map(|l| format!("; latest {l}"))
            .unwrap_or_default();
        note(
            out,
            &format!(
                "Sandbox sink {}: {} document(s), {} record(s) received{latest}",
                s.dir, s.documents, s.records
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(error: &str) -> Report {
        Report {
            source: Source::DataDirectory,
            generated_at_ms: 10_000_000,
            interfaces: vec![InterfaceReport {
                interface: "payment-confirmation-v1".into(),
                path: "/payment-confirmation/v1".into(),
                pending: 1_234_567,
                rejected: 12_345,
                quarantined: 3,
                delivered: 9_999_999,
                oldest_pending_age_secs: Some(200_000),
                failures: 3,
                last_error: Some(error.into()),
                last_error_ms: Some(1),
                next_retry_ms: Some(20_000_000),
                delivery: "backing off".into(),
                last_success_ms: Some(1),
            }],
            sandbox_sink: None,
            nodes: Vec::new(),
            duplicate_node_names: Vec::new(),
            kept: Default::default(),
        }
    }

    #[test]
    fn the_default_table_fits_100_columns_with_the_reason_first() {
        let long = format!(
            "https://ap.example.com/intake/payment-confirmation-v1: {}",
            "connection refused ".repeat(10)
        );
        let text = render(&report(&long), false);
        for line in text
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('\n'))
        {
            if line.starts_with('/') || line.starts_with("INTERFACE") {
                assert!(line.chars().count() <= WIDTH, "{line:?}");
            }
        }
        assert!(text.contains("connection refused"), "{text}");
        assert!(!text.contains("NEXT RETRY"), "{text}");
    }

    /// D41: every process is listed with its instance; a name two live ones carry is
    /// warned about, one only a gone process shares is not.
    #[test]
    fn nodes_sharing_a_name_are_listed_and_warned_about() {
        let node = |name: &str, instance: &str, live: bool| crate::queue::Node {
            name: name.into(),
            instance: instance.into(),
            started_at_ms: 1_000_000,
            last_seen_ms: 9_990_000,
            leases: 7,
            live,
        };
        let mut r = report("boom");
        r.nodes = vec![
            node("solo", "0123456789abcdef", true),
            node("solo", "fedcba9876543210", false),
            node("twin", "aaaaaaaa11111111", true),
            node("twin", "bbbbbbbb22222222", true),
        ];
        r.duplicate_node_names = vec!["twin".into()];
        let text = render(&r, false);
        for line in text.lines() {
            assert!(line.chars().count() <= WIDTH, "{line:?}");
        }
        assert!(
            text.contains("INSTANCE") && text.contains("STARTED"),
            "{text}"
        );
        assert!(
            text.contains("aaaaaaaa") && text.contains("bbbbbbbb"),
            "{text}"
        );
        assert!(text.contains("10s ago (gone)"), "{text}");
        assert!(
            text.contains("WARNING: node name \"twin\" is used by 2 running processes"),
            "{text}"
        );
        assert!(!text.contains("\"solo\" is used"), "{text}");
    }

    #[test]
    fn wide_keeps_everything_but_the_next_retry_of_a_stopped_service() {
        let text = render(&report("https://h/x: boom"), true);
        assert!(text.contains("boom (https://h/x)"), "{text}");
        assert!(text.contains("LAST SUCCESS") && text.contains("QUARANTINED"));
        let row = text
            .lines()
            .find(|l| l.starts_with('/'))
            .unwrap_or_default();
        assert!(!row.contains(" in "), "no next retry while stopped: {row}");
    }
}
