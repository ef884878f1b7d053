//! [`WaitGroup`]: wait for a set of tasks to finish, Go style.
//!
//! `count` is an atomic; `add` and `done` change it without a lock. The `done` that brings it to
//! zero then takes the [`WaitQueue`]'s lock and notifies every waiter. A waiter that finds a
//! non-zero count re-reads it *under that lock* before queueing: either that read sees zero, or
//! it queued before the final `done` took the lock and is notified. A notification means "the
//! count reached zero": the waiter returns without re-reading it (it may have been raised again
//! for a new round since).

use std::fmt;
use std::time::{Duration, Instant};

use super::wait_queue::{deadline_after, wait, WaitQueue, Woke};
use crate::error::{Cancelled, WaitError};
use crate::loom::{AtomicUsize, Ordering};

/// Waits until a counter of outstanding tasks drops to zero.
///
/// Share it by reference or in an `Arc`: `add` before starting a task, `done` when it ends,
/// `wait` for all of them.
///
/// ```
/// use std::sync::Arc;
/// let wg = Arc::new(weft::sync::WaitGroup::new());
/// for _ in 0..4 {
///     wg.add(1);
///     let wg = wg.clone();
///     weft::spawn(move || wg.done());
/// }
/// wg.wait().unwrap();
/// assert_eq!(wg.count(), 0);
/// ```
#[derive(Default)]
pub struct WaitGroup {
    /// Tasks added and not yet done.
    count: AtomicUsize,
    /// Fibers and threads waiting for `count` to reach zero.
    waiters: WaitQueue,
}

impl WaitGroup {
    crate::loom::const_fn_unless_loom! {
        /// A group with nothing outstanding.
        pub const fn new() -> WaitGroup {
            WaitGroup {
                count: AtomicUsize::new(0),
                waiters: WaitQueue::new(),
            }
        }
    }

    /// Adds `n` outstanding tasks.
    ///
    /// # Panics
    /// When the count would overflow.
    pub fn add(&self, n: usize) {
        let before = self.count.fetch_add(n, Ordering::Relaxed);
        if before.checked_add(n).is_none() {
            self.count.fetch_sub(n, Ordering::Relaxed);
            panic!("weft: WaitGroup counter overflow");
        }
    }

    /// Marks one task done; the last one wakes every waiter.
    ///
    /// # Panics
    /// When nothing is outstanding (more `done`s than `add`s).
    pub fn done(&self) {
        let mut count = self.count.load(Ordering::Relaxed);
        loop {
            assert!(
                count > 0,
                "weft: WaitGroup::done called more times than add"
            );
            // Release publishes this task's work; Acquire lets the last `done` carry every
            // earlier one's on to the waiters it notifies.
            match self.count.compare_exchange_weak(
                count,
                count - 1,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(actual) => count = actual,
            }
        }
        if count == 1 {
            let wakes = self.waiters.lock().notify_all();
            wakes.wake();
        }
    }

    /// Outstanding tasks right now (a snapshot).
    pub fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// Parks the fiber (or blocks the thread) until the count is zero.
    ///
    /// Fails only when the calling fiber is cancelled while it would wait.
    pub fn wait(&self) -> Result<(), Cancelled> {
        self.wait_until(None).map_err(|_| Cancelled)
    }

    /// As [`WaitGroup::wait`], giving up with [`WaitError::TimedOut`] after `timeout`.
    pub fn wait_timeout(&self, timeout: Duration) -> Result<(), WaitError> {
        self.wait_until(deadline_after(timeout))
    }

    fn wait_until(&self, deadline: Option<Instant>) -> Result<(), WaitError> {
        if self.count.load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        let waiter = {
            let mut list = self.waiters.lock();
            if self.count.load(Ordering::Acquire) == 0 {
                return Ok(());
            }
            list.push()
        };
        match wait(&waiter, deadline, || self.waiters.lock().remove(&waiter)) {
            Woke::Notified => Ok(()),
            Woke::TimedOut => Err(WaitError::TimedOut),
            Woke::Cancelled => Err(WaitError::Cancelled),
        }
    }
}

impl fmt::Debug for WaitGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaitGroup")
            .field("count", &self.count())
            .finish()
    }
}

/// The real wait group under loom: `done` decrements outside the queue's lock and the waiter
/// re-checks the count under it, so the last `done` either is seen by that re-check or finds
/// the waiter queued; a lost wake-up is a deadlock loom reports. Each worker's write must be
/// visible to the waiter once `wait` returns (loom checks the cells' happens-before).
#[cfg(all(test, loom))]
mod loom {
    use ::loom::cell::UnsafeCell;
    use ::loom::sync::Arc;
    use ::loom::thread;

    use super::*;

    #[test]
    fn loom_wait_group_wait_sees_the_last_done() {
        ::loom::model(|| {
            let wg = Arc::new((
                WaitGroup::new(),
                [UnsafeCell::new(0u32), UnsafeCell::new(0)],
            ));
            wg.0.add(2);
            let workers: Vec<_> = (0..2)
                .map(|i| {
                    let wg = wg.clone();
                    thread::spawn(move || {
                        // SAFETY: worker `i`'s own cell; loom checks it against the waiter's
                        // read (the model's point).
                        wg.1[i].with_mut(|v| unsafe { *v += 1 });
                        wg.0.done();
                    })
                })
                .collect();
            wg.0.wait().unwrap();
            // SAFETY: `wait` returned, so both workers' writes happened before (or loom fails).
            let sum: u32 = wg.1.iter().map(|c| c.with(|v| unsafe { *v })).sum();
            assert_eq!(sum, 2);
            for w in workers {
                w.join().unwrap();
            }
            assert!(wg.0.waiters.lock().is_empty());
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn zero_does_not_wait() {
        let wg = WaitGroup::new();
        wg.wait().unwrap();
        wg.add(2);
        wg.done();
        wg.done();
        wg.wait_timeout(Duration::ZERO).unwrap();
        assert_eq!(format!("{wg:?}"), "WaitGroup { count: 0 }");
    }

    #[test]
    #[should_panic(expected = "more times than add")]
    fn too_many_done_panics() {
        WaitGroup::new().done();
    }

    #[test]
    fn timeout_then_threads_finish() {
        let wg = Arc::new(WaitGroup::new());
        wg.add(3);
        let start = Instant::now();
        assert_eq!(
            wg.wait_timeout(Duration::from_millis(20)),
            Err(WaitError::TimedOut)
        );
        assert!(start.elapsed() >= Duration::from_millis(20));
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let wg = wg.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(5));
                    wg.done();
                })
            })
            .collect();
        wg.wait().unwrap();
        assert_eq!(wg.count(), 0);
        for t in threads {
            t.join().unwrap();
        }
        assert!(wg.waiters.lock().is_empty());
    }
}
