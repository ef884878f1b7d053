//! The one place lock-free code gets its atomics and cells from.
//!
//! Under `--cfg loom` these are loom's model-checked types; otherwise the std ones (with a
//! loom-shaped `UnsafeCell` so the same code compiles both ways). Every lock-free structure in
//! weft imports from here, never from `std::sync::atomic` directly, so `RUSTFLAGS="--cfg loom"
//! cargo test -p weft --release loom` explores its interleavings.
//!
//! Modelled today: the run-queue ring (`sched::ring::loom`), the work-requesting slot
//! (`sched::request::loom`), the park/unpark state word (`fiber::park_state::loom`) and the
//! idle-sleep handshake (`runtime::idle::loom`) and the I/O operation protocol's state and result
//! words (`io::op_state::loom`). Not yet through the shim: the semaphore's state word and wait
//! list (`sync::semaphore`, whose `const fn new` needs a `const` atomic loom does not have),
//! the other `sync` types, the epoll waiter table and the forwarded-cancel queue, and
//! process-wide `static` counters (ids, statistics), which are not protocols.

#[cfg(loom)]
#[allow(unused_imports)]
pub(crate) use loom::{
    cell::UnsafeCell,
    sync::atomic::{
        fence, AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
    },
    sync::{Arc, Mutex},
};

#[cfg(not(loom))]
#[allow(unused_imports)]
pub(crate) use std::sync::{
    atomic::{fence, AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering},
    Arc, Mutex,
};

/// `std::cell::UnsafeCell` with loom's closure-based access API.
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
#[allow(dead_code)]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }

    /// Runs `f` with a shared pointer to the value. The caller upholds the aliasing rules.
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Runs `f` with a mutable pointer to the value. The caller upholds the aliasing rules.
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}
