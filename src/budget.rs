//! The in-flight memory budget (D27): bodies being received or parsed, and the trees and
//! reports their parsing builds, are charged against `[limits] inflight_bytes` before the
//! memory is taken. A request that would pass the budget waits for room until its deadline,
//! then is refused (503); one that could never fit is refused at once (413).
//!
//! A sixteenth of the budget is kept for small requests (at most [`SMALL_REQUEST_BYTES`] in
//! all), so that a few large bodies waiting for room never hold up a client's single record.

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// A request whose whole charge stays within this is small: it may use the reserve.
pub const SMALL_REQUEST_BYTES: usize = 64 * 1024;

/// Permits count kibibytes, so that one charge of any size fits tokio's `u32` permits.
const UNIT: usize = 1024;

/// Why a charge was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    /// The budget stayed full until the request's deadline (503, retry later).
    #[error(
        "the service is processing as many request bodies as its memory allows; nothing was \
         queued, retry later"
    )]
    Busy,
    /// The request alone needs more than the whole budget (413).
    #[error(
        "the request needs about {needed_mib} MiB to process, more than the {budget_mib} MiB \
         this service allows; send fewer or smaller records per request"
    )]
    TooLarge {
        /// What the request needs, in MiB (rounded up).
        needed_mib: usize,
        /// The budget, in MiB.
        budget_mib: usize,
    },
}

/// The shared budget.
#[derive(Debug)]
pub struct Budget {
    main: Arc<Semaphore>,
    main_units: usize,
    reserve: Arc<Semaphore>,
    total_bytes: usize,
}

/// What one request holds; released when dropped.
#[derive(Debug, Default)]
pub struct Charge {
    bytes: usize,
    /// Whether the request had to wait for room at least once.
    waited: bool,
    main: Option<OwnedSemaphorePermit>,
    reserve: Option<OwnedSemaphorePermit>,
}

impl Charge {
    /// Bytes charged so far.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether the request was held back waiting for room: its body then arrived late by the
    /// service's doing, not the client's (503, not 408).
    pub fn waited(&self) -> bool {
        self.waited
    }
}

fn units(bytes: usize) -> usize {
    bytes.div_ceil(UNIT)
}

fn merge(slot: &mut Option<OwnedSemaphorePermit>, permit: OwnedSemaphorePermit) {
    match slot {
        Some(held) => held.merge(permit),
        None => *slot = Some(permit),
    }
}

impl Budget {
    /// A budget of `total_bytes` (at least 1 MiB is used).
    pub fn new(total_bytes: usize) -> Self {
        let total_units = units(total_bytes).max(1024);
        let reserve_units = (total_units / 16).max(units(SMALL_REQUEST_BYTES));
        let main_units = total_units - reserve_units;
        Self {
            main: Arc::new(Semaphore::new(main_units)),
            main_units,
            reserve: Arc::new(Semaphore::new(reserve_units)),
            total_bytes: total_units * UNIT,
        }
    }

    /// Bytes not charged right now (for metrics and tests).
    pub fn available_bytes(&self) -> usize {
        (self.main.available_permits() + self.reserve.available_permits()) * UNIT
    }

    /// The whole budget in bytes.
    pub fn total_bytes(&self) -> usize {
        self.total_bytes
    }

    /// Adds `bytes` to `charge`, waiting for room until `deadline`.
    pub async fn charge(
        &self,
        charge: &mut Charge,
        bytes: usize,
        deadline: Instant,
    ) -> Result<(), BudgetError> {
        let need = units(charge.bytes + bytes) - units(charge.bytes);
        if need == 0 {
            charge.bytes += bytes;
            return Ok(());
        }
        let held = charge.main.as_ref().map_or(0, |p| p.num_permits());
        if held + need > self.main_units {
            return Err(BudgetError::TooLarge {
                needed_mib: (charge.bytes + bytes).div_ceil(1 << 20),
                budget_mib: self.total_bytes >> 20,
            });
        }
        let need32 = u32::try_from(need).map_err(|_| BudgetError::Busy)?;
        if let Ok(p) = Arc::clone(&self.main).try_acquire_many_owned(need32) {
            merge(&mut charge.main, p);
        } else if charge.bytes + bytes <= SMALL_REQUEST_BYTES {
            charge.waited = true;
            let p = acquire(&self.reserve, need32, deadline).await?;
            merge(&mut charge.reserve, p);
        } else {
            charge.waited = true;
            let p = acquire(&self.main, need32, deadline).await?;
            merge(&mut charge.main, p);
        }
        charge.bytes += bytes;
        Ok(())
    }
}

async fn acquire(
    sem: &Arc<Semaphore>,
    n: u32,
    deadline: Instant,
) -> Result<OwnedSemaphorePermit, BudgetError> {
    match tokio::time::timeout_at(deadline, Arc::clone(sem).acquire_many_owned(n)).await {
        Ok(Ok(p)) => Ok(p),
        _ => Err(BudgetError::Busy),
    }
}

/// How long a refused request should wait before retrying (Retry-After).
pub const RETRY_AFTER: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests {
    use super::*;

    fn soon() -> Instant {
        Instant::now() + Duration::from_millis(50)
    }

    #[tokio::test]
    async fn charges_are_released_when_dropped() {
        let b = Budget::new(16 << 20);
        let total = b.available_bytes();
        let mut c = Charge::default();
        b.charge(&mut c, 5 << 20, soon()).await.unwrap();
        assert_eq!(c.bytes(), 5 << 20);
        assert_eq!(b.available_bytes(), total - (5 << 20));
        drop(c);
        assert_eq!(b.available_bytes(), total);
    }

    #[tokio::test]
    async fn a_full_budget_makes_large_requests_wait_then_refuses() {
        let b = Budget::new(16 << 20);
        let mut big = Charge::default();
        b.charge(&mut big, 15 << 20, soon()).await.unwrap();
        let mut other = Charge::default();
        assert_eq!(
            b.charge(&mut other, 2 << 20, soon()).await,
            Err(BudgetError::Busy)
        );
        // Small requests still find room in the reserve.
        let mut small = Charge::default();
        b.charge(&mut small, 10_000, soon()).await.unwrap();
    }

    #[tokio::test]
    async fn a_waiting_request_proceeds_when_room_is_made() {
        let b = Arc::new(Budget::new(16 << 20));
        let mut big = Charge::default();
        b.charge(&mut big, 15 << 20, soon()).await.unwrap();
        let b2 = Arc::clone(&b);
        let waiter = tokio::spawn(async move {
            let mut c = Charge::default();
            let deadline = Instant::now() + Duration::from_secs(5);
            b2.charge(&mut c, 4 << 20, deadline)
                .await
                .map(|()| c.bytes())
        });
        tokio::task::yield_now().await;
        drop(big);
        assert_eq!(waiter.await.unwrap(), Ok(4 << 20));
    }

    #[tokio::test]
    async fn a_request_larger_than_the_budget_is_refused_at_once() {
        let b = Budget::new(16 << 20);
        let mut c = Charge::default();
        let e = b.charge(&mut c, 20 << 20, soon()).await.unwrap_err();
        assert!(
            matches!(
                e,
                BudgetError::TooLarge {
                    needed_mib: 20,
                    budget_mib: 16
                }
            ),
            "{e:?}"
        );
    }
}
