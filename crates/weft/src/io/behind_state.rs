//! The completion handshake of a write-behind send ([`super::behind`]), apart from the record
//! so loom can check it (`behind_state::loom`).
//!
//! One writer at a time (the record's claim holder) hands a send to the kernel and later, maybe
//! from another fiber or thread, waits for it; the driver reaps the completion on its own
//! thread. Unlike an ordinary operation ([`super::op_state`]) nobody is parked on the send
//! while it is in flight: the driver wakes a waiter only if one announced itself.
//!
//! Protocol, on one `state` word, one `result` word and a `waiter` slot under a mutex:
//! - [`Signal::arm`] (writer, before submitting): `state = 0`. Nothing else touches `state`
//!   then: the previous completion was waited for ([`Signal::poll`] saw `DONE`).
//! - [`Signal::complete`] (driver): store the result, `fetch_or(DONE)`; if `WAITING` was set,
//!   take the waiter out of the slot and wake it.
//! - [`Signal::wait_until`] (writer): until `DONE` is seen: put itself in the slot,
//!   `fetch_or(WAITING)`; if that saw `DONE`, stop, else park. The two `fetch_or`s are ordered
//!   against each other, so either the driver sees `WAITING` (and the waiter, stored before
//!   it) or the writer sees `DONE`: no wake-up is lost.
//!
//! A writer may give up waiting ([`Signal::wait_until`], a cancelled fiber): it takes itself
//! out of the slot and leaves `WAITING` set, so the driver then finds no waiter (or, racing
//! with the take, wakes the writer once too often), and a later wait of the same send stores
//! itself again and sees `DONE` or is woken as before.
//!
//! A driver that completed an earlier send may still be taking the slot's waiter when the
//! writer already waits for the next send; it then wakes that waiter once too often, or takes
//! it before the next completion can. Both are harmless: a wake-up may be spurious (the waiter
//! re-checks `DONE`), and a waiter that wakes stores itself again before it parks again.
//!
//! What the models check: the writer reads the result published with `DONE`; a waiting writer is
//! always woken (loom reports a deadlock otherwise), also across two sends in a row, and after
//! an earlier wait for the same send gave up.

use crate::loom::{AtomicI32, AtomicU8, Mutex, Ordering};
use crate::poison::Recover;

/// The kernel's completion was reaped; `result` holds it.
pub(crate) const DONE: u8 = 1;
/// A writer waits for `DONE` and is in the waiter slot.
pub(crate) const WAITING: u8 = 2;

/// Something that wakes a parked waiter (a fiber's or thread's unparker).
pub(crate) trait Wake {
    fn wake(self);
}

/// The handshake's words; see the module docs.
#[derive(Debug)]
pub(crate) struct Signal<W> {
    state: AtomicU8,
    result: AtomicI32,
    waiter: Mutex<Option<W>>,
}

/// The slot's lock; a panic while it was held cannot leave an `Option` half-written (see
/// `crate::poison`).
fn slot<W>(m: &Mutex<Option<W>>) -> impl std::ops::DerefMut<Target = Option<W>> + '_ {
    m.lock().recover()
}

impl<W: Wake> Signal<W> {
    pub(crate) fn new() -> Self {
        Signal {
            state: AtomicU8::new(0),
            result: AtomicI32::new(0),
            waiter: Mutex::new(None),
        }
    }

    /// The writer, before handing a new send to the kernel (the previous one, if any, was
    /// waited for).
    pub(crate) fn arm(&self) {
        self.state.store(0, Ordering::Relaxed);
    }

    /// The driver: publishes the kernel's `result` and wakes a writer that waits for it.
    pub(crate) fn complete(&self, result: i32) {
        self.result.store(result, Ordering::Relaxed);
        if self.state.fetch_or(DONE, Ordering::AcqRel) & WAITING != 0 {
            let waiter = slot(&self.waiter).take();
            if let Some(w) = waiter {
                w.wake();
            }
        }
    }

    /// The writer: the result, if the completion was reaped.
    pub(crate) fn poll(&self) -> Option<i32> {
        if self.state.load(Ordering::Acquire) & DONE != 0 {
            Some(self.result.load(Ordering::Relaxed))
        } else {
            None
        }
    }

    /// [`Signal::wait_until`] that never gives up.
    #[cfg(loom)]
    pub(crate) fn wait(&self, me: impl Fn() -> W, park: impl Fn()) -> i32 {
        self.wait_until(me, park, || false).expect("never gives up")
    }

    /// The writer: waits for the result. `me` makes a waker for the caller; `park` suspends it
    /// until that waker is used (a wake-up that came first must make it return at once, and it
    /// may return spuriously). Gives up (`None`) when `give_up` says so, checked before each
    /// park: the send stays in flight, and a later wait (or [`Signal::poll`]) still gets its
    /// result.
    pub(crate) fn wait_until(
        &self,
        me: impl Fn() -> W,
        park: impl Fn(),
        give_up: impl Fn() -> bool,
    ) -> Option<i32> {
        let mut stored = false;
        let r = loop {
            if let Some(r) = self.poll() {
                break Some(r);
            }
            if give_up() {
                break None;
            }
            *slot(&self.waiter) = Some(me());
            stored = true;
            if self.state.fetch_or(WAITING, Ordering::AcqRel) & DONE != 0 {
                continue;
            }
            park();
        };
        if stored {
            // Do not keep the waiter (a counted reference to a fiber) alive in the record.
            slot(&self.waiter).take();
        }
        r
    }
}

#[cfg(all(test, loom))]
mod loom {
    use ::loom::sync::Arc;
    use ::loom::thread;

    use super::*;

    impl Wake for thread::Thread {
        fn wake(self) {
            self.unpark();
        }
    }

    fn driver(s: &Arc<Signal<thread::Thread>>, result: i32) -> thread::JoinHandle<()> {
        let d = s.clone();
        thread::spawn(move || d.complete(result))
    }

    fn wait(s: &Signal<thread::Thread>) -> i32 {
        s.wait(thread::current, thread::park)
    }

    /// A writer woken (spuriously, or by a cancel) gives up, then waits for the same send again.
    #[test]
    fn a_wait_that_gave_up_does_not_lose_the_next_wait_of_the_same_send() {
        ::loom::model(|| {
            let s = Arc::new(Signal::new());
            let woken = std::cell::Cell::new(false);
            s.arm();
            let d = driver(&s, 7);
            // The first park returns at once, as a cancel's unpark would; then it gives up.
            let first = s.wait_until(thread::current, || woken.set(true), || woken.get());
            assert!(first.is_none() || first == Some(7));
            assert_eq!(wait(&s), 7);
            d.join().unwrap();
        });
    }

    #[test]
    fn a_waiting_writer_is_woken_and_reads_the_published_result() {
        ::loom::model(|| {
            let s = Arc::new(Signal::new());
            s.arm();
            let d = driver(&s, 42);
            assert_eq!(wait(&s), 42);
            d.join().unwrap();
        });
    }

    #[test]
    fn a_late_wake_up_from_the_previous_send_does_not_lose_the_next_one() {
        ::loom::model(|| {
            let s = Arc::new(Signal::new());
            s.arm();
            let d1 = driver(&s, 1);
            assert_eq!(wait(&s), 1);
            // The first driver may still be in its wake-up while the second send goes out.
            s.arm();
            let d2 = driver(&s, 2);
            assert_eq!(wait(&s), 2);
            d1.join().unwrap();
            d2.join().unwrap();
        });
    }

    /// `park` may return spuriously: then the first send's driver can still be about to take
    /// the waiter when the writer already waits for the second send.
    #[test]
    fn a_spurious_wake_up_before_the_previous_driver_took_the_waiter_loses_nothing() {
        ::loom::model(|| {
            let s = Arc::new(Signal::new());
            let spurious = std::cell::Cell::new(true);
            let park = || {
                if !spurious.replace(false) {
                    thread::park();
                }
            };
            s.arm();
            let d1 = driver(&s, 1);
            assert_eq!(s.wait(thread::current, park), 1);
            s.arm();
            let d2 = driver(&s, 2);
            assert_eq!(s.wait(thread::current, thread::park), 2);
            d1.join().unwrap();
            d2.join().unwrap();
        });
    }
}
