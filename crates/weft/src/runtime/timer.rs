//! Per-processor timers: a min-heap of deadlines, each waking one fiber.
//!
//! A fiber that parks with a deadline adds an entry on the processor it runs on; the processor
//! fires due entries every few scheduling rounds and bounds its idle sleep by the earliest one.
//! The fiber may wake for another reason and move to another processor, so it cannot remove its
//! entry; it marks it cancelled instead, and the heap drops cancelled entries when they come due
//! (or in a sweep when the heap grows), so a stale entry never wakes anyone.

use std::cmp::{Ordering as CmpOrdering, Reverse};
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::fiber::FiberRef;

/// The shared part of one timer: whom to wake, and whether that is still wanted.
pub(crate) struct TimerShared {
    fiber: FiberRef,
    cancelled: AtomicBool,
}

impl TimerShared {
    /// The timer will not wake anyone. Any thread may call it.
    pub(crate) fn cancel(&self) {
        self.cancelled.store(true, Ordering::Release);
    }

    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }
}

struct Entry {
    deadline: Instant,
    seq: u64,
    shared: Arc<TimerShared>,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.deadline == other.deadline && self.seq == other.seq
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        (self.deadline, self.seq).cmp(&(other.deadline, other.seq))
    }
}

/// One processor's timers.
#[derive(Default)]
pub(crate) struct TimerHeap {
    heap: BinaryHeap<Reverse<Entry>>,
    seq: u64,
}

impl TimerHeap {
    /// Wakes `fiber` at `deadline` unless the returned handle is cancelled first.
    pub(crate) fn add(&mut self, deadline: Instant, fiber: FiberRef) -> Arc<TimerShared> {
        if self.heap.len() >= 1024 && self.heap.len().is_power_of_two() {
            self.heap.retain(|e| !e.0.shared.is_cancelled());
        }
        let shared = Arc::new(TimerShared {
            fiber,
            cancelled: AtomicBool::new(false),
        });
        self.seq += 1;
        self.heap.push(Reverse(Entry {
            deadline,
            seq: self.seq,
            shared: shared.clone(),
        }));
        shared
    }

    /// The earliest deadline, cancelled entries included (waking early for one is harmless).
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.heap.peek().map(|e| e.0.deadline)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Removes every entry due at `now` and returns the fibers to wake.
    pub(crate) fn expire(&mut self, now: Instant, due: &mut Vec<FiberRef>) {
        while let Some(top) = self.heap.peek() {
            if top.0.deadline > now {
                break;
            }
            let entry = self.heap.pop().expect("peeked").0;
            if !entry.shared.is_cancelled() {
                due.push(entry.shared.fiber.clone());
            }
        }
    }
}
