//! The park/unpark protocol on a fiber's `state` word, apart from the fiber record so loom can
//! check it (`park::state::loom`). `park::switch` calls these; the behaviour is the one described
//! in `fiber::core`:
//! - `EMPTY`: running, queued, or on its way to parking;
//! - `NOTIFIED`: as `EMPTY`, plus a wake-up token the next park will consume;
//! - `PARKED`: switched out and in no queue; the unparker that moves it back to `EMPTY` creates
//!   the one `Task` for it.
//!
//! What the protocol guarantees (and the models check): for every park that does not consume
//! a token, either the processor keeps the fiber runnable (`finish_park` returns `false`) or
//! exactly one unparker learns it must make the Task (`leave_parked` returns `true`), never
//! both and never neither once an unpark came; and whoever makes the Task sees everything the
//! fiber and its processor wrote before the park (release/acquire on `state`).

use crate::loom::{AtomicU8, Ordering};

pub(crate) const EMPTY: u8 = 0;
pub(crate) const NOTIFIED: u8 = 1;
pub(crate) const PARKED: u8 = 2;

/// Moves `state` on for a wake-up: `PARKED` to `EMPTY` (returns `true`: the caller must
/// create the fiber's one `Task`), `EMPTY` to `NOTIFIED` (a token), `NOTIFIED` unchanged.
#[inline]
pub(crate) fn leave_parked(state: &AtomicU8) -> bool {
    let mut now = state.load(Ordering::Acquire);
    loop {
        let next = match now {
            NOTIFIED => return false,
            EMPTY => NOTIFIED,
            _ => EMPTY,
        };
        match state.compare_exchange_weak(now, next, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return now == PARKED,
            Err(actual) => now = actual,
        }
    }
}

/// The processor's half, after the fiber switched out to park: `true` if it is parked for
/// real, `false` if a token arrived in the meantime (consumed; the fiber stays runnable).
#[inline]
pub(crate) fn finish_park(state: &AtomicU8) -> bool {
    match state.compare_exchange(EMPTY, PARKED, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => true,
        Err(_) => {
            // NOTIFIED: consume the token. Only the fiber's own processor moves it out of
            // NOTIFIED to anything but NOTIFIED, so a store is enough.
            state.store(EMPTY, Ordering::Release);
            false
        }
    }
}

/// The fiber's half before switching out: consume a token if one is there.
#[inline]
pub(crate) fn take_token(state: &AtomicU8) -> bool {
    state
        .compare_exchange(NOTIFIED, EMPTY, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
}

#[cfg(all(test, loom))]
mod loom {
    use ::loom::cell::UnsafeCell;
    use ::loom::sync::atomic::AtomicUsize;
    use ::loom::sync::Arc;
    use ::loom::thread;

    use super::*;
    use crate::loom::Ordering;

    /// A fiber record reduced to what the protocol touches: the state word and something the
    /// holder of the Task writes (the coroutine), which loom checks for unsynchronised access.
    struct Fiber {
        state: AtomicU8,
        coroutine: UnsafeCell<u32>,
        /// Tasks made for the fiber by unparkers (at most one may exist at a time).
        tasks: AtomicUsize,
    }

    impl Fiber {
        fn new() -> Fiber {
            Fiber {
                state: AtomicU8::new(EMPTY),
                coroutine: UnsafeCell::new(0),
                tasks: AtomicUsize::new(0),
            }
        }

        /// One park by the running fiber and its processor; `true` if it ended parked (no
        /// Task held by this thread any more).
        fn park(&self) -> bool {
            // The fiber runs: the holder of the Task touches the coroutine.
            // SAFETY: loom checks this access against the other side's (the model's point).
            self.coroutine.with_mut(|c| unsafe { *c += 1 });
            if take_token(&self.state) {
                return false;
            }
            finish_park(&self.state)
        }

        fn unpark(&self) {
            if leave_parked(&self.state) {
                // The new Task's holder resumes the fiber: touches the coroutine.
                // SAFETY: loom checks this access against the other side's (the model's point).
                self.coroutine.with_mut(|c| unsafe { *c += 1 });
                self.tasks.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    #[test]
    fn one_park_one_unpark_never_loses_the_wake_up_nor_doubles_the_task() {
        ::loom::model(|| {
            let f = Arc::new(Fiber::new());
            let g = f.clone();
            let unparker = thread::spawn(move || g.unpark());
            let parked = f.park();
            unparker.join().unwrap();
            let tasks = f.tasks.load(Ordering::Relaxed);
            // Parked: the unparker made its one Task. Not parked: the fiber kept running and
            // nobody else made one.
            assert_eq!(tasks, usize::from(parked));
            let end = f.state.load(Ordering::Relaxed);
            assert!(end == EMPTY || end == NOTIFIED, "state {end}");
        });
    }

    #[test]
    fn two_unparkers_make_at_most_one_task() {
        ::loom::model(|| {
            let f = Arc::new(Fiber::new());
            let unparkers: Vec<_> = (0..2)
                .map(|_| {
                    let g = f.clone();
                    thread::spawn(move || g.unpark())
                })
                .collect();
            let parked = f.park();
            for u in unparkers {
                u.join().unwrap();
            }
            assert_eq!(f.tasks.load(Ordering::Relaxed), usize::from(parked));
        });
    }

    #[test]
    fn a_token_left_before_the_park_is_consumed_by_it() {
        ::loom::model(|| {
            let f = Arc::new(Fiber::new());
            f.unpark();
            // The token is there: the park returns at once whatever else runs.
            let g = f.clone();
            let other = thread::spawn(move || g.unpark());
            let parked = f.park();
            other.join().unwrap();
            assert_eq!(f.tasks.load(Ordering::Relaxed), usize::from(parked));
            if !parked {
                // Park again; the second unpark's token (if it came after) is consumed or the
                // fiber parks with nobody left to wake it, which the counts tell apart.
                let end = f.state.load(Ordering::Relaxed);
                assert!(end == EMPTY || end == NOTIFIED);
            }
        });
    }
}
