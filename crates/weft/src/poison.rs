//! What a poisoned lock inside the runtime means, and the one way the runtime takes its locks.
//!
//! A `std::sync::Mutex` is poisoned when a panic unwinds while it is held. That matters only if
//! the panic could leave the guarded data half-updated: then going on would serve from broken
//! state, and the process must stop instead (the servers' store locks abort, see
//! `weft_cache::fatal`). The runtime's own locks are written so that it cannot happen:
//!
//! - a critical section runs no user code (closures, destructors of user values) and no
//!   assertion; an invariant is checked before the lock is taken or after it is released, so a
//!   violation panics with no lock held (`sched::take_owner_half`);
//! - every update is one step that cannot unwind halfway (a container's push, pop, take,
//!   `swap_remove` or `clear`, a counter, a store; allocation failure aborts, it does not
//!   unwind), and data kept in step with it (a mirrored length, a sleeper count) is updated
//!   with it under the same guard.
//!
//! So a panic under one of them could only come before or after a whole update, the data is
//! consistent, and recovering with [`Recover::recover`] is sound: it keeps the runtime (and
//! every other fiber) running rather than turning one panic into many. Every lock in
//! `crates/weft` is taken through it, so `grep -rn recover` lists the sites to re-check when a
//! critical section changes. A lock whose critical section could unwind midway must not use
//! it: it aborts on poison with a message naming the lock, as `weft_cache::fatal::lock` does.
//!
//! (`weft::sync::Mutex` is not an OS lock and has no poisoning at all: a panicking owner's guard
//! unlocks it, as with `parking_lot`; what the user's data looks like then is the user's.)

use std::sync::{LockResult, PoisonError, TryLockError, TryLockResult};

/// Taking a lock whose data a panic cannot leave half-updated (see the module docs).
pub(crate) trait Recover<G> {
    /// The guard, whether or not a panic poisoned the lock.
    fn recover(self) -> G;
}

impl<G> Recover<G> for LockResult<G> {
    #[inline]
    fn recover(self) -> G {
        self.unwrap_or_else(PoisonError::into_inner)
    }
}

/// [`Recover::recover`] for `try_lock`: the guard, or `None` when the lock is held.
#[inline]
pub(crate) fn try_recover<G>(result: TryLockResult<G>) -> Option<G> {
    match result {
        Ok(guard) => Some(guard),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}
