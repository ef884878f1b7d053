//! The skeleton of the study's FIFO/LIFO hybrids: one locked deque per processor that its
//! owner may push and pop at either end, chosen per operation by an [`Ends`] rule, plus a
//! locked inject queue for remote pushes, and thieves that take the oldest half of a victim.
//!
//! FIFO order is fair and keeps latency bounded; LIFO order runs the task made runnable last,
//! whose data is still in cache. The hybrids mix the two (`hybrid-stochastic`,
//! `hybrid-switch`, `hybrid-reverse`), each one rule in its own file.
//!
//! The deques are locked (`inject::Inject`), not lock-free: only the owner and the occasional
//! thief touch one, so the lock is almost never contended, and a lock-free deque that pops at
//! both ends and is stolen from is a research project of its own.
//!
//! `pop`: every [`INJECT_CHECK_INTERVAL`] ticks the inject queue first, then the own deque at
//! the end the rule picks, then the inject queue. `steal`: the oldest half of the first victim
//! that has any (moved under one lock on each side), then the inject queue.
//!
//! Invariant: every queued task is in a processor's deque or the inject queue, both seen by
//! `has_work`.

use std::sync::{Arc, Mutex};

use super::inject::Inject;
use super::ring::Overflow;
use super::rng::XorShift;
use super::victims::Victims;
use super::{LocalQueue, Origin, Policy, Task};

/// Every this many ticks `pop` serves the inject queue before the own deque.
pub const INJECT_CHECK_INTERVAL: u64 = 61;

/// One end of a deque. Pushes and pops at the same end give LIFO order, at opposite ends FIFO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Front,
    Back,
}

/// The rule that makes a hybrid: which end each push and pop uses. One per processor.
pub trait Ends: Send + 'static {
    /// The end the next push goes to.
    fn push_end(&mut self) -> End;
    /// The end the next pop takes from (called once per pop of a non-empty deque).
    fn pop_end(&mut self) -> End;
}

/// The shared half.
pub(crate) struct Hybrid<R> {
    name: &'static str,
    deques: Box<[Inject]>,
    inject: Inject,
    /// Each processor's rule, taken once by [`Policy::local`].
    rules: Mutex<Vec<Option<R>>>,
}

impl<R: Ends> Hybrid<R> {
    /// A hybrid called `name`, processor `i` following `rule(i)`.
    pub(crate) fn new(name: &'static str, processors: usize, rule: impl Fn(usize) -> R) -> Self {
        assert!(processors > 0, "a cluster needs at least one processor");
        Hybrid {
            name,
            deques: (0..processors).map(|_| Inject::default()).collect(),
            inject: Inject::default(),
            rules: Mutex::new((0..processors).map(|i| Some(rule(i))).collect()),
        }
    }
}

impl<R: Ends> Policy for Hybrid<R> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn local(self: Arc<Self>, index: usize) -> Box<dyn LocalQueue> {
        let rule = super::take_owner_half(&self.rules, index, self.name);
        Box::new(Local {
            shared: self,
            index,
            rule,
            rng: XorShift::new(index as u64),
        })
    }

    fn push_remote(&self, task: Task) {
        self.inject.push(task);
    }

    fn has_work(&self) -> bool {
        !self.inject.is_empty() || self.deques.iter().any(|d| !d.is_empty())
    }
}

struct Local<R> {
    shared: Arc<Hybrid<R>>,
    index: usize,
    rule: R,
    rng: XorShift,
}

impl<R> Local<R> {
    fn own(&self) -> &Inject {
        &self.shared.deques[self.index]
    }
}

impl<R: Ends> LocalQueue for Local<R> {
    fn push(&mut self, task: Task, _origin: Origin) {
        match self.rule.push_end() {
            End::Back => Overflow::push(self.own(), task),
            End::Front => self.own().push_front(task),
        }
    }

    fn pop(&mut self, tick: u64) -> Option<Task> {
        if tick % INJECT_CHECK_INTERVAL == 0 {
            if let Some(task) = self.shared.inject.pop() {
                return Some(task);
            }
        }
        if !self.own().is_empty() {
            let task = match self.rule.pop_end() {
                End::Front => self.own().pop(),
                End::Back => self.own().pop_back(),
            };
            if task.is_some() {
                return task;
            }
        }
        self.shared.inject.pop()
    }

    /// The end opposite the one pushes go to now.
    fn pop_oldest(&mut self, tick: u64) -> Option<Task> {
        let task = match self.rule.push_end() {
            End::Back => self.own().pop(),
            End::Front => self.own().pop_back(),
        };
        task.or_else(|| self.pop(tick))
    }

    fn steal(&mut self) -> Option<Task> {
        let n = self.shared.deques.len();
        for victim in Victims::All.order(self.index, n, &mut self.rng) {
            let mut loot = self.shared.deques[victim].take_front_half().into_iter();
            if let Some(first) = loot.next() {
                if loot.len() > 0 {
                    self.own().push_batch(loot);
                }
                return Some(first);
            }
        }
        self.shared.inject.pop()
    }

    fn len(&self) -> usize {
        self.own().len()
    }
}
