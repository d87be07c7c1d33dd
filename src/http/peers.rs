//! Connections per client address (D26): one source cannot take every connection slot.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How often at most the refusals are summed up at info level: a flood must not become a
/// flood of log lines.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(60);

/// Open connections per client address.
pub struct Peers {
    max_per_ip: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    open: HashMap<IpAddr, usize>,
    refused_since_log: u64,
    last_log: Option<Instant>,
}

/// One admitted connection; its address's count drops when this is dropped.
pub struct Admitted {
    peers: Arc<Peers>,
    ip: IpAddr,
}

impl Peers {
    /// At most `max_per_ip` connections per address.
    pub fn new(max_per_ip: usize) -> Arc<Self> {
        Arc::new(Self {
            max_per_ip,
            state: Mutex::new(State::default()),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The counts stay consistent whatever panicked while holding the lock.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts a new connection from `ip`, or `None` when that address is at its cap.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<Admitted> {
        // An IPv4 client on a dual-stack listener must not count as another address.
        let ip = ip.to_canonical();
        let mut state = self.state();
        let open = state.open.entry(ip).or_insert(0);
        if *open < self.max_per_ip {
            *open += 1;
            return Some(Admitted {
                peers: Arc::clone(self),
                ip,
            });
        }
        state.refused_since_log += 1;
        tracing::debug!(%ip, max = self.max_per_ip, "connection refused: address at its cap");
        let now = Instant::now();
        if state
            .last_log
            .is_none_or(|t| now.duration_since(t) >= REFUSAL_LOG_EVERY)
        {
            tracing::info!(
                %ip,
                refused = state.refused_since_log,
                max_connections_per_ip = self.max_per_ip,
                "connections refused: a client address reached server.max_connections_per_ip"
            );
            state.refused_since_log = 0;
            state.last_log = Some(now);
        }
        None
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut state = self.peers.state();
        if let Some(open) = state.open.get_mut(&self.ip) {
            *open -= 1;
            if *open == 0 {
                state.open.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_at_its_cap_is_refused_until_one_of_its_connections_ends() {
        let peers = Peers::new(2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let first = peers.admit(a).unwrap();
        let _second = peers.admit(a).unwrap();
        assert!(peers.admit(a).is_none());
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert!(
            peers.admit(mapped).is_none(),
            "IPv4-mapped is the same address"
        );
        assert!(
            peers.admit(b).is_some(),
            "other addresses have their own count"
        );
        drop(first);
        assert!(peers.admit(a).is_some());
    }

    #[test]
    fn counts_of_closed_addresses_are_forgotten() {
        let peers = Peers::new(1);
        drop(peers.admit("10.0.0.1".parse().unwrap()));
        assert!(peers.state().open.is_empty());
    }
}
