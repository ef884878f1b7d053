//! Home queues: where the started fibers of one processor wait, out of every other processor's
//! reach (the soundness default of the fiber contract, `fiber::core::Placement`).
//!
//! A started fiber is bound to the processor that first ran it. Its `Task` therefore never
//! enters the policy's queues (policies steal, share overflow queues, hand work over) nor the
//! stealable yield lanes: it goes to its home processor's [`HomeQueue`] (wake-ups there and
//! yields) or, from anywhere else, to that processor's [`HomeInbox`], after which the processor
//! is woken if it sleeps. The policies keep what may move: fibers that have not started, and
//! the `unsafe` migratable ones. So every policy, present or future, obeys the rule without
//! knowing it.
//!
//! Order inside a home queue: a LIFO slot (the fiber woken last runs next, at most
//! [`LIFO_RUNS_MAX`] times in a row, as in work-stealing) in front of a FIFO; yielded fibers in
//! their own FIFO, served where the cluster's yield queue is. The processor alternates between
//! its home queue and the policy when both have work, and gives every
//! `OLDEST_CHECK_INTERVAL`-th round to the policy's oldest task, so both keep the
//! bounded-unfairness invariant (`sched::wait_rounds_bound`): a task in the home FIFO moves up
//! at least once every `2 * (LIFO_RUNS_MAX + 1)` rounds.
//!
//! Invariants: a `HomeQueue` is touched only by its processor; a `HomeInbox` is pushed by
//! anyone and drained only by its processor; a task is in exactly one place.

use std::collections::VecDeque;

use crate::fiber::core::Task;
use crate::sched::inject::Inject;

/// How many times in a row the LIFO slot may run before its task goes to the back of the FIFO.
pub(crate) const LIFO_RUNS_MAX: u32 = 3;

/// Wake-ups of a processor's fibers made elsewhere (other processors, other clusters, plain
/// threads): a locked FIFO with a lock-free length, so the owner's per-round look costs a load.
#[derive(Default)]
pub(crate) struct HomeInbox {
    queue: Inject,
}

impl HomeInbox {
    pub(crate) fn push(&self, task: Task) {
        crate::sched::ring::Overflow::push(&self.queue, task);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Moves everything into `home`'s FIFO, under one lock.
    fn drain_into(&self, fifo: &mut VecDeque<Task>) {
        self.queue.drain_into(fifo);
    }
}

/// A processor's own queue of its started fibers.
#[derive(Default)]
pub(crate) struct HomeQueue {
    /// The fiber made runnable here last.
    lifo: Option<Task>,
    /// How many tasks in a row came from the LIFO slot; see [`LIFO_RUNS_MAX`].
    lifo_runs: u32,
    fifo: VecDeque<Task>,
    /// Fibers that called `yield_now`, oldest first.
    yielded: VecDeque<Task>,
    /// Whose turn it is when both this queue and the policy have work.
    home_turn: bool,
}

impl HomeQueue {
    /// Queues a fiber made runnable on its home processor.
    #[inline]
    pub(crate) fn push(&mut self, task: Task) {
        if let Some(previous) = self.lifo.replace(task) {
            self.fifo.push_back(previous);
        }
    }

    pub(crate) fn push_yielded(&mut self, task: Task) {
        self.yielded.push_back(task);
    }

    pub(crate) fn pop_yielded(&mut self) -> Option<Task> {
        self.yielded.pop_front()
    }

    /// Takes what other threads queued for this processor.
    #[inline]
    pub(crate) fn take_inbox(&mut self, inbox: &HomeInbox) {
        if !inbox.is_empty() {
            inbox.drain_into(&mut self.fifo);
        }
    }

    /// Whether a runnable fiber waits here (yielded ones included); the inbox is apart.
    pub(crate) fn is_empty(&self) -> bool {
        self.lifo.is_none() && self.fifo.is_empty() && self.yielded.is_empty()
    }

    /// Whether the LIFO slot or the FIFO holds a task.
    #[inline]
    pub(crate) fn has_runnable(&self) -> bool {
        self.lifo.is_some() || !self.fifo.is_empty()
    }

    /// The next task in this queue's own order.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<Task> {
        if let Some(task) = self.lifo.take() {
            if self.lifo_runs < LIFO_RUNS_MAX {
                self.lifo_runs += 1;
                return Some(task);
            }
            self.fifo.push_back(task);
        }
        self.lifo_runs = 0;
        self.fifo.pop_front()
    }

    /// The oldest task: the FIFO's head, else the LIFO slot.
    pub(crate) fn pop_oldest(&mut self) -> Option<Task> {
        if let Some(task) = self.fifo.pop_front() {
            return Some(task);
        }
        self.lifo_runs = 0;
        self.lifo.take()
    }

    /// Flips whose turn it is; `true`: this queue's.
    #[inline]
    pub(crate) fn take_turn(&mut self) -> bool {
        self.home_turn = !self.home_turn;
        self.home_turn
    }
}
