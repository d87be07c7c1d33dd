//! The one pool both engines keep their connections in: a bounded stack of idle connections,
//! each checked before it is handed out when it has sat idle a while, and a new connection
//! opened when none is idle (or none passes). Not a pool crate: the queue is called from
//! blocking threads (deadpool is async), and r2d2's SQLite adapter cannot sit beside our
//! rusqlite (ARCHITECTURE.md); a pool here is only this much.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Idle connections of type `C`, at most `max_idle` of them.
pub(crate) struct Pool<C> {
    idle: Mutex<Vec<(C, Instant)>>,
    max_idle: usize,
    /// A connection idle this long is checked before use (a database restarted meanwhile has
    /// closed it); one used more recently is handed out as it is.
    check_after: Duration,
}

impl<C> Pool<C> {
    /// A pool keeping at most `max_idle` idle connections, checking those idle `check_after`.
    pub fn new(max_idle: usize, check_after: Duration) -> Self {
        Self {
            idle: Mutex::new(Vec::new()),
            max_idle,
            check_after,
        }
    }

    fn idle(&self) -> MutexGuard<'_, Vec<(C, Instant)>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An idle connection that passes `sound` (asked only of one idle `check_after` or
    /// longer; one that fails is dropped), or else a new one from `open`.
    pub fn get<E>(
        &self,
        sound: impl Fn(&mut C) -> bool,
        open: impl FnOnce() -> Result<C, E>,
    ) -> Result<C, E> {
        loop {
            let Some((mut conn, since)) = self.idle().pop() else {
                return open();
            };
            if since.elapsed() < self.check_after || sound(&mut conn) {
                return Ok(conn);
            }
        }
    }

    /// Gives `conn` back to be used again, unless `max_idle` are idle already.
    pub fn put(&self, conn: C) {
        let mut idle = self.idle();
        if idle.len() < self.max_idle {
            idle.push((conn, Instant::now()));
        }
    }

    /// Drops every idle connection.
    pub fn clear(&self) {
        self.idle().clear();
    }

    /// Takes every idle connection out (to close them elsewhere).
    pub fn drain(&self) -> Vec<C> {
        self.idle().drain(..).map(|(c, _)| c).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_is_bounded_and_checks_connections_that_sat_idle() {
        let pool = Pool::new(2, Duration::from_millis(30));
        for n in 0..5 {
            pool.put(n);
        }
        assert_eq!(pool.drain(), [0, 1], "at most two kept");
        pool.put(7);
        let never = |_: &mut i32| false;
        // Used a moment ago: handed out unchecked.
        assert_eq!(pool.get(never, || Ok::<_, ()>(9)), Ok(7));
        pool.put(7);
        pool.put(8);
        std::thread::sleep(Duration::from_millis(40));
        // Idle a while: checked, and the unsound ones are dropped for a new one.
        assert_eq!(pool.get(never, || Ok::<_, ()>(9)), Ok(9));
        assert!(pool.drain().is_empty());
        pool.put(5);
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(pool.get(|c: &mut i32| *c == 5, || Ok::<_, ()>(9)), Ok(5));
    }
}
