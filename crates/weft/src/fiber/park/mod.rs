//! Parking: the one primitive every blocking point in weft is built on, and the whole
//! park/unpark state machine under it: the protocol on a fiber's `state` word (`state`,
//! loom-checked), a fiber's side of it (`switch`: park, finish, wake) and the wait nodes the
//! `sync` lists link (`wait_node`; the data is `ctx::WaitNode`).
//!
//! [`park`] suspends the caller until an [`Unparker`] for it is used, the deadline passes, or
//! (for a fiber) it is cancelled. The caller may be a fiber, which parks without blocking its
//! processor, or a plain OS thread, which blocks. Code above this module (sync primitives, I/O,
//! join) never asks which.
//!
//! Contract:
//! - An `unpark` that happens before the `park` it targets is not lost: it leaves a token that
//!   makes the next `park` return at once (the same rule as `std::thread::park`).
//! - `park` may return [`Parked::Woken`] spuriously; callers re-check their condition in a loop.
//! - Cancellation is checked before parking and after every wake-up, and wins over a timeout.

pub(crate) mod state;
mod switch;
mod wait_node;

use std::time::Instant;

pub(crate) use self::switch::{
    drop_live_timer, finish_park, park_current, park_fiber, prefetch, unpark, unpark_owned,
};
pub(crate) use crate::ctx::WaitNode;
use crate::fiber::core::FiberRef;
use crate::fiber::current::{current_fiber_ptr, current_ref, fiber_is_cancelled};
use crate::loom::thread;

/// How a [`park`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Parked {
    /// Woken by an unpark, or spuriously.
    Woken,
    /// The deadline passed.
    TimedOut,
    /// The current fiber is cancelled.
    Cancelled,
}

/// Wakes one parked fiber or thread. Cheap to clone; any thread may use it.
#[derive(Clone)]
pub(crate) struct Unparker {
    target: Target,
}

#[derive(Clone)]
enum Target {
    Fiber(FiberRef),
    Thread(thread::Thread),
}

impl Unparker {
    /// Makes the target runnable (or leaves it a token if it is not parked yet).
    pub(crate) fn unpark(&self) {
        match &self.target {
            Target::Fiber(f) => f.unpark(),
            Target::Thread(t) => t.unpark(),
        }
    }

    /// Like [`Unparker::unpark`], consuming the unparker: a parked fiber's new task takes over
    /// its strong count instead of a clone of it.
    pub(crate) fn unpark_owned(self) {
        match self.target {
            Target::Fiber(f) => unpark_owned(f.0),
            Target::Thread(t) => t.unpark(),
        }
    }

    /// Whether this unparker wakes the same fiber or thread as `other`.
    #[allow(dead_code)]
    pub(crate) fn same_as(&self, other: &Unparker) -> bool {
        match (&self.target, &other.target) {
            (Target::Fiber(a), Target::Fiber(b)) => a.ptr_eq(b),
            (Target::Thread(a), Target::Thread(b)) => a.id() == b.id(),
            _ => false,
        }
    }
}

impl std::fmt::Debug for Unparker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.target {
            Target::Fiber(fb) => write!(f, "Unparker(fiber {})", fb.id()),
            Target::Thread(t) => write!(f, "Unparker(thread {:?})", t.id()),
        }
    }
}

/// An unparker for the calling fiber, or for the calling thread outside any fiber.
pub(crate) fn current_unparker() -> Unparker {
    match current_ref() {
        Some(f) => Unparker {
            target: Target::Fiber(f),
        },
        None => Unparker {
            target: Target::Thread(thread::current()),
        },
    }
}

/// Parks the caller until unparked, `deadline` passes, or the current fiber is cancelled.
///
/// Inlined (with `park_fiber`) so that fewer call frames stay open across the stack switch:
/// each one costs mispredicted returns on both sides of it (see `fiber::current::yield_now`).
#[inline(always)]
pub(crate) fn park(deadline: Option<Instant>) -> Parked {
    park_judged(deadline, true)
}

/// [`park`] for a waiter that checks first whether what it waits for is done: a fiber that is
/// resumed comes back [`Parked::Woken`] without the clock being read (only a thread still
/// tells [`Parked::TimedOut`]), so the caller reads the clock only when its wait is not over
/// (an I/O completion's waiter, woken by the completion nearly always: one clock reading a
/// request less, `docs/notes/scale.md`).
#[inline(always)]
pub(crate) fn park_unjudged(deadline: Option<Instant>) -> Parked {
    park_judged(deadline, false)
}

#[inline(always)]
fn park_judged(deadline: Option<Instant>, judge_fiber: bool) -> Parked {
    // One thread-local read for the whole park: the fiber's record stays valid across the
    // switch even when it resumes on another thread.
    let me = current_fiber_ptr();
    if !me.is_null() {
        // SAFETY: `me` is the fiber running here.
        if unsafe { fiber_is_cancelled(me) } {
            return Parked::Cancelled;
        }
        // SAFETY: `me` is the fiber running here and we are on its stack.
        unsafe { park_fiber(me, deadline) };
        // SAFETY: `me` is still this fiber's own record, wherever it resumed.
        if unsafe { fiber_is_cancelled(me) } {
            return Parked::Cancelled;
        }
        if !judge_fiber {
            return Parked::Woken;
        }
    } else {
        #[cfg(not(loom))]
        match deadline {
            None => thread::park(),
            Some(d) => {
                let now = Instant::now();
                if d > now {
                    thread::park_timeout(d - now);
                }
            }
        }
        // loom has no clock and no timed park: a deadline passes at once, so a model's waiter
        // gives up at every point of its notifier's run (see `crate::loom`).
        #[cfg(loom)]
        match deadline {
            None => thread::park(),
            Some(_) => return Parked::TimedOut,
        }
    }
    match deadline {
        Some(d) if Instant::now() >= d => Parked::TimedOut,
        _ => Parked::Woken,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use std::sync::{Arc, OnceLock};

    /// Rings of fibers pass a baton with park/unpark, with random delays, yields and short
    /// sleeps in between, on a 2-processor cluster whose processors keep going idle (few
    /// fibers). A lost wake-up would hang a ring; the test checks every ring finishes.
    #[test]
    fn no_lost_wakeups_across_millions_of_park_unpark_cycles() {
        const RING: usize = 4;
        const RINGS: usize = 4;
        let hops_per_ring: u64 = std::env::var("WEFT_STRESS_HOPS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(500_000);
        let cluster = crate::Cluster::builder()
            .name("stress")
            .processors(2)
            .build()
            .unwrap();
        let total = Arc::new(AtomicUsize::new(0));
        let mut handles = Vec::new();
        let mut turns = Vec::new();
        let mut all_slots = Vec::new();
        for ring in 0..RINGS {
            let turn = Arc::new(AtomicU64::new(0));
            let slots: Arc<Vec<OnceLock<Unparker>>> =
                Arc::new((0..RING).map(|_| OnceLock::new()).collect());
            turns.push(turn.clone());
            all_slots.push(slots.clone());
            for me in 0..RING {
                let (turn, slots, total) = (turn.clone(), slots.clone(), total.clone());
                handles.push(cluster.spawn(move || {
                    slots[me].set(current_unparker()).unwrap();
                    let mut rng = ((ring * 31 + me + 1) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    let mut hops = 0usize;
                    loop {
                        let t = turn.load(Ordering::Acquire);
                        if t >= hops_per_ring {
                            break;
                        }
                        if t % RING as u64 != me as u64 {
                            park(None);
                            continue;
                        }
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        match rng % 64 {
                            0 => crate::yield_now(),
                            1 => {
                                let _ = crate::sleep(std::time::Duration::from_micros(rng % 50));
                            }
                            n => {
                                for _ in 0..n * 4 {
                                    std::hint::spin_loop();
                                }
                            }
                        }
                        turn.store(t + 1, Ordering::Release);
                        hops += 1;
                        let next = (me + 1) % RING;
                        // The next fiber may not have published its unparker yet: it will see
                        // the turn when it first looks.
                        if let Some(u) = slots[next].get() {
                            u.unpark();
                        }
                        if t + 1 >= hops_per_ring {
                            // Release everyone waiting in this ring.
                            for s in slots.iter().filter_map(|s| s.get()) {
                                s.unpark();
                            }
                        }
                    }
                    total.fetch_add(hops, Ordering::Relaxed);
                }));
            }
        }
        // Watch progress: a lost wake-up shows as every ring standing still. Fail with the
        // state of each fiber instead of hanging.
        let progress = || turns.iter().map(|t| t.load(Ordering::SeqCst)).sum::<u64>();
        let (mut last, mut since) = (progress(), Instant::now());
        while !handles.iter().all(|h| h.is_finished()) {
            std::thread::sleep(std::time::Duration::from_millis(50));
            let now = progress();
            if now != last {
                (last, since) = (now, Instant::now());
            } else if since.elapsed() > std::time::Duration::from_secs(20) {
                let states: Vec<String> = all_slots
                    .iter()
                    .flat_map(|s| s.iter())
                    .map(|u| match u.get() {
                        Some(Unparker {
                            target: Target::Fiber(f),
                        }) => f.0.state.load(Ordering::SeqCst).to_string(),
                        _ => "-".to_owned(),
                    })
                    .collect();
                panic!(
                    "no progress for 20 s: turns {:?}, fiber states {states:?}, finished {:?}",
                    turns
                        .iter()
                        .map(|t| t.load(Ordering::SeqCst))
                        .collect::<Vec<_>>(),
                    handles.iter().map(|h| h.is_finished()).collect::<Vec<_>>()
                );
            }
        }
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(
            total.load(Ordering::Relaxed) as u64,
            hops_per_ring * RINGS as u64
        );
    }

    #[test]
    fn threads_park_with_deadline_and_tokens() {
        let me = current_unparker();
        me.unpark();
        // A token left before parking makes the park return at once.
        assert_eq!(park(None), Parked::Woken);
        let start = Instant::now();
        let deadline = start + std::time::Duration::from_millis(20);
        while park(Some(deadline)) != Parked::TimedOut {}
        assert!(start.elapsed() >= std::time::Duration::from_millis(20));
    }
}
