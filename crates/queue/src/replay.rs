//! Replay (D49): the XML of each key's last delivered version, kept `[retention]
//! delivered_days`, queued again for when the platform lost what it had taken. A key with a
//! version pending or parked is left alone: what is queued already is newer than what was
//! delivered. Each replayed key goes to the end of its interface's line with a new version,
//! and is delivered once more in the usual way.

use crate::QueueKey;

/// Which kept versions to queue again.
#[derive(Debug, Clone, Default)]
pub struct Window {
    /// Delivered at or after (unix ms).
    pub since_ms: u64,
    /// Delivered before (unix ms); now when `None`.
    pub until_ms: Option<u64>,
    /// Only this interface's (its id).
    pub interface: Option<String>,
    /// Only these keys; every key when empty.
    pub keys: Vec<QueueKey>,
}

/// What a replay did, or would do (a dry run).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replayed {
    /// Keys queued again, in the order they were delivered.
    pub queued: Vec<QueueKey>,
    /// Keys with a version pending or parked, left alone.
    pub left_alone: Vec<QueueKey>,
    /// Keys asked for by name with no kept version in the window: delivered before the
    /// retention (gone) or never delivered.
    pub not_kept: Vec<QueueKey>,
}

/// A kept version, as an engine reads it for a replay.
#[derive(Debug, Clone)]
pub struct Kept {
    /// The key.
    pub key: QueueKey,
    /// Its interface.
    pub interface: String,
    /// Its XML element.
    pub xml: String,
}

impl Window {
    /// Whether `key` is one of the keys asked for (any key when none was named).
    pub fn names(&self, key: &QueueKey) -> bool {
        self.keys.is_empty() || self.keys.contains(key)
    }

    /// The keys asked for by name that `found` lacks.
    pub fn missing(&self, found: &[Kept]) -> Vec<QueueKey> {
        self.keys
            .iter()
            .filter(|k| !found.iter().any(|f| &f.key == *k))
            .cloned()
            .collect()
    }
}

/// What the kept XML holds (`status`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeptSize {
    /// Keys with a kept version.
    pub keys: u64,
    /// Bytes of their XML.
    pub bytes: u64,
}

/// Kept versions removed in one pruning step.
pub const PRUNE_STEP: i64 = 5000;
