//! Refusal lines in bounded volume (D44): per client address and status (or failed TLS
//! handshake), the first
//! [`LINES_PER_MINUTE`] refusals of a minute get a line of their own; the rest of that minute
//! becomes one line with their count, written when the minute ends (with the summary line).
//!
//! The table holds at most [`MAX_SOURCES`] pairs of address and status. Past that (a hostile
//! network can use many addresses) every further address shares one entry per status,
//! "other addresses": together they get the first lines of the minute and one count line, so
//! a minute adds at most about `(MAX_SOURCES + statuses) × (LINES_PER_MINUTE + 1)` lines
//! whatever arrives.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Refusals per address and status with a line of their own, each minute.
pub const LINES_PER_MINUTE: u32 = 10;

/// Pairs of address and status followed one by one within a minute.
pub const MAX_SOURCES: usize = 256;

/// The "status" of a failed TLS handshake: a connection refused before any request.
pub const HANDSHAKE: u16 = 0;

/// The minute's refusals so far.
#[derive(Default)]
pub struct Refusals {
    table: Mutex<HashMap<(Option<IpAddr>, u16), Tally>>,
}

#[derive(Default)]
struct Tally {
    logged: u32,
    held: u64,
}

impl Refusals {
    fn table(&self) -> MutexGuard<'_, HashMap<(Option<IpAddr>, u16), Tally>> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts a refusal with `status` of a request from `peer`; true when it gets its own line.
    pub fn admit(&self, peer: Option<IpAddr>, status: u16) -> bool {
        let mut table = self.table();
        let key = (peer.map(|ip| ip.to_canonical()), status);
        let key = if table.len() < MAX_SOURCES || table.contains_key(&key) {
            key
        } else {
            (None, status)
        };
        let tally = table.entry(key).or_default();
        if tally.logged < LINES_PER_MINUTE {
            tally.logged += 1;
            true
        } else {
            tally.held += 1;
            false
        }
    }

    /// Ends the minute: one line for each address and status with refusals not logged one by
    /// one, then a fresh table.
    pub fn end_minute(&self, period: &str) {
        let ended = std::mem::take(&mut *self.table());
        let mut held: Vec<_> = ended.into_iter().filter(|(_, t)| t.held > 0).collect();
        held.sort_by_key(|&(key, _)| key);
        for ((peer, status), tally) in held {
            let peer = peer.map_or_else(|| "other addresses".to_string(), |p| p.to_string());
            if status == HANDSHAKE {
                tracing::info!(
                    peer,
                    not_logged = tally.held,
                    "more TLS handshakes failed {period} than logged one by one"
                );
            } else {
                tracing::info!(
                    peer,
                    status,
                    not_logged = tally.held,
                    "more requests refused {period} than logged one by one"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u32) -> Option<IpAddr> {
        Some(IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + n)))
    }

    #[test]
    fn ten_lines_a_minute_per_address_and_status_then_a_count() {
        let r = Refusals::default();
        let logged = (0..1000).filter(|_| r.admit(ip(1), 401)).count();
        assert_eq!(logged, 10);
        assert!(r.admit(ip(1), 404), "another status has its own lines");
        assert!(
            r.admit(ip(1), HANDSHAKE),
            "failed TLS handshakes have their own lines"
        );
        assert!(r.admit(ip(2), 401), "another address has its own lines");
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert!(
            !r.admit(Some(mapped), 401),
            "IPv4-mapped is the same address"
        );
        let held = r.table()[&(ip(1), 401)].held;
        assert_eq!(held, 991);
        r.end_minute("in the last minute");
        assert!(r.admit(ip(1), 401), "a new minute starts afresh");
    }

    #[test]
    fn past_the_bound_further_addresses_share_one_entry_per_status() {
        let r = Refusals::default();
        for n in 0..MAX_SOURCES as u32 {
            assert!(r.admit(ip(n), 401));
        }
        let more = (0..100).filter(|&n| r.admit(ip(10_000 + n), 401)).count();
        assert_eq!(more, LINES_PER_MINUTE as usize);
        assert!(r.admit(ip(0), 401), "known addresses keep their own lines");
        assert_eq!(r.table().len(), MAX_SOURCES + 1);
    }
}
