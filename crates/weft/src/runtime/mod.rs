//! The machinery under fibers: processors, clusters, idle sleep and timers, and spawning.
//!
//! Layer 4 with `sched` (ARCHITECTURE.md, "Layers"): it may use `sched`, `io`, `fiber`, `ctx`
//! and the leaves. The fiber layer below calls up into it only through the hooks installed
//! here ([`install_hooks`]) and the [`Scheduler`] trait `ClusterShared` implements.

pub(crate) mod cluster;
pub(crate) mod home;
pub(crate) mod idle;
pub(crate) mod idle_poll;
pub(crate) mod processor;
pub mod sched_stats;
pub(crate) mod spawn;
pub(crate) mod timer;
pub(crate) mod yield_queue;

use std::io;
use std::sync::Arc;
use std::time::Instant;

pub(crate) use cluster::ClusterShared;
pub use cluster::{default_cluster, Cluster, ClusterBuilder};

use crate::fiber::core::{FiberRef, Hooks, Scheduler, Task};
use crate::fiber::stack::{self, FiberStack};
use crate::sched::Origin;

/// Makes `task` runnable. A started fiber goes to its home processor (its own queue when that
/// is the current one, else its inbox: `home`); one that may move goes to the current
/// processor when it belongs to the task's cluster (locality), else to the cluster's remote
/// queue.
pub(crate) fn schedule(task: Task, origin: Origin) {
    let p = processor::current();
    // SAFETY: the caller holds `task`, so its cluster field is stable (fiber::core docs).
    let cluster = unsafe { &*task.0.cluster.get() };
    if let Some(home) = task.0.placement.home() {
        if !p.is_null() {
            // SAFETY: a non-null `current` is this thread's live processor.
            let p = unsafe { &*p };
            if p.index == home && same_cluster(cluster, &p.cluster) {
                p.push_home(task);
                return;
            }
        }
        cluster.push_home(home, task);
        return;
    }
    if !p.is_null() {
        // SAFETY: a non-null `current` is this thread's live processor.
        let p = unsafe { &*p };
        if same_cluster(cluster, &p.cluster) {
            p.push_local(task, origin);
            return;
        }
    }
    let cluster = cluster.clone();
    cluster.push_remote(task);
}

/// Whether the fiber's cluster `a` is the processor's cluster `b`.
#[inline]
fn same_cluster(a: &Arc<dyn Scheduler>, b: &Arc<ClusterShared>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

/// Installs the hooks through which the fiber layer reaches the scheduler (a wake-up's new
/// `Task` goes to [`schedule`], a park's deadline to [`add_timer`]). Called before any fiber
/// exists (`ClusterBuilder::build`).
pub(crate) fn install_hooks() {
    crate::fiber::core::install_hooks(Hooks {
        wake: |task| schedule(task, Origin::Wake),
        arm_timer: add_timer,
    });
}

/// Arms a timer on the current processor (see `timer::TimerHeap::add`); `false` outside
/// processors.
pub(crate) fn add_timer(deadline: Instant, fiber: FiberRef, generation: u64) -> bool {
    let p = processor::current();
    if p.is_null() {
        return false;
    }
    // SAFETY: a non-null `current` is this thread's live processor.
    unsafe { &*p }.add_timer(deadline, fiber, generation);
    true
}

/// A stack of `size` bytes, from this processor's cache when it keeps that size.
pub(crate) fn take_stack(size: usize) -> io::Result<FiberStack> {
    let p = processor::current();
    if !p.is_null() {
        // SAFETY: a non-null `current` is this thread's live processor.
        let p = unsafe { &*p };
        if p.cluster.stack_size == size {
            return stack::take(size, Some(&mut p.stacks.borrow_mut()));
        }
    }
    stack::take(size, None)
}

/// The cluster of the processor running this thread, if any.
pub(crate) fn current_cluster() -> Option<Arc<ClusterShared>> {
    let p = processor::current();
    // SAFETY: a non-null `current` is this thread's live processor.
    (!p.is_null()).then(|| unsafe { (*p).cluster.clone() })
}
