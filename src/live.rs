//! Settings that a reload (SIGHUP, D34) replaces while the service runs: readers take the
//! current value for one use, a reload swaps in the next one.

use std::sync::{Arc, RwLock};

/// A value that can be replaced while others use the previous one.
pub struct Live<T>(RwLock<Arc<T>>);

impl<T> Live<T> {
    /// Starts with `value`.
    pub fn new(value: T) -> Self {
        Self(RwLock::new(Arc::new(value)))
    }

    /// The current value (a reload during its use does not change it).
    pub fn get(&self) -> Arc<T> {
        match self.0.read() {
            Ok(v) => Arc::clone(&v),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Replaces the value for later uses.
    pub fn set(&self, value: T) {
        let mut slot = match self.0.write() {
            Ok(v) => v,
            Err(poisoned) => poisoned.into_inner(),
        };
        *slot = Arc::new(value);
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Live<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}
