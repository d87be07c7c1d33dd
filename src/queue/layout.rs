//! Key encodings of the index and meta trees (see the layout in `mod.rs`).

/// Which counter of an interface.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Count {
    Pending,
    Rejected,
    Delivered,
}

pub(crate) fn pending_key(interface: &str, queued_at_ms: u64, version: u64) -> Vec<u8> {
    let mut k = prefix(interface);
    k.extend_from_slice(&queued_at_ms.to_be_bytes());
    k.extend_from_slice(&version.to_be_bytes());
    k
}

/// `queued_at_ms` of a pending-index key.
pub(crate) fn pending_queued_at(key: &[u8]) -> Option<u64> {
    let at = key.len().checked_sub(16)?;
    let bytes: [u8; 8] = key.get(at..at + 8)?.try_into().ok()?;
    Some(u64::from_be_bytes(bytes))
}

pub(crate) fn rejected_key(interface: &str, key: &[u8]) -> Vec<u8> {
    let mut k = prefix(interface);
    k.extend_from_slice(key);
    k
}

/// The queue key inside a rejected-index key.
pub(crate) fn rejected_queue_key(key: &[u8]) -> &[u8] {
    let start = key
        .iter()
        .position(|&b| b == 0)
        .map_or(key.len(), |p| p + 1);
    &key[start..]
}

/// `interface 0x00`: the prefix of one interface's entries in an index tree.
pub(crate) fn prefix(interface: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(interface.len() + 17);
    k.extend_from_slice(interface.as_bytes());
    k.push(0);
    k
}

pub(crate) fn count_key(interface: &str, count: Count) -> Vec<u8> {
    let kind = match count {
        Count::Pending => "pending",
        Count::Rejected => "rejected",
        Count::Delivered => "delivered",
    };
    [b"count\0", interface.as_bytes(), b"\0", kind.as_bytes()].concat()
}

pub(crate) fn backoff_key(interface: &str) -> Vec<u8> {
    [b"backoff\0", interface.as_bytes()].concat()
}

pub(crate) fn decode_u64(bytes: Option<&[u8]>) -> u64 {
    bytes
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map_or(0, u64::from_be_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_keys_sort_by_interface_then_age() {
        let a = pending_key("gl", 5, 9);
        let b = pending_key("gl", 6, 1);
        let c = pending_key("gl-x", 1, 1);
        assert!(a < b && b < c);
        assert_eq!(pending_queued_at(&b), Some(6));
        assert_eq!(rejected_queue_key(&rejected_key("gl", b"k\0x")), b"k\0x");
    }
}
