//! One stop signal for tasks and threads alike: set once, seen by every clone. Async tasks
//! await [`Stop::signalled`]; threads sleep in [`Stop::wait_timeout`], which returns at once
//! when the signal comes, so no thread polls a flag and none sleeps through a stop.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A stop signal; clones share it.
#[derive(Clone, Default)]
pub struct Stop(Arc<Inner>);

#[derive(Default)]
struct Inner {
    set: Mutex<bool>,
    threads: Condvar,
    tasks: tokio::sync::Notify,
}

impl std::fmt::Debug for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Stop").field(&self.is_signalled()).finish()
    }
}

impl Stop {
    /// A signal not yet given.
    pub fn new() -> Self {
        Self::default()
    }

    /// Gives the signal to every holder; giving it again changes nothing.
    pub fn signal(&self) {
        let mut set = self.0.set.lock().unwrap_or_else(PoisonError::into_inner);
        *set = true;
        self.0.threads.notify_all();
        drop(set);
        self.0.tasks.notify_waiters();
    }

    /// Whether the signal was given.
    pub fn is_signalled(&self) -> bool {
        *self.0.set.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sleeps up to `d`, or until the signal; whether it was given.
    pub fn wait_timeout(&self, d: Duration) -> bool {
        let until = Instant::now() + d;
        let mut set = self.0.set.lock().unwrap_or_else(PoisonError::into_inner);
        while !*set {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            set = match self.0.threads.wait_timeout(set, left) {
                Ok((s, _)) => s,
                Err(e) => e.into_inner().0,
            };
        }
        true
    }

    /// Resolves once the signal is given (at once if it was).
    pub async fn signalled(&self) {
        loop {
            let notified = self.0.tasks.notified();
            tokio::pin!(notified);
            // Registered before the look, so a signal between the two is not missed.
            notified.as_mut().enable();
            if self.is_signalled() {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sleeping_thread_wakes_at_the_signal_not_at_its_timeout() {
        let stop = Stop::new();
        assert!(!stop.wait_timeout(Duration::from_millis(10)));
        let s = stop.clone();
        let sleeper = std::thread::spawn(move || {
            let t = Instant::now();
            (s.wait_timeout(Duration::from_secs(60)), t.elapsed())
        });
        std::thread::sleep(Duration::from_millis(50));
        stop.signal();
        let (signalled, slept) = sleeper.join().unwrap();
        assert!(signalled);
        assert!(slept < Duration::from_secs(10), "{slept:?}");
        assert!(
            stop.wait_timeout(Duration::from_secs(60)),
            "given once, seen always"
        );
    }

    #[test]
    fn a_task_resolves_at_the_signal_and_after_it() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            let stop = Stop::new();
            let s = stop.clone();
            let task = tokio::spawn(async move { s.signalled().await });
            tokio::task::yield_now().await;
            assert!(!task.is_finished());
            stop.signal();
            tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .unwrap()
                .unwrap();
            stop.signal();
            stop.signalled().await;
        });
    }
}
