//! LIFO work-stealing on Chase-Lev deques (crossbeam-deque), the scheduler study's "LIFO".
//!
//! Each processor owns a `crossbeam_deque::Worker::new_lifo()`: it pushes and pops the newest
//! end (the task made runnable last runs next, hot in cache), while stealers take batches from
//! the oldest end. Pushes from outside the cluster go to a shared `Injector`.
//!
//! - `pop`: the newest own task; every [`INJECT_CHECK_INTERVAL`] ticks the injector first, and
//!   at the mid-point of that period the *oldest* own task (see below).
//! - `steal`: `steal_batch_and_pop` from a random victim (then each other one once), then from
//!   the injector.
//!
//! Pure LIFO can starve: two fibers that keep waking each other stay on top of the deque
//! forever, and everything under them waits. Taking the oldest own task every
//! [`INJECT_CHECK_INTERVAL`] ticks bounds that wait (to about the deque's length times the
//! interval) at a cost of one deque operation per interval; the policy is otherwise pure LIFO.
//!
//! Invariant: every queued task is in a worker deque or the injector, both seen by `has_work`.

use std::sync::{Arc, Mutex};

use crossbeam_deque::{Injector, Steal, Stealer, Worker};

use super::rng::XorShift;
use super::{LocalQueue, Origin, Policy, Task};

/// Every this many ticks `pop` serves the injector before the own deque (and, half a period
/// later, the own deque's oldest task).
pub const INJECT_CHECK_INTERVAL: u64 = 61;

/// How many times one steal call retries a deque that reported a lost race, before moving on.
/// Bounds the work of one call; the search loop calls again.
const STEAL_RETRIES: u32 = 8;

/// Runs `attempt` until it succeeds, finds nothing, or has lost `STEAL_RETRIES` races.
pub(crate) fn retrying(mut attempt: impl FnMut() -> Steal<Task>) -> Option<Task> {
    for _ in 0..STEAL_RETRIES {
        match attempt() {
            Steal::Success(task) => return Some(task),
            Steal::Empty => return None,
            Steal::Retry => std::hint::spin_loop(),
        }
    }
    None
}

/// The shared half.
pub struct LifoStealing {
    /// Every processor's deque, stealer side, indexed by processor.
    stealers: Box<[Stealer<Task>]>,
    /// The owner sides, each taken once by [`Policy::local`].
    workers: Mutex<Vec<Option<Worker<Task>>>>,
    /// Pushes from outside the cluster.
    injector: Injector<Task>,
}

impl LifoStealing {
    pub fn new(processors: usize) -> LifoStealing {
        assert!(processors > 0, "a cluster needs at least one processor");
        let workers: Vec<_> = (0..processors).map(|_| Worker::new_lifo()).collect();
        LifoStealing {
            stealers: workers.iter().map(Worker::stealer).collect(),
            workers: Mutex::new(workers.into_iter().map(Some).collect()),
            injector: Injector::new(),
        }
    }
}

impl Policy for LifoStealing {
    fn name(&self) -> &'static str {
        "lifo-stealing"
    }

    fn local(self: Arc<Self>, index: usize) -> Box<dyn LocalQueue> {
        let worker = super::take_owner_half(&self.workers, index, self.name());
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

/// One processor's half.
struct Local {
    shared: Arc<LifoStealing>,
    /// This processor's index, to skip itself when picking a victim and to find its own stealer.
    index: usize,
    /// The owner side of this processor's deque.
    worker: Worker<Task>,
    /// Picks the first victim of each steal.
    rng: XorShift,
}

impl Local {
    fn steal_injector(&self) -> Option<Task> {
        retrying(|| self.shared.injector.steal_batch_and_pop(&self.worker))
    }
}

impl LocalQueue for Local {
    fn push(&mut self, task: Task, _origin: Origin) {
        self.worker.push(task);
    }

    fn pop(&mut self, tick: u64) -> Option<Task> {
        match tick % INJECT_CHECK_INTERVAL {
            0 => {
                if let Some(task) = self.steal_injector() {
                    return Some(task);
                }
            }
            phase if phase == INJECT_CHECK_INTERVAL / 2 => {
                // The oldest own task, through our own stealer: the anti-starvation step.
                if let Some(task) = retrying(|| self.shared.stealers[self.index].steal()) {
                    return Some(task);
                }
            }
            _ => {}
        }
        self.worker.pop()
    }

    /// The bottom of the own deque, through its own stealer.
    fn pop_oldest(&mut self, tick: u64) -> Option<Task> {
        retrying(|| self.shared.stealers[self.index].steal()).or_else(|| self.pop(tick))
    }

    fn steal(&mut self) -> Option<Task> {
        let stealers = &self.shared.stealers;
        let n = stealers.len();
        if n > 1 {
            let start = self.rng.below(n);
            for i in 0..n {
                let victim = (start + i) % n;
                if victim == self.index {
                    continue;
                }
                let stolen = retrying(|| stealers[victim].steal_batch_and_pop(&self.worker));
                if stolen.is_some() {
                    return stolen;
                }
            }
        }
        self.steal_injector()
    }

    fn len(&self) -> usize {
        self.worker.len()
    }
}
