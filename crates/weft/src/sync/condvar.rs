//! [`Condvar`]: a condition variable for [`Mutex`], whose waiters park (fibers) or block (threads).
//!
//! A wait queues the caller in the condvar's [`WaitQueue`] *before* it unlocks the mutex, so a
//! notifier that changes the state under the mutex afterwards always finds it: no wake-up is
//! lost. Then it parks until notified (or timed out, or cancelled) and locks the mutex again.
//!
//! Cancellation: a waiter cancelled before it is notified leaves the queue and returns
//! [`Cancelled`] without re-locking the mutex. A waiter notified first re-locks; when even that
//! fails (the lock is taken and the fiber is cancelled) it has consumed a notification it will not
//! act on, so it **passes it on** with `notify_one`: another waiter may see a spurious wake-up,
//! but never misses one.

use std::fmt;
use std::time::{Duration, Instant};

use super::mutex::{Mutex, MutexGuard};
use super::wait_queue::{deadline_after, wait, WaitQueue, Woke};
use crate::error::Cancelled;

/// A condition variable for fibers and threads, used with [`Mutex`].
///
/// As with std's, wake-ups may be spurious: wait in a loop on the condition, or use
/// [`Condvar::wait_while`].
///
/// ```
/// use std::sync::Arc;
/// use weft::sync::{Condvar, Mutex};
///
/// let pair = Arc::new((Mutex::new(false), Condvar::new()));
/// let other = pair.clone();
/// let t = std::thread::spawn(move || {
///     *other.0.lock().unwrap() = true;
///     other.1.notify_one();
/// });
/// let ready = pair.1.wait_while(pair.0.lock().unwrap(), |ready| !*ready).unwrap();
/// assert!(*ready);
/// # drop(ready);
/// t.join().unwrap();
/// ```
#[derive(Default)]
pub struct Condvar {
    /// Fibers and threads waiting for a notification, in arrival order.
    waiters: WaitQueue,
}

impl Condvar {
    crate::loom::const_fn_unless_loom! {
        pub const fn new() -> Condvar {
            Condvar {
                waiters: WaitQueue::new(),
            }
        }
    }

    /// Unlocks the guard's mutex, parks until notified, then locks it again.
    ///
    /// When the fiber is cancelled the mutex stays unlocked and the guard is gone.
    pub fn wait<'a, T: ?Sized>(
        &self,
        guard: MutexGuard<'a, T>,
    ) -> Result<MutexGuard<'a, T>, Cancelled> {
        self.wait_until(guard, None).map(|(guard, _)| guard)
    }

    /// As [`Condvar::wait`], waiting at most `timeout`; the flag says whether it timed out
    /// (rather than being notified).
    pub fn wait_timeout<'a, T: ?Sized>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Duration,
    ) -> Result<(MutexGuard<'a, T>, bool), Cancelled> {
        self.wait_until(guard, deadline_after(timeout))
    }

    /// Waits as long as `condition` holds (it is checked first, and after every wake-up).
    pub fn wait_while<'a, T: ?Sized>(
        &self,
        mut guard: MutexGuard<'a, T>,
        mut condition: impl FnMut(&mut T) -> bool,
    ) -> Result<MutexGuard<'a, T>, Cancelled> {
        while condition(&mut *guard) {
            guard = self.wait(guard)?;
        }
        Ok(guard)
    }

    /// As [`Condvar::wait_while`], waiting at most `timeout` in all; the flag says whether it
    /// timed out with the condition still holding.
    pub fn wait_timeout_while<'a, T: ?Sized>(
        &self,
        mut guard: MutexGuard<'a, T>,
        timeout: Duration,
        mut condition: impl FnMut(&mut T) -> bool,
    ) -> Result<(MutexGuard<'a, T>, bool), Cancelled> {
        let deadline = deadline_after(timeout);
        loop {
            if !condition(&mut *guard) {
                return Ok((guard, false));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok((guard, true));
            }
            guard = self.wait_until(guard, deadline)?.0;
        }
    }

    /// Wakes the longest-waiting waiter, if any.
    pub fn notify_one(&self) {
        let wake = self.waiters.lock().notify_one();
        if let Some(wake) = wake {
            wake.wake();
        }
    }

    /// Wakes every waiter.
    pub fn notify_all(&self) {
        let wakes = self.waiters.lock().notify_all();
        wakes.wake();
    }

    fn wait_until<'a, T: ?Sized>(
        &self,
        guard: MutexGuard<'a, T>,
        deadline: Option<Instant>,
    ) -> Result<(MutexGuard<'a, T>, bool), Cancelled> {
        let mutex: &'a Mutex<T> = guard.mutex;
        // Queue first, unlock second: see the module docs.
        let waiter = self.waiters.lock().push();
        drop(guard);
        let woke = wait(&waiter, deadline, || self.waiters.lock().remove(&waiter));
        if woke == Woke::Cancelled {
            return Err(Cancelled);
        }
        match mutex.lock() {
            Ok(guard) => Ok((guard, woke == Woke::TimedOut)),
            Err(Cancelled) => {
                if woke == Woke::Notified {
                    self.notify_one();
                }
                Err(Cancelled)
            }
        }
    }
}

impl fmt::Debug for Condvar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Condvar").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn wait_timeout_times_out_holding_the_lock() {
        let m = Mutex::new(5);
        let c = Condvar::new();
        let start = Instant::now();
        let (guard, timed_out) = c
            .wait_timeout(m.lock().unwrap(), Duration::from_millis(20))
            .unwrap();
        assert!(timed_out);
        assert!(start.elapsed() >= Duration::from_millis(20));
        assert_eq!(*guard, 5);
        assert!(m.is_locked());
        drop(guard);
        assert!(c.waiters.lock().is_empty());
    }

    #[test]
    fn wait_timeout_while_checks_the_condition_first() {
        let m = Mutex::new(1);
        let c = Condvar::new();
        let (guard, timed_out) = c
            .wait_timeout_while(m.lock().unwrap(), Duration::from_secs(10), |v| *v == 0)
            .unwrap();
        assert!(!timed_out);
        drop(guard);
        let (_guard, timed_out) = c
            .wait_timeout_while(m.lock().unwrap(), Duration::from_millis(10), |v| *v == 1)
            .unwrap();
        assert!(timed_out);
    }

    #[test]
    fn notify_all_wakes_every_thread() {
        let state = Arc::new((Mutex::new(0u32), Condvar::new()));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let state = state.clone();
                std::thread::spawn(move || {
                    let (m, c) = &*state;
                    let mut g = c.wait_while(m.lock().unwrap(), |v| *v == 0).unwrap();
                    *g += 1;
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(10));
        *state.0.lock().unwrap() = 1;
        state.1.notify_all();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*state.0.lock().unwrap(), 5);
    }

    #[test]
    fn notify_without_waiters_is_a_no_op() {
        let c = Condvar::new();
        c.notify_one();
        c.notify_all();
        assert_eq!(format!("{c:?}"), "Condvar { .. }");
    }
}
