//! A fiber's half of parking: switching out to park (the fiber), finishing the park (its
//! processor) and waking it (any unparker), on the record's `state` word through the protocol
//! in `state`. See `fiber::core` for the states and who may store which.
//!
//! The scheduler is above this layer: a wake-up's new `Task` and a park's timer go to it
//! through `core::hooks`.

use std::sync::Arc;
use std::time::Instant;

use super::state;
use crate::fiber::core::{hooks, Fiber, FiberBody, FiberRef, Suspend, Task};
use crate::fiber::current::{current_fiber_ptr, suspend};
use crate::loom::Ordering;

/// Parks the current fiber until unparked or `deadline` (the fiber half of [`super::park`]).
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
    if take_token(fiber) {
        return;
    }
    match deadline {
        Some(d) => {
            let now = Instant::now();
            if now >= d {
                return;
            }
            if !reuses_live_timer(fiber.timer_live.get(), d, now) {
                drop_live_timer(fiber);
                // SAFETY: `me` came from `Arc::as_ptr` of the Task the processor holds while
                // the fiber runs; one more strong count makes the timer's reference.
                let own = unsafe {
                    std::sync::Arc::increment_strong_count(me);
                    FiberRef(std::sync::Arc::from_raw(me))
                };
                // Only this fiber writes its generation, so a relaxed load sees its own last
                // store.
                let generation = fiber.timer_gen.load(Ordering::Relaxed);
                if (hooks().arm_timer)(d, own, generation) {
                    fiber.timer_live.set(Some(d));
                }
            }
        }
        // An untimed park is never ended by a timer.
        None => drop_live_timer(fiber),
    }
    let here = 0u8;
    fiber
        .stack_hint
        .store(std::ptr::addr_of!(here) as usize, Ordering::Relaxed);
    // SAFETY: forwarded from the caller.
    unsafe { suspend(me, Suspend::Park) };
    prefetch_below_park_point(std::ptr::addr_of!(here) as usize);
}

/// How much of its stack below its park point a resumed fiber prefetches.
const BELOW_PREFETCH_BYTES: usize = 1024;

/// Resumed: the fiber returns up to the caller that waited and then, typically, goes down again
/// into the code that handles what the wait brought (a request's parsing and execution), whose
/// frames lie below the park point and went cold while thousands of other fibers ran. Asking
/// for those lines now gives them the return path's time to arrive. Done here, one fiber at a
/// time, rather than by the waker: a waker prefetches a whole batch of fibers at once, and
/// that many more lines per fiber overflowed the cache before the later fibers ran
/// (`docs/notes/scale.md`, "Tried, not kept", sixth session). The waker already asked for the
/// two lines just below the park point.
#[inline]
fn prefetch_below_park_point(sp: usize) {
    for offset in (192..=BELOW_PREFETCH_BYTES).step_by(64) {
        prefetch(sp.wrapping_sub(offset) as *const u8);
    }
}

/// Timer entries outlive a wake-up: whether a park until `deadline` can keep the fiber's live
/// entry, due at `live`, instead of arming a new one.
///
/// Why: a connection's fiber parks with a read deadline once per request (a keep-alive
/// timeout, seconds to minutes away). Arming an entry per park and making it stale at the
/// wake-up left one stale entry per request in the processor's heap, and sweeping them cost
/// two cold loads of other fibers' generations per push: 1.8 % of weft http's CPU at 15,360
/// connections (`docs/notes/scale.md`, "Timer entries that outlive a wake-up"). A live entry
/// due a little before the new deadline wakes the fiber that little early instead; the park
/// returns [`super::Parked::Woken`] (spurious wake-ups are in its contract), and the caller's
/// next park, past that entry, arms one for the real deadline. So a deadline never fires
/// early, and a fiber parked with one is woken at most once before it, no earlier than
/// [`REUSE_FRACTION`] of its wait ahead of it.
///
/// Kept when the entry is still ahead (`now < live`), not after the deadline, and at most a
/// `1 / REUSE_FRACTION` share of the wait before it.
#[inline]
pub(crate) fn reuses_live_timer(live: Option<Instant>, deadline: Instant, now: Instant) -> bool {
    match live {
        Some(live) if now < live && live <= deadline => {
            (deadline - live) * REUSE_FRACTION <= deadline - now
        }
        _ => false,
    }
}

/// A reused entry fires at most `1 / REUSE_FRACTION` of the wait before the deadline.
pub(crate) const REUSE_FRACTION: u32 = 8;

/// Makes the fiber's live timer entry stale, if it has one (the running fiber only).
#[inline]
pub(crate) fn drop_live_timer(fiber: &Fiber) {
    if fiber.timer_live.take().is_some() {
        let next = fiber.timer_gen.load(Ordering::Relaxed).wrapping_add(1);
        fiber.timer_gen.store(next, Ordering::Release);
    }
}

/// The unpark half of the state machine.
pub(crate) fn unpark(fiber: &Arc<Fiber>) {
    if leave_parked(fiber) {
        prefetch_resume(fiber);
        (hooks().wake)(Task(fiber.clone()));
    }
}

/// [`unpark`] for a caller that owns a strong count: a parked fiber's new `Task` takes it over
/// (no clone), otherwise it is dropped.
pub(crate) fn unpark_owned(fiber: Arc<Fiber>) {
    if leave_parked(&fiber) {
        prefetch_resume(&fiber);
        (hooks().wake)(Task(fiber));
    }
}

/// How much of a parked fiber's stack above its park point the waker prefetches: the frames a
/// resume returns through, up to the caller that waited. A connection's fiber parks inside a
/// read (`park` ← `Completion::wait` ← `sockio::recv` ← `read`) about 600–700 bytes below its
/// connection loop's frame (`weft_cache::server::run_tcp`: 0x298 bytes of locals under six
/// saved registers), and at thousands of connections each of those frames is cold when the
/// fiber resumes: before this, 61 % of `run_tcp`'s own samples were one load from its frame
/// right after the read returned (`docs/notes/scale.md`, "Prefetching the frames a resume
/// returns through").
const RESUME_PREFETCH_BYTES: usize = 1024;

/// Starts fetching what resuming `fiber` reads first: the top of its stack (where the switch
/// saved its registers), the frames above it up to [`RESUME_PREFETCH_BYTES`], and every line
/// of its coroutine record, so the lines are on their way while the waker finishes its turn.
/// A hint only (nothing is read; an address past the stack's end is harmless): with no hint
/// yet, only the coroutine record.
#[inline]
fn prefetch_resume(fiber: &Fiber) {
    let sp = fiber.stack_hint.load(Ordering::Relaxed);
    if sp != 0 {
        prefetch(sp.wrapping_sub(128) as *const u8);
        prefetch(sp.wrapping_sub(64) as *const u8);
        for offset in (0..RESUME_PREFETCH_BYTES).step_by(64) {
            prefetch(sp.wrapping_add(offset) as *const u8);
        }
    }
    // Every line of the coroutine record, not only its first: the resume reads the saved
    // stack pointer 0x88 bytes in, on the next line (`Processor::run` stalled on that load:
    // 0.3 % of CPU 0's samples at 4,000 connections).
    let body = fiber.coroutine.get() as usize;
    let len = std::mem::size_of::<FiberBody>();
    for line in (body & !63..body + len).step_by(64) {
        prefetch(line as *const u8);
    }
}

/// A hint to bring the line at `addr` into the cache ([`crate::hint::prefetch_read`]).
pub(crate) use crate::hint::prefetch_read as prefetch;

/// Moves `state` on for a wake-up (see `state::leave_parked`).
#[inline]
fn leave_parked(fiber: &Fiber) -> bool {
    state::leave_parked(&fiber.state)
}

/// The processor's half, after the fiber switched out with `Suspend::Park`: park it for real,
/// or give the task back if a token arrived in the meantime.
pub(crate) fn finish_park(task: Task) -> Option<Task> {
    if state::finish_park(&task.0.state) {
        None
    } else {
        Some(task)
    }
}

/// The fiber's half before switching out: consume a token if one is there.
pub(crate) fn take_token(fiber: &Fiber) -> bool {
    state::take_token(&fiber.state)
}

#[cfg(test)]
mod tests {
    use super::{reuses_live_timer, REUSE_FRACTION};
    use std::time::{Duration, Instant};

    #[test]
    fn a_live_timer_is_kept_only_a_little_ahead_of_the_deadline() {
        let now = Instant::now();
        let ms = Duration::from_millis;
        let deadline = now + ms(800);
        // No entry, or one already due: arm.
        assert!(!reuses_live_timer(None, deadline, now));
        assert!(!reuses_live_timer(Some(now), deadline, now));
        // Due after the deadline: it would fire late.
        assert!(!reuses_live_timer(Some(deadline + ms(1)), deadline, now));
        // At the deadline, or up to an eighth of the 800 ms wait before it: kept.
        assert!(reuses_live_timer(Some(deadline), deadline, now));
        let most = ms(800) / REUSE_FRACTION;
        assert!(reuses_live_timer(Some(deadline - most), deadline, now));
        // Any earlier: it would wake the park too soon.
        assert!(!reuses_live_timer(
            Some(deadline - most - ms(1)),
            deadline,
            now
        ));
    }
}
