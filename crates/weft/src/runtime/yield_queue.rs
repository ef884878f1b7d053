//! The cluster's yield queue, sharded: one bounded lane per processor plus a shared overflow.
//!
//! `yield_now` never puts a fiber back on the policy's run queue (re-queueing a yielding fiber
//! locally lets it starve or deadlock its peers). It goes to the yielding processor's lane
//! instead, which that processor serves every `YIELD_CHECK_INTERVAL` rounds and whenever its run
//! queue is empty, and which idle processors steal from. Together the lanes are one global
//! FIFO-ish queue that every processor serves; sharding it keeps the common case (a processor
//! re-running its own yielders) free of shared-cache-line traffic.
//!
//! Invariants: a lane is pushed and popped only by its processor (`YieldLane` is owned by it);
//! other processors only steal (`ring::Steal`). A full lane moves half its fibers to the
//! overflow in one batch, so a yield never fails and never blocks; those fibers are older than
//! the lane's, and the lane takes them back first (`YieldLane::pop`), so a lane kept full by
//! fibers that yield again and again cannot starve the ones it spilled.

use std::collections::VecDeque;

use crate::fiber::core::Task;
use crate::sched::inject::Inject;
use crate::sched::ring;

/// Fibers a lane holds before it spills into the overflow.
const LANE_CAPACITY: usize = 256;

/// The shared half: stealers for every lane, and the overflow.
pub(crate) struct YieldShared {
    lanes: Vec<ring::Steal<Task>>,
    overflow: Inject,
}

/// A processor's own lane.
pub(crate) struct YieldLane {
    lane: ring::Local<Task>,
    /// Where the next steal attempt starts, so victims rotate.
    next_victim: usize,
    /// Fibers this lane overflowed not yet taken back from the overflow: older than the
    /// lane's, so `pop` takes them first. Without it a lane kept full by fibers that yield
    /// again and again was served alone, and the fibers it had spilled waited until it
    /// emptied (`tests/fairness.rs`).
    owed: usize,
    /// Spilled fibers taken back from the overflow, [`SPILL_BATCH`] at a time under one lock,
    /// served before the lane. Private, so at most a batch is out of the thieves' reach, and
    /// only while this processor is busy serving it.
    spilled: VecDeque<Task>,
}

/// How many spilled fibers one look at the overflow takes back.
const SPILL_BATCH: usize = 32;

/// Builds the lanes of a cluster of `processors` processors.
pub(crate) fn new(processors: usize) -> (YieldShared, Vec<YieldLane>) {
    let (locals, lanes): (Vec<_>, Vec<_>) = (0..processors)
        .map(|_| ring::new::<Task>(LANE_CAPACITY))
        .unzip();
    let own = locals
        .into_iter()
        .enumerate()
        .map(|(i, lane)| YieldLane {
            lane,
            next_victim: i + 1,
            owed: 0,
            spilled: VecDeque::new(),
        })
        .collect();
    (
        YieldShared {
            lanes,
            overflow: Inject::default(),
        },
        own,
    )
}

impl YieldShared {
    /// Whether any yielded fiber waits anywhere.
    pub(crate) fn has_work(&self) -> bool {
        !self.overflow.is_empty() || self.lanes.iter().any(|l| !l.is_empty())
    }
}

impl YieldLane {
    pub(crate) fn push(&mut self, shared: &YieldShared, task: Task) {
        self.owed += self.lane.push_back_or_overflow(task, &shared.overflow);
    }

    /// The oldest fiber: one this lane spilled while any is owed (the count is an upper bound,
    /// since other processors pop the overflow too; an empty overflow settles it), else the
    /// lane's front, else the overflow's.
    pub(crate) fn pop(&mut self, shared: &YieldShared) -> Option<Task> {
        if self.spilled.is_empty() && self.owed > 0 {
            let taken = shared
                .overflow
                .pop_front_into(&mut self.spilled, self.owed.min(SPILL_BATCH));
            self.owed = if taken == 0 { 0 } else { self.owed - taken };
        }
        self.spilled
            .pop_front()
            .or_else(|| self.lane.pop())
            .or_else(|| shared.overflow.pop())
    }

    /// Takes half of another processor's lane (idle processors only).
    pub(crate) fn steal(&mut self, shared: &YieldShared) -> Option<Task> {
        let n = shared.lanes.len();
        for i in 0..n {
            let victim = (self.next_victim + i) % n;
            if shared.lanes[victim].is_empty() {
                continue;
            }
            if let Some(task) = shared.lanes[victim].steal_into(&mut self.lane) {
                self.next_victim = victim + 1;
                return Some(task);
            }
        }
        None
    }
}
