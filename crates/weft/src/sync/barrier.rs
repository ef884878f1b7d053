//! [`Barrier`]: `n` fibers or threads wait for each other, round after round.
//!
//! One OS lock guards the count of arrivals in the current round and the [`WaitList`] of those
//! that wait. The `n`-th arrival is the leader: it resets the count (starting the next round)
//! and notifies every waiter. A notification means "your round is complete", so rounds never mix
//! even when a fast fiber comes back for the next round before the others have woken.
//!
//! A waiter that times out or is cancelled before its round completes leaves the list and takes
//! its arrival back, as if it had never come; if the round completed first, it returns normally
//! (see [`super::wait_queue`]).

use std::fmt;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use super::wait_queue::{deadline_after, wait, WaitList, Woke};
use crate::error::{Cancelled, WaitError};
use crate::poison::Recover;

/// A reusable barrier for fibers and threads.
///
/// ```
/// use std::sync::Arc;
/// let barrier = Arc::new(weft::sync::Barrier::new(3));
/// let handles: Vec<_> = (0..3)
///     .map(|_| {
///         let b = barrier.clone();
///         weft::spawn(move || b.wait().unwrap().is_leader())
///     })
///     .collect();
/// let leaders = handles.into_iter().map(|h| h.join().unwrap());
/// assert_eq!(leaders.filter(|&leader| leader).count(), 1);
/// ```
pub struct Barrier {
    /// How many arrivals complete a round (0 acts as 1).
    n: usize,
    /// The current round; see the module docs.
    state: std::sync::Mutex<Round>,
}

struct Round {
    /// Arrivals in the current round so far, fewer than `n`.
    arrived: usize,
    /// Those arrivals, waiting for the round to complete.
    waiters: WaitList,
}

/// What [`Barrier::wait`] returns: whether this caller was the round's leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BarrierWaitResult {
    /// Whether this caller was the one arrival per round that completed it.
    leader: bool,
}

impl BarrierWaitResult {
    /// Whether this caller completed the round (exactly one per round is).
    pub fn is_leader(&self) -> bool {
        self.leader
    }
}

impl Barrier {
    /// A barrier that releases its waiters every `n` arrivals.
    pub const fn new(n: usize) -> Barrier {
        Barrier {
            n,
            state: std::sync::Mutex::new(Round {
                arrived: 0,
                waiters: WaitList::new(),
            }),
        }
    }

    /// Arrives, and parks the fiber (or blocks the thread) until `n` have arrived.
    ///
    /// Fails only when the calling fiber is cancelled while it would wait; its arrival is then
    /// taken back.
    pub fn wait(&self) -> Result<BarrierWaitResult, Cancelled> {
        self.wait_until(None).map_err(|_| Cancelled)
    }

    /// As [`Barrier::wait`], giving up with [`WaitError::TimedOut`] after `timeout` (the
    /// arrival is then taken back).
    pub fn wait_timeout(&self, timeout: Duration) -> Result<BarrierWaitResult, WaitError> {
        self.wait_until(deadline_after(timeout))
    }

    /// Locks the round. Nothing that can panic runs under this lock, so poisoning is ignored.
    fn lock(&self) -> MutexGuard<'_, Round> {
        self.state.lock().recover()
    }

    fn wait_until(&self, deadline: Option<Instant>) -> Result<BarrierWaitResult, WaitError> {
        let waiter = {
            let mut round = self.lock();
            round.arrived += 1;
            if round.arrived >= self.n {
                round.arrived = 0;
                let wakes = round.waiters.notify_all();
                drop(round);
                wakes.wake();
                return Ok(BarrierWaitResult { leader: true });
            }
            round.waiters.push()
        };
        let woke = wait(&waiter, deadline, || {
            let mut round = self.lock();
            let removed = round.waiters.remove(&waiter);
            if removed {
                round.arrived -= 1;
            }
            removed
        });
        match woke {
            Woke::Notified => Ok(BarrierWaitResult { leader: false }),
            Woke::TimedOut => Err(WaitError::TimedOut),
            Woke::Cancelled => Err(WaitError::Cancelled),
        }
    }
}

impl fmt::Debug for Barrier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Barrier")
            .field("n", &self.n)
            .field("arrived", &self.lock().arrived)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn zero_and_one_never_wait() {
        assert!(Barrier::new(0).wait().unwrap().is_leader());
        let b = Barrier::new(1);
        assert!(b.wait().unwrap().is_leader());
        assert!(b.wait().unwrap().is_leader());
    }

    #[test]
    fn timeout_takes_the_arrival_back() {
        let b = Barrier::new(2);
        let start = Instant::now();
        assert_eq!(
            b.wait_timeout(Duration::from_millis(20)),
            Err(WaitError::TimedOut)
        );
        assert!(start.elapsed() >= Duration::from_millis(20));
        assert_eq!(format!("{b:?}"), "Barrier { n: 2, arrived: 0 }");
    }

    #[test]
    fn threads_over_several_rounds() {
        let b = Arc::new(Barrier::new(3));
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let b = b.clone();
                std::thread::spawn(move || {
                    (0..20).filter(|_| b.wait().unwrap().is_leader()).count()
                })
            })
            .collect();
        let leaders: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(leaders, 20, "one leader per round");
    }
}
