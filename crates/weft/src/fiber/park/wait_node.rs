//! The fiber half of the wait node (its data is `ctx::WaitNode`): which node the caller
//! waits on, and the strong count of its fiber that a listed fiber node holds.

use std::sync::Arc;

use super::{Target, Unparker};
use crate::ctx::{self, WaitNode};
use crate::fiber::core::{fiber_of_node, FiberRef};
use crate::fiber::current::current_fiber_ptr;
use crate::loom::Ordering;

impl WaitNode {
    /// The node of the calling fiber, or of the calling thread outside fibers. It stays valid
    /// as long as its owner lives, which covers every wait the owner makes.
    pub(crate) fn current() -> *const WaitNode {
        let fiber = current_fiber_ptr();
        if fiber.is_null() {
            ctx::thread_node()
        } else {
            // SAFETY: `fiber` is the fiber running here, alive while it runs.
            unsafe { std::ptr::addr_of!((*fiber).wait_node) }
        }
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
            unsafe { Arc::increment_strong_count(fiber_of_node(node)) };
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
            unsafe { Arc::decrement_strong_count(fiber_of_node(node)) };
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
            None => Target::Fiber(FiberRef(unsafe { Arc::from_raw(fiber_of_node(node)) })),
            Some(thread) => Target::Thread(thread.clone()),
        };
        node.notified.store(true, Ordering::Release);
        Unparker { target }
    }
}
