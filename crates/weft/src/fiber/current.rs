//! The calls a fiber makes about itself: which fiber is running here, switching out
//! (`yield_now`), sleeping, its id, name, cancellation flag and locals.
//!
//! Invariants: the running fiber is read from the context (`ctx::fiber`, never inlined), once
//! per call, and a record reached through it is used only until the fiber next switches out,
//! except by the fiber itself (its record outlives its run).

use std::time::{Duration, Instant};

use super::core::{Fiber, FiberRef, Suspend};
use super::park::{park, Parked};
use crate::ctx;
use crate::ctx::LocalMap;
use crate::error::Cancelled;
use crate::loom::Ordering;

/// The fiber running on this thread, or null. Never inlined (see `ctx`).
#[inline(always)]
pub(crate) fn current_fiber_ptr() -> *const Fiber {
    ctx::fiber().cast::<Fiber>()
}

/// Runs `f` with the current fiber, if the caller is one. `f` must not switch out.
pub(crate) fn with_current<R>(f: impl FnOnce(Option<&Fiber>) -> R) -> R {
    let ptr = current_fiber_ptr();
    // SAFETY: a non-null pointer is the fiber running right now on this thread, alive at least
    // until it switches out, which `f` does not do.
    f(unsafe { ptr.as_ref() })
}

/// Whether the caller is a fiber (rather than a plain OS thread or a processor's own loop).
pub(crate) fn in_fiber() -> bool {
    !current_fiber_ptr().is_null()
}

/// A counted reference to the current fiber.
pub(crate) fn current_ref() -> Option<FiberRef> {
    let ptr = current_fiber_ptr();
    if ptr.is_null() {
        return None;
    }
    // SAFETY: `ptr` came from `Arc::as_ptr` of the Task the processor holds while the fiber runs,
    // so the Arc is alive; we take one more strong count for the new reference.
    unsafe {
        std::sync::Arc::increment_strong_count(ptr);
        Some(FiberRef(std::sync::Arc::from_raw(ptr)))
    }
}

/// Switches the fiber `me` (the caller) out.
///
/// # Safety
/// `me` must be the fiber running on this thread (from `current_fiber_ptr`), and the caller must
/// run on its stack.
#[inline(always)]
pub(crate) unsafe fn suspend(me: *const Fiber, reason: Suspend) {
    // SAFETY: per the contract `me` is running, so its record is alive and its yielder was set
    // when its coroutine started; we are on its stack, where the yielder may be used.
    unsafe {
        let yielder = (*me).yielder.get();
        (*yielder).suspend(reason);
    }
}

/// Whether the fiber `me` has been cancelled.
///
/// # Safety
/// `me` must be a live fiber (the running one, in practice).
pub(crate) unsafe fn fiber_is_cancelled(me: *const Fiber) -> bool {
    // SAFETY: per the contract.
    unsafe { &*me }.cancelled.load(Ordering::Acquire)
}

/// Whether the current fiber has been cancelled (always `false` outside fibers).
pub fn is_cancelled() -> bool {
    with_current(|f| f.is_some_and(|f| f.cancelled.load(Ordering::Acquire)))
}

/// Lets other runnable fibers run; the caller goes to the back of its cluster's yield queue.
/// Outside fibers, yields the OS thread.
///
/// Inlined into the caller on purpose: a call frame that stays open across the stack switch
/// makes the CPU mispredict the returns on both sides of it (its return-address predictor
/// holds the other stack's addresses), which cost about 15 ns per yield, half of a round.
#[inline]
pub fn yield_now() {
    let me = current_fiber_ptr();
    if me.is_null() {
        std::thread::yield_now();
    } else {
        // SAFETY: `me` is the running fiber and we are on its stack.
        unsafe { suspend(me, Suspend::Yield) };
    }
}

/// Parks the current fiber (or blocks the current thread) for `duration`.
pub fn sleep(duration: Duration) -> Result<(), Cancelled> {
    sleep_until(Instant::now() + duration)
}

/// Parks the current fiber (or blocks the current thread) until `deadline`.
///
/// Fibers of one processor whose deadlines have all passed when it next looks at its timers
/// resume in deadline order (migratable fibers: in their policy's order).
pub fn sleep_until(deadline: Instant) -> Result<(), Cancelled> {
    loop {
        match park(Some(deadline)) {
            Parked::Cancelled => return Err(Cancelled),
            Parked::TimedOut => return Ok(()),
            Parked::Woken => {}
        }
    }
}

/// The current fiber's id, or `None` outside fibers.
pub fn id() -> Option<u64> {
    with_current(|f| f.map(|f| f.id))
}

/// The current fiber's name, or `None` outside fibers or for an unnamed fiber.
pub fn name() -> Option<String> {
    with_current(|f| f.and_then(|f| f.name.as_deref().map(str::to_owned)))
}

/// The current fiber's locals, or the thread's outside fibers.
pub(crate) fn current_locals() -> *mut LocalMap {
    let ptr = current_fiber_ptr();
    if ptr.is_null() {
        ctx::thread_locals()
    } else {
        // SAFETY: the fiber is alive while it runs; only it touches its locals.
        unsafe { (*ptr).locals.get() }
    }
}
