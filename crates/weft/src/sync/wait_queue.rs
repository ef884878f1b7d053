//! The waiter list every primitive in [`crate::sync`] parks on.
//!
//! A waiter is a [`Waiter`]: the waiting fiber's (or thread's) own wait node, which holds its
//! `notified` flag and the link to the next waiter. Every fiber carries one node in its record
//! and every thread one in a thread-local, because a waiter is in at most one list at a time;
//! so the list is intrusive and queueing allocates nothing. While a fiber's node is listed, the
//! list holds one strong count of the fiber (a parked fiber may have no other owner); the
//! notifier that pops it takes that count over and hands it to the fiber's new task.
//! A [`WaitList`] is a FIFO of nodes with no lock of its own: each primitive keeps
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

use std::time::{Duration, Instant};

use crate::fiber::park::{park, Parked, Unparker, WaitNode};
use crate::loom::{Mutex, MutexGuard};
use crate::poison::Recover;

/// One fiber or thread waiting in a [`WaitList`]: its own node, which it keeps alive by being
/// alive (a fiber's node is in its record, a thread's in a thread-local).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Waiter(*const WaitNode);

impl Waiter {
    /// Whether a notifier popped this waiter (and handed it whatever the primitive hands over).
    pub(crate) fn is_notified(&self) -> bool {
        // SAFETY: only the waiter itself holds its `Waiter`, and its node lives as long as it.
        unsafe { (*self.0).is_notified() }
    }
}

/// A popped waiter to wake once the owner's lock is released.
#[must_use = "a popped waiter must be woken, or it parks forever"]
pub(crate) struct Wake(
    /// Carries the strong count the list held, so the fiber stays alive until the wake-up.
    Unparker,
);

impl Wake {
    /// Wakes the waiter. Call it after releasing the owner's lock.
    pub(crate) fn wake(self) {
        self.0.unpark_owned();
    }
}

/// Several popped waiters to wake once the owner's lock is released.
#[must_use = "popped waiters must be woken, or they park forever"]
pub(crate) struct WakeAll(
    /// The popped waiters, in the order they waited (woken in that order).
    Vec<Wake>,
);

impl WakeAll {
    /// Wakes every waiter. Call it after releasing the owner's lock.
    pub(crate) fn wake(self) {
        for wake in self.0 {
            wake.wake();
        }
    }
}

/// A FIFO of waiters, linked through the waiters' own nodes (intrusive: queueing allocates
/// nothing and touches no memory but the list and the node). Not locked: its owner keeps it
/// behind its own OS lock, and every method runs under that lock.
///
/// Invariants: `head` and `tail` are both null or both set; following `next` from `head`
/// reaches `tail`, whose `next` is null; every node in the list was linked by its owner with
/// [`WaitNode::retain_listed`] and is alive.
pub(crate) struct WaitList {
    /// The oldest waiter (notified first), or null.
    head: *const WaitNode,
    /// The newest waiter, or null.
    tail: *const WaitNode,
}

// SAFETY: the nodes the pointers name are kept alive by the list (a fiber's strong count) or by
// their blocked threads, and are touched only under the owner's lock, from any thread.
unsafe impl Send for WaitList {}
// SAFETY: as above; shared access goes through the owner's lock.
unsafe impl Sync for WaitList {}

impl Default for WaitList {
    fn default() -> WaitList {
        WaitList::new()
    }
}

impl std::fmt::Debug for WaitList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitList")
            .field("empty", &self.is_empty())
            .finish()
    }
}

impl WaitList {
    pub(crate) const fn new() -> WaitList {
        WaitList {
            head: std::ptr::null(),
            tail: std::ptr::null(),
        }
    }

    /// Queues the calling fiber (or thread) at the back and returns its node, to pass to
    /// [`wait`].
    ///
    /// The caller must not be in any other list (one wait at a time per fiber or thread).
    pub(crate) fn push(&mut self) -> Waiter {
        let node = WaitNode::current();
        // SAFETY: the caller's own node, in no list (one wait at a time), being linked here.
        unsafe {
            (*node).reset();
            WaitNode::retain_listed(node);
        }
        self.link(node);
        Waiter(node)
    }

    /// Links `node` at the back.
    fn link(&mut self, node: *const WaitNode) {
        // SAFETY: `node` is alive and in no list; `tail`, when set, is a live listed node.
        unsafe {
            (*node).set_next(std::ptr::null());
            if self.tail.is_null() {
                self.head = node;
            } else {
                (*self.tail).set_next(node);
            }
        }
        self.tail = node;
    }

    /// Pops the front waiter and marks it notified; the caller wakes it after unlocking.
    pub(crate) fn notify_one(&mut self) -> Option<Wake> {
        let node = self.head;
        if node.is_null() {
            return None;
        }
        // SAFETY: `node` is listed, hence alive; it is unlinked before `take_listed`, which is
        // the last touch of it.
        unsafe {
            self.head = (*node).next();
            if self.head.is_null() {
                self.tail = std::ptr::null();
            }
            Some(Wake(WaitNode::take_listed(node)))
        }
    }

    /// Pops every waiter and marks them notified; the caller wakes them after unlocking.
    pub(crate) fn notify_all(&mut self) -> WakeAll {
        let mut wakes = Vec::new();
        while let Some(wake) = self.notify_one() {
            wakes.push(wake);
        }
        WakeAll(wakes)
    }

    /// Removes `waiter` (the caller's own) if it is still queued. Returns `false` when it is
    /// not, which means a notifier popped it: it was notified.
    pub(crate) fn remove(&mut self, waiter: &Waiter) -> bool {
        let mut prev: *const WaitNode = std::ptr::null();
        let mut node = self.head;
        // SAFETY: every node reached from `head` is listed, hence alive; `waiter`'s node is the
        // caller's own, linked by its `push`.
        unsafe {
            while !node.is_null() {
                let next = (*node).next();
                if std::ptr::eq(node, waiter.0) {
                    if prev.is_null() {
                        self.head = next;
                    } else {
                        (*prev).set_next(next);
                    }
                    if next.is_null() {
                        self.tail = prev;
                    }
                    (*node).set_next(std::ptr::null());
                    WaitNode::release_listed(node);
                    return true;
                }
                prev = node;
                node = next;
            }
        }
        false
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.head.is_null()
    }

    /// Like [`WaitList::push`] with a node of its own (leaked: tests only), so one test thread
    /// can play several waiters.
    #[cfg(test)]
    pub(crate) fn push_detached(&mut self) -> Waiter {
        let node: &'static WaitNode = Box::leak(Box::new(WaitNode::for_thread(
            crate::loom::thread::current(),
        )));
        self.link(node);
        Waiter(node)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        let mut n = 0;
        let mut node = self.head;
        while !node.is_null() {
            n += 1;
            // SAFETY: listed nodes are alive.
            node = unsafe { (*node).next() };
        }
        n
    }
}

impl Drop for WaitList {
    /// A list dropped with waiters in it (its owner can only be dropped once nobody references
    /// it, so this does not happen in practice) gives back the fibers' strong counts without
    /// waking anyone, as dropping counted references would.
    fn drop(&mut self) {
        while let Some(Wake(unparker)) = self.notify_one() {
            drop(unparker);
        }
    }
}

/// A [`WaitList`] with its own lock, for primitives whose state is an atomic word.
#[derive(Debug, Default)]
pub(crate) struct WaitQueue {
    /// Held only for a push, a pop or a removal, never while anyone parks.
    list: Mutex<WaitList>,
}

impl WaitQueue {
    crate::loom::const_fn_unless_loom! {
        pub(crate) const fn new() -> WaitQueue {
            WaitQueue {
                list: Mutex::new(WaitList::new()),
            }
        }
    }

    /// Locks the list (pushes, pops and removals only: see `crate::poison`).
    pub(crate) fn lock(&self) -> MutexGuard<'_, WaitList> {
        self.list.lock().recover()
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

    /// A listed fiber holds one count of its record; whichever way it leaves the list (popped
    /// by a notification, removed on a timeout, popped by a notify-all) the count comes back,
    /// so the record (and its stack) is freed once the handle is the last owner.
    #[test]
    fn waits_give_back_the_fibers_counts() {
        let cluster = crate::Cluster::builder()
            .name("counts")
            .processors(1)
            .build()
            .unwrap();
        let sem = Arc::new(crate::sync::Semaphore::new(0));
        let pair = Arc::new((crate::sync::Mutex::new(false), crate::sync::Condvar::new()));
        let handle = {
            let (sem, pair) = (sem.clone(), pair.clone());
            cluster.spawn(move || {
                sem.acquire().unwrap();
                assert!(sem.acquire_timeout(Duration::from_millis(5)).is_err());
                let mut ready = pair.0.lock().unwrap();
                while !*ready {
                    ready = pair.1.wait(ready).unwrap();
                }
            })
        };
        // Let the fiber park in each wait before it is let through.
        std::thread::sleep(Duration::from_millis(20));
        sem.release();
        std::thread::sleep(Duration::from_millis(30));
        *pair.0.lock().unwrap() = true;
        pair.1.notify_all();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !(handle.is_finished() && handle.fiber_strong_count() == 1) {
            assert!(Instant::now() < deadline, "a count was not given back");
            std::thread::sleep(Duration::from_millis(1));
        }
        handle.join().unwrap();
        cluster.shutdown();
    }

    #[test]
    fn far_deadline_is_no_deadline() {
        assert_eq!(deadline_after(Duration::MAX), None);
        assert!(deadline_after(Duration::from_secs(1)).is_some());
    }
}
