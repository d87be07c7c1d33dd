//! A thread that serves what is waiting in batches: the mechanism under the queue-write
//! thread ([`super::Writer`]).
//!
//! Callers push items; the thread wakes, takes the waiting items (all of them, or what the
//! [`Serve`] implementation chooses) and serves them as one batch. While a batch is served,
//! new items gather for the next, so batches grow with load and an idle thread serves each
//! item at once.

use std::sync::{Arc, Condvar, Mutex};

/// What a batch thread does with its batches.
pub(crate) trait Serve<T>: Send + 'static {
    /// Takes the next batch out of the waiting items (never empty when items wait).
    fn take(&mut self, waiting: &mut Vec<T>) -> Vec<T> {
        std::mem::take(waiting)
    }

    /// Serves one batch.
    fn serve(&mut self, batch: Vec<T>);
}

struct Waiting<T> {
    items: Vec<T>,
    stopping: bool,
    /// The thread waits on the condition variable: only then does a push notify it (a
    /// notification is a system call, and a busy thread takes what gathered anyway).
    asleep: bool,
}

struct Shared<T> {
    waiting: Mutex<Waiting<T>>,
    wake: Condvar,
}

/// A running batch thread; clones share it.
pub(crate) struct BatchThread<T> {
    shared: Arc<Shared<T>>,
    thread: Arc<Mutex<Option<std::thread::JoinHandle<()>>>>,
}

impl<T> Clone for BatchThread<T> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            thread: Arc::clone(&self.thread),
        }
    }
}

impl<T: Send + 'static> BatchThread<T> {
    /// Starts a thread called `name` serving batches with `server`.
    pub fn start(name: &str, mut server: impl Serve<T>) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            waiting: Mutex::new(Waiting {
                items: Vec::new(),
                stopping: false,
                asleep: false,
            }),
            wake: Condvar::new(),
        });
        let worker = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || run(&worker, &mut server))?;
        Ok(Self {
            shared,
            thread: Arc::new(Mutex::new(Some(thread))),
        })
    }

    /// Adds an item to the next batch; gives it back when the thread is stopping or failed.
    pub fn push(&self, item: T) -> Result<(), T> {
        let asleep = match self.shared.waiting.lock() {
            Ok(mut w) if !w.stopping => {
                w.items.push(item);
                w.asleep
            }
            _ => return Err(item),
        };
        if asleep {
            self.shared.wake.notify_one();
        }
        Ok(())
    }

    /// Serves what is waiting, refuses new items and waits for the thread to end.
    pub fn stop(&self) {
        if let Ok(mut w) = self.shared.waiting.lock() {
            w.stopping = true;
        }
        self.shared.wake.notify_one();
        let thread = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

fn run<T>(shared: &Shared<T>, server: &mut impl Serve<T>) {
    loop {
        let batch = {
            let Ok(mut w) = shared.waiting.lock() else {
                return;
            };
            while w.items.is_empty() && !w.stopping {
                w.asleep = true;
                w = match shared.wake.wait(w) {
                    Ok(w) => w,
                    Err(_) => return,
                };
                w.asleep = false;
            }
            server.take(&mut w.items)
        };
        if batch.is_empty() {
            // Only when stopping: nothing is left.
            return;
        }
        server.serve(batch);
    }
}
