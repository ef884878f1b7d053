//! Global queues a work-stealing policy can overflow into, behind one trait so the policy is
//! written once ([`super::ring_stealing`]) and the queue is the experiment's variable:
//!
//! - [`Inject`] (`inject.rs`): one `Mutex<VecDeque>`, the locked baseline;
//! - [`LockFree`]: crossbeam's `SegQueue`, a lock-free unbounded MPMC queue (segments of slots
//!   claimed with a CAS on the head and tail indices);
//! - [`Sharded`]: `N` locked queues, a push picks one by hashing the fiber id, a pop starts at
//!   the processor's own shard and walks the others, so pushes and pops from different
//!   processors mostly take different locks.
//!
//! Invariants: every queue is FIFO per shard, never loses or duplicates a task, and its `len`
//! is never 0 while a push that completed before the call left a task in it (`has_work`
//! depends on it).

use crossbeam_queue::SegQueue;

use super::inject::Inject;
use super::ring::{self, Overflow};
use super::rng;
use super::Task;

/// A cluster-wide queue of tasks: ring overflow and pushes from outside the cluster.
pub(crate) trait GlobalQueue: Overflow<Task> + Send + Sync + 'static {
    /// A queue for a cluster of `processors` processors.
    fn for_processors(processors: usize) -> Self;

    /// Takes a task; `processor` is the caller's index (sharded queues start at its shard).
    fn pop(&self, processor: usize) -> Option<Task>;

    /// About how many tasks are queued.
    fn len(&self) -> usize;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Takes a task to run now and moves up to `max - 1` more into `ring`.
    fn pop_batch_into(
        &self,
        ring: &mut ring::Local<Task>,
        max: usize,
        processor: usize,
    ) -> Option<Task> {
        let first = self.pop(processor)?;
        for _ in 1..max {
            let Some(task) = self.pop(processor) else {
                break;
            };
            if let Err(task) = ring.push_back(task) {
                Overflow::push(self, task);
                break;
            }
        }
        Some(first)
    }
}

impl GlobalQueue for Inject {
    fn for_processors(_processors: usize) -> Self {
        Inject::default()
    }

    fn pop(&self, _processor: usize) -> Option<Task> {
        Inject::pop(self)
    }

    fn len(&self) -> usize {
        Inject::len(self)
    }

    fn pop_batch_into(
        &self,
        ring: &mut ring::Local<Task>,
        max: usize,
        _processor: usize,
    ) -> Option<Task> {
        Inject::pop_batch_into(self, ring, max)
    }
}

/// A lock-free MPMC queue (crossbeam's `SegQueue`).
#[derive(Default)]
pub(crate) struct LockFree(SegQueue<Task>);

impl Overflow<Task> for LockFree {
    fn push(&self, task: Task) {
        self.0.push(task);
    }

    fn push_batch(&self, tasks: impl Iterator<Item = Task>) {
        tasks.for_each(|t| self.0.push(t));
    }
}

impl GlobalQueue for LockFree {
    fn for_processors(_processors: usize) -> Self {
        LockFree::default()
    }

    fn pop(&self, _processor: usize) -> Option<Task> {
        self.0.pop()
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

/// `N` locked queues, one per processor; pushes spread by fiber-id hash.
pub(crate) struct Sharded(Box<[Inject]>);

impl Sharded {
    fn shard_of(&self, task: &Task) -> &Inject {
        let i = (rng::mix(task.fiber_id()) % self.0.len() as u64) as usize;
        &self.0[i]
    }
}

impl Overflow<Task> for Sharded {
    fn push(&self, task: Task) {
        Overflow::push(self.shard_of(&task), task);
    }

    fn push_batch(&self, tasks: impl Iterator<Item = Task>) {
        // One lock for the whole batch: the shard of its first task.
        let mut tasks = tasks.peekable();
        if let Some(first) = tasks.peek() {
            let shard = self.shard_of(first);
            shard.push_batch(tasks);
        }
    }
}

impl GlobalQueue for Sharded {
    fn for_processors(processors: usize) -> Self {
        Sharded((0..processors.max(1)).map(|_| Inject::default()).collect())
    }

    fn pop(&self, processor: usize) -> Option<Task> {
        let n = self.0.len();
        (0..n).find_map(|i| self.0[(processor + i) % n].pop())
    }

    fn len(&self) -> usize {
        self.0.iter().map(Inject::len).sum()
    }
}
