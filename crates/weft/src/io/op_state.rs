//! The I/O operation protocol on a [`super::op::Completion`]'s `state` and `result` words,
//! apart from the record so loom can check it (`op_state::loom`). `io::op` calls these; the
//! protocol is the one its module docs describe:
//! - the driver publishes the operation's result with `DONE`, and a cancel request's end with
//!   `ACK` ([`publish`]), reading everything it needs from the record *before* publishing;
//! - the fiber asks for a cancel only while nothing is published ([`claim_cancel`]: `0` to
//!   `CANCEL`), and then waits for `ACK` as well as `DONE`;
//! - the fiber leaves (its stack frame, and so the record, may be reused) only once
//!   [`finished`] holds, and then reads the result ([`result`]).
//!
//! What the models check: the fiber never leaves before the driver's last touch of the record;
//! the result it reads is the one published; a cancel it claimed is always acknowledged
//! before it leaves; a cancel that lost the race to `DONE` is not claimed (so no `ACK` is
//! waited for that never comes).

use crate::loom::{AtomicI32, AtomicU8, Ordering};

/// The kernel (or readiness) has produced the result.
pub(crate) const DONE: u8 = 1;
/// The fiber asked for the operation to be cancelled.
pub(crate) const CANCEL: u8 = 2;
/// The driver has handled the cancel request.
pub(crate) const ACK: u8 = 4;

/// The driver's side: stores `result` (if any) and publishes `bits`. After this returns the
/// record may be gone: read anything else from it before.
#[inline]
pub(crate) fn publish(state: &AtomicU8, result_word: &AtomicI32, result: Option<i32>, bits: u8) {
    if let Some(r) = result {
        result_word.store(r, Ordering::Relaxed);
    }
    state.fetch_or(bits, Ordering::AcqRel);
}

/// Whether a fiber seeing `state` may leave: `DONE`, and `ACK` too if it asked for a cancel.
#[inline]
pub(crate) fn finished(state: u8) -> bool {
    state & DONE != 0 && (state & CANCEL == 0 || state & ACK != 0)
}

/// The fiber's state load (acquire: pairs with [`publish`]).
#[inline]
pub(crate) fn load(state: &AtomicU8) -> u8 {
    state.load(Ordering::Acquire)
}

/// The fiber claims a cancel: `true` if nothing was published yet (the caller must then send
/// the cancel request, and will wait for its `ACK`), `false` if `DONE` came first.
#[inline]
pub(crate) fn claim_cancel(state: &AtomicU8) -> bool {
    state
        .compare_exchange(0, CANCEL, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
}

/// The published result; call only after [`load`] saw `DONE`.
#[inline]
pub(crate) fn result(result_word: &AtomicI32) -> i32 {
    result_word.load(Ordering::Relaxed)
}

#[cfg(all(test, loom))]
mod loom {
    use ::loom::cell::UnsafeCell;
    use ::loom::sync::atomic::AtomicBool;
    use ::loom::sync::Arc;
    use ::loom::thread;

    use super::*;

    const REAL: i32 = 42;
    const ECANCELED: i32 = -125;

    /// A completion record reduced to what the protocol touches, plus the fiber's stack frame
    /// (`frame`): the driver reads it before publishing (the waiter it will wake), and the
    /// fiber overwrites it once it has left (the frame reused); loom flags any overlap.
    struct Record {
        state: AtomicU8,
        result: AtomicI32,
        frame: UnsafeCell<u32>,
        /// The kernel saw the cancel before completing the operation.
        cancel_seen: AtomicBool,
    }

    /// A fresh record and the driver thread that will complete its operation.
    fn record_and_driver() -> (Arc<Record>, thread::JoinHandle<()>) {
        let r = Arc::new(Record {
            state: AtomicU8::new(0),
            result: AtomicI32::new(0),
            frame: UnsafeCell::new(0),
            cancel_seen: AtomicBool::new(false),
        });
        let d = r.clone();
        (r, thread::spawn(move || complete(&d)))
    }

    /// The driver reaping the operation's completion: `-ECANCELED` if the cancel reached the
    /// kernel first, the real result otherwise.
    fn complete(r: &Record) {
        // SAFETY: loom checks this access against the other side's (the model's point).
        let _waiter = r.frame.with(|f| unsafe { *f });
        let res = if r.cancel_seen.load(Ordering::Acquire) {
            ECANCELED
        } else {
            REAL
        };
        publish(&r.state, &r.result, Some(res), DONE);
    }

    /// The driver reaping the cancel request's completion.
    fn acknowledge(r: &Record) {
        // SAFETY: loom checks this access against the other side's (the model's point).
        let _waiter = r.frame.with(|f| unsafe { *f });
        publish(&r.state, &r.result, None, ACK);
    }

    /// The fiber: gives up at once (a deadline that passed), claims the cancel if it can,
    /// then waits until it may leave, reads the result and reuses its frame.
    fn fiber(r: &Arc<Record>) -> (bool, i32) {
        let mut canceller = None;
        if !finished(load(&r.state)) && claim_cancel(&r.state) {
            let g = r.clone();
            canceller = Some(thread::spawn(move || {
                g.cancel_seen.store(true, Ordering::Release);
                acknowledge(&g);
            }));
        }
        let mut s = load(&r.state);
        while !finished(s) {
            thread::yield_now();
            s = load(&r.state);
        }
        let res = result(&r.result);
        // SAFETY: loom checks this access against the other side's (the model's point).
        r.frame.with_mut(|f| unsafe { *f += 1 });
        if let Some(c) = canceller {
            c.join().unwrap();
        }
        (s & CANCEL != 0, res)
    }

    #[test]
    fn a_cancelled_wait_leaves_only_after_done_and_ack_and_reads_the_published_result() {
        ::loom::model(|| {
            let (r, driver) = record_and_driver();
            let (cancelled, res) = fiber(&r);
            driver.join().unwrap();
            let end = r.state.load(Ordering::Relaxed);
            assert!(end & DONE != 0);
            if cancelled {
                assert!(end & ACK != 0, "a claimed cancel was not acknowledged");
            } else {
                assert_eq!(
                    end & (CANCEL | ACK),
                    0,
                    "an unclaimed cancel was acknowledged"
                );
                assert_eq!(res, REAL, "a wait that did not cancel read {res}");
            }
            assert!(res == REAL || res == ECANCELED, "read {res}");
        });
    }

    #[test]
    fn a_wait_without_a_deadline_reads_the_result_published_before_done() {
        ::loom::model(|| {
            let (r, driver) = record_and_driver();
            let mut s = load(&r.state);
            while !finished(s) {
                thread::yield_now();
                s = load(&r.state);
            }
            assert_eq!(result(&r.result), REAL);
            // SAFETY: loom checks this access against the other side's (the model's point).
            r.frame.with_mut(|f| unsafe { *f += 1 });
            driver.join().unwrap();
        });
    }
}
