//! The inject queue: a locked FIFO shared by a cluster's processors, for work that has no
//! processor yet (pushes from outside the cluster) or did not fit in one (ring overflow).
//!
//! A lock is fine here: every use moves a batch (overflow pushes half a ring, a processor with
//! an empty ring takes its share) or is rare (remote pushes, the every-61-ticks fairness check).
//! An atomic mirror of the length lets the common "is there anything?" question skip the lock.
//!
//! Invariants: `len` is stored under the lock after every change, so it equals the queue's
//! length whenever the lock is free; critical sections are bounded by one batch.

use crate::loom::{AtomicUsize, Ordering};
use crate::poison::Recover;
use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use super::ring::{self, Overflow};
use super::Task;

/// A locked FIFO of tasks with a lock-free length.
#[derive(Default)]
pub(crate) struct Inject {
    queue: Mutex<VecDeque<Task>>,
    /// Mirrors `queue.len()` so `is_empty` (called by `has_work` and on every pop) needs no lock.
    len: AtomicUsize,
}

impl Inject {
    fn lock(&self) -> MutexGuard<'_, VecDeque<Task>> {
        // Pushes and pops, with `len` stored under the lock: see `crate::poison`.
        self.queue.lock().recover()
    }

    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Takes the oldest task.
    pub(crate) fn pop(&self) -> Option<Task> {
        if self.is_empty() {
            return None;
        }
        let mut q = self.lock();
        let task = q.pop_front();
        self.len.store(q.len(), Ordering::Release);
        task
    }

    /// Takes the newest task (for deques popped at either end).
    pub(crate) fn pop_back(&self) -> Option<Task> {
        if self.is_empty() {
            return None;
        }
        let mut q = self.lock();
        let task = q.pop_back();
        self.len.store(q.len(), Ordering::Release);
        task
    }

    /// Queues `task` at the front (for deques pushed at either end).
    pub(crate) fn push_front(&self, task: Task) {
        let mut q = self.lock();
        q.push_front(task);
        self.len.store(q.len(), Ordering::Release);
    }

    /// Takes the oldest half (rounded up) of the queue, under one lock: what a thief takes.
    pub(crate) fn take_front_half(&self) -> Vec<Task> {
        if self.is_empty() {
            return Vec::new();
        }
        let mut q = self.lock();
        let n = q.len() - q.len() / 2;
        let half = q.drain(..n).collect();
        self.len.store(q.len(), Ordering::Release);
        half
    }

    /// Takes the oldest task to run now plus up to `max - 1` more into `ring` (stopping early if
    /// it fills), all under one lock.
    pub(crate) fn pop_batch_into(&self, ring: &mut ring::Local<Task>, max: usize) -> Option<Task> {
        if self.is_empty() {
            return None;
        }
        let mut q = self.lock();
        let first = q.pop_front();
        if first.is_some() {
            for _ in 1..max {
                let Some(task) = q.pop_front() else {
                    break;
                };
                if let Err(task) = ring.push_back(task) {
                    q.push_front(task);
                    break;
                }
            }
        }
        self.len.store(q.len(), Ordering::Release);
        first
    }
}

impl Overflow<Task> for Inject {
    fn push(&self, task: Task) {
        let mut q = self.lock();
        q.push_back(task);
        self.len.store(q.len(), Ordering::Release);
    }

    fn push_batch(&self, tasks: impl Iterator<Item = Task>) {
        let mut q = self.lock();
        q.extend(tasks);
        self.len.store(q.len(), Ordering::Release);
    }
}
