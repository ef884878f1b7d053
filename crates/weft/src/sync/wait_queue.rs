//! The waiter list every primitive in [`crate::sync`] parks on.
//!
//! A waiter is a [`Waiter`]: a counted reference to the waiting fiber's (or thread's) own wait
//! node, which holds its `notified` flag and knows how to wake it. Every fiber carries one node
//! and every thread one in a thread-local, because a waiter is in at most one list at a time;
//! so queueing costs a reference-count increment, not an allocation. A [`WaitList`] is a FIFO of them with no lock of its own: each primitive keeps
//! it behind the OS lock that also guards the state the waiters wait for (a channel's buffer, a
//! barrier's count), or in a [`WaitQueue`] (a list plus its lock) when that state is an atomic
//! (a mutex's lock word, a semaphore's permit count).
//!
//! # Protocol
//!
//! 1. A waiter takes the owner's lock, re-checks its condition and, if it must wait, pushes a new
//!    `Waiter` ([`WaitList::push`]) and releases the lock.
//! 2. A notifier takes the same lock and pops waiters from the front ([`WaitList::notify_one`],
//!    [`WaitList::notify_all`]); popping sets `notified`. That is the hand-off point: whatever
//!    the primitive gives with a notification (a mutex's ownership, a semaphore's permit) belongs
//!    to the waiter from then on. The notifier wakes the popped waiters ([`Wake::wake`]) after it
//!    released the lock, so the lock is never held across a wake-up.
//! 3. The waiter parks ([`wait`]) until it sees `notified`. Parking may end spuriously, so it
//!    loops.
//!
//! # Timeouts, cancellation, and the race with a notification
//!
//! When a wait times out or the fiber is cancelled, the waiter takes the owner's lock again and
//! removes itself from the list. Being in the list and not being notified are the same thing
//! (popping is what notifies, both under the lock), so the removal settles the race:
//!
//! - still in the list: nobody handed it anything; it leaves, and reports the timeout or the
//!   cancellation;
//! - already popped: a notifier got there first. **The waiter keeps what it was given** and the
//!   wait reports success. Nothing is handed on, so nothing can be lost or handed twice; the
//!   fiber sees its cancellation at its next blocking point (cancellation is sticky).
//!
//! The one primitive that cannot keep a notification is [`crate::sync::Condvar`]: a notified
//! waiter still has to re-lock its mutex, and if that fails with `Cancelled` it passes the
//! notification on (see there).
//!
//! Invariants: a waiter is in at most one list, at most once; `notified` goes from `false` to
//! `true` once, under the owner's lock, when the waiter leaves the list; no OS lock is held while
//! anyone parks.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::park::{park, NodeRef, Parked};

/// One fiber or thread waiting in a [`WaitList`].
///
/// Its node's flag is set by the notifier that popped it, under the owner's lock; `Release`
/// there and `Acquire` in [`Waiter::is_notified`] make what the notifier handed over (the data a
/// mutex protects, say) visible to the waiter, which may read it without the owner's lock.
#[derive(Debug, Clone)]
pub(crate) struct Waiter(NodeRef);

impl Waiter {
    /// Whether a notifier popped this waiter (and handed it whatever the primitive hands over).
    pub(crate) fn is_notified(&self) -> bool {
        self.0.is_notified()
    }
}

/// A popped waiter to wake once the owner's lock is released.
#[must_use = "a popped waiter must be woken, or it parks forever"]
pub(crate) struct Wake(
    /// The popped waiter: holding it keeps its fiber (and node) alive until the wake-up.
    Waiter,
);

impl Wake {
    /// Wakes the waiter. Call it after releasing the owner's lock.
    pub(crate) fn wake(self) {
        self.0 .0.unpark();
    }
}

/// Several popped waiters to wake once the owner's lock is released.
#[must_use = "popped waiters must be woken, or they park forever"]
pub(crate) struct WakeAll(
    /// The popped waiters, in the order they waited (woken in that order).
    VecDeque<Waiter>,
);

impl WakeAll {
    /// Wakes every waiter. Call it after releasing the owner's lock.
    pub(crate) fn wake(self) {
        for waiter in self.0 {
            waiter.0.unpark();
        }
    }
}

/// A FIFO of waiters. Not locked: its owner keeps it behind its own OS lock.
#[derive(Debug, Default)]
pub(crate) struct WaitList {
    /// Waiters in arrival order; the front one is notified first.
    waiters: VecDeque<Waiter>,
}

impl WaitList {
    pub(crate) const fn new() -> WaitList {
        WaitList {
            waiters: VecDeque::new(),
        }
    }

    /// Queues the calling fiber (or thread) at the back and returns its node, to pass to
    /// [`wait`].
    ///
    /// The caller must not be in any other list (one wait at a time per fiber or thread).
    pub(crate) fn push(&mut self) -> Waiter {
        let waiter = Waiter(NodeRef::current());
        waiter.0.reset();
        self.waiters.push_back(waiter.clone());
        waiter
    }

    /// Pops the front waiter and marks it notified; the caller wakes it after unlocking.
    pub(crate) fn notify_one(&mut self) -> Option<Wake> {
        let waiter = self.waiters.pop_front()?;
        waiter.0.set_notified();
        Some(Wake(waiter))
    }

    /// Pops every waiter and marks them notified; the caller wakes them after unlocking.
    pub(crate) fn notify_all(&mut self) -> WakeAll {
        let waiters = std::mem::take(&mut self.waiters);
        for waiter in &waiters {
            waiter.0.set_notified();
        }
        WakeAll(waiters)
    }

    /// Removes `waiter` if it is still queued. Returns `false` when it is not, which means a
    /// notifier popped it: it was notified.
    pub(crate) fn remove(&mut self, waiter: &Waiter) -> bool {
        match self.waiters.iter().position(|w| w.0.same_node(&waiter.0)) {
            Some(index) => {
                self.waiters.remove(index);
                true
            }
            None => false,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }

    /// Like [`WaitList::push`] with a node of its own, so one test thread can play several
    /// waiters.
    #[cfg(test)]
    pub(crate) fn push_detached(&mut self) -> Waiter {
        let node = std::sync::Arc::new(crate::park::WaitNode::new());
        let waiter = Waiter(NodeRef::Thread(node, std::thread::current()));
        self.waiters.push_back(waiter.clone());
        waiter
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.waiters.len()
    }
}

/// A [`WaitList`] with its own lock, for primitives whose state is an atomic word.
#[derive(Debug, Default)]
pub(crate) struct WaitQueue {
    /// Held only for a push, a pop or a removal, never while anyone parks.
    list: std::sync::Mutex<WaitList>,
}

impl WaitQueue {
    pub(crate) const fn new() -> WaitQueue {
        WaitQueue {
            list: std::sync::Mutex::new(WaitList::new()),
        }
    }

    /// Locks the list. Nothing that can panic runs under this lock, so poisoning is ignored.
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, WaitList> {
        self.list.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// How a [`wait`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woke {
    /// A notifier popped the waiter (possibly racing a timeout or a cancellation, which lost).
    Notified,
    /// The deadline passed and the waiter left the list un-notified.
    TimedOut,
    /// The fiber was cancelled and the waiter left the list un-notified.
    Cancelled,
}

/// Parks until `waiter` is notified, `deadline` passes or the fiber is cancelled.
///
/// `withdraw` is called when the wait gives up: it must take the owner's lock and remove
/// `waiter` from its list (returning [`WaitList::remove`]'s answer), and may fix up the owner's
/// state while it holds the lock. When it returns `false` the waiter had been notified and the
/// wait reports [`Woke::Notified`] after all (see the module docs).
#[inline(always)]
pub(crate) fn wait(
    waiter: &Waiter,
    deadline: Option<Instant>,
    withdraw: impl FnOnce() -> bool,
) -> Woke {
    loop {
        if waiter.is_notified() {
            return Woke::Notified;
        }
        let gave_up = match park(deadline) {
            Parked::Woken => continue,
            Parked::TimedOut => Woke::TimedOut,
            Parked::Cancelled => Woke::Cancelled,
        };
        return if withdraw() { gave_up } else { Woke::Notified };
    }
}

/// The deadline `timeout` from now; `None` (no deadline) when that is too far to represent.
pub(crate) fn deadline_after(timeout: Duration) -> Option<Instant> {
    Instant::now().checked_add(timeout)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn fifo_notify_and_remove() {
        let mut list = WaitList::default();
        let a = list.push_detached();
        let b = list.push_detached();
        let c = list.push_detached();
        assert_eq!(list.len(), 3);
        assert!(list.remove(&b));
        assert!(!list.remove(&b), "removed twice");
        list.notify_one().expect("a is queued").wake();
        assert!(a.is_notified());
        assert!(!c.is_notified());
        assert!(!list.remove(&a), "a was popped by the notification");
        list.notify_all().wake();
        assert!(c.is_notified());
        assert!(list.is_empty());
        assert!(list.notify_one().is_none());
    }

    #[test]
    fn timeout_leaves_the_list() {
        let queue = WaitQueue::new();
        let waiter = queue.lock().push();
        let start = Instant::now();
        let woke = wait(&waiter, Some(start + Duration::from_millis(20)), || {
            queue.lock().remove(&waiter)
        });
        assert_eq!(woke, Woke::TimedOut);
        assert!(start.elapsed() >= Duration::from_millis(20));
        assert!(queue.lock().is_empty());
    }

    #[test]
    fn notification_racing_a_timeout_wins() {
        let queue = WaitQueue::new();
        let waiter = queue.lock().push();
        // Notified, but the waiter never looked before its deadline passed.
        queue.lock().notify_one().expect("queued").wake();
        let woke = wait(&waiter, Some(Instant::now()), || {
            queue.lock().remove(&waiter)
        });
        assert_eq!(woke, Woke::Notified);
    }

    #[test]
    fn thread_wakes_thread() {
        let queue = Arc::new(WaitQueue::new());
        let ready = Arc::new(Mutex::new(false));
        let waiter = queue.lock().push();
        let notifier = {
            let queue = queue.clone();
            let ready = ready.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(10));
                *ready.lock().unwrap() = true;
                let wake = queue.lock().notify_one();
                wake.expect("queued").wake();
            })
        };
        assert_eq!(wait(&waiter, None, || unreachable!()), Woke::Notified);
        assert!(*ready.lock().unwrap());
        notifier.join().unwrap();
    }

    #[test]
    fn far_deadline_is_no_deadline() {
        assert_eq!(deadline_after(Duration::MAX), None);
        assert!(deadline_after(Duration::from_secs(1)).is_some());
    }
}
