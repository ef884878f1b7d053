//! [`Semaphore`]: a counting semaphore whose waiters park (fibers) or block (threads).
//!
//! One atomic word holds the state: `permits << 2 | LOCKED | WAITERS`.
//! - `permits`: permits free right now;
//! - `WAITERS`: the wait list is not empty;
//! - `LOCKED`: somebody is changing the wait list. The bit is the list's lock (a spin lock:
//!   it is held for a push, a pop or a removal, never while anyone parks), so taking it is
//!   the same compare-and-swap that reads and updates the count, on the same cache line.
//!
//! Invariants:
//! - **`WAITERS` set implies `permits == 0`**: a waiter sets `WAITERS` only from a state with no
//!   permit, and while it is set no release adds to `permits`: it hands its permits straight to
//!   waiters instead;
//! - **`LOCKED` set implies `WAITERS` set**, and while both are set nobody but the holder
//!   changes the word (fast acquires need a permit, fast releases need `WAITERS` clear), so the
//!   holder unlocks with a plain store of the word it wants;
//! - `WAITERS` is set exactly when the list is non-empty, both changed under `LOCKED`.
//!
//! - `acquire` with a permit free: one compare-and-swap taking it.
//! - `release` with nobody waiting: one compare-and-swap adding it.
//! - `acquire` with none free: one compare-and-swap sets `LOCKED | WAITERS`, the caller queues
//!   itself, a store unlocks; then it parks until a release hands a permit over.
//! - `release` with `WAITERS` set: one compare-and-swap sets `LOCKED`; the front waiters are
//!   popped (each notification *is* a permit, FIFO), and one store unlocks, clearing `WAITERS`
//!   and adding what is left when the list emptied.
//!
//! A waiter that times out or is cancelled removes itself (clearing `WAITERS` if it was the
//! last). If a permit was handed to it first, it keeps the permit and the acquire succeeds (see
//! [`super::wait_queue`]), so a cancelled waiter never swallows a permit.

use std::fmt;
use std::time::Duration;

use super::wait_queue::{deadline_after, wait, WaitList, Wake, Woke};
use crate::error::{Cancelled, WaitError};
use crate::loom::{AtomicUsize, Backoff, Ordering, UnsafeCell};

/// Somebody waits in the list (and then no permit is free).
const WAITERS: usize = 1;
/// The wait list is being changed (and then `WAITERS` is set).
const LOCKED: usize = 2;
/// One permit, in the state word.
const ONE: usize = 4;

/// A counting semaphore for fibers and threads.
///
/// ```
/// let s = weft::sync::Semaphore::new(1);
/// s.acquire().unwrap();
/// assert!(!s.try_acquire());
/// s.release();
/// assert_eq!(s.available_permits(), 1);
/// ```
// 24 bytes, aligned to 32 so that one never straddles two cache lines in an array.
#[repr(align(32))]
pub struct Semaphore {
    /// `permits << 2 | LOCKED | WAITERS`; see the module docs.
    state: AtomicUsize,
    /// Fibers and threads waiting for a permit, in arrival order. Touched only by whoever set
    /// `LOCKED`.
    waiters: UnsafeCell<WaitList>,
}

// SAFETY: the wait list is only touched under the `LOCKED` bit, which one thread holds at a
// time (set by an `Acquire` compare-and-swap, cleared by a `Release` store); the rest is atomic.
unsafe impl Sync for Semaphore {}

impl Semaphore {
    /// The most permits a semaphore can hold.
    pub const MAX_PERMITS: usize = usize::MAX >> 2;

    crate::loom::const_fn_unless_loom! {
        /// A semaphore with `permits` permits free.
        ///
        /// # Panics
        /// When `permits` exceeds [`Semaphore::MAX_PERMITS`].
        pub const fn new(permits: usize) -> Semaphore {
            assert!(
                permits <= Semaphore::MAX_PERMITS,
                "weft: too many semaphore permits"
            );
            Semaphore {
                state: AtomicUsize::new(permits * ONE),
                waiters: UnsafeCell::new(WaitList::new()),
            }
        }
    }

    /// Takes a permit, parking the fiber (or blocking the thread) until one is free.
    ///
    /// Fails only when the calling fiber is cancelled while it would wait; a free permit is
    /// taken even by a cancelled fiber.
    #[inline]
    pub fn acquire(&self) -> Result<(), Cancelled> {
        if self.try_acquire() {
            return Ok(());
        }
        self.acquire_slow(None).map_err(|_| Cancelled)
    }

    /// As [`Semaphore::acquire`], giving up with [`WaitError::TimedOut`] after `timeout`.
    pub fn acquire_timeout(&self, timeout: Duration) -> Result<(), WaitError> {
        if self.try_acquire() {
            return Ok(());
        }
        self.acquire_slow(Some(timeout))
    }

    /// Takes a permit if one is free right now.
    #[inline]
    pub fn try_acquire(&self) -> bool {
        let mut state = self.state.load(Ordering::Relaxed);
        while state >= ONE {
            match self.state.compare_exchange_weak(
                state,
                state - ONE,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(actual) => state = actual,
            }
        }
        false
    }

    /// Adds one permit, handing it to the first waiter if there is one.
    #[inline]
    pub fn release(&self) {
        self.add_permits(1);
    }

    /// Adds `n` permits, handing them to waiters first (FIFO).
    ///
    /// # Panics
    /// When the count would exceed [`Semaphore::MAX_PERMITS`].
    #[inline]
    pub fn add_permits(&self, n: usize) {
        if n == 0 {
            return;
        }
        assert!(
            n <= Semaphore::MAX_PERMITS,
            "weft: semaphore permit count overflow"
        );
        let mut state = self.state.load(Ordering::Relaxed);
        while state & WAITERS == 0 {
            let next = add(state, n);
            match self.state.compare_exchange_weak(
                state,
                next,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(actual) => state = actual,
            }
        }
        self.add_permits_slow(n);
    }

    /// Permits free right now (a snapshot).
    pub fn available_permits(&self) -> usize {
        self.state.load(Ordering::Relaxed) / ONE
    }

    /// Runs `f` on the wait list.
    ///
    /// # Safety
    /// The caller set `LOCKED` and has not cleared it.
    #[inline(always)]
    unsafe fn with_list<R>(&self, f: impl FnOnce(&mut WaitList) -> R) -> R {
        // SAFETY: `LOCKED` makes the caller the list's only user (see the type's `Sync`); the
        // reference does not outlive `f`.
        self.waiters.with_mut(|list| f(unsafe { &mut *list }))
    }

    /// Sets `LOCKED` once `WAITERS` is set and nobody holds it. Returns `false` without locking
    /// when `WAITERS` is (or becomes) clear: the list is empty then.
    fn lock_waiters(&self) -> bool {
        let backoff = Backoff::new();
        let mut state = self.state.load(Ordering::Relaxed);
        loop {
            if state & WAITERS == 0 {
                return false;
            }
            if state & LOCKED != 0 {
                backoff.snooze();
                state = self.state.load(Ordering::Relaxed);
                continue;
            }
            match self.state.compare_exchange_weak(
                state,
                state | LOCKED,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(actual) => state = actual,
            }
        }
    }

    /// Queues the caller and waits until a permit is handed to it.
    /// Inlined although it is the slow path: a frame left open across the park's stack switch
    /// costs mispredicted returns on both sides (see `crate::yield_now`); inlining it took the
    /// `cycle` benchmark from 25.5–26.7 to 28.9–30.9 M hand-offs/s.
    #[inline(always)]
    fn acquire_slow(&self, timeout: Option<Duration>) -> Result<(), WaitError> {
        let deadline = timeout.and_then(deadline_after);
        let backoff = Backoff::new();
        let mut state = self.state.load(Ordering::Relaxed);
        loop {
            let (next, order) = if state >= ONE {
                // A permit appeared (whoever holds the lock, taking it is safe).
                (state - ONE, Ordering::Acquire)
            } else if state & LOCKED != 0 {
                backoff.snooze();
                state = self.state.load(Ordering::Relaxed);
                continue;
            } else {
                // No permit and unlocked (state is 0 or WAITERS): lock and announce a waiter
                // in one step.
                (LOCKED | WAITERS, Ordering::Acquire)
            };
            match self
                .state
                .compare_exchange_weak(state, next, order, Ordering::Relaxed)
            {
                Ok(_) if next & LOCKED == 0 => return Ok(()),
                Ok(_) => break,
                Err(actual) => state = actual,
            }
        }
        // SAFETY: we set LOCKED just now.
        let waiter = unsafe { self.with_list(|list| list.push()) };
        // LOCKED | WAITERS with no permit: nobody else changes the word (module invariants).
        self.state.store(WAITERS, Ordering::Release);
        let woke = wait(&waiter, deadline, || {
            if !self.lock_waiters() {
                // WAITERS clear: the list is empty, so a release popped us.
                return false;
            }
            // SAFETY: we set LOCKED just now.
            let (removed, empty) =
                unsafe { self.with_list(|list| (list.remove(&waiter), list.is_empty())) };
            let next = if empty { 0 } else { WAITERS };
            self.state.store(next, Ordering::Release);
            removed
        });
        match woke {
            Woke::Notified => Ok(()),
            Woke::TimedOut => Err(WaitError::TimedOut),
            Woke::Cancelled => Err(WaitError::Cancelled),
        }
    }

    /// Hands permits to waiters under `LOCKED`; adds the rest to the count.
    #[cold]
    fn add_permits_slow(&self, n: usize) {
        if !self.lock_waiters() {
            // The last waiter left meanwhile: an ordinary release.
            return self.add_permits(n);
        }
        // The common case is one permit and one waiter: keep that wake-up out of the Vec, so a
        // hand-off allocates nothing.
        let mut first: Option<Wake> = None;
        let mut more: Vec<Wake> = Vec::new();
        let mut left = n;
        // SAFETY: we set LOCKED just now.
        let empty = unsafe {
            self.with_list(|list| {
                while left > 0 {
                    let Some(wake) = list.notify_one() else { break };
                    if first.is_none() {
                        first = Some(wake);
                    } else {
                        more.push(wake);
                    }
                    left -= 1;
                }
                list.is_empty()
            })
        };
        // LOCKED | WAITERS with no permit: nobody else changes the word (module invariants).
        let next = if empty { add(0, left) } else { WAITERS };
        self.state.store(next, Ordering::Release);
        if let Some(wake) = first {
            wake.wake();
        }
        for wake in more {
            wake.wake();
        }
    }
}

/// `state` with `n` more permits.
fn add(state: usize, n: usize) -> usize {
    assert!(
        n <= Semaphore::MAX_PERMITS && state / ONE <= Semaphore::MAX_PERMITS - n,
        "weft: semaphore permit count overflow"
    );
    state + n * ONE
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.load(Ordering::Relaxed);
        f.debug_struct("Semaphore")
            .field("permits", &(state / ONE))
            .field("waiters", &(state & WAITERS != 0))
            .finish()
    }
}

/// The real semaphore under loom, its waiters loom threads (see `crate::loom`): a blocked
/// `acquire` is a parked loom thread, so a lost wake-up is a deadlock loom reports, and an
/// `acquire_timeout`'s deadline passes at once, so the waiter's withdrawal races every step of
/// the releaser. The wait list sits in loom's `UnsafeCell`, so two threads in it at once (a
/// broken `LOCKED` bit) fail the model too.
#[cfg(all(test, loom))]
mod loom {
    use ::loom::cell::UnsafeCell;
    use ::loom::sync::Arc;
    use ::loom::thread;

    use super::*;

    /// Two preemptions per execution (tokio's bound for its loom runs): the three-thread
    /// models, whose waiters spin on `LOCKED`, finish in under a second at 2 and run for more
    /// than ten minutes at 3.
    const PREEMPTIONS: usize = 2;

    /// No `LOCKED`, no `WAITERS`: `permits` free and nobody queued.
    fn settled(s: &Semaphore, permits: usize) {
        assert_eq!(s.state.load(Ordering::Relaxed), permits * ONE);
    }

    #[test]
    fn loom_semaphore_release_wakes_a_blocked_acquire() {
        crate::loom::model_bounded(PREEMPTIONS, || {
            let s = Arc::new(Semaphore::new(0));
            let t = s.clone();
            let waiter = thread::spawn(move || t.acquire().unwrap());
            s.release();
            waiter.join().unwrap();
            settled(&s, 0);
        });
    }

    /// One permit, two contenders besides the main thread: the holders' writes to a loom cell
    /// never overlap (loom fails the model on concurrent access or a missing happens-before
    /// from one holder's release to the next one's acquire), and the permit comes back.
    #[test]
    fn loom_semaphore_permits_never_exceed_the_count() {
        crate::loom::model_bounded(PREEMPTIONS, || {
            let s = Arc::new((Semaphore::new(1), UnsafeCell::new(0u32)));
            let holders: Vec<_> = (0..2)
                .map(|_| {
                    let s = s.clone();
                    thread::spawn(move || {
                        s.0.acquire().unwrap();
                        // SAFETY: loom checks this access against the other holder's (the
                        // model's point).
                        s.1.with_mut(|held| unsafe { *held += 1 });
                        s.0.release();
                    })
                })
                .collect();
            for h in holders {
                h.join().unwrap();
            }
            // SAFETY: both holders are joined.
            assert_eq!(s.1.with(|held| unsafe { *held }), 2);
            settled(&s.0, 1);
        });
    }

    /// A waiter that gives up racing the release that hands it the permit: either it got the
    /// permit (and reports success) or the permit is still there. Never both, never neither.
    #[test]
    fn loom_semaphore_timed_out_waiter_does_not_swallow_a_permit() {
        crate::loom::model_bounded(PREEMPTIONS, || {
            let s = Arc::new(Semaphore::new(0));
            let t = s.clone();
            let waiter = thread::spawn(move || t.acquire_timeout(Duration::ZERO).is_ok());
            s.release();
            let got = waiter.join().unwrap();
            settled(&s, usize::from(!got));
        });
    }

    /// A waiter giving up while another stays blocked: the release reaches the blocked one
    /// (or the one that gave up, which keeps it and then gives another), so nobody is left
    /// parked and no permit is lost or invented.
    #[test]
    fn loom_semaphore_withdrawal_does_not_strand_the_next_waiter() {
        crate::loom::model_bounded(PREEMPTIONS, || {
            let s = Arc::new(Semaphore::new(0));
            let t = s.clone();
            let quitter = thread::spawn(move || t.acquire_timeout(Duration::ZERO).is_ok());
            let t = s.clone();
            let blocked = thread::spawn(move || t.acquire().unwrap());
            s.release();
            if quitter.join().unwrap() {
                s.release();
            }
            blocked.join().unwrap();
            settled(&s, 0);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn counts() {
        let s = Semaphore::new(2);
        assert!(s.try_acquire());
        assert!(s.try_acquire());
        assert!(!s.try_acquire());
        s.add_permits(3);
        assert_eq!(s.available_permits(), 3);
        s.add_permits(0);
        assert_eq!(s.available_permits(), 3);
        assert_eq!(format!("{s:?}"), "Semaphore { permits: 3, waiters: false }");
    }

    #[test]
    #[should_panic(expected = "overflow")]
    fn overflow_panics() {
        let s = Semaphore::new(Semaphore::MAX_PERMITS);
        s.release();
    }

    #[test]
    fn timeout_leaves_the_count_alone() {
        let s = Semaphore::new(0);
        let start = Instant::now();
        assert_eq!(
            s.acquire_timeout(Duration::from_millis(20)),
            Err(WaitError::TimedOut)
        );
        assert!(start.elapsed() >= Duration::from_millis(20));
        assert_eq!(s.state.load(Ordering::Relaxed), 0);
        s.release();
        assert_eq!(s.available_permits(), 1);
    }

    #[test]
    fn release_hands_off_to_waiting_threads() {
        let s = Arc::new(Semaphore::new(0));
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || s.acquire().unwrap())
            })
            .collect();
        // Hand out permits one by one, some possibly before the threads wait.
        s.release();
        s.add_permits(2);
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(s.state.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn threads_ping_pong() {
        let ping = Arc::new(Semaphore::new(0));
        let pong = Arc::new(Semaphore::new(0));
        let other = {
            let (ping, pong) = (ping.clone(), pong.clone());
            std::thread::spawn(move || {
                for _ in 0..1000 {
                    ping.acquire().unwrap();
                    pong.release();
                }
            })
        };
        for _ in 0..1000 {
            ping.release();
            pong.acquire().unwrap();
        }
        other.join().unwrap();
        assert_eq!(ping.available_permits() + pong.available_permits(), 0);
    }
}
