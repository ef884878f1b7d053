//! `ws-request`: work-requesting. Queues are private; an idle processor asks a busy one for
//! work, and the busy one hands a task over at its next scheduling point.
//!
//! Each processor keeps its runnable tasks in a plain `VecDeque` that nobody else touches (no
//! atomic read-modify-write on the push/pop fast path, unlike a stealable deque), publishes
//! its length in an atomic, and owns a `HandOff` (`request.rs`) slot. An idle processor (`steal`) picks a
//! victim with at least [`SURPLUS`] queued tasks and an empty slot and claims the slot with its
//! request. The victim checks its slot on every `pop` (one relaxed load): if a request waits
//! and it has a task beyond the one it is about to run, it answers with its oldest spare task;
//! otherwise it declines. The thief takes the answer on its next `steal`.
//!
//! Costs and limits: a thief waits for the victim's next scheduling point (a fiber that runs
//! long without yielding delays the hand-over, where work-stealing would take the task at
//! once), and one request moves one task.
//!
//! No answer is stranded: if the thief went to sleep, anyone that finds a filled slot takes the
//! task (`has_work` reports filled slots, so the victim's next local push wakes a sleeper), and
//! the victim takes back its own stale answer every [`INJECT_CHECK_INTERVAL`] ticks.
//!
//! Invariant: every queued task is in a private queue (whose owner runs until it is empty), the
//! inject queue, or a filled slot; `has_work` sees the last two, and private queues with a
//! surplus nobody has asked for yet.

use crate::loom::{AtomicUsize, Ordering};
use std::collections::VecDeque;
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use super::inject::Inject;
use super::request::{HandOff, Look};
use super::ring::Overflow;
use super::rng::XorShift;
use super::victims::Victims;
use super::{LocalQueue, Origin, Policy, Task};

/// The name on command lines.
pub const NAME: &str = "ws-request";

/// A processor is worth asking when this many tasks wait in its queue: it runs one itself at
/// its next scheduling point and can spare the other.
pub const SURPLUS: usize = 2;

/// Every this many ticks `pop` serves the inject queue first and takes back a stale answer.
pub const INJECT_CHECK_INTERVAL: u64 = 61;

/// Builds the policy for `processors` processors.
pub fn build(processors: usize) -> Arc<dyn Policy> {
    assert!(processors > 0, "a cluster needs at least one processor");
    Arc::new(WsRequest {
        lens: (0..processors).map(|_| CachePadded::default()).collect(),
        slots: (0..processors).map(|_| HandOff::new()).collect(),
        inject: Inject::default(),
    })
}

struct WsRequest {
    /// Each processor's private queue length, published by its owner.
    lens: Box<[CachePadded<AtomicUsize>]>,
    /// Each processor's request/hand-off slot.
    slots: Box<[HandOff<Task>]>,
    /// Remote pushes.
    inject: Inject,
}

impl Policy for WsRequest {
    fn name(&self) -> &'static str {
        NAME
    }

    fn local(self: Arc<Self>, index: usize) -> Box<dyn LocalQueue> {
        assert!(index < self.lens.len(), "{NAME}: no processor {index}");
        Box::new(Local {
            shared: self,
            index,
            queue: VecDeque::new(),
            pending: None,
            rng: XorShift::new(index as u64),
        })
    }

    fn push_remote(&self, task: Task) {
        self.inject.push(task);
    }

    fn has_work(&self) -> bool {
        !self.inject.is_empty()
            || self.slots.iter().any(HandOff::is_filled)
            || self
                .lens
                .iter()
                .zip(self.slots.iter())
                .any(|(len, slot)| len.load(Ordering::Relaxed) >= SURPLUS && slot.is_empty())
    }
}

struct Local {
    shared: Arc<WsRequest>,
    index: usize,
    /// Private: only this processor pushes and pops.
    queue: VecDeque<Task>,
    /// The victim whose slot holds this processor's request.
    pending: Option<usize>,
    rng: XorShift,
}

impl Local {
    fn publish_len(&self) {
        self.shared.lens[self.index].store(self.queue.len(), Ordering::Relaxed);
    }

    /// At a scheduling point: answer a waiting request with the oldest spare task, or decline.
    #[inline(never)]
    fn serve_request(&mut self) {
        let slot = &self.shared.slots[self.index];
        match self.queue.pop_front() {
            Some(spare) => {
                if let Err(spare) = slot.answer(spare) {
                    self.queue.push_front(spare);
                }
            }
            None => slot.decline(),
        }
    }

    /// Follows up this processor's own request: the answer, or `None` while it waits.
    fn collect_answer(&mut self) -> Option<Task> {
        let victim = self.pending?;
        let slot = &self.shared.slots[victim];
        match slot.look(self.index) {
            Look::Filled => {
                self.pending = None;
                slot.take()
            }
            Look::Waiting => {
                // Asking a processor that has run dry is pointless: ask another.
                if self.shared.lens[victim].load(Ordering::Relaxed) < SURPLUS
                    && slot.cancel(self.index)
                {
                    self.pending = None;
                }
                None
            }
            Look::Gone => {
                self.pending = None;
                None
            }
        }
    }

    /// Takes any filled slot's task (its thief may be asleep).
    fn rescue(&self) -> Option<Task> {
        self.shared
            .slots
            .iter()
            .filter(|s| s.is_filled())
            .find_map(HandOff::take)
    }

    /// Asks the first victim with a surplus and a free slot.
    fn ask(&mut self) {
        let shared = &self.shared;
        let n = shared.lens.len();
        for victim in Victims::All.order(self.index, n, &mut self.rng) {
            if shared.lens[victim].load(Ordering::Relaxed) >= SURPLUS
                && shared.slots[victim].request(self.index)
            {
                self.pending = Some(victim);
                return;
            }
        }
    }
}

impl LocalQueue for Local {
    fn push(&mut self, task: Task, _origin: Origin) {
        self.queue.push_back(task);
        self.publish_len();
    }

    fn pop(&mut self, tick: u64) -> Option<Task> {
        let mut task = None;
        if tick % INJECT_CHECK_INTERVAL == 0 {
            if let Some(stale) = self.shared.slots[self.index].take() {
                self.queue.push_back(stale);
            }
            task = self.shared.inject.pop();
        }
        let task = task
            .or_else(|| self.queue.pop_front())
            .or_else(|| self.shared.inject.pop());
        if self.shared.slots[self.index].is_requested() {
            self.serve_request();
        }
        self.publish_len();
        task
    }

    fn steal(&mut self) -> Option<Task> {
        if let Some(task) = self.collect_answer() {
            return Some(task);
        }
        if let Some(task) = self.rescue().or_else(|| self.shared.inject.pop()) {
            return Some(task);
        }
        if self.pending.is_none() {
            self.ask();
        }
        None
    }

    fn len(&self) -> usize {
        self.queue.len()
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        // A request left behind would make the victim hand a task to a processor that is gone;
        // the rescue path would still run it, but withdrawing is cleaner.
        if let Some(victim) = self.pending {
            self.shared.slots[victim].cancel(self.index);
        }
    }
}
