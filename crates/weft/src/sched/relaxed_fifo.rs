//! Relaxed FIFO, the way Cforall does it: timestamped lanes, locality first, help the oldest.
//!
//! Every processor owns [`LANES_PER_PROCESSOR`] short locked FIFO lanes. Each entry carries the
//! time it was pushed; each lane publishes its head's timestamp and its length in atomics, so
//! anyone can compare lanes without taking a lock.
//!
//! - **push** (owner): into one of its own lanes, alternating, skipping a lane someone else holds.
//! - **push_remote**: into a random lane of a random processor.
//! - **pop**: the older head of the processor's own lanes. Every [`HELP_INTERVAL`] pops it also
//!   peeks at one random lane of another processor and **helps** it (pops from it instead) when
//!   that lane's head is older than its own by more than [`HELP_THRESHOLD_NS`]. That bounds how
//!   long a task can sit behind a busy processor while keeping most pops local.
//! - **steal** (own lanes empty): the older head of two random other lanes ("power of two
//!   choices"), then a scan of every lane from a random start.
//!
//! Invariants:
//! - a lane's `head_ns`/`len` are stored under its lock after every change, so they are exact
//!   whenever the lock is free and `has_work` (any `len > 0`) sees every completed push;
//! - timestamps within a lane never decrease (a push stores at least the back's timestamp), so
//!   a lane's head is its oldest entry;
//! - every lane is reachable by every processor (`steal` and helping), so nothing is stranded.

use crate::loom::{AtomicU64, AtomicUsize, Ordering};
use crate::poison::Recover;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crossbeam_utils::CachePadded;

use super::rng::{mix, XorShift};
use super::{LocalQueue, Origin, Policy, Task};

/// Lanes each processor owns: two let a helper and the owner work on different lanes at once.
pub const LANES_PER_PROCESSOR: usize = 2;

/// Every this many pops, a processor peeks at another processor's lane.
pub const HELP_INTERVAL: u64 = 16;

/// How much older another lane's head must be before a processor helps it instead of running
/// its own work: the bound on unfairness that buys locality.
pub const HELP_THRESHOLD_NS: u64 = 50_000;

/// `head_ns` of an empty lane: later than any real timestamp.
const EMPTY_NS: u64 = u64::MAX;

/// One short FIFO with a lock-free view of its head and length.
struct Lane {
    entries: Mutex<VecDeque<(u64, Task)>>,
    /// When the head entry was pushed (ns since the policy's epoch), or `EMPTY_NS`.
    head_ns: AtomicU64,
    /// Mirrors `entries.len()` for `has_work`, `len` and cheap emptiness checks.
    len: AtomicUsize,
}

impl Lane {
    fn new() -> Lane {
        Lane {
            entries: Mutex::new(VecDeque::new()),
            head_ns: AtomicU64::new(EMPTY_NS),
            len: AtomicUsize::new(0),
        }
    }

    fn head_ns(&self) -> u64 {
        self.head_ns.load(Ordering::Acquire)
    }

    fn is_empty(&self) -> bool {
        self.len.load(Ordering::Acquire) == 0
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<(u64, Task)>> {
        // Pushes, pops and `publish` under the lock: see `crate::poison`.
        self.entries.lock().recover()
    }

    fn try_lock(&self) -> Option<MutexGuard<'_, VecDeque<(u64, Task)>>> {
        crate::poison::try_recover(self.entries.try_lock())
    }

    /// Publishes the lane's state; called with the lock held after every change.
    fn publish(&self, entries: &VecDeque<(u64, Task)>) {
        let head = entries.front().map_or(EMPTY_NS, |e| e.0);
        self.head_ns.store(head, Ordering::Release);
        self.len.store(entries.len(), Ordering::Release);
    }

    fn push_locked(
        &self,
        mut entries: MutexGuard<'_, VecDeque<(u64, Task)>>,
        now_ns: u64,
        task: Task,
    ) {
        // Keep the lane sorted: a pusher that read the clock before a later one took the lock
        // gets the later one's timestamp.
        let stamp = entries.back().map_or(now_ns, |e| e.0.max(now_ns));
        entries.push_back((stamp, task));
        self.publish(&entries);
    }

    fn pop_locked(&self, mut entries: MutexGuard<'_, VecDeque<(u64, Task)>>) -> Option<Task> {
        let task = entries.pop_front().map(|e| e.1);
        self.publish(&entries);
        task
    }

    /// Pops the head, waiting for the lock (lanes are held for a few instructions).
    fn pop(&self) -> Option<Task> {
        if self.is_empty() {
            return None;
        }
        self.pop_locked(self.lock())
    }
}

/// The shared half: every processor's lanes.
pub struct RelaxedFifo {
    /// Processor `i` owns lanes `i * LANES_PER_PROCESSOR ..`; padded so lanes of different
    /// processors never share a cache line.
    lanes: Box<[CachePadded<Lane>]>,
    /// Timestamps are nanoseconds since this instant.
    epoch: Instant,
    /// Sequence for remote pushes' random choices (outside threads have no generator).
    remote_seq: AtomicU64,
}

impl RelaxedFifo {
    pub fn new(processors: usize) -> RelaxedFifo {
        assert!(processors > 0, "a cluster needs at least one processor");
        RelaxedFifo {
            lanes: (0..processors * LANES_PER_PROCESSOR)
                .map(|_| CachePadded::new(Lane::new()))
                .collect(),
            epoch: Instant::now(),
            remote_seq: AtomicU64::new(0),
        }
    }

    fn now_ns(&self) -> u64 {
        // u64 nanoseconds last 584 years.
        self.epoch.elapsed().as_nanos() as u64
    }

    /// The lanes of processor `index`.
    fn own(&self, index: usize) -> &[CachePadded<Lane>] {
        &self.lanes[index * LANES_PER_PROCESSOR..(index + 1) * LANES_PER_PROCESSOR]
    }
}

impl Policy for RelaxedFifo {
    fn name(&self) -> &'static str {
        "relaxed-fifo"
    }

    fn local(self: Arc<Self>, index: usize) -> Box<dyn LocalQueue> {
        assert!(
            index < self.lanes.len() / LANES_PER_PROCESSOR,
            "relaxed-fifo: no processor {index}"
        );
        Box::new(Local {
            shared: self,
            index,
            next_lane: 0,
            pops: 0,
            rng: XorShift::new(index as u64),
        })
    }

    fn push_remote(&self, task: Task) {
        let now_ns = self.now_ns();
        let start =
            mix(self.remote_seq.fetch_add(1, Ordering::Relaxed)) as usize % self.lanes.len();
        // A free lane if one of the first few tries finds one, else wait on the first.
        for i in 0..4 {
            let lane = &self.lanes[(start + i) % self.lanes.len()];
            if let Some(entries) = lane.try_lock() {
                lane.push_locked(entries, now_ns, task);
                return;
            }
        }
        let lane = &self.lanes[start];
        lane.push_locked(lane.lock(), now_ns, task);
    }

    fn has_work(&self) -> bool {
        self.lanes.iter().any(|l| !l.is_empty())
    }
}

/// One processor's half: only its position in the lanes and its counters.
struct Local {
    shared: Arc<RelaxedFifo>,
    /// This processor's index: its lanes are `shared.own(index)`.
    index: usize,
    /// The own lane the next push tries first (alternates, to keep both lanes short).
    next_lane: usize,
    /// Pops so far, to help another lane every `HELP_INTERVAL`.
    pops: u64,
    /// Picks lanes to help and to steal from.
    rng: XorShift,
}

impl Local {
    /// The index of a random lane that is not one of ours (`None` with one processor).
    fn random_other_lane(&mut self) -> Option<usize> {
        let lanes = self.shared.lanes.len();
        if lanes == LANES_PER_PROCESSOR {
            return None;
        }
        // Pick among the other processors' lanes, then skip over our own block.
        let mut i = self.rng.below(lanes - LANES_PER_PROCESSOR);
        if i >= self.index * LANES_PER_PROCESSOR {
            i += LANES_PER_PROCESSOR;
        }
        Some(i)
    }

    /// Our own lane with the oldest head, if any is non-empty.
    fn oldest_own(&self) -> Option<&Lane> {
        self.shared
            .own(self.index)
            .iter()
            .map(|l| &**l)
            .filter(|l| !l.is_empty())
            .min_by_key(|l| l.head_ns())
    }

    /// Pops from a random other lane if its head is much older than `own_ns`.
    fn try_help(&mut self, own_ns: u64) -> Option<Task> {
        let index = self.random_other_lane()?;
        let lane = &self.shared.lanes[index];
        let head_ns = lane.head_ns();
        if head_ns == EMPTY_NS || head_ns.saturating_add(HELP_THRESHOLD_NS) >= own_ns {
            return None;
        }
        // Help only if the lane is free: its owner is probably popping it right now.
        lane.pop_locked(lane.try_lock()?)
    }
}

impl LocalQueue for Local {
    fn push(&mut self, task: Task, _origin: Origin) {
        let now_ns = self.shared.now_ns();
        let own = self.shared.own(self.index);
        let first = self.next_lane;
        self.next_lane = (first + 1) % LANES_PER_PROCESSOR;
        for i in 0..LANES_PER_PROCESSOR {
            let lane = &own[(first + i) % LANES_PER_PROCESSOR];
            if let Some(entries) = lane.try_lock() {
                lane.push_locked(entries, now_ns, task);
                return;
            }
        }
        // Helpers hold both lanes: wait for the first (a few instructions).
        let lane = &own[first];
        lane.push_locked(lane.lock(), now_ns, task);
    }

    fn pop(&mut self, _tick: u64) -> Option<Task> {
        self.pops = self.pops.wrapping_add(1);
        if self.pops % HELP_INTERVAL == 0 {
            let own_ns = self.oldest_own().map_or(EMPTY_NS, Lane::head_ns);
            if let Some(task) = self.try_help(own_ns) {
                return Some(task);
            }
        }
        // Oldest own lane first; if a helper emptied it meanwhile, the other.
        if let Some(task) = self.oldest_own().and_then(Lane::pop) {
            return Some(task);
        }
        self.shared.own(self.index).iter().find_map(|l| l.pop())
    }

    fn steal(&mut self) -> Option<Task> {
        let (a, b) = (self.random_other_lane()?, self.random_other_lane()?);
        let (a, b) = (&self.shared.lanes[a], &self.shared.lanes[b]);
        let older = if a.head_ns() <= b.head_ns() { a } else { b };
        if let Some(task) = older.pop() {
            return Some(task);
        }
        let lanes = &self.shared.lanes;
        let start = self.rng.below(lanes.len());
        (0..lanes.len())
            .map(|i| &lanes[(start + i) % lanes.len()])
            .find_map(|l| l.pop())
    }

    fn len(&self) -> usize {
        self.shared
            .own(self.index)
            .iter()
            .map(|l| l.len.load(Ordering::Relaxed))
            .sum()
    }
}
