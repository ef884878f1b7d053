//! Scheduling policies: where runnable fibers wait and which one a processor runs next.
//!
//! A policy is two small traits. [`Policy`] is the shared half, built once per cluster and
//! reached from any thread; [`LocalQueue`] is the owner half, one per processor, used only by
//! that processor's thread (so it takes `&mut self` and needs no synchronisation for its own
//! state). Adding a policy is one file: implement both traits and add a line to [`POLICIES`].
//!
//! What a policy does *not* own, because every policy gets it from the cluster:
//! - the global **yield queue** (`yield_now` never goes through the policy: re-queueing a
//!   yielding fiber locally lets it starve its peers);
//! - **idle sleep** and wake-ups, and the bound on how many processors search at once;
//! - timers and I/O completions (they call [`LocalQueue::push`] with [`Origin::Wake`]).
//!
//! Invariants every policy keeps:
//! - a [`Task`] pushed is popped or stolen exactly once (never lost, never duplicated);
//! - [`Policy::has_work`] is `true` whenever a push that completed before the call left a task
//!   that a processor other than its owner could take (the cluster brackets both sides with
//!   `SeqCst` fences, so plain loads inside `has_work` are enough);
//! - no operation blocks or parks; critical sections are short and bounded.
//!
//! The built-in policies, one file each ([`POLICIES`] lists them, the default first):
//! - [`work_stealing`]: per-processor [`ring`]s, a capped LIFO slot, steal-half, an inject
//!   queue checked every 61 ticks (Go, tokio);
//! - [`relaxed_fifo`]: two timestamped lanes per processor, helping lanes much older than
//!   one's own (Cforall);
//! - [`lifo_stealing`]: Chase-Lev LIFO deques from `crossbeam-deque`, batch stealing;
//! - [`global_fifo`]: one locked queue, the baseline;
//! - the scheduler study's variants (issue 7, docs/SCHEDULERS.md): the FIFO/LIFO hybrids
//!   [`hybrid_stochastic`], [`hybrid_switch`], [`hybrid_reverse`] (on the `hybrid`
//!   skeleton); FIFO work-stealing that steals only from neighbours ([`ws_nearest`]), that
//!   overflows to a locked, lock-free or sharded global queue ([`ws_overflow_locked`],
//!   [`ws_overflow_lockfree`], [`ws_overflow_sharded`], on the `ring_stealing` skeleton), whose
//!   deques grow ([`ws_grow`]); and work-requesting ([`ws_request`], the `request` slot).
//!
//! Shared pieces: [`ring`] (the lock-free bounded SPMC ring, model-checked with loom), `inject`
//! (a locked FIFO with a lock-free length), `rng` (xorshift for picking victims), `victims`
//! (victim orders), `global_queue` (the overflow queues behind one trait).
//!
//! Architecture Invariant: policies know nothing of fibers beyond [`Task`], nor of threads,
//! sleeping or timers; the runtime knows nothing of how a policy stores its tasks.

use crate::poison::Recover;
use std::sync::Arc;

pub use crate::fiber::core::Task;

pub mod global_fifo;
mod global_queue;
mod hybrid;
pub mod hybrid_reverse;
pub mod hybrid_stochastic;
pub mod hybrid_switch;
pub(crate) mod inject;
pub mod lifo_stealing;
pub mod relaxed_fifo;
mod request;
pub mod ring;
mod ring_stealing;
mod rng;
mod victims;
pub mod work_stealing;
pub mod ws_grow;
pub mod ws_nearest;
pub mod ws_overflow_locked;
pub mod ws_overflow_lockfree;
pub mod ws_overflow_sharded;
pub mod ws_request;

/// Every this many scheduling rounds a processor takes the *oldest* task of its own queue
/// ([`LocalQueue::pop_oldest`]) instead of the one its policy's order picks, so a LIFO order
/// (or a LIFO slot) cannot keep an old task waiting while new ones keep arriving.
pub const OLDEST_CHECK_INTERVAL: u64 = 16;

/// The bounded-unfairness invariant, in scheduling rounds: a task queued on a processor while
/// at most `queued` tasks could be queued there runs on it within this many of its rounds (or
/// is stolen earlier). Every `OLDEST_CHECK_INTERVAL`-th round serves the oldest task, so each
/// task older than it is gone after at most that many rounds; the yield queue (every 31
/// rounds) and shared queues (every 61) only take rounds from the others, which the slack
/// covers. Checked under every policy by `tests/fairness.rs`.
pub const fn wait_rounds_bound(queued: u64) -> u64 {
    OLDEST_CHECK_INTERVAL * (queued + 1) + 64
}

/// The policy clusters get unless told otherwise: work-stealing keeps a woken fiber on the
/// processor that woke it (locality) and spreads bursts by stealing, with bounded unfairness.
pub const DEFAULT_POLICY: &str = "work-stealing";

/// Why a task is being queued by its processor: policies may treat new and woken work apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A fiber spawned by a fiber running on this processor.
    Spawn,
    /// A parked fiber woken by this processor (by a fiber, a timer or an I/O completion).
    Wake,
}

/// The shared half of a scheduling policy: one per cluster.
pub trait Policy: Send + Sync + 'static {
    /// The short name used on command lines and in benchmark output (`"work-stealing"`).
    fn name(&self) -> &'static str;

    /// Builds processor `index`'s owner-side queue. The cluster calls it exactly once for each
    /// index in `0..processors` before it runs anything.
    fn local(self: Arc<Self>, index: usize) -> Box<dyn LocalQueue>;

    /// Queues a task from a thread that is not one of this cluster's processors: another
    /// cluster's processor, a plain OS thread, the blocking pool.
    fn push_remote(&self, task: Task);

    /// Whether a task is queued where some processor other than its owner could take it.
    fn has_work(&self) -> bool;
}

/// The owner half of a scheduling policy: one per processor, used only by that processor.
pub trait LocalQueue: Send {
    /// Queues a task made runnable on this processor.
    fn push(&mut self, task: Task, origin: Origin);

    /// The next task from this processor's own queues. `tick` counts the processor's scheduling
    /// rounds, for policies that look at shared queues every N rounds.
    fn pop(&mut self, tick: u64) -> Option<Task>;

    /// The oldest task of this processor's own queues, or one close to it (a shared overflow
    /// queue's head counts as older than the local queue). The processor calls this instead of
    /// [`LocalQueue::pop`] every [`OLDEST_CHECK_INTERVAL`] rounds, which is what bounds every
    /// policy's unfairness ([`wait_rounds_bound`]). The default is `pop`, right for policies
    /// whose own order is FIFO.
    fn pop_oldest(&mut self, tick: u64) -> Option<Task> {
        self.pop(tick)
    }

    /// Looks for work elsewhere (other processors, shared queues) after `pop` found none.
    fn steal(&mut self) -> Option<Task>;

    /// About how many tasks wait in this processor's own queues.
    fn len(&self) -> usize;

    /// Whether this processor's own queues look empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Hands processor `index` its owner half, kept in `owners` until `Policy::local` asks for it.
///
/// # Panics
/// When `index` is out of range or its half was already taken: the cluster calls `local` once
/// per processor, so either means a broken cluster.
pub(crate) fn take_owner_half<T>(
    owners: &std::sync::Mutex<Vec<Option<T>>>,
    index: usize,
    policy: &str,
) -> T {
    // Taken, then checked with the guard gone: a broken cluster panics with no lock poisoned
    // (see `crate::poison`).
    let half = owners
        .lock()
        .recover()
        .get_mut(index)
        .and_then(Option::take);
    half.unwrap_or_else(|| panic!("{policy}: no processor {index}, or asked twice"))
}

/// A policy the runtime knows by name.
pub struct PolicyInfo {
    /// The name used on command lines.
    pub name: &'static str,
    /// One line for `--help` and docs.
    pub summary: &'static str,
    /// Builds the policy for a cluster of `processors` processors.
    pub build: fn(processors: usize) -> Arc<dyn Policy>,
}

/// Every built-in policy, the default first.
pub static POLICIES: &[PolicyInfo] = &[
    PolicyInfo {
        name: "work-stealing",
        summary: "per-processor rings with a capped LIFO slot, steal-half, shared inject queue (Go/tokio)",
        build: |n| Arc::new(work_stealing::WorkStealing::new(n)),
    },
    PolicyInfo {
        name: "relaxed-fifo",
        summary: "two timestamped lanes per processor, helping much older lanes (Cforall)",
        build: |n| Arc::new(relaxed_fifo::RelaxedFifo::new(n)),
    },
    PolicyInfo {
        name: "lifo-stealing",
        summary: "Chase-Lev LIFO deque per processor, batch stealing, injector (crossbeam-deque)",
        build: |n| Arc::new(lifo_stealing::LifoStealing::new(n)),
    },
    PolicyInfo {
        name: "global-fifo",
        summary: "one locked FIFO queue shared by all processors (the baseline)",
        build: |n| Arc::new(global_fifo::GlobalFifo::new(n)),
    },
    PolicyInfo {
        name: hybrid_stochastic::NAME,
        summary: "locked deque per processor, each pop LIFO with probability 0.5, else FIFO",
        build: hybrid_stochastic::build,
    },
    PolicyInfo {
        name: hybrid_switch::NAME,
        summary: "locked deque per processor, pops switch FIFO <-> LIFO every 32",
        build: hybrid_switch::build,
    },
    PolicyInfo {
        name: hybrid_reverse::NAME,
        summary: "locked LIFO stack per processor, reversed every 32 pops",
        build: hybrid_reverse::build,
    },
    PolicyInfo {
        name: ws_nearest::NAME,
        summary: "FIFO rings, thieves try only the 2 nearest processors by index",
        build: ws_nearest::build,
    },
    PolicyInfo {
        name: ws_overflow_locked::NAME,
        summary: "FIFO rings overflowing to a locked global queue",
        build: ws_overflow_locked::build,
    },
    PolicyInfo {
        name: ws_overflow_lockfree::NAME,
        summary: "FIFO rings overflowing to a lock-free global queue (crossbeam SegQueue)",
        build: ws_overflow_lockfree::build,
    },
    PolicyInfo {
        name: ws_overflow_sharded::NAME,
        summary: "FIFO rings overflowing to per-processor locked queues picked by hash",
        build: ws_overflow_sharded::build,
    },
    PolicyInfo {
        name: ws_grow::NAME,
        summary: "unbounded FIFO Chase-Lev deques that grow instead of overflowing",
        build: ws_grow::build,
    },
    PolicyInfo {
        name: ws_request::NAME,
        summary: "private queues; idle processors request work, owners hand it over",
        build: ws_request::build,
    },
];

/// The policy named `name`, built for `processors` processors.
pub fn by_name(name: &str, processors: usize) -> Result<Arc<dyn Policy>, UnknownPolicy> {
    POLICIES
        .iter()
        .find(|p| p.name == name)
        .map(|p| (p.build)(processors))
        .ok_or_else(|| UnknownPolicy(name.to_owned()))
}

/// The names of every built-in policy, for error messages and `--help`.
pub fn names() -> Vec<&'static str> {
    POLICIES.iter().map(|p| p.name).collect()
}

/// A scheduler name that no built-in policy has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownPolicy(pub String);

impl std::fmt::Display for UnknownPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unknown scheduler policy '{}' (known: {})",
            self.0,
            names().join(", ")
        )
    }
}

impl std::error::Error for UnknownPolicy {}
