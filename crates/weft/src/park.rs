//! Parking: the one primitive every blocking point in weft is built on.
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

use std::time::Instant;

use crate::fiber;

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
    Fiber(fiber::FiberRef),
    Thread(std::thread::Thread),
}

impl Unparker {
    /// Makes the target runnable (or leaves it a token if it is not parked yet).
    pub(crate) fn unpark(&self) {
        match &self.target {
            Target::Fiber(f) => f.unpark(),
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
    match fiber::current_ref() {
        Some(f) => Unparker {
            target: Target::Fiber(f),
        },
        None => Unparker {
            target: Target::Thread(std::thread::current()),
        },
    }
}

/// Parks the caller until unparked, `deadline` passes, or the current fiber is cancelled.
pub(crate) fn park(deadline: Option<Instant>) -> Parked {
    if fiber::in_fiber() {
        if fiber::is_cancelled() {
            return Parked::Cancelled;
        }
        fiber::park_current(deadline);
        if fiber::is_cancelled() {
            return Parked::Cancelled;
        }
    } else {
        match deadline {
            None => std::thread::park(),
            Some(d) => {
                let now = Instant::now();
                if d > now {
                    std::thread::park_timeout(d - now);
                }
            }
        }
    }
    match deadline {
        Some(d) if Instant::now() >= d => Parked::TimedOut,
        _ => Parked::Woken,
    }
}
