//! The audit trail's service side (D50): who acted ([`Actor`]: the admin socket's peer by
//! `SO_PEERCRED`, or the user running a command on a stopped store), the record made of each
//! action and its log line, and the record's wire form (`status audit --json`).

use crate::queue::audit::AuditRecord;
use crate::queue::{Store, StoreError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Keys an audit record lists at most; the count is always whole.
pub const KEYS_LISTED: usize = 100;

/// Who did something.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// The Unix user's id; `None` for the service acting on a signal.
    pub uid: Option<u32>,
    /// The user's name (through NSS, so directory users resolve), or `uid <n>` when it has
    /// none; what a signal names.
    pub name: String,
}

impl Actor {
    /// The Unix user `uid`.
    pub fn user(uid: u32) -> Self {
        let name = uzers::get_user_by_uid(uid)
            .map(|u| u.name().to_string_lossy().into_owned())
            .unwrap_or_else(|| format!("uid {uid}"));
        Self {
            uid: Some(uid),
            name,
        }
    }

    /// The user running this process: a command on a stopped store, the service itself.
    pub fn current() -> Self {
        Self::user(uzers::get_current_uid())
    }

    /// The service acting on `signal` (a reload: whoever sent it is not known).
    pub fn signal(signal: &str) -> Self {
        let me = Self::current();
        Self {
            uid: me.uid,
            name: format!("{} ({signal})", me.name),
        }
    }
}

/// Adds a record of `action` by `actor` to the store's trail and logs it. The arguments and
/// the changes are JSON objects.
pub fn record(
    store: &dyn Store,
    actor: &Actor,
    action: &str,
    args: &Value,
    changed: &Value,
) -> Result<(), StoreError> {
    let mut id = [0u8; 16];
    // Without randomness the time and the action still tell records apart in practice; a
    // collision would keep the first (the trail adds an id once).
    let _ = getrandom::fill(&mut id);
    let at_ms = crate::queue::now_ms();
    let record = AuditRecord {
        id: id.iter().map(|b| format!("{b:02x}")).collect(),
        at_ms,
        actor: actor.name.clone(),
        uid: actor.uid,
        action: action.to_string(),
        args: args.to_string(),
        changed: changed.to_string(),
    };
    store.audit(&record)?;
    tracing::info!(
        target: "ap_intake::audit",
        actor = %actor.name,
        uid = actor.uid,
        action,
        args = %record.args,
        changed = %record.changed,
        "operator action"
    );
    Ok(())
}

/// Keys as an audit record lists them: the first [`KEYS_LISTED`], and how many in all.
pub fn keys(keys: &[String]) -> Value {
    serde_json::json!({
        "count": keys.len(),
        "keys": keys.iter().take(KEYS_LISTED).collect::<Vec<_>>(),
    })
}

/// An audit record on the wire and in `status audit --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Its id.
    pub id: String,
    /// When (unix ms).
    pub at_ms: u64,
    /// The user's name.
    pub actor: String,
    /// The user's id.
    pub uid: Option<u32>,
    /// The action.
    pub action: String,
    /// Its arguments.
    pub args: Value,
    /// What it changed.
    pub changed: Value,
}

impl From<&AuditRecord> for Entry {
    fn from(r: &AuditRecord) -> Self {
        let json = |t: &str| serde_json::from_str(t).unwrap_or_else(|_| Value::String(t.into()));
        Self {
            id: r.id.clone(),
            at_ms: r.at_ms,
            actor: r.actor.clone(),
            uid: r.uid,
            action: r.action.clone(),
            args: json(&r.args),
            changed: json(&r.changed),
        }
    }
}

impl From<Entry> for AuditRecord {
    fn from(e: Entry) -> Self {
        Self {
            id: e.id,
            at_ms: e.at_ms,
            actor: e.actor,
            uid: e.uid,
            action: e.action,
            args: e.args.to_string(),
            changed: e.changed.to_string(),
        }
    }
}

/// The trail for a terminal: a line a record.
pub fn render(records: &[AuditRecord]) -> String {
    let mut out = String::new();
    for r in records {
        let e = Entry::from(r);
        out.push_str(&format!(
            "{}  {:<16} {:<18} {}  {}\n",
            crate::status::receipt::rfc3339(r.at_ms),
            r.action,
            r.actor,
            e.args,
            e.changed
        ));
    }
    if records.is_empty() {
        out.push_str("no audit records in that time\n");
    }
    out
}
