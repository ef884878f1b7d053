//! The work-stealing skeleton the study's variants share: per-processor FIFO [`ring`]s that
//! overflow into a [`GlobalQueue`], and a thief that tries a [`Victims`] set.
//!
//! Unlike [`super::work_stealing`] there is no LIFO slot: every variant is plain FIFO work
//! stealing, so the only differences between `ws-overflow-locked`, `ws-overflow-lockfree`,
//! `ws-overflow-sharded` and `ws-nearest` are the global queue and the victim set.
//!
//! `pop`: every [`GLOBAL_CHECK_INTERVAL`] ticks the global queue first (so overflowed and remote
//! work cannot be starved by a processor that always has local work), then the tasks this ring
//! overflowed while any is owed (older than the ring's, so FIFO order holds across an
//! overflow), then the ring's front, then a share of the global queue. `steal`: half of a
//! victim's ring, victims in [`Victims::order`], then the global queue.
//!
//! Invariant: every queued task is in a ring or the global queue, both seen by `has_work`; a
//! full ring overflows half of itself plus the new task, so a push never fails or blocks.

use std::sync::{Arc, Mutex};

use super::global_queue::GlobalQueue;
use super::ring;
use super::rng::XorShift;
use super::victims::Victims;
use super::{LocalQueue, Origin, Policy, Task};

/// Every this many ticks `pop` serves the global queue before local work.
pub const GLOBAL_CHECK_INTERVAL: u64 = 61;

/// The shared half, generic over the global queue.
pub(crate) struct RingStealing<G> {
    name: &'static str,
    /// Every processor's ring, stealer side.
    stealers: Box<[ring::Steal<Task>]>,
    /// The owner sides, each taken once by [`Policy::local`].
    owners: Mutex<Vec<Option<ring::Local<Task>>>>,
    /// Ring overflow and remote pushes.
    global: G,
    victims: Victims,
}

impl<G: GlobalQueue> RingStealing<G> {
    /// A policy called `name` for `processors` processors, stealing from `victims`.
    pub(crate) fn new(name: &'static str, processors: usize, victims: Victims) -> Self {
        assert!(processors > 0, "a cluster needs at least one processor");
        let (owners, stealers) = (0..processors)
            .map(|_| {
                let (local, steal) = ring::new(ring::DEFAULT_CAPACITY);
                (Some(local), steal)
            })
            .unzip::<_, _, Vec<_>, Vec<_>>();
        RingStealing {
            name,
            stealers: stealers.into_boxed_slice(),
            owners: Mutex::new(owners),
            global: G::for_processors(processors),
            victims,
        }
    }
}

impl<G: GlobalQueue> Policy for RingStealing<G> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn local(self: Arc<Self>, index: usize) -> Box<dyn LocalQueue> {
        let ring = super::take_owner_half(&self.owners, index, self.name);
        Box::new(Local {
            shared: self,
            index,
            ring,
            rng: XorShift::new(index as u64),
            owed: 0,
        })
    }

    fn push_remote(&self, task: Task) {
        self.global.push(task);
    }

    fn has_work(&self) -> bool {
        !self.global.is_empty() || self.stealers.iter().any(|s| !s.is_empty())
    }
}

struct Local<G> {
    shared: Arc<RingStealing<G>>,
    index: usize,
    ring: ring::Local<Task>,
    rng: XorShift,
    /// Tasks this ring overflowed into the global queue not yet served from it: older than
    /// everything left in the ring, so `pop` takes them first (see `pop_owed`).
    owed: usize,
}

impl<G: GlobalQueue> Local<G> {
    /// One of the tasks this ring overflowed, ahead of the ring's newer ones, so order stays
    /// FIFO across an overflow (before, they waited for the ring to empty or for every 16th
    /// round while newer work kept passing them). Other processors may have taken some
    /// meanwhile, so the count is an upper bound: a later push at the head is then served a
    /// little early, and an empty queue settles the debt.
    #[inline(never)]
    fn pop_owed(&mut self) -> Option<Task> {
        let task = self.shared.global.pop(self.index);
        self.owed = if task.is_some() { self.owed - 1 } else { 0 };
        task
    }

    fn pop_global_batch(&mut self) -> Option<Task> {
        let shared = &self.shared;
        if shared.global.is_empty() {
            return None;
        }
        let fair = shared.global.len() / shared.stealers.len() + 1;
        let max = fair.min(self.ring.capacity() / 2);
        shared
            .global
            .pop_batch_into(&mut self.ring, max, self.index)
    }
}

impl<G: GlobalQueue> LocalQueue for Local<G> {
    fn push(&mut self, task: Task, _origin: Origin) {
        self.owed += self.ring.push_back_or_overflow(task, &self.shared.global);
    }

    fn pop(&mut self, tick: u64) -> Option<Task> {
        if tick % GLOBAL_CHECK_INTERVAL == 0 && !self.shared.global.is_empty() {
            if let Some(task) = self.shared.global.pop(self.index) {
                return Some(task);
            }
        }
        if self.owed > 0 {
            if let Some(task) = self.pop_owed() {
                return Some(task);
            }
        }
        if let Some(task) = self.ring.pop() {
            return Some(task);
        }
        self.pop_global_batch()
    }

    /// The global queue's head first: a full ring moves its older half there.
    fn pop_oldest(&mut self, tick: u64) -> Option<Task> {
        if !self.shared.global.is_empty() {
            if let Some(task) = self.shared.global.pop(self.index) {
                return Some(task);
            }
        }
        self.pop(tick)
    }

    fn steal(&mut self) -> Option<Task> {
        let n = self.shared.stealers.len();
        let order = self.shared.victims.order(self.index, n, &mut self.rng);
        for victim in order {
            if let Some(task) = self.shared.stealers[victim].steal_into(&mut self.ring) {
                return Some(task);
            }
        }
        self.pop_global_batch()
    }

    fn len(&self) -> usize {
        self.ring.len()
    }
}
