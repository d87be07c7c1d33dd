//! The in-flight memory budget (D27): bodies being received or parsed, and the trees and
//! reports their parsing builds, are charged against `[limits] inflight_bytes` before the
//! memory is taken.
//!
//! A request waits for room when it is admitted, before it holds anything: it reserves what a
//! body of its declared length ordinarily takes. Later growth (a body larger than ordinary to
//! parse, a gzip body inflating, a body without a declared length) is taken at once when it is
//! free; else one request at a time may wait for it, and any other is refused (503). Letting
//! every request wait while holding part of the budget would let sixteen half-received bodies
//! hold it all, each waiting for the others; with one waiter, everyone else either proceeds or
//! gives up, and the waiter is served next. A request that alone needs more than the budget is
//! refused at once (413).
//!
//! A sixteenth of the budget is kept for small requests (at most [`SMALL_REQUEST_BYTES`] in
//! all), so that large bodies waiting for room never hold up a client's single record.

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// A request whose whole charge stays within this is small: it may use the reserve.
pub const SMALL_REQUEST_BYTES: usize = 64 * 1024;

/// Permits count kibibytes, so that one charge of any size fits tokio's `u32` permits.
const UNIT: usize = 1024;

/// How long a refused request should wait before retrying (Retry-After).
pub const RETRY_AFTER: Duration = Duration::from_secs(2);

/// Why a charge was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    /// No room until the request's deadline, or none at once for its growth (503, retry).
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
    /// Held by the one request that may wait to grow while it holds part of the budget.
    grower: tokio::sync::Mutex<()>,
}

/// What one request holds; given back when dropped.
#[derive(Debug, Default)]
pub struct Charge {
    main: Option<OwnedSemaphorePermit>,
    reserve: Option<OwnedSemaphorePermit>,
    /// Whether the request had to wait to be admitted.
    waited: bool,
}

impl Charge {
    fn units(&self) -> usize {
        self.main.as_ref().map_or(0, |p| p.num_permits())
            + self.reserve.as_ref().map_or(0, |p| p.num_permits())
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.units() * UNIT
    }

    /// Whether the request was held back waiting for room: its body then arrived late by the
    /// service's doing, not the client's (503, not 408).
    pub fn waited(&self) -> bool {
        self.waited
    }

    fn add(&mut self, from_main: bool, permit: OwnedSemaphorePermit) {
        let slot = if from_main {
            &mut self.main
        } else {
            &mut self.reserve
        };
        match slot {
            Some(held) => held.merge(permit),
            None => *slot = Some(permit),
        }
    }
}

fn units(bytes: usize) -> usize {
    bytes.div_ceil(UNIT)
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
            grower: tokio::sync::Mutex::new(()),
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

    fn too_large(&self, bytes: usize) -> BudgetError {
        BudgetError::TooLarge {
            needed_mib: bytes.div_ceil(1 << 20),
            budget_mib: self.total_bytes >> 20,
        }
    }

    /// Admits a request expected to take `bytes`, waiting in line for room until `deadline`.
    /// An expectation beyond the budget is admitted with all of it: what the request really
    /// needs is known once its body is parsed.
    pub async fn admit(&self, bytes: usize, deadline: Instant) -> Result<Charge, BudgetError> {
        let need = units(bytes).clamp(1, self.main_units);
        let need32 = u32::try_from(need).map_err(|_| self.too_large(bytes))?;
        let mut charge = Charge::default();
        if let Ok(p) = Arc::clone(&self.main).try_acquire_many_owned(need32) {
            charge.add(true, p);
            return Ok(charge);
        }
        charge.waited = true;
        let small = bytes <= SMALL_REQUEST_BYTES;
        let sem = if small { &self.reserve } else { &self.main };
        charge.add(!small, acquire(sem, need32, deadline).await?);
        Ok(charge)
    }

    /// Sets what `charge` holds to `bytes`: gives back the excess, or takes the difference,
    /// waiting for it until `deadline` only when no other request is waiting to grow (see the
    /// module documentation).
    pub async fn resize(
        &self,
        charge: &mut Charge,
        bytes: usize,
        deadline: Instant,
    ) -> Result<(), BudgetError> {
        match self.grow_now(charge, bytes) {
            Err(BudgetError::Busy) => {}
            done => return done,
        }
        let Ok(_lane) = self.grower.try_lock() else {
            return Err(BudgetError::Busy);
        };
        let need = units(bytes) - charge.units();
        let need32 = u32::try_from(need).map_err(|_| self.too_large(bytes))?;
        charge.waited = true;
        let p = acquire(&self.main, need32, deadline).await?;
        charge.add(true, p);
        Ok(())
    }

    /// [`Self::resize`] without waiting: Busy when the difference is not free right now.
    fn grow_now(&self, charge: &mut Charge, bytes: usize) -> Result<(), BudgetError> {
        let (want, held) = (units(bytes), charge.units());
        if want < held {
            self.give_back(charge, held - want);
            return Ok(());
        }
        let need = want - held;
        if need == 0 {
            return Ok(());
        }
        let in_main = charge.main.as_ref().map_or(0, |p| p.num_permits());
        if in_main + need > self.main_units && want > units(SMALL_REQUEST_BYTES) {
            return Err(self.too_large(bytes));
        }
        let need32 = u32::try_from(need).map_err(|_| self.too_large(bytes))?;
        if let Ok(p) = Arc::clone(&self.main).try_acquire_many_owned(need32) {
            charge.add(true, p);
            return Ok(());
        }
        if want <= units(SMALL_REQUEST_BYTES)
            && let Ok(p) = Arc::clone(&self.reserve).try_acquire_many_owned(need32)
        {
            charge.add(false, p);
            return Ok(());
        }
        Err(BudgetError::Busy)
    }

    /// Gives `n` units of `charge` back, from the reserve first.
    fn give_back(&self, charge: &mut Charge, n: usize) {
        let left = give_back_from(&mut charge.reserve, n);
        give_back_from(&mut charge.main, left);
    }
}

/// `n` permits of `sem`, waiting in line until `deadline`.
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

/// Gives up to `n` units of `slot` back; returns how many are still to give.
fn give_back_from(slot: &mut Option<OwnedSemaphorePermit>, n: usize) -> usize {
    let Some(held) = slot.as_mut() else { return n };
    let held_n = held.num_permits();
    if n >= held_n {
        *slot = None;
        n - held_n
    } else {
        drop(held.split(n));
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn soon() -> Instant {
        Instant::now() + Duration::from_millis(50)
    }

    #[tokio::test]
    async fn charges_are_resized_and_given_back_when_dropped() {
        let b = Budget::new(16 << 20);
        let total = b.available_bytes();
        let mut c = b.admit(5 << 20, soon()).await.unwrap();
        assert_eq!(c.bytes(), 5 << 20);
        assert_eq!(b.available_bytes(), total - (5 << 20));
        b.resize(&mut c, 2 << 20, soon()).await.unwrap();
        assert_eq!(b.available_bytes(), total - (2 << 20));
        b.resize(&mut c, 6 << 20, soon()).await.unwrap();
        assert_eq!(c.bytes(), 6 << 20);
        drop(c);
        assert_eq!(b.available_bytes(), total);
    }

    #[tokio::test]
    async fn a_full_budget_makes_requests_wait_then_refuses_them() {
        let b = Budget::new(16 << 20);
        let _big = b.admit(15 << 20, soon()).await.unwrap();
        assert_eq!(
            b.admit(2 << 20, soon()).await.unwrap_err(),
            BudgetError::Busy
        );
        // Small requests still find room in the reserve.
        let small = b.admit(10_000, soon()).await.unwrap();
        assert!(small.waited());
    }

    #[tokio::test]
    async fn a_waiting_request_is_admitted_when_room_is_made() {
        let b = Arc::new(Budget::new(16 << 20));
        let big = b.admit(15 << 20, soon()).await.unwrap();
        let b2 = Arc::clone(&b);
        let waiter = tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(5);
            b2.admit(4 << 20, deadline).await.map(|c| c.bytes())
        });
        tokio::task::yield_now().await;
        drop(big);
        assert_eq!(waiter.await.unwrap(), Ok(4 << 20));
    }

    /// One request at a time may wait to grow; another that would have to wait too is
    /// refused, so requests holding part of the budget never wait on each other.
    #[tokio::test]
    async fn one_request_waits_to_grow_the_others_are_refused() {
        let b = Arc::new(Budget::new(16 << 20));
        let mut a = b.admit(8 << 20, soon()).await.unwrap();
        let c = b.admit(7 << 20, soon()).await.unwrap();
        let b2 = Arc::clone(&b);
        let grower = tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(5);
            b2.resize(&mut a, 9 << 20, deadline)
                .await
                .map(|()| a.bytes())
        });
        // Wait until the first is in line, then a second grower is refused at once.
        while b.grower.try_lock().is_ok() {
            tokio::task::yield_now().await;
        }
        let mut d = b.admit(10_000, soon()).await.unwrap();
        assert_eq!(
            b.resize(&mut d, 2 << 20, soon()).await,
            Err(BudgetError::Busy)
        );
        drop(c);
        assert_eq!(grower.await.unwrap(), Ok(9 << 20));
    }

    #[tokio::test]
    async fn a_request_larger_than_the_budget_is_refused_at_once() {
        let b = Budget::new(16 << 20);
        let mut c = b.admit(20 << 20, soon()).await.unwrap();
        assert_eq!(c.bytes(), 15 << 20, "admitted with all of the main budget");
        let e = b.resize(&mut c, 20 << 20, soon()).await.unwrap_err();
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
