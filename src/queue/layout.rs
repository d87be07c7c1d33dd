//! Key encodings of the index and meta trees (see the layout in `mod.rs`).

/// Which counter of an interface.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Count {
    Pending,
    Rejected,
    Delivered,
}

/// The pending-index entry of a lot: the keys queued together at `queued_at_ms`.
pub(crate) fn pending_key(interface: &str, queued_at_ms: u64, lot: u64) -> Vec<u8> {
    let mut k = prefix(interface);
    k.extend_from_slice(&queued_at_ms.to_be_bytes());
    k.extend_from_slice(&lot.to_be_bytes());
    k
}

/// The lot id of a pending-index key.
pub(crate) fn pending_lot(key: &[u8]) -> Option<u64> {
    let at = key.len().checked_sub(8)?;
    Some(u64::from_be_bytes(key.get(at..)?.try_into().ok()?))
}

/// A lot's keys: each as a u32 length and the key.
pub(crate) fn encode_lot(keys: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(keys.iter().map(|k| k.len() + 4).sum());
    for k in keys {
        out.extend_from_slice(&(k.len() as u32).to_be_bytes());
        out.extend_from_slice(k);
    }
    out
}

/// The keys of an encoded lot.
pub(crate) fn decode_lot(mut bytes: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let mut keys = Vec::new();
    while !bytes.is_empty() {
        let (len, rest) = bytes
            .split_first_chunk::<4>()
            .ok_or("truncated lot entry")?;
        let len = u32::from_be_bytes(*len) as usize;
        let key = rest.get(..len).ok_or("truncated lot entry")?;
        keys.push(key.to_vec());
        bytes = &rest[len..];
    }
    Ok(keys)
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

/// The meta key of the queue's format (see `sled_store.rs`).
pub(crate) const FORMAT_KEY: &[u8] = b"format";

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
        assert_eq!(pending_lot(&b), Some(1));
    }

    #[test]
    fn lots_round_trip() {
        let keys = vec![b"gl-code\0main\0A".to_vec(), Vec::new(), b"x".to_vec()];
        assert_eq!(decode_lot(&encode_lot(&keys)), Ok(keys.clone()));
        assert_eq!(decode_lot(&[]), Ok(vec![]));
        assert!(decode_lot(&encode_lot(&keys)[..6]).is_err());
    }
}
