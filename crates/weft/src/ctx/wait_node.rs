//! The wait node's data: a fiber's or thread's entry in the intrusive wait lists of
//! `sync::wait_queue`. The thread's own node lives in the context (`ctx::thread_node`); the
//! fiber layer adds what needs a fiber record (`fiber::park::wait_node`: finding the current
//! node, and the strong counts a listed fiber node holds).

use std::cell::Cell;

use crate::loom::{thread, AtomicBool, Ordering};

/// A fiber's or thread's entry in the intrusive wait lists of `sync::wait_queue`. Each fiber has
/// one in its record and each OS thread one in a thread-local: a waiter is in at most one list
/// at a time, so a wait allocates nothing and queueing links the node itself.
///
/// `next` belongs to the list the node is in and is read and written only under that list's
/// owner's lock; `notified` is written by the notifier that unlinks the node (under the same
/// lock) and read by the owner.
pub(crate) struct WaitNode {
    pub(crate) notified: AtomicBool,
    /// The next node of the list this one is in (null at the tail, or when in no list).
    pub(crate) next: Cell<*const WaitNode>,
    /// The thread to unpark for a thread's node; `None` for the node in a fiber's record.
    pub(crate) thread: Option<thread::Thread>,
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

    /// Clears the flag for a new wait. Only the owner calls it, and only while the node is in
    /// no list, so no notifier of an earlier wait can still write it.
    pub(crate) fn reset(&self) {
        self.notified.store(false, Ordering::Relaxed);
    }

    /// Whether a notifier unlinked the node (`Acquire`: pairs with `WaitNode::take_listed`).
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
}

impl std::fmt::Debug for WaitNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitNode")
            .field("notified", &self.notified.load(Ordering::Relaxed))
            .field("thread", &self.thread.as_ref().map(|t| t.id()))
            .finish()
    }
}
