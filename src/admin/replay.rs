//! `ap-intake replay` (D49): the command's wire form and what it prints. The work is the
//! store's (`queue/replay.rs`).

use crate::queue::QueueKey;
use crate::queue::replay::{Replayed, Window};
use serde::{Deserialize, Serialize};

/// Keys a replay's answer and its audit record list at most; the counts are always whole.
pub const KEYS_SHOWN: usize = 100;

/// What to replay, on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Asked {
    /// Delivered at or after (unix ms).
    pub since_ms: u64,
    /// Delivered before (unix ms).
    pub until_ms: Option<u64>,
    /// One interface (its id).
    pub interface: Option<String>,
    /// These keys only (operator form).
    pub keys: Vec<String>,
    /// Say what would be queued, queue nothing.
    pub dry_run: bool,
}

impl Asked {
    /// The store's window; an error names a key that is not one.
    pub fn window(&self) -> Result<Window, String> {
        let keys = self
            .keys
            .iter()
            .map(|k| QueueKey::parse(k).map_err(|e| format!("--key {k:?}: {e}")))
            .collect::<Result<_, _>>()?;
        Ok(Window {
            since_ms: self.since_ms,
            until_ms: self.until_ms,
            interface: self.interface.clone(),
            keys,
        })
    }
}

/// What a replay did, on the wire: each list whole (the audit record is bounded instead).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Done {
    /// Keys queued again (or that would be, in a dry run).
    pub queued: Vec<String>,
    /// Keys with a version pending or parked, left alone.
    pub left_alone: Vec<String>,
    /// Keys named that have no kept version in the window.
    pub not_kept: Vec<String>,
    /// Whether it was a dry run.
    pub dry_run: bool,
}

impl Done {
    /// From what the store did.
    pub fn of(r: &Replayed, dry_run: bool) -> Self {
        let shown = |keys: &[QueueKey]| keys.iter().map(ToString::to_string).collect();
        Self {
            queued: shown(&r.queued),
            left_alone: shown(&r.left_alone),
            not_kept: shown(&r.not_kept),
            dry_run,
        }
    }

    /// The audit record's summary: counts, and the first keys of each list.
    pub fn changed(&self) -> serde_json::Value {
        serde_json::json!({
            "queued": super::audit::keys(&self.queued),
            "left_alone": super::audit::keys(&self.left_alone),
            "not_kept": super::audit::keys(&self.not_kept),
        })
    }

    /// What the command prints.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let verb = if self.dry_run {
            "would queue"
        } else {
            "queued"
        };
        out.push_str(&format!(
            "{verb} {} key(s) again, each to be delivered once more\n",
            self.queued.len()
        ));
        for k in self.queued.iter().take(KEYS_SHOWN) {
            out.push_str(&format!("  {k}\n"));
        }
        if self.queued.len() > KEYS_SHOWN {
            out.push_str(&format!(
                "  ... and {} more\n",
                self.queued.len() - KEYS_SHOWN
            ));
        }
        if !self.left_alone.is_empty() {
            out.push_str(&format!(
                "left alone {} key(s) with a newer version pending or parked\n",
                self.left_alone.len()
            ));
        }
        if !self.not_kept.is_empty() {
            out.push_str(&format!(
                "could not replay {} key(s): no version of theirs delivered in that time is \
                 kept (delivered before [retention] delivered_days, or never delivered)\n",
                self.not_kept.len()
            ));
            for k in self.not_kept.iter().take(KEYS_SHOWN) {
                out.push_str(&format!("  {k}\n"));
            }
        }
        out
    }
}
