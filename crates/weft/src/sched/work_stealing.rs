//! Work-stealing, the way Go and tokio do it: per-processor rings, a LIFO slot, steal-half.
//!
//! Each processor owns a bounded lock-free [`ring`] (FIFO) and a **LIFO slot** holding the task
//! it made runnable last (spawned or woken), which it runs next: the task that was just handed
//! data finds it in cache. The cluster shares one inject queue for pushes from outside the
//! cluster and for ring overflow.
//!
//! `pop`, in order:
//! 1. every [`INJECT_CHECK_INTERVAL`] ticks, the inject queue first, so remote work cannot be
//!    starved by processors that always have local work;
//! 2. the LIFO slot, unless it has run [`LIFO_RUNS_MAX`] times in a row: then its task goes to
//!    the back of the ring, so two fibers waking each other cannot starve the ring;
//! 3. the tasks this ring overflowed into the inject queue, while any is owed (they are older
//!    than the ring's: FIFO order holds across an overflow);
//! 4. the ring's front;
//! 5. a share of the inject queue (moved into the ring in one lock).
//!
//! `steal`: half of a random victim's ring (start at a random processor, try each other one
//! once), then the inject queue. The cluster bounds how many processors search at once.
//!
//! Invariants:
//! - a ring that is full overflows half of itself plus the new task to the inject queue in one
//!   batch, so a push never fails and never blocks on another processor;
//! - the LIFO slot is private to its processor (not stealable, not counted by `has_work`): the
//!   owner runs it before anything else it has, so it is never stranded while the owner lives;
//!   what another processor could take is in a ring or the inject queue, both seen by
//!   `has_work`.

use std::sync::{Arc, Mutex};

use super::inject::Inject;
use super::ring::{self, Overflow};
use super::rng::XorShift;
use super::{LocalQueue, Origin, Policy, Task};

/// Every this many ticks `pop` serves the inject queue before local work (prime, so it does not
/// line up with the cluster's yield-queue interval).
pub const INJECT_CHECK_INTERVAL: u64 = 61;

/// How many times in a row the LIFO slot may run before its task goes to the back of the ring.
pub const LIFO_RUNS_MAX: u32 = 3;

/// The shared half: what other processors and outside threads reach.
pub struct WorkStealing {
    /// Every processor's ring, stealer side, indexed by processor.
    stealers: Box<[ring::Steal<Task>]>,
    /// The owner sides, each taken once by [`Policy::local`].
    owners: Mutex<Vec<Option<ring::Local<Task>>>>,
    /// Remote pushes and ring overflow.
    inject: Inject,
}

impl WorkStealing {
    pub fn new(processors: usize) -> WorkStealing {
        assert!(processors > 0, "a cluster needs at least one processor");
        let (owners, stealers) = (0..processors)
            .map(|_| {
                let (local, steal) = ring::new(ring::DEFAULT_CAPACITY);
                (Some(local), steal)
            })
            .unzip::<_, _, Vec<_>, Vec<_>>();
        WorkStealing {
            stealers: stealers.into_boxed_slice(),
            owners: Mutex::new(owners),
            inject: Inject::default(),
        }
    }
}

impl Policy for WorkStealing {
    fn name(&self) -> &'static str {
        "work-stealing"
    }

    fn local(self: Arc<Self>, index: usize) -> Box<dyn LocalQueue> {
        let ring = super::take_owner_half(&self.owners, index, self.name());
        Box::new(Local {
            shared: self,
            index,
            ring,
            lifo: None,
            lifo_runs: 0,
            rng: XorShift::new(index as u64),
            owed: 0,
        })
    }

    fn push_remote(&self, task: Task) {
        self.inject.push(task);
    }

    fn has_work(&self) -> bool {
        !self.inject.is_empty() || self.stealers.iter().any(|s| !s.is_empty())
    }
}

/// One processor's half.
struct Local {
    shared: Arc<WorkStealing>,
    /// This processor's index, to skip itself when picking a victim.
    index: usize,
    /// The owner side of this processor's ring.
    ring: ring::Local<Task>,
    /// The task to run next (the last one made runnable here).
    lifo: Option<Task>,
    /// How many tasks in a row came from the LIFO slot; see [`LIFO_RUNS_MAX`].
    lifo_runs: u32,
    /// Picks the first victim of each steal.
    rng: XorShift,
    /// Tasks this ring overflowed into the inject queue that have not been served from it
    /// since: they are older than everything left in the ring, so `pop` takes them first.
    owed: usize,
}

impl Local {
    /// The most tasks one refill takes from the inject queue: a fair share of it, at most half
    /// a ring (the rest stays for the other processors).
    fn inject_share(&self) -> usize {
        let fair = self.shared.inject.len() / self.shared.stealers.len() + 1;
        fair.min(self.ring.capacity() / 2)
    }

    #[inline]
    fn pop_inject(&mut self) -> Option<Task> {
        if self.shared.inject.is_empty() {
            return None;
        }
        self.pop_inject_batch()
    }

    /// One of the tasks this ring overflowed, ahead of the ring's newer ones, so order stays
    /// FIFO across an overflow (before, they waited for the ring to empty or for every 16th
    /// round while newer work kept passing them). Other processors may have taken some
    /// meanwhile, so the count is an upper bound: a later push at the head is then served a
    /// little early, and an empty queue settles the debt.
    #[inline(never)]
    fn pop_owed(&mut self) -> Option<Task> {
        let task = self.shared.inject.pop();
        self.owed = if task.is_some() { self.owed - 1 } else { 0 };
        task
    }

    #[inline(never)]
    fn pop_inject_batch(&mut self) -> Option<Task> {
        let max = self.inject_share();
        self.shared.inject.pop_batch_into(&mut self.ring, max)
    }
}

impl LocalQueue for Local {
    fn push(&mut self, task: Task, _origin: Origin) {
        // New and woken work both run next; what they displace goes where others can steal it.
        if let Some(previous) = self.lifo.replace(task) {
            self.owed += self
                .ring
                .push_back_or_overflow(previous, &self.shared.inject);
        }
    }

    fn pop(&mut self, tick: u64) -> Option<Task> {
        if tick % INJECT_CHECK_INTERVAL == 0 {
            if let Some(task) = self.shared.inject.pop() {
                self.lifo_runs = 0;
                return Some(task);
            }
        }
        if let Some(task) = self.lifo.take() {
            if self.lifo_runs < LIFO_RUNS_MAX {
                self.lifo_runs += 1;
                return Some(task);
            }
            self.owed += self.ring.push_back_or_overflow(task, &self.shared.inject);
        }
        self.lifo_runs = 0;
        if self.owed > 0 {
            if let Some(task) = self.pop_owed() {
                return Some(task);
            }
        }
        if let Some(task) = self.ring.pop() {
            return Some(task);
        }
        self.pop_inject()
    }

    /// The inject queue's head first: a full ring moves its older half there. Then the ring's
    /// head, and the LIFO slot (the newest) last.
    fn pop_oldest(&mut self, tick: u64) -> Option<Task> {
        if let Some(task) = self.shared.inject.pop() {
            self.lifo_runs = 0;
            return Some(task);
        }
        if let Some(task) = self.ring.pop() {
            return Some(task);
        }
        self.pop(tick)
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
                if let Some(task) = stealers[victim].steal_into(&mut self.ring) {
                    return Some(task);
                }
            }
        }
        self.pop_inject()
    }

    fn len(&self) -> usize {
        self.ring.len() + usize::from(self.lifo.is_some())
    }
}
