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

use std::cell::Cell;
use std::sync::Arc;
use std::time::Instant;

use crate::fiber;
use crate::loom::{thread, AtomicBool, Ordering};

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
            Target::Fiber(f) => fiber::unpark_owned(f.0),
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

/// A fiber's or thread's entry in the intrusive wait lists of `sync::wait_queue`. Each fiber has
/// one in its record and each OS thread one in a thread-local: a waiter is in at most one list
/// at a time, so a wait allocates nothing and queueing links the node itself.
///
/// `next` belongs to the list the node is in and is read and written only under that list's
/// owner's lock; `notified` is written by the notifier that unlinks the node (under the same
/// lock) and read by the owner.
pub(crate) struct WaitNode {
    notified: AtomicBool,
    /// The next node of the list this one is in (null at the tail, or when in no list).
    next: Cell<*const WaitNode>,
    /// The thread to unpark for a thread's node; `None` for the node in a fiber's record.
    thread: Option<thread::Thread>,
}

// SAFETY: `next` (the only field that is not thread-safe) is touched only under the lock of the
// list the node is in, and every other field is immutable or atomic.
unsafe impl Sync for WaitNode {}
// SAFETY: as above; a node is moved only before it is ever listed.
unsafe impl Send for WaitNode {}

impl WaitNode {
    crate::loom::const_fn_unless_loom! {
        /// The node inside a fiber's record.
        pub(crate) const fn new() -> WaitNode {
            WaitNode {
                notified: AtomicBool::new(false),
                next: Cell::new(std::ptr::null()),
                thread: None,
            }
        }
    }

    /// A node whose owner is the OS thread `thread`.
    pub(crate) fn for_thread(thread: thread::Thread) -> WaitNode {
        WaitNode {
            notified: AtomicBool::new(false),
            next: Cell::new(std::ptr::null()),
            thread: Some(thread),
        }
    }

    /// The node of the calling fiber, or of the calling thread outside fibers. It stays valid
    /// as long as its owner lives, which covers every wait the owner makes.
    pub(crate) fn current() -> *const WaitNode {
        thread::thread_local! {
            static NODE: WaitNode = WaitNode::for_thread(thread::current());
        }
        let fiber = fiber::current_fiber_ptr();
        if fiber.is_null() {
            NODE.with(|n| n as *const WaitNode)
        } else {
            // SAFETY: `fiber` is the fiber running here, alive while it runs.
            unsafe { std::ptr::addr_of!((*fiber).wait_node) }
        }
    }

    /// Clears the flag for a new wait. Only the owner calls it, and only while the node is in
    /// no list, so no notifier of an earlier wait can still write it.
    pub(crate) fn reset(&self) {
        self.notified.store(false, Ordering::Relaxed);
    }

    /// Whether a notifier unlinked the node (`Acquire`: pairs with [`WaitNode::take_listed`]).
    pub(crate) fn is_notified(&self) -> bool {
        self.notified.load(Ordering::Acquire)
    }

    /// The next node of the list (under the list owner's lock).
    pub(crate) fn next(&self) -> *const WaitNode {
        self.next.get()
    }

    /// Sets the next node of the list (under the list owner's lock).
    pub(crate) fn set_next(&self, next: *const WaitNode) {
        self.next.set(next);
    }

    /// Called as the node is linked into a list: a fiber's node makes the list hold one strong
    /// count of the fiber, so a parked fiber that nobody else references stays alive while it
    /// waits. A thread's node needs none (the thread is blocked in its wait).
    ///
    /// # Safety
    /// `node` is the caller's own node ([`WaitNode::current`]) and is being linked.
    pub(crate) unsafe fn retain_listed(node: *const WaitNode) {
        // SAFETY: the caller's own node is alive.
        if unsafe { (*node).thread.is_none() } {
            // SAFETY: a node without a thread is the `wait_node` field of a live `Arc<Fiber>`.
            unsafe { Arc::increment_strong_count(fiber::fiber_of_node(node)) };
        }
    }

    /// Undoes [`WaitNode::retain_listed`] for a node its owner unlinked itself (a timeout or a
    /// cancellation). The owner is running, so this never drops the last count.
    ///
    /// # Safety
    /// `node` was linked with `retain_listed` and has just been unlinked by its owner.
    pub(crate) unsafe fn release_listed(node: *const WaitNode) {
        // SAFETY: the owner is alive and calls this.
        if unsafe { (*node).thread.is_none() } {
            // SAFETY: the count taken by `retain_listed`.
            unsafe { Arc::decrement_strong_count(fiber::fiber_of_node(node)) };
        }
    }

    /// Marks an unlinked node notified and returns what wakes its owner, carrying the strong
    /// count the list held (a thread's handle for a thread). The node is not touched after
    /// the flag is set: its owner may return from its wait, and a thread may exit, at once.
    /// `Release` makes what the notifier hands over (a mutex's data, a permit) visible to the
    /// owner's `Acquire` in [`WaitNode::is_notified`].
    ///
    /// # Safety
    /// `node` was linked with `retain_listed` and has just been unlinked, under the lock, by a
    /// notifier (who calls this before releasing the lock).
    pub(crate) unsafe fn take_listed(node: *const WaitNode) -> Unparker {
        // SAFETY: a listed node is alive: the list holds its fiber's count, or its thread is
        // blocked waiting.
        let node = unsafe { &*node };
        let target = match &node.thread {
            // SAFETY: the count `retain_listed` took moves into the unparker.
            None => Target::Fiber(fiber::FiberRef(unsafe {
                Arc::from_raw(fiber::fiber_of_node(node))
            })),
            Some(thread) => Target::Thread(thread.clone()),
        };
        node.notified.store(true, Ordering::Release);
        Unparker { target }
    }
}

impl std::fmt::Debug for WaitNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitNode")
            .field("notified", &self.notified.load(Ordering::Relaxed))
            .field("thread", &self.thread.as_ref().map(|t| t.id()))
            .finish()
    }
}

/// An unparker for the calling fiber, or for the calling thread outside any fiber.
pub(crate) fn current_unparker() -> Unparker {
    match fiber::current_ref() {
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
/// each one costs mispredicted returns on both sides of it (see `crate::yield_now`).
#[inline(always)]
pub(crate) fn park(deadline: Option<Instant>) -> Parked {
    // One thread-local read for the whole park: the fiber's record stays valid across the
    // switch even when it resumes on another thread.
    let me = fiber::current_fiber_ptr();
    if !me.is_null() {
        // SAFETY: `me` is the fiber running here.
        if unsafe { fiber::fiber_is_cancelled(me) } {
            return Parked::Cancelled;
        }
        // SAFETY: `me` is the fiber running here and we are on its stack.
        unsafe { fiber::park_fiber(me, deadline) };
        // SAFETY: `me` is still this fiber's own record, wherever it resumed.
        if unsafe { fiber::fiber_is_cancelled(me) } {
            return Parked::Cancelled;
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
