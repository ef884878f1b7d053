//! Fibers: user-level threads with their own stacks.
//!
//! [`crate::spawn`] documents the fiber contract. This module holds the fiber record and its
//! state machine (`core`), stacks (`stack`), stack-overflow reports (`overflow`),
//! fiber-local storage (`local`) and the calls a fiber makes about itself.

mod core;
pub(crate) mod local;
pub(crate) mod overflow;
mod park_state;
mod spawn;
pub(crate) mod stack;

use crate::loom::Ordering;
use std::time::{Duration, Instant};

pub use self::core::Task;
pub(crate) use self::core::{fiber_of_node, finish_park, unpark_owned, Fiber, FiberRef, Suspend};
pub use self::local::FiberLocal;
pub use self::spawn::{spawn, Builder, JoinError, JoinHandle};
pub(crate) use self::stack::FiberStack;
pub use self::stack::{DEFAULT_STACK_SIZE, MIN_STACK_SIZE};

use crate::error::Cancelled;
use crate::runtime::{self, processor, Cluster};

/// The fiber running on this thread, or null. Never inlined (see `runtime::processor`).
#[inline(always)]
pub(crate) fn current_fiber_ptr() -> *const Fiber {
    processor::running_fiber()
}

/// Runs `f` with the current fiber, if the caller is one. `f` must not switch out.
fn with_current<R>(f: impl FnOnce(Option<&Fiber>) -> R) -> R {
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
unsafe fn suspend(me: *const Fiber, reason: Suspend) {
    // SAFETY: per the contract `me` is running, so its record is alive and its yielder was set
    // when its coroutine started; we are on its stack, where the yielder may be used.
    unsafe {
        let yielder = (*me).yielder.get();
        (*yielder).suspend(reason);
    }
}

/// Parks the current fiber until unparked or `deadline` (the fiber half of `park::park`).
pub(crate) fn park_current(deadline: Option<Instant>) {
    let me = current_fiber_ptr();
    if !me.is_null() {
        // SAFETY: `me` is the running fiber and we are on its stack.
        unsafe { park_fiber(me, deadline) };
    }
}

/// Parks the fiber `me` until unparked or `deadline`.
///
/// # Safety
/// `me` must be the fiber running on this thread (from `current_fiber_ptr`), and the caller must
/// run on its stack. `me` stays valid after the switch (it is the caller's own record), even if
/// the fiber resumes on another thread.
#[inline(always)]
pub(crate) unsafe fn park_fiber(me: *const Fiber, deadline: Option<Instant>) {
    // SAFETY: per the contract `me` is the running fiber, alive while it runs.
    let fiber = unsafe { &*me };
    if self::core::take_token(fiber) {
        return;
    }
    let armed = match deadline {
        Some(d) if Instant::now() >= d => return,
        Some(d) => {
            // SAFETY: `me` came from `Arc::as_ptr` of the Task the processor holds while the
            // fiber runs; one more strong count makes the timer's reference.
            let own = unsafe {
                std::sync::Arc::increment_strong_count(me);
                FiberRef(std::sync::Arc::from_raw(me))
            };
            // Only this fiber writes its generation, so a relaxed load sees its own last store.
            let generation = fiber.timer_gen.load(Ordering::Relaxed);
            runtime::add_timer(d, own, generation)
        }
        None => false,
    };
    let here = 0u8;
    fiber
        .stack_hint
        .store(std::ptr::addr_of!(here) as usize, Ordering::Relaxed);
    // SAFETY: forwarded from the caller.
    unsafe { suspend(me, Suspend::Park) };
    if armed {
        // Whatever woke us, the entry just armed must not wake a later park.
        let next = fiber.timer_gen.load(Ordering::Relaxed).wrapping_add(1);
        fiber.timer_gen.store(next, Ordering::Release);
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
pub fn sleep_until(deadline: Instant) -> Result<(), Cancelled> {
    loop {
        match crate::park::park(Some(deadline)) {
            crate::park::Parked::Cancelled => return Err(Cancelled),
            crate::park::Parked::TimedOut => return Ok(()),
            crate::park::Parked::Woken => {}
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

/// Moves the calling fiber to `cluster`; it continues there, on whichever of its processors
/// first takes it, and stays on that one. A no-op when it is already there.
///
/// # Safety
///
/// The fiber continues on another OS thread: nothing that depends on the OS thread may be alive
/// in the calling fiber across this call (see [`Builder::migratable`] for what that covers).
/// It must not be called while the thread is panicking (from a destructor during unwinding):
/// std counts panics per thread.
///
/// # Panics
/// When called outside a fiber, or while panicking.
pub unsafe fn migrate(cluster: &Cluster) {
    let here = runtime::current_cluster();
    let me = current_fiber_ptr();
    assert!(!me.is_null(), "weft::migrate called outside a fiber");
    if here.is_some_and(|h| std::sync::Arc::ptr_eq(&h, &cluster.shared)) {
        return;
    }
    assert!(
        !std::thread::panicking(),
        "weft::migrate called while panicking: unwinding must end on the thread it began on"
    );
    // SAFETY: `me` is the running fiber and we are on its stack.
    unsafe { suspend(me, Suspend::Migrate(cluster.shared.clone())) };
}

/// Spawns a fiber that may be resumed on any processor of its cluster after it started
/// (see [`Builder::migratable`]). Panics where [`spawn`] does.
///
/// # Safety
///
/// As for [`Builder::migratable`]: nothing thread-bound alive across the fiber's blocking
/// calls.
pub unsafe fn spawn_migratable<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    // SAFETY: forwarded from the caller.
    unsafe { Builder::new().migratable() }
        .spawn(f)
        .unwrap_or_else(|e| panic!("weft: cannot spawn a fiber: {e}"))
}

/// The current fiber's locals, or the thread's outside fibers.
pub(crate) fn current_locals() -> *mut local::LocalMap {
    let ptr = current_fiber_ptr();
    if ptr.is_null() {
        local::thread_map()
    } else {
        // SAFETY: the fiber is alive while it runs; only it touches its locals.
        unsafe { (*ptr).locals.get() }
    }
}

#[allow(dead_code)]
fn _assert_send() {
    fn send<T: Send + Sync>() {}
    send::<Task>();
    send::<FiberRef>();
}
