//! Request identifiers (D4) that reveal nothing about the service (D43): an id the service
//! makes is the millisecond it was made and 96 bits from the operating system's random source,
//! with no counter in it, so no client learns from its ids how many requests others send.
//!
//! The time comes first so ids are made in order: receipts are stored under their request id
//! (D38), and wholly random ids made each insert touch another page of that index, which
//! measured a third more bytes written per record and a third fewer single-record requests a
//! second.

use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicU64, Ordering};

/// Request identifiers: the client's `x-request-id` when it is a sane token, else a new one.
pub struct RequestIds {
    /// A secret of this process: the key of [`Self::nonce`]'s permutation, and of the ids
    /// made should the random source ever fail.
    key: [u8; 32],
    /// How many nonces (and fallback ids) were made; never shown as such.
    next: AtomicU64,
}

impl Default for RequestIds {
    fn default() -> Self {
        // The random source is what keys the process; the clock and the process id only
        // keep the key apart between processes should it fail at start.
        let mut seed = [0u8; 32];
        let _ = getrandom::fill(&mut seed);
        let mut h = Sha256::new();
        h.update(seed);
        h.update(std::process::id().to_le_bytes());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        h.update(now.as_nanos().to_le_bytes());
        Self {
            key: h.finalize().into(),
            next: AtomicU64::new(0),
        }
    }
}

impl RequestIds {
    /// A new identifier: 36 hex digits, 12 of the millisecond it was made (the server's clock,
    /// which every answer's `Date` shows anyway) and 24 of fresh random bits (D43). Costs one
    /// `getrandom` call (about a microsecond).
    pub fn fresh(&self) -> String {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64;
        let mut id = [0u8; 18];
        id[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
        if getrandom::fill(&mut id[6..]).is_err() {
            // The kernel's random source does not fail once booted; should it, the ids stay
            // unpredictable and unique through the process's secret.
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            let mut h = Sha256::new();
            h.update(self.key);
            h.update(b"id");
            h.update(n.to_le_bytes());
            id[6..].copy_from_slice(&h.finalize()[..12]);
        }
        hex::encode(id)
    }

    /// A number no other request of this process gets (receipts tell requests that share an
    /// `x-request-id` apart with it): a keyed permutation of a counter, so it is unique, and
    /// shows no count should it ever be seen.
    pub fn nonce(&self) -> u64 {
        permute(&self.key, self.next.fetch_add(1, Ordering::Relaxed))
    }

    /// Whether `v` can be a request id: 1 to 64 letters, digits and `-_.:`.
    pub fn is_id(v: &str) -> bool {
        (1..=64).contains(&v.len())
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
    }

    /// The identifier of a request with these headers.
    pub fn for_request(&self, headers: &http::HeaderMap) -> String {
        headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .filter(|v| Self::is_id(v))
            .map_or_else(|| self.fresh(), str::to_string)
    }
}

/// A keyed permutation of 64-bit numbers: a four-round Feistel network whose round function is
/// SHA-256 under `key` (Luby-Rackoff). Distinct inputs give distinct outputs.
fn permute(key: &[u8; 32], n: u64) -> u64 {
    let (mut left, mut right) = ((n >> 32) as u32, n as u32);
    for round in 0u8..4 {
        let mut h = Sha256::new();
        h.update(key);
        h.update([round]);
        h.update(right.to_le_bytes());
        let f = h.finalize();
        let f = u32::from_le_bytes([f[0], f[1], f[2], f[3]]);
        (left, right) = (right, left ^ f);
    }
    (u64::from(left) << 32) | u64::from(right)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn made_ids_are_the_time_and_96_random_bits_d43() {
        let ids = RequestIds::default();
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let made: Vec<String> = (0..1000).map(|_| ids.fresh()).collect();
        assert!(
            made.iter()
                .all(|id| id.len() == 36 && RequestIds::is_id(id))
        );
        assert_eq!(made.iter().collect::<HashSet<_>>().len(), made.len());
        let ms: Vec<u64> = made
            .iter()
            .map(|id| u64::from_str_radix(&id[..12], 16).unwrap())
            .collect();
        assert!(
            ms[0] >= before && ms[0] < before + 60_000,
            "{} {before}",
            ms[0]
        );
        assert!(ms.windows(2).all(|w| w[0] <= w[1]), "made in order");
        // No position of the random part is fixed, as a counter's high digits would be ...
        for i in 12..36 {
            let digits: HashSet<u8> = made.iter().map(|id| id.as_bytes()[i]).collect();
            assert!(digits.len() > 8, "digit {i} takes {} values", digits.len());
        }
        // ... and consecutive random parts do not differ by one, as a counter's would.
        let random = |s: &str| u128::from_str_radix(&s[12..], 16).unwrap();
        assert!(
            made.windows(2)
                .all(|w| random(&w[1]).abs_diff(random(&w[0])) > 1 << 32)
        );
    }

    #[test]
    fn nonces_are_unique_and_show_no_count_d43() {
        let ids = RequestIds::default();
        let nonces: Vec<u64> = (0..20_000).map(|_| ids.nonce()).collect();
        assert_eq!(nonces.iter().collect::<HashSet<_>>().len(), nonces.len());
        let close = nonces
            .windows(2)
            .filter(|w| w[0].abs_diff(w[1]) < 1 << 32)
            .count();
        assert!(close < 10, "{close} consecutive nonces are near each other");
        let other = RequestIds::default();
        assert_ne!(other.nonce(), nonces[0], "each process has its own key");
    }

    #[test]
    fn a_sane_client_id_is_kept_and_anything_else_replaced() {
        let ids = RequestIds::default();
        let mut headers = http::HeaderMap::new();
        headers.insert("x-request-id", "erp-batch-42".parse().unwrap());
        assert_eq!(ids.for_request(&headers), "erp-batch-42");
        headers.insert("x-request-id", "has space".parse().unwrap());
        assert_eq!(ids.for_request(&headers).len(), 36);
    }

    /// How long making an id takes (printed; `cargo test --release -- --nocapture ids`).
    #[test]
    fn making_an_id_takes_about_a_microsecond() {
        let ids = RequestIds::default();
        let started = std::time::Instant::now();
        for _ in 0..10_000 {
            std::hint::black_box(ids.fresh());
        }
        let each = started.elapsed() / 10_000;
        println!("one request id: {each:?}");
        assert!(each < std::time::Duration::from_micros(50), "{each:?}");
    }
}
