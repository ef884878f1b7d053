//! Admission of new connections: at most `Config::max_unanswered` accepted connections whose
//! request the server has not yet answered while the client waits on it.
//!
//! A connection holds a [`Slot`] from its `accept` until it first waits for its client: a
//! read after its first one, a first read that finds nothing waiting (a client that connected
//! and has not sent yet), a write longer than the socket takes at once, a `send_file`, or its
//! end. Until then everything it waits for is the server's own work: the CPU, the open-file
//! cache, the disk. The accept fiber takes a slot before each `accept` and parks while none is
//! free, so an overload waits in the kernel's listen queue (where it costs the server nothing)
//! instead of becoming thousands of fibers with stacks and buffers (docs/notes/disk.md: 8,000
//! of them, 17 KiB each, pushed the page cache out under a memory limit and then the OOM
//! killer in). A burst on an idle server still goes in as many at a time as there are slots,
//! not one per round of the processor.
//!
//! Invariants: a slot is released exactly once (by [`Slot::release`] or its drop, which also
//! covers a connection whose worker never ran); a client can hold a slot only while its
//! request bytes sit unanswered in our hands, never by sending slowly or reading slowly, so a
//! few slow or silent clients cannot stop the server from accepting.

use std::sync::Arc;

use weft::sync::Semaphore;

/// The slots of one server.
pub(crate) struct Admission {
    free: Semaphore,
}

impl Admission {
    /// `slots` slots (at least 1; at most `Semaphore::MAX_PERMITS`).
    pub(crate) fn new(slots: usize) -> Arc<Admission> {
        Arc::new(Admission {
            free: Semaphore::new(slots.clamp(1, Semaphore::MAX_PERMITS)),
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
        let admission = Admission::new(8);
        let mut a = admission.acquire().unwrap();
        let b = admission.acquire().unwrap();
        assert_eq!(admission.free_slots(), 8 - 2);
        a.release();
        a.release();
        assert!(!a.is_held());
        assert_eq!(admission.free_slots(), 8 - 1);
        drop(a);
        drop(b);
        assert_eq!(admission.free_slots(), 8);
    }
}
