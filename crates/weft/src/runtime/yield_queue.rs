//! The cluster's yield queue for fibers that may move: one FIFO shared by every processor,
//! reached in batches.
//!
//! `yield_now` never puts a fiber back on the policy's run queue (re-queueing a yielding fiber
//! locally lets it starve or deadlock its peers). A migratable fiber goes to the yielding
//! processor's *outbox* instead, and the outbox joins the back of the shared queue, under one
//! lock, once it holds [`OUTBOX_MAX`] fibers or once its processor goes back to the queue. A
//! processor serves its *batch*, up to [`BATCH_MAX`] fibers taken from the queue's front under
//! one lock, and idle processors take from the queue or steal half of a busy one's batch.
//! While the shared queue is empty a processor serves its own yields without any lock.
//!
//! So yielders take turns in one order across the cluster, whichever processor they yielded
//! on, as Go's `Gosched` puts a goroutine on its global run queue. Per-processor lanes served
//! separately (the design before) kept each lane FIFO but gave a fiber a share of the CPU that
//! depended on which lane it was in: with two busy processors, the one fiber of a short lane
//! ran 40 turns while the 599 of the other lane ran 18 (`tests/fairness.rs`).
//!
//! Invariants:
//! - an outbox and a batch's owner side belong to their processor (`YieldLocal` is owned by
//!   it); other processors only steal from batches (`ring::Steal`) and use the shared queue;
//! - a fiber stays in its processor's outbox until the batch there runs out (at most
//!   [`BATCH_MAX`] pops) or the outbox fills ([`OUTBOX_MAX`] yields), and is then served from
//!   it or joins the queue; in the queue it waits its place, then at most [`BATCH_MAX`] pops
//!   in a batch: a fiber yielded after another is not served before it by more than a batch
//!   and an outbox;
//! - a yield never blocks beyond one short lock, and never fails.

use std::collections::VecDeque;

use crate::fiber::core::Task;
use crate::sched::inject::Inject;
use crate::sched::ring::{self, Overflow};

/// Yields a processor collects before they join the shared queue in one lock.
const OUTBOX_MAX: usize = 16;
/// Fibers one look at the shared queue takes (the ring holds twice that, for thieves' room).
const BATCH_MAX: usize = 32;

/// The shared half: the queue, and stealers for every processor's batch.
pub(crate) struct YieldShared {
    queue: Inject,
    batches: Vec<ring::Steal<Task>>,
}

/// A processor's own half.
pub(crate) struct YieldLocal {
    /// Fibers taken from the queue's front (or this processor's own, while the queue was
    /// empty), served in order; idle processors steal half.
    batch: ring::Local<Task>,
    /// This processor's latest yields, oldest first, at most [`OUTBOX_MAX`].
    outbox: VecDeque<Task>,
    /// Where the next steal attempt starts, so victims rotate.
    next_victim: usize,
}

/// Builds the queue of a cluster of `processors` processors.
pub(crate) fn new(processors: usize) -> (YieldShared, Vec<YieldLocal>) {
    let (locals, batches): (Vec<_>, Vec<_>) = (0..processors)
        .map(|_| ring::new::<Task>(2 * BATCH_MAX))
        .unzip();
    let own = locals
        .into_iter()
        .enumerate()
        .map(|(i, batch)| YieldLocal {
            batch,
            outbox: VecDeque::with_capacity(OUTBOX_MAX),
            next_victim: i + 1,
        })
        .collect();
    (
        YieldShared {
            queue: Inject::default(),
            batches,
        },
        own,
    )
}

impl YieldShared {
    /// Whether any yielded fiber waits where an idle processor can take it.
    pub(crate) fn has_work(&self) -> bool {
        !self.queue.is_empty() || self.batches.iter().any(|b| !b.is_empty())
    }
}

impl YieldLocal {
    /// Queues a fiber that yielded on this processor. True when the outbox joined the shared
    /// queue (the caller may wake an idle processor to help).
    pub(crate) fn push(&mut self, shared: &YieldShared, task: Task) -> bool {
        self.outbox.push_back(task);
        if self.outbox.len() < OUTBOX_MAX {
            return false;
        }
        shared.queue.push_batch(self.outbox.drain(..));
        true
    }

    /// The next yielded fiber to run here: the batch's front; else, when other yields wait in
    /// the shared queue, this processor's own join its back and the oldest come back as the
    /// next batch; else this processor's own, in order, without a lock.
    pub(crate) fn pop(&mut self, shared: &YieldShared) -> Option<Task> {
        if let Some(task) = self.batch.pop() {
            return Some(task);
        }
        if !shared.queue.is_empty() {
            if !self.outbox.is_empty() {
                shared.queue.push_batch(self.outbox.drain(..));
            }
            if let Some(task) = shared.queue.pop_batch_into(&mut self.batch, BATCH_MAX) {
                return Some(task);
            }
        }
        let first = self.outbox.pop_front()?;
        // The rest go where idle processors can steal them. The batch is empty and holds
        // `2 * BATCH_MAX > OUTBOX_MAX` fibers, so each push finds room; the overflow is the
        // queue, should a thief's claim still hold slots.
        for task in self.outbox.drain(..) {
            self.batch.push_back_or_overflow(task, &shared.queue);
        }
        Some(first)
    }

    /// An idle processor's look for yielded fibers: a batch from the shared queue, else half
    /// of another processor's batch.
    pub(crate) fn steal(&mut self, shared: &YieldShared) -> Option<Task> {
        if let Some(task) = shared.queue.pop_batch_into(&mut self.batch, BATCH_MAX) {
            return Some(task);
        }
        let n = shared.batches.len();
        for i in 0..n {
            let victim = (self.next_victim + i) % n;
            if shared.batches[victim].is_empty() {
                continue;
            }
            if let Some(task) = shared.batches[victim].steal_into(&mut self.batch) {
                self.next_victim = victim + 1;
                return Some(task);
            }
        }
        None
    }
}
