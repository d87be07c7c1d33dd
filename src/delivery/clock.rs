//! The wall clock delivery reads (D31). Waits run on the monotonic clock (`Instant`); the wall
//! clock only dates what is stored for `status` and is read back, clamped, at start. Tests
//! give the worker a clock they can move.

use std::sync::atomic::{AtomicI64, Ordering};

/// Where delivery gets the wall time.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn wall_ms(&self) -> u64;
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn wall_ms(&self) -> u64 {
        crate::queue::now_ms()
    }
}

/// The system's wall clock moved by an offset that can be changed at any time: a wall clock
/// that jumps, as NTP or an operator can make it.
#[derive(Debug, Default)]
pub struct ShiftedClock {
    offset_ms: AtomicI64,
}

impl ShiftedClock {
    /// Moves the clock by `ms` (negative: back).
    pub fn jump(&self, ms: i64) {
        self.offset_ms.fetch_add(ms, Ordering::Relaxed);
    }
}

impl Clock for ShiftedClock {
    fn wall_ms(&self) -> u64 {
        let now = i64::try_from(crate::queue::now_ms()).unwrap_or(i64::MAX);
        u64::try_from(now.saturating_add(self.offset_ms.load(Ordering::Relaxed))).unwrap_or(0)
    }
}
