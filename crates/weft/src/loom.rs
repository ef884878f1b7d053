//! The one place weft gets its atomics, locks, cells and thread parking from.
//!
//! Under `--cfg loom` these are loom's model-checked types; otherwise the std ones (with a
//! loom-shaped `UnsafeCell` so the same code compiles both ways). Every atomic in weft is
//! imported from here, never from `std::sync::atomic` directly, so `RUSTFLAGS="--cfg loom"
//! cargo test -p weft --release --lib loom` explores the interleavings of whatever protocol
//! uses it. (Test scaffolding outside the models keeps std's, as it runs outside any model.)
//!
//! One kind of atomic cannot be a loom object: a `static` outlives every loom execution, and
//! loom's objects live in one. Statics use the `StaticAtomic*` names below (std's types in every
//! build), so the choice is visible where they are declared; the process-wide statics are id
//! counters, statistics and once-only flags (a probe's answer, a warning already logged), and
//! the lazily allocated key of a `FiberLocal` (which lives in a `static`): none a protocol
//! between threads, but one: the arrival-ticket counter (`io::arrival`), whose models run on
//! it, is one of loom's `lazy_static`s under loom (made anew for each execution) and a std
//! `static` in every other build. A type with a `const fn` constructor declares it through
//! [`const_fn_unless_loom!`], which drops the `const` under loom (loom's constructors are not
//! `const`), so its fields can be the shim's.
//!
//! Modelled (each `loom` module next to its code): the run-queue ring (`sched::ring::loom`),
//! the work-requesting slot (`sched::request::loom`), the park/unpark state word
//! (`fiber::park::state::loom`), the idle-sleep handshake (`runtime::idle::loom`), the I/O
//! operation protocol's state and result words (`io::op_state::loom`), the semaphore
//! (`sync::semaphore::loom`), the mutex's lock word and wait queue (`sync::mutex::loom`), the
//! wait group (`sync::wait_group::loom`), the forwarded-cancel queue (`io::driver::loom`), the
//! write-behind completion hand-off (`io::behind_state::loom`), the home inbox
//! (`runtime::home::loom`), the lent buffers given back on other threads
//! (`io::lend::loom`) and the arrival tickets against checks (`io::arrival::loom`). Those
//! models run the real code: a waiter in them is a loom thread parked through [`thread`], and
//! a deadline passes at once (loom has no clock), so giving up races every step of the
//! notifier. A lost wake-up shows as loom's
//! "deadlock" panic, after which the test binary aborts (loom's thread-local destructor panics
//! during that unwind): a failing model ends the run either way.

#[cfg(loom)]
#[allow(unused_imports)]
pub(crate) use loom::{
    cell::UnsafeCell,
    sync::atomic::{
        fence, AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
    },
    sync::{Arc, Mutex, MutexGuard},
};

#[cfg(not(loom))]
#[allow(unused_imports)]
pub(crate) use std::sync::{
    atomic::{fence, AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering},
    Arc, Mutex, MutexGuard,
};

/// Process-wide `static` atomics: std's in every build (see the module docs).
#[allow(unused_imports)]
pub(crate) use std::sync::atomic::{
    AtomicBool as StaticAtomicBool, AtomicU64 as StaticAtomicU64, AtomicUsize as StaticAtomicUsize,
};

/// Declares a `const fn` that is a plain `fn` under loom, whose atomics, cells and locks have
/// no `const` constructors. Public `const` constructors keep their `const` in every real build.
macro_rules! const_fn_unless_loom {
    ($(#[$attr:meta])* $vis:vis const fn $($rest:tt)*) => {
        #[cfg(not(loom))]
        $(#[$attr])* $vis const fn $($rest)*
        #[cfg(loom)]
        $(#[$attr])* $vis fn $($rest)*
    };
}
pub(crate) use const_fn_unless_loom;

/// Thread parking and the calling thread's handle: loom's threads under loom (so a model's
/// blocked waiter is a parked loom thread, and a lost wake-up is a deadlock loom reports).
pub(crate) mod thread {
    #[cfg(loom)]
    #[allow(unused_imports)]
    pub(crate) use loom::{
        thread::{current, park, yield_now, Thread},
        thread_local,
    };
    #[cfg(not(loom))]
    #[allow(unused_imports)]
    pub(crate) use std::{
        thread::{current, park, park_timeout, yield_now, Thread},
        thread_local,
    };
}

/// Exponential back-off for a spin-wait on another thread's progress: crossbeam's, or under
/// loom a yield to the other threads (loom explores a spin that does not yield forever).
#[cfg(not(loom))]
pub(crate) use crossbeam_utils::Backoff;

#[cfg(loom)]
#[derive(Debug, Default)]
pub(crate) struct Backoff;

#[cfg(loom)]
impl Backoff {
    pub(crate) fn new() -> Backoff {
        Backoff
    }

    pub(crate) fn snooze(&self) {
        loom::thread::yield_now();
    }
}

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

/// Runs a loom model exploring executions with at most `preemptions` preemptions each (unless
/// `LOOM_MAX_PREEMPTIONS` sets the bound). For models of three threads whose waiters spin on a
/// lock, where the unbounded search does not finish in minutes: most concurrency bugs need only
/// one or two preemptions to show (the CHESS result loom's bound comes from).
#[cfg(all(test, loom))]
pub(crate) fn model_bounded<F>(preemptions: usize, f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(preemptions);
    }
    // A spin that yields costs two branches a turn, and with three threads loom also explores
    // schedules where two spinners take turns for a while: loom's default of 1,000 branches
    // per execution is too few for those, although every one of them ends.
    if std::env::var_os("LOOM_MAX_BRANCHES").is_none() {
        builder.max_branches = 20_000;
    }
    builder.check(f);
}
