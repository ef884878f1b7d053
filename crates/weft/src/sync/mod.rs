//! Fiber-aware synchronisation: locks, condition variables, semaphores, channels, promises,
//! wait groups and barriers.
//!
//! # What parks
//!
//! Every blocking call here (`lock`, `wait`, `acquire`, `send` on a full channel, `recv` on an
//! empty one) **parks the calling fiber**: its processor goes on running other fibers, and the
//! fiber resumes (perhaps on another processor) when it is woken. Called from a plain OS thread,
//! the same call **blocks the thread**. Both sides mix freely: a thread may wait for a fiber's
//! unlock, a fiber for a thread's send. Every blocking call has a `*_timeout` variant, and a
//! `try_*` form where that makes sense.
//!
//! # Cancellation
//!
//! A fiber cancelled with [`crate::JoinHandle::cancel`] gets [`crate::Cancelled`] (or
//! `WaitError::Cancelled`, or a `Cancelled` variant carrying the value back) from the blocking
//! call it is parked in, or from the next one that would park; cancellation is sticky. A call
//! that can complete at once (a free lock, a free permit, a buffered value) completes even in a
//! cancelled fiber, so clean-up code may still lock and send; like `JoinHandle::join`, the
//! cancellation shows at the next point where the fiber would wait. When a wake-up races a
//! timeout or a cancellation, the wake-up wins: the lock or permit handed over is kept and the
//! call succeeds, so a cancelled waiter never swallows a permit, a lock or a message (the rule
//! is written down in `sync/wait_queue.rs`; [`Condvar`] documents its one exception).
//!
//! # Internals and lock order
//!
//! Every primitive is built on the runtime's park/unpark and on `wait_queue`, a FIFO of
//! waiters each holding an unparker and a notified flag. Waiter lists live behind short
//! `std::sync::Mutex` critical sections (a push, a pop, a count change) that never park, never
//! run user code and never drop user values; wake-ups happen after the lock is released. Each
//! primitive has exactly one such lock, and no code path holds two, so there is no lock order
//! to get wrong. (A `Condvar` wait takes the condvar's lock, releases it, then unlocks the
//! `Mutex`, which may take the mutex's queue lock: one at a time.)
//!
//! The fast paths need no lock at all: [`Mutex`] and [`Semaphore`] take and release with one
//! compare-and-swap on an atomic word when nobody waits, and [`WaitGroup`] counts with atomics.
//! With waiters, [`Mutex`] and [`Semaphore`] hand the lock or permit directly to the first
//! waiter (FIFO), so no waiter starves.

mod barrier;
pub mod channel;
mod condvar;
mod error;
mod mutex;
pub mod oneshot;
mod semaphore;
mod wait_group;
pub(crate) mod wait_queue;

pub use barrier::{Barrier, BarrierWaitResult};
pub use condvar::Condvar;
pub use mutex::{Mutex, MutexGuard};
pub use semaphore::Semaphore;
pub use wait_group::WaitGroup;

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn send_sync<T: Send + Sync>() {}
    fn sync<T: Sync>() {}

    #[test]
    fn auto_traits_match_std() {
        // `T: Send` is enough to share a lock or a channel of `T` (`Cell` is `Send`, `!Sync`).
        send_sync::<Mutex<Cell<u8>>>();
        send_sync::<channel::Sender<Cell<u8>>>();
        send_sync::<channel::Receiver<Cell<u8>>>();
        send_sync::<oneshot::Sender<Cell<u8>>>();
        send_sync::<oneshot::Receiver<Cell<u8>>>();
        send_sync::<Condvar>();
        send_sync::<Semaphore>();
        send_sync::<WaitGroup>();
        send_sync::<Barrier>();
        sync::<MutexGuard<'static, u8>>();
    }
}
