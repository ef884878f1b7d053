//! [`Mutex`]: a lock whose waiters park (fibers) or block (threads).
//!
//! The lock word `state` has two bits:
//! - `LOCKED`: somebody owns the lock;
//! - `WAITERS`: the wait queue is not empty. It is changed only under the queue's lock, and is
//!   only ever set while `LOCKED` is set too.
//!
//! `lock` is one compare-and-swap from `0` to `LOCKED` when the lock is free. Unlocking with no
//! waiter is one compare-and-swap back to `0`. Unlocking with waiters **hands the lock over**:
//! `LOCKED` stays set and the front waiter is notified as the new owner (FIFO, so no waiter
//! starves), and `WAITERS` is cleared with the last waiter. A waiter that times out or is
//! cancelled removes itself (clearing `WAITERS` if it was the last); if the lock was handed to it
//! first, it keeps the lock and `lock` succeeds (see [`super::wait_queue`]).
//!
//! There is no poisoning: a panic while the lock is held unwinds through the guard, which unlocks.

use std::cell::UnsafeCell;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::time::Duration;

use super::wait_queue::{deadline_after, wait, WaitQueue, Woke};
use crate::error::{Cancelled, WaitError};
use crate::loom::{AtomicU8, Ordering};

/// Somebody owns the lock.
const LOCKED: u8 = 1;
/// Somebody waits in the queue (only set together with `LOCKED`).
const WAITERS: u8 = 2;

/// A mutual-exclusion lock for fibers and threads.
///
/// A fiber that finds it locked parks, letting its processor run other fibers; a plain OS thread
/// blocks. Holding the guard across blocking calls (`yield_now`, channel operations, I/O) is
/// fine, unlike with `std::sync::Mutex` on a fiber.
///
/// ```
/// let m = weft::sync::Mutex::new(0);
/// *m.lock().unwrap() += 1;
/// assert_eq!(m.into_inner(), 1);
/// ```
pub struct Mutex<T: ?Sized> {
    /// `LOCKED` and `WAITERS` bits; see the module docs.
    state: AtomicU8,
    /// Fibers and threads waiting for the lock, in arrival order.
    waiters: WaitQueue,
    /// The protected value: accessed only through a guard, `get_mut` or `into_inner`.
    data: UnsafeCell<T>,
}

// SAFETY: the mutex hands out access to `T` to one owner at a time, on whatever thread that owner
// runs on, so it is `Send` and `Sync` whenever `T` may move between threads (as std's).
unsafe impl<T: ?Sized + Send> Send for Mutex<T> {}
// SAFETY: as above.
unsafe impl<T: ?Sized + Send> Sync for Mutex<T> {}

impl<T> Mutex<T> {
    crate::loom::const_fn_unless_loom! {
        /// An unlocked mutex holding `value`.
        pub const fn new(value: T) -> Mutex<T> {
            Mutex {
                state: AtomicU8::new(0),
                waiters: WaitQueue::new(),
                data: UnsafeCell::new(value),
            }
        }
    }

    /// Consumes the mutex and returns the value.
    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Locks the mutex, parking the fiber (or blocking the thread) until it is free.
    ///
    /// Fails only when the calling fiber is cancelled while it would wait; a free lock is taken
    /// even by a cancelled fiber.
    pub fn lock(&self) -> Result<MutexGuard<'_, T>, Cancelled> {
        if let Some(guard) = self.try_lock() {
            return Ok(guard);
        }
        self.lock_slow(None).map_err(|_| Cancelled)
    }

    /// As [`Mutex::lock`], giving up with [`WaitError::TimedOut`] after `timeout`.
    pub fn lock_timeout(&self, timeout: Duration) -> Result<MutexGuard<'_, T>, WaitError> {
        if let Some(guard) = self.try_lock() {
            return Ok(guard);
        }
        self.lock_slow(Some(timeout))
    }

    /// Locks the mutex if it is free right now.
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        self.state
            .compare_exchange(0, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| MutexGuard::new(self))
    }

    /// Whether somebody holds the lock right now (a snapshot, for diagnostics).
    pub fn is_locked(&self) -> bool {
        self.state.load(Ordering::Relaxed) & LOCKED != 0
    }

    /// The value, through a unique borrow (no locking needed).
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }

    /// Queues the caller and waits until the lock is handed to it.
    fn lock_slow(&self, timeout: Option<Duration>) -> Result<MutexGuard<'_, T>, WaitError> {
        let deadline = timeout.and_then(deadline_after);
        let waiter = {
            let mut list = self.waiters.lock();
            let mut state = self.state.load(Ordering::Relaxed);
            loop {
                let next = if state & LOCKED == 0 {
                    state | LOCKED
                } else if state & WAITERS == 0 {
                    state | WAITERS
                } else {
                    break;
                };
                match self.state.compare_exchange_weak(
                    state,
                    next,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) if next & WAITERS == 0 => return Ok(MutexGuard::new(self)),
                    Ok(_) => break,
                    Err(actual) => state = actual,
                }
            }
            list.push()
        };
        let woke = wait(&waiter, deadline, || {
            let mut list = self.waiters.lock();
            let removed = list.remove(&waiter);
            if removed && list.is_empty() {
                self.state.fetch_and(!WAITERS, Ordering::Relaxed);
            }
            removed
        });
        match woke {
            // The unlocker handed the lock over; `is_notified`'s acquire saw its writes.
            Woke::Notified => Ok(MutexGuard::new(self)),
            Woke::TimedOut => Err(WaitError::TimedOut),
            Woke::Cancelled => Err(WaitError::Cancelled),
        }
    }

    /// Releases the lock, handing it to the first waiter if there is one.
    fn unlock(&self) {
        if self
            .state
            .compare_exchange(LOCKED, 0, Ordering::Release, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
        let wake = {
            let mut list = self.waiters.lock();
            let wake = list.notify_one();
            // Under the queue lock nobody else changes `state`: it is LOCKED (we own it), so
            // `try_lock` fails, and `WAITERS` is only touched under this lock.
            if wake.is_none() {
                // Every waiter gave up since we looked: unlock for real.
                self.state.store(0, Ordering::Release);
            } else if list.is_empty() {
                // Handed over to the last waiter: still locked, nobody waiting.
                self.state.store(LOCKED, Ordering::Relaxed);
            }
            wake
        };
        if let Some(wake) = wake {
            wake.wake();
        }
    }
}

impl<T: Default> Default for Mutex<T> {
    fn default() -> Mutex<T> {
        Mutex::new(T::default())
    }
}

impl<T> From<T> for Mutex<T> {
    fn from(value: T) -> Mutex<T> {
        Mutex::new(value)
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Mutex");
        match self.try_lock() {
            Some(guard) => d.field("data", &&*guard),
            None => d.field("data", &format_args!("<locked>")),
        };
        d.finish_non_exhaustive()
    }
}

/// Access to a locked [`Mutex`]'s value; unlocks when dropped.
///
/// Like std's guard it is not `Send`, though a fiber may hold it across blocking calls (and so
/// across moves between OS threads).
///
/// ```compile_fail
/// fn send<T: Send>(_: T) {}
/// let m = weft::sync::Mutex::new(0);
/// send(m.lock().unwrap());
/// ```
#[must_use = "the mutex unlocks as soon as the guard is dropped"]
pub struct MutexGuard<'a, T: ?Sized> {
    /// The mutex this guard owns; `Condvar` reads it to re-lock after a wait.
    pub(super) mutex: &'a Mutex<T>,
    /// Makes the guard `!Send`, as std's.
    _not_send: PhantomData<*const ()>,
}

// SAFETY: sharing a guard only shares `&T`.
unsafe impl<T: ?Sized + Sync> Sync for MutexGuard<'_, T> {}

impl<'a, T: ?Sized> MutexGuard<'a, T> {
    /// Wraps a lock the caller just took.
    fn new(mutex: &'a Mutex<T>) -> MutexGuard<'a, T> {
        MutexGuard {
            mutex,
            _not_send: PhantomData,
        }
    }
}

impl<T: ?Sized> Deref for MutexGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: the guard owns the lock, so nobody else touches the value.
        unsafe { &*self.mutex.data.get() }
    }
}

impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard owns the lock, and `&mut self` makes this the only access through it.
        unsafe { &mut *self.mutex.data.get() }
    }
}

impl<T: ?Sized> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        self.mutex.unlock();
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ?Sized + fmt::Display> fmt::Display for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&**self, f)
    }
}

/// The real mutex under loom, its waiters loom threads (see `crate::loom`): a lock handed to a
/// parked waiter that never wakes is a deadlock loom reports, and a `lock_timeout`'s deadline
/// passes at once, so the waiter's withdrawal races every step of the unlocker.
#[cfg(all(test, loom))]
mod loom {
    use ::loom::cell::UnsafeCell;
    use ::loom::sync::Arc;
    use ::loom::thread;

    use super::*;

    /// See `sync::semaphore::loom`: the three-thread models need the bound.
    const PREEMPTIONS: usize = 2;

    /// Unlocked, nobody queued.
    fn settled<T>(m: &Mutex<T>) {
        assert_eq!(m.state.load(Ordering::Relaxed), 0);
        assert!(m.waiters.lock().is_empty());
    }

    /// Two contenders and a holder: the owners' writes to a loom cell never overlap (loom
    /// fails the model on concurrent access or a missing happens-before between owners), every
    /// waiter gets the lock, and it ends unlocked.
    #[test]
    fn loom_mutex_excludes_and_hands_over() {
        crate::loom::model_bounded(PREEMPTIONS, || {
            let m = Arc::new(Mutex::new(UnsafeCell::new(0u32)));
            let held = m.lock().unwrap();
            let owners: Vec<_> = (0..2)
                .map(|_| {
                    let m = m.clone();
                    thread::spawn(move || {
                        let g = m.lock().unwrap();
                        // SAFETY: loom checks this access against the other owners' (the
                        // model's point).
                        g.with_mut(|v| unsafe { *v += 1 });
                    })
                })
                .collect();
            // SAFETY: as above.
            held.with_mut(|v| unsafe { *v += 1 });
            drop(held);
            for o in owners {
                o.join().unwrap();
            }
            // SAFETY: every owner is joined.
            assert_eq!(m.lock().unwrap().with(|v| unsafe { *v }), 3);
            settled(&m);
        });
    }

    /// A waiter that gives up racing the unlock that hands it the lock: it either owns the
    /// lock (and unlocks it) or the lock is free; it never ends locked with no owner.
    #[test]
    fn loom_mutex_timed_out_waiter_does_not_swallow_the_lock() {
        crate::loom::model_bounded(PREEMPTIONS, || {
            let m = Arc::new(Mutex::new(()));
            let held = m.lock().unwrap();
            let n = m.clone();
            let waiter = thread::spawn(move || n.lock_timeout(Duration::ZERO).is_ok());
            drop(held);
            waiter.join().unwrap();
            settled(&m);
        });
    }

    /// A waiter giving up while another stays blocked: the unlock reaches the blocked one (or
    /// the one that gave up, which keeps the lock and then unlocks), so nobody stays parked.
    #[test]
    fn loom_mutex_withdrawal_does_not_strand_the_next_waiter() {
        crate::loom::model_bounded(PREEMPTIONS, || {
            let m = Arc::new(Mutex::new(()));
            let held = m.lock().unwrap();
            let n = m.clone();
            let quitter = thread::spawn(move || drop(n.lock_timeout(Duration::ZERO)));
            let n = m.clone();
            let blocked = thread::spawn(move || drop(n.lock().unwrap()));
            drop(held);
            quitter.join().unwrap();
            blocked.join().unwrap();
            settled(&m);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn lock_try_lock_and_handoff_between_threads() {
        let m = Arc::new(Mutex::new(0u32));
        let guard = m.lock().unwrap();
        assert!(m.try_lock().is_none());
        assert!(m.is_locked());
        let waiter = {
            let m = m.clone();
            std::thread::spawn(move || {
                *m.lock().unwrap() += 1;
            })
        };
        // Wait until the thread is queued, then hand it the lock.
        while m.state.load(Ordering::Relaxed) & WAITERS == 0 {
            std::thread::yield_now();
        }
        drop(guard);
        waiter.join().unwrap();
        assert_eq!(*m.lock().unwrap(), 1);
        assert_eq!(m.state.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn lock_timeout_times_out_and_leaves_no_waiter() {
        let m = Mutex::new(());
        let _guard = m.lock().unwrap();
        let start = Instant::now();
        let err = m.lock_timeout(Duration::from_millis(20)).unwrap_err();
        assert_eq!(err, WaitError::TimedOut);
        assert!(start.elapsed() >= Duration::from_millis(20));
        assert_eq!(m.state.load(Ordering::Relaxed), LOCKED);
        assert!(m.waiters.lock().is_empty());
    }

    #[test]
    fn threads_count() {
        let m = Arc::new(Mutex::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for _ in 0..2000 {
                        *m.lock().unwrap() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*m.lock().unwrap(), 8000);
        assert_eq!(m.state.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn get_mut_into_inner_debug_unsized() {
        let mut m = Mutex::new(vec![1]);
        m.get_mut().push(2);
        assert_eq!(format!("{m:?}"), "Mutex { data: [1, 2], .. }");
        let g = m.lock().unwrap();
        assert_eq!(format!("{m:?}"), "Mutex { data: <locked>, .. }");
        drop(g);
        assert_eq!(m.into_inner(), vec![1, 2]);
        let s: &Mutex<[u8]> = &Mutex::new([1u8, 2, 3]);
        assert_eq!(s.lock().unwrap().len(), 3);
    }
}
