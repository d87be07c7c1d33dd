//! A request's receipt (D38) as clients and operators see it: times in RFC 3339 (UTC), the
//! interface by its path.

use crate::queue::receipt::{Receipt, ReceiptRecord, ReceiptState};
use serde::Serialize;
use std::fmt::Write;
use std::time::{Duration, UNIX_EPOCH};

/// The body of `GET /requests/<id>` and of `status request <id> --json`.
#[derive(Debug, Serialize)]
pub struct Shown<'a> {
    request_id: &'a str,
    received_at: String,
    interface: &'a str,
    records: Vec<ShownRecord<'a>>,
}

#[derive(Debug, Serialize)]
struct ShownRecord<'a> {
    index: u32,
    key: &'a str,
    state: &'static str,
    updated_at: Option<String>,
    reason: Option<&'a str>,
}

impl<'a> Shown<'a> {
    /// The receipt in the clients' form.
    pub fn of(r: &'a Receipt) -> Self {
        Self {
            request_id: &r.request_id,
            received_at: rfc3339(r.received_at_ms),
            interface: path_of(&r.interface),
            records: r.records.iter().map(ShownRecord::of).collect(),
        }
    }
}

impl<'a> ShownRecord<'a> {
    fn of(r: &'a ReceiptRecord) -> Self {
        Self {
            index: r.index,
            key: &r.key,
            state: word(r.state),
            updated_at: r.updated_at_ms.map(rfc3339),
            reason: r.reason.as_deref(),
        }
    }
}

/// A record's state as clients and operators read it: the words of the OpenAPI document's
/// `ReceiptState` (D38), spelled here rather than derived from the queue's type.
pub fn word(state: ReceiptState) -> &'static str {
    match state {
        ReceiptState::Pending => "pending",
        ReceiptState::Delivered => "delivered",
        ReceiptState::Rejected => "rejected",
        ReceiptState::Quarantined => "quarantined",
        ReceiptState::Superseded => "superseded",
    }
}

/// The interface's path, or its id if the table no longer has it.
pub fn path_of(id: &str) -> &str {
    crate::interfaces::INTERFACES
        .iter()
        .find(|i| i.id == id)
        .map_or(id, |i| i.path)
}

/// Unix milliseconds as RFC 3339 in UTC, to the millisecond.
pub fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// The receipt for a terminal: a head, then one line per record.
pub fn render(r: &Receipt) -> String {
    let key = if r.api_key.is_empty() {
        "(none: sandbox)"
    } else {
        &r.api_key
    };
    let mut out = format!(
        "request {}  received {}  {}  API key {key}\n",
        r.request_id,
        rfc3339(r.received_at_ms),
        path_of(&r.interface)
    );
    let _ = writeln!(out, "{:>6}  {:<12} {:<25} KEY", "INDEX", "STATE", "UPDATED");
    for rec in &r.records {
        let state = word(rec.state);
        let updated = rec.updated_at_ms.map_or("-".into(), rfc3339);
        let _ = write!(
            out,
            "{:>6}  {state:<12} {updated:<25} {}",
            rec.index, rec.key
        );
        if let Some(reason) = &rec.reason {
            let _ = write!(out, "  ({reason})");
        }
        out.push('\n');
    }
    out
}
