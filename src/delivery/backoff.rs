//! Capped exponential backoff with full jitter (D18), and `Retry-After`.

use std::time::{Duration, SystemTime};

/// `[delivery] backoff_base_ms` and `backoff_cap_ms` (plain data, defined with the config;
/// its rules are here).
pub use crate::config::BackoffPolicy as Policy;

/// `Retry-After` is honoured up to this, so a broken header cannot park deliveries for years.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 3600);

impl Policy {
    /// The ceiling after `failures` failures in a row: base, 2 base, 4 base, ... up to cap.
    pub fn ceiling(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(31);
        self.base.saturating_mul(1 << doublings).min(self.cap)
    }

    /// The delay before the next attempt: uniformly random up to the ceiling ("full jitter"),
    /// and never shorter than the platform's `Retry-After`.
    pub fn delay(&self, failures: u32, retry_after: Option<Duration>) -> Duration {
        let ceiling = self.ceiling(failures).as_millis() as u64;
        let random = getrandom::u64().unwrap_or(ceiling / 2);
        let jittered = Duration::from_millis(random % (ceiling + 1));
        jittered.max(retry_after.unwrap_or_default().min(MAX_RETRY_AFTER))
    }
}

/// A `Retry-After` value: delay-seconds or an HTTP date (RFC 9110), relative to `now`.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(300),
        }
    }

    #[test]
    fn ceilings_double_up_to_the_cap() {
        let p = policy();
        let secs: Vec<u64> = (1..=11).map(|f| p.ceiling(f).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(p.ceiling(u32::MAX), Duration::from_secs(300));
    }

    #[test]
    fn delays_are_jittered_within_the_ceiling_and_respect_retry_after() {
        let p = policy();
        let delays: Vec<Duration> = (0..200).map(|_| p.delay(4, None)).collect();
        assert!(delays.iter().all(|d| *d <= Duration::from_secs(8)));
        assert!(delays.iter().any(|d| *d != delays[0]), "jittered");
        let d = p.delay(1, Some(Duration::from_secs(30)));
        assert!(d >= Duration::from_secs(30));
    }

    #[test]
    fn retry_after_in_both_forms() {
        let now = httpdate::parse_http_date("Sun, 22 Nov 2026 10:00:00 GMT").unwrap();
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Sun, 22 Nov 2026 10:01:30 GMT", now),
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            parse_retry_after("Sun, 22 Nov 2026 09:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
    }
}
