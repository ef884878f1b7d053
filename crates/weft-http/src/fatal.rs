//! Invariant violations stop the server (the rule weft-cache follows too; ARCHITECTURE.md).
//!
//! A lock is poisoned when a panic unwinds while it is held, and what it guards may be
//! half-updated (a file-cache shard with its byte count not yet lowered). Every lock in
//! weft-http is taken through [`lock`], which on poison writes one line to stderr and aborts
//! the process instead of serving from that state; a supervisor restarts the server. A panic
//! that holds no lock (one connection's parsing) ends only that connection.

use std::sync::{Condvar, Mutex, MutexGuard};

/// Locks `mutex`; if a panic poisoned it, reports `what` and aborts the process.
pub(crate) fn lock<'m, T>(mutex: &'m Mutex<T>, what: &str) -> MutexGuard<'m, T> {
    mutex.lock().unwrap_or_else(|_| poisoned(what))
}

/// Waits on `cv` with `guard`; aborts like [`lock`] if the lock comes back poisoned.
pub(crate) fn wait<'m, T>(cv: &Condvar, guard: MutexGuard<'m, T>, what: &str) -> MutexGuard<'m, T> {
    cv.wait(guard).unwrap_or_else(|_| poisoned(what))
}

#[cold]
#[inline(never)]
fn poisoned(what: &str) -> ! {
    eprintln!(
        "weft http: fatal: the {what} lock is poisoned (a panic while it was held may have left \
         it half-updated); aborting rather than serving from it"
    );
    std::process::abort()
}
