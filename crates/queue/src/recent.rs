//! What a store knows of its own health from its last write, so that readiness (`/readyz`,
//! the `ap_intake_ready` gauge) needs no write of its own while the queue is busy: a commit
//! that just succeeded, or just failed, says as much as a probe would. Only a store that has
//! written nothing for [`PROBE_EVERY`] is probed with a real write (D29, D30).

use crate::StoreError;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long the outcome of a write answers for the store's readiness.
pub const PROBE_EVERY: Duration = Duration::from_secs(5);

/// The outcome of the store's last write (a commit, or a probe), and when.
#[derive(Default)]
pub(crate) struct LastWrite(Mutex<Option<(Instant, Result<(), String>)>>);

impl LastWrite {
    /// Notes a write's outcome.
    pub fn note<T>(&self, outcome: &Result<T, StoreError>) {
        let seen = outcome.as_ref().map(|_| ()).map_err(ToString::to_string);
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some((Instant::now(), seen));
    }

    /// The readiness the last write shows, if it was recent; `None` when a probe is due.
    pub fn recent(&self) -> Option<Result<(), StoreError>> {
        let last = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let (at, outcome) = last.as_ref()?;
        (at.elapsed() < PROBE_EVERY).then(|| outcome.clone().map_err(StoreError::LastWriteFailed))
    }
}
