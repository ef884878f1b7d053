//! Invariant violations stop the server.
//!
//! A lock is poisoned when a panic unwinds while it is held: the data behind it may be
//! half-updated (a shard's LRU list relinked on one side only, its byte count not yet
//! lowered). Recovering it with `PoisonError::into_inner` would go on serving from a broken
//! shard, so every lock in weft-cache is taken through [`lock`], which on poison writes one
//! line to stderr and aborts the process. A supervisor restarts a cache; a cache that answers
//! from a corrupt LRU loses or resurrects items silently.
//!
//! Why here and not `panic = "abort"` in the release profile: weft-cache is a library that
//! runs in any binary (the `weft` CLI, tests, embedders), and a profile setting covers only
//! the binaries built with it; the runtime also promises that a fiber's panic reaches its
//! join handle, which the load generators and benchmarks in the same binary rely on. A panic
//! that holds no lock (a connection's own parsing state) ends only that connection.

use std::sync::{Mutex, MutexGuard, TryLockError};

/// Locks `mutex`; if a panic poisoned it, reports `what` and aborts the process.
#[inline]
pub fn lock<'m, T>(mutex: &'m Mutex<T>, what: &str) -> MutexGuard<'m, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(_) => poisoned(what),
    }
}

/// Locks `mutex` if it is free (`None` when another thread holds it); on poison, as [`lock`].
#[inline]
pub fn try_lock<'m, T>(mutex: &'m Mutex<T>, what: &str) -> Option<MutexGuard<'m, T>> {
    match mutex.try_lock() {
        Ok(guard) => Some(guard),
        Err(TryLockError::WouldBlock) => None,
        Err(TryLockError::Poisoned(_)) => poisoned(what),
    }
}

/// Reports a poisoned lock and aborts.
#[cold]
#[inline(never)]
pub fn poisoned(what: &str) -> ! {
    eprintln!(
        "weft-cache: fatal: the {what} lock is poisoned (a panic while it was held may have \
         left it half-updated); aborting rather than serving from it"
    );
    std::process::abort()
}
