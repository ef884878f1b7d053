//! The per-thread context: the only home of the runtime's thread-locals.
//!
//! Layer 1 of the runtime (see ARCHITECTURE.md, "Layers"): it may use the leaves (`loom`,
//! `poison`, `error`) and nothing else, so it cannot name the types of the layers above that
//! keep state here. Those slots hold erased pointers, and each is written and read only
//! through its owner's typed accessors:
//! - `processor`: the `runtime::processor::Processor` of this thread (`processor::current`);
//! - `fiber`: the `fiber::core::Fiber` being resumed here (`fiber::current`);
//! - `driver`: this processor's `io::driver::Driver` (`io::op::current_driver`).
//!
//! Invariants:
//! - everything is reached through [`with`] (or the small accessors built on it) by closure:
//!   no reference into the context outlives the closure, and a closure never switches fibers,
//!   so a fiber that moved threads never holds its old thread's context;
//! - the accessors are never inlined: a fiber may resume on another OS thread, and an inlined
//!   thread-local read could reuse the old thread's address across the switch;
//! - [`CTX`]'s fields have no destructor, so the context stays readable while other
//!   thread-locals are destroyed at thread exit; what needs dropping (the send-buffer pool, the
//!   thread's fiber-locals, its wait node) lives in thread-locals of its own, below.

mod local_map;
mod wait_node;

use std::cell::{Cell, RefCell, UnsafeCell};
use std::ptr;

use crate::loom::thread;

pub(crate) use local_map::LocalMap;
pub(crate) use wait_node::WaitNode;

/// How many operations a fiber may complete in a row without switching out before it is made
/// to yield (memcached's `-R`, tokio's co-operative budget): on epoll a socket that always has
/// data would otherwise let one connection's fiber starve every other fiber of its processor.
/// The counter is here; `io::op::spend_op_budget` spends it and the processor refills it.
pub(crate) const OP_BUDGET_PER_RUN: u32 = 128;

/// One thread's runtime state.
pub(crate) struct Context {
    /// This thread's processor (erased `*const Processor`), or null; set for the processor
    /// thread's whole life.
    processor: Cell<*const ()>,
    /// The fiber being resumed on this thread right now (erased `*const Fiber`), or null
    /// between fibers.
    fiber: Cell<*const ()>,
    /// This processor's I/O driver (erased `*const Driver`), or null; set with `processor`.
    driver: Cell<*const ()>,
    /// Operations the running fiber may still complete without switching out.
    op_budget: Cell<u32>,
}

impl Context {
    const fn new() -> Context {
        Context {
            processor: Cell::new(ptr::null()),
            fiber: Cell::new(ptr::null()),
            driver: Cell::new(ptr::null()),
            op_budget: Cell::new(OP_BUDGET_PER_RUN),
        }
    }
}

std::thread_local! {
    static CTX: Context = const { Context::new() };
    /// Spare send buffers of this thread (`io::behind`).
    static SEND_BUFFERS: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    /// Fiber-local values of the thread itself, for callers outside any fiber.
    static THREAD_LOCALS: UnsafeCell<LocalMap> = const { UnsafeCell::new(LocalMap::new()) };
}

thread::thread_local! {
    /// The thread's node for `sync` wait lists (a fiber has its own in its record). Through
    /// the loom shim: a loom model's threads each need their own.
    static THREAD_NODE: WaitNode = WaitNode::for_thread(thread::current());
}

/// Runs `f` with this thread's context. `f` must not switch fibers.
#[inline(never)]
pub(crate) fn with<R>(f: impl FnOnce(&Context) -> R) -> R {
    CTX.with(f)
}

/// The fiber running on this thread (erased), or null. See the module invariants.
#[inline(never)]
pub(crate) fn fiber() -> *const () {
    CTX.with(|c| c.fiber.get())
}

/// Sets the fiber running on this thread (null between fibers); the processor's alone.
pub(crate) fn set_fiber(fiber: *const ()) {
    with(|c| c.fiber.set(fiber));
}

/// This thread's processor (erased), or null.
#[inline(never)]
pub(crate) fn processor() -> *const () {
    CTX.with(|c| c.processor.get())
}

/// This thread's driver (erased), or null.
#[inline(never)]
pub(crate) fn driver() -> *const () {
    CTX.with(|c| c.driver.get())
}

/// Sets (or, with nulls, clears) this thread's processor and its driver.
pub(crate) fn set_processor(processor: *const (), driver: *const ()) {
    with(|c| {
        c.processor.set(processor);
        c.driver.set(driver);
    });
}

/// Spends one operation of the running fiber's budget; `true` when it is used up.
#[inline(never)]
pub(crate) fn spend_op() -> bool {
    CTX.with(|c| {
        let left = c.op_budget.get().saturating_sub(1);
        c.op_budget.set(left);
        left == 0
    })
}

/// Gives the fiber about to be resumed a fresh budget.
pub(crate) fn refill_op_budget() {
    with(|c| c.op_budget.set(OP_BUDGET_PER_RUN));
}

/// Runs `f` with this thread's pool of spare send buffers. `f` must not switch fibers. Never
/// inlined, as every accessor here (module docs): its caller may park between two uses.
#[inline(never)]
pub(crate) fn with_send_buffers<R>(f: impl FnOnce(&mut Vec<Vec<u8>>) -> R) -> R {
    SEND_BUFFERS.with(|p| f(&mut p.borrow_mut()))
}

/// The fiber-local map of this OS thread, for callers outside any fiber. Only the thread
/// itself uses it (see `fiber::local`).
#[inline(never)]
pub(crate) fn thread_locals() -> *mut LocalMap {
    THREAD_LOCALS.with(|m| m.get())
}

/// The wait node of this OS thread. It stays valid as long as the thread lives, which covers
/// every wait the thread makes.
pub(crate) fn thread_node() -> *const WaitNode {
    THREAD_NODE.with(|n| n as *const WaitNode)
}
