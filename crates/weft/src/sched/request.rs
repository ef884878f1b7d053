//! The hand-off slot of work-requesting: an idle processor asks a busy one for a task, and the
//! busy one answers at its next scheduling point by handing one over.
//!
//! One slot per processor (the *owner*, the one asked). Its `state` is one atomic word:
//!
//! ```text
//!  EMPTY --request(r)--> REQUESTED(r) --answer(v)--> FILLED --take--> TAKING --> EMPTY
//!    ^                        |   |
//!    +------cancel(r)---------+   +--decline--> EMPTY
//! ```
//!
//! - `request(r)`: thief `r` claims the empty slot (CAS `EMPTY -> REQUESTED(r)`);
//! - `cancel(r)`: the thief gives up (CAS `REQUESTED(r) -> EMPTY`), e.g. after waiting long;
//! - `answer(v)`: the owner writes `v` into the cell, then publishes it (CAS
//!   `REQUESTED(r) -> FILLED`, release). If the CAS fails because the request was cancelled,
//!   the owner reads `v` back and keeps it;
//! - `decline`: the owner has nothing to spare (CAS `REQUESTED(r) -> EMPTY`);
//! - `take`: *anyone* takes a filled slot (CAS `FILLED -> TAKING`, acquire; read; store `EMPTY`,
//!   release). Normally the thief that asked; if it went to sleep meanwhile, any processor
//!   that finds the slot filled, including the owner, so an answer is never stranded.
//!
//! Invariants (each `unsafe` relies on them):
//! - only the owner writes the cell, and only while the state is `REQUESTED(_)` or `EMPTY`
//!   after a failed publish, when nobody else reads it (readers need `FILLED`, which only the
//!   owner sets);
//! - the cell is read only by whoever moved the state `FILLED -> TAKING` (one taker), or by the
//!   owner after its publish failed (the value was never visible);
//! - so every value answered is taken exactly once or given back to the owner.
//!
//! Model-checked under loom: `RUSTFLAGS="--cfg loom" cargo test -p weft --release --lib
//! request::loom`.

use crate::loom::{AtomicUsize, Ordering, UnsafeCell};

const EMPTY: usize = 0;
const FILLED: usize = 1;
const TAKING: usize = 2;
/// `REQUESTED(r)` is `REQUESTED_BASE + r`.
const REQUESTED_BASE: usize = 3;

/// One processor's request/hand-off slot.
pub(crate) struct HandOff<T> {
    state: AtomicUsize,
    cell: UnsafeCell<Option<T>>,
}

// SAFETY: a value moves from the owner to a taker through the cell, so `T: Send` is needed and
// enough: the state machine gives the cell one accessor at a time (module invariants), ordered
// by the release publish and the acquiring take.
unsafe impl<T: Send> Send for HandOff<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for HandOff<T> {}

/// What a thief sees when it looks at the slot it asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Look {
    /// Its request still waits for the owner.
    Waiting,
    /// A task is there to take.
    Filled,
    /// The request is gone (declined, or answered and taken by someone else).
    Gone,
}

impl<T> HandOff<T> {
    pub(crate) fn new() -> Self {
        HandOff {
            state: AtomicUsize::new(EMPTY),
            cell: UnsafeCell::new(None),
        }
    }

    /// Thief `who` asks; `false` when the slot is busy with another request or answer.
    pub(crate) fn request(&self, who: usize) -> bool {
        self.state
            .compare_exchange(
                EMPTY,
                REQUESTED_BASE + who,
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Thief `who` withdraws its request; `false` when the owner already answered or declined.
    pub(crate) fn cancel(&self, who: usize) -> bool {
        self.state
            .compare_exchange(
                REQUESTED_BASE + who,
                EMPTY,
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// What thief `who` finds at the slot it asked.
    pub(crate) fn look(&self, who: usize) -> Look {
        match self.state.load(Ordering::Acquire) {
            FILLED => Look::Filled,
            s if s == REQUESTED_BASE + who => Look::Waiting,
            _ => Look::Gone,
        }
    }

    /// Whether some thief waits for an answer (the owner polls this at its scheduling points).
    #[inline]
    pub(crate) fn is_requested(&self) -> bool {
        self.state.load(Ordering::Relaxed) >= REQUESTED_BASE
    }

    /// Whether the slot is free for a new request.
    pub(crate) fn is_empty(&self) -> bool {
        self.state.load(Ordering::Relaxed) == EMPTY
    }

    /// Whether a task waits to be taken.
    pub(crate) fn is_filled(&self) -> bool {
        self.state.load(Ordering::Acquire) == FILLED
    }

    /// Owner only: hands `value` to the waiting thief, or gives it back when no request is
    /// waiting (none was made, or it was cancelled).
    pub(crate) fn answer(&self, value: T) -> Result<(), T> {
        let mut current = self.state.load(Ordering::Acquire);
        if current < REQUESTED_BASE {
            return Err(value);
        }
        // SAFETY: the state is `REQUESTED(_)`, set after any previous taker stored `EMPTY`
        // (acquired above), and only the owner (the caller) can move it to `FILLED`, so no one
        // reads or writes the cell now (module invariants).
        self.cell.with_mut(|p| unsafe { *p = Some(value) });
        loop {
            match self
                .state
                .compare_exchange(current, FILLED, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(()),
                // Cancelled, then perhaps asked again by another thief: answer that one.
                Err(now) if now >= REQUESTED_BASE => current = now,
                Err(_) => {
                    // SAFETY: the publish failed and the state is `EMPTY` (only the owner sets
                    // `FILLED`), so the value was never visible: it is still ours alone.
                    let value = self.cell.with_mut(|p| unsafe { (*p).take() });
                    return Err(value.expect("the owner wrote the cell just now"));
                }
            }
        }
    }

    /// Owner only: turns the waiting request away (nothing to spare).
    pub(crate) fn decline(&self) {
        let current = self.state.load(Ordering::Relaxed);
        if current >= REQUESTED_BASE {
            // Failing means the thief cancelled first: the slot is empty either way.
            let _ =
                self.state
                    .compare_exchange(current, EMPTY, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// Anyone: takes the handed-over task, if one is there.
    pub(crate) fn take(&self) -> Option<T> {
        if self.state.load(Ordering::Relaxed) != FILLED {
            return None;
        }
        self.state
            .compare_exchange(FILLED, TAKING, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        // SAFETY: our CAS moved the state `FILLED -> TAKING`, so we are the one taker, and the
        // acquire pairs with the owner's release publish: the value is written and ours.
        let value = self.cell.with_mut(|p| unsafe { (*p).take() });
        // Release: the owner's next write (after a new request) happens after our read.
        self.state.store(EMPTY, Ordering::Release);
        value
    }
}

impl<T> Default for HandOff<T> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn request_answer_take() {
        let slot = HandOff::new();
        assert_eq!(slot.answer(1), Err(1), "nobody asked");
        assert!(slot.request(7));
        assert!(!slot.request(8), "one request at a time");
        assert_eq!(slot.look(7), Look::Waiting);
        assert_eq!(slot.look(8), Look::Gone);
        assert_eq!(slot.answer(2), Ok(()));
        assert!(!slot.cancel(7), "too late to cancel");
        assert_eq!(slot.look(7), Look::Filled);
        assert_eq!(slot.take(), Some(2));
        assert_eq!(slot.take(), None);
        assert!(slot.is_empty());
    }

    #[test]
    fn cancel_and_decline() {
        let slot = HandOff::new();
        assert!(slot.request(0));
        assert!(slot.cancel(0));
        assert_eq!(slot.answer(3), Err(3), "cancelled request");
        assert!(slot.request(1));
        slot.decline();
        assert_eq!(slot.look(1), Look::Gone);
        assert!(slot.request(2), "declined slot is free again");
    }
}

#[cfg(all(test, loom))]
mod loom {
    use ::loom::sync::Arc;
    use ::loom::thread;

    use super::{HandOff, Look};

    /// The owner answers while the thief may cancel: the value ends with exactly one of them.
    #[test]
    fn answer_races_cancel() {
        ::loom::model(|| {
            let slot = Arc::new(HandOff::new());
            assert!(slot.request(0));
            let thief = {
                let slot = slot.clone();
                thread::spawn(move || if slot.cancel(0) { None } else { slot.take() })
            };
            let kept = slot.answer(42u32).err();
            let taken = thief.join().unwrap();
            assert_eq!(kept.is_some() as u32 + taken.is_some() as u32, 1);
            assert_eq!(kept.or(taken), Some(42));
        });
    }

    /// Two takers race for one answer, and a second thief asks while the first is served:
    /// the value is taken once, and the slot ends usable.
    #[test]
    fn takers_race_and_a_new_request_waits_for_the_take() {
        ::loom::model(|| {
            let slot = Arc::new(HandOff::new());
            assert!(slot.request(0));
            assert_eq!(slot.answer(5u32), Ok(()));
            let rescuer = {
                let slot = slot.clone();
                thread::spawn(move || slot.take())
            };
            let second = {
                let slot = slot.clone();
                thread::spawn(move || slot.request(1))
            };
            let mine = if slot.look(0) == Look::Filled {
                slot.take()
            } else {
                None
            };
            let rescued = rescuer.join().unwrap();
            let asked = second.join().unwrap();
            assert_eq!(mine.is_some() as u32 + rescued.is_some() as u32, 1);
            assert_eq!(mine.or(rescued), Some(5));
            if asked {
                assert_eq!(slot.answer(6), Ok(()));
                assert_eq!(slot.take(), Some(6));
            }
        });
    }

    /// The whole handshake concurrently: a thief asks, waits, and cancels; the owner polls and
    /// answers or keeps; a third processor rescues filled slots. Each value ends in exactly one
    /// place.
    #[test]
    fn request_answer_cancel_rescue() {
        let mut builder = ::loom::model::Builder::new();
        builder.preemption_bound = builder.preemption_bound.or(Some(3));
        builder.check(|| {
            let slot = Arc::new(HandOff::new());
            let thief = {
                let slot = slot.clone();
                thread::spawn(move || {
                    if !slot.request(0) {
                        return None;
                    }
                    match slot.look(0) {
                        Look::Filled => slot.take(),
                        Look::Waiting if slot.cancel(0) => None,
                        _ => slot.take(),
                    }
                })
            };
            let rescuer = {
                let slot = slot.clone();
                thread::spawn(move || slot.take())
            };
            let kept = if slot.is_requested() {
                slot.answer(9u32).err()
            } else {
                Some(9)
            };
            let a = thief.join().unwrap();
            let b = rescuer.join().unwrap();
            let c = slot.take();
            let places = [kept, a, b, c];
            assert_eq!(places.iter().flatten().count(), 1, "{places:?}");
        });
    }
}
