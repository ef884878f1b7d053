//! Admission of new connections: at most [`UNANSWERED_MAX`] accepted connections whose
//! request the server has not yet answered while the client waits on it.
//!
//! A connection holds a [`Slot`] from its `accept` until the server first has to wait for the
//! client: its first write (the first answer going out), any read after its first one, or a
//! first read that finds nothing waiting in the socket (a client that connected and has not
//! sent yet). Until then everything the connection waits for is the server's own work: the
//! CPU, the open-file cache, the disk. The accept fiber takes a slot before each `accept` and
//! parks while none is free, so an overload waits in the kernel's listen queue (where it
//! costs the server nothing) instead of becoming thousands of fibers with stacks and buffers
//! (docs/notes/disk.md: 8,000 of them, 17 KiB each, pushed the page cache out under a memory
//! limit and then the OOM killer in). A burst on an idle server still goes in
//! [`UNANSWERED_MAX`] at a time per round of the processors, not one per round.
//!
//! Invariants: a slot is released exactly once (by [`Slot::release`] or its drop, which also
//! covers a connection whose worker never ran); a client can hold a slot only while its
//! request bytes sit unanswered in our hands, never by sending slowly or reading slowly, so a
//! few slow or silent clients cannot stop the server from accepting.

use std::sync::Arc;

use weft::sync::Semaphore;

/// Accepted connections at most whose request waits for the server, not the client.
pub(crate) const UNANSWERED_MAX: usize = 64;

/// The slots of one server.
pub(crate) struct Admission {
    free: Semaphore,
}

impl Admission {
    pub(crate) fn new() -> Arc<Admission> {
        Arc::new(Admission {
            free: Semaphore::new(UNANSWERED_MAX),
        })
    }

    /// Waits (parking the calling fiber) until a slot is free and takes it; `None` when the
    /// wait was cancelled (shutdown).
    pub(crate) fn acquire(self: &Arc<Self>) -> Option<Slot> {
        self.free.acquire().ok()?;
        Some(Slot {
            admission: Some(self.clone()),
        })
    }

    /// Slots free right now (for tests).
    #[cfg(test)]
    pub(crate) fn free_slots(&self) -> usize {
        self.free.available_permits()
    }
}

/// One connection's slot; given back on [`release`](Slot::release) or drop.
pub(crate) struct Slot {
    admission: Option<Arc<Admission>>,
}

impl Slot {
    /// Gives the slot back (once; later calls do nothing).
    pub(crate) fn release(&mut self) {
        if let Some(admission) = self.admission.take() {
            admission.free.release();
        }
    }

    pub(crate) fn is_held(&self) -> bool {
        self.admission.is_some()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_given_back_once_by_release_or_drop() {
        let admission = Admission::new();
        let mut a = admission.acquire().unwrap();
        let b = admission.acquire().unwrap();
        assert_eq!(admission.free_slots(), UNANSWERED_MAX - 2);
        a.release();
        a.release();
        assert!(!a.is_held());
        assert_eq!(admission.free_slots(), UNANSWERED_MAX - 1);
        drop(a);
        drop(b);
        assert_eq!(admission.free_slots(), UNANSWERED_MAX);
    }
}
