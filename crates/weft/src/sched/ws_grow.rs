//! `ws-grow`: FIFO work-stealing whose local queues grow instead of overflowing.
//!
//! Each processor owns a `crossbeam_deque::Worker::new_fifo()`, an unbounded Chase-Lev deque
//! that doubles its buffer when full: a burst of spawns stays on the processor that made it
//! (no batch of half a ring moved to a global queue and fetched back), at the cost of memory
//! that grows with the burst. Thieves take batches from a victim's oldest end; pushes from
//! outside the cluster go to a shared `Injector`, served every [`INJECT_CHECK_INTERVAL`] ticks
//! and when the own deque is empty.
//!
//! Invariant: every queued task is in a worker deque or the injector, both seen by `has_work`.

use std::sync::{Arc, Mutex};

use crossbeam_deque::{Injector, Stealer, Worker};

use super::lifo_stealing::retrying;
use super::rng::XorShift;
use super::victims::Victims;
use super::{LocalQueue, Origin, Policy, Task};

/// The name on command lines.
pub const NAME: &str = "ws-grow";

/// Every this many ticks `pop` serves the injector before the own deque.
pub const INJECT_CHECK_INTERVAL: u64 = 61;

/// Builds the policy for `processors` processors.
pub fn build(processors: usize) -> Arc<dyn Policy> {
    assert!(processors > 0, "a cluster needs at least one processor");
    let workers: Vec<_> = (0..processors).map(|_| Worker::new_fifo()).collect();
    Arc::new(WsGrow {
        stealers: workers.iter().map(Worker::stealer).collect(),
        workers: Mutex::new(workers.into_iter().map(Some).collect()),
        injector: Injector::new(),
    })
}

struct WsGrow {
    stealers: Box<[Stealer<Task>]>,
    workers: Mutex<Vec<Option<Worker<Task>>>>,
    injector: Injector<Task>,
}

impl Policy for WsGrow {
    fn name(&self) -> &'static str {
        NAME
    }

    fn local(self: Arc<Self>, index: usize) -> Box<dyn LocalQueue> {
        let worker = super::take_owner_half(&self.workers, index, NAME);
        Box::new(Local {
            shared: self,
            index,
            worker,
            rng: XorShift::new(index as u64),
        })
    }

    fn push_remote(&self, task: Task) {
        self.injector.push(task);
    }

    fn has_work(&self) -> bool {
        !self.injector.is_empty() || self.stealers.iter().any(|s| !s.is_empty())
    }
}

struct Local {
    shared: Arc<WsGrow>,
    index: usize,
    worker: Worker<Task>,
    rng: XorShift,
}

impl Local {
    fn take_injected(&self) -> Option<Task> {
        if self.shared.injector.is_empty() {
            return None;
        }
        retrying(|| self.shared.injector.steal_batch_and_pop(&self.worker))
    }
}

impl LocalQueue for Local {
    fn push(&mut self, task: Task, _origin: Origin) {
        self.worker.push(task);
    }

    fn pop(&mut self, tick: u64) -> Option<Task> {
        if tick % INJECT_CHECK_INTERVAL == 0 {
            if let Some(task) = self.take_injected() {
                return Some(task);
            }
        }
        self.worker.pop().or_else(|| self.take_injected())
    }

    fn steal(&mut self) -> Option<Task> {
        let n = self.shared.stealers.len();
        for victim in Victims::All.order(self.index, n, &mut self.rng) {
            let stolen =
                retrying(|| self.shared.stealers[victim].steal_batch_and_pop(&self.worker));
            if stolen.is_some() {
                return stolen;
            }
        }
        self.take_injected()
    }

    fn len(&self) -> usize {
        self.worker.len()
    }
}
