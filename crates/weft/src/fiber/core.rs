//! The fiber record, and the scheduler interface below the scheduler.
//!
//! A fiber is an `Arc<Fiber>`. Exactly one [`Task`] for it exists while it is runnable or
//! running (it sits in one queue, or is held by the processor running it); none exists while it
//! is parked. Unparkers hold plain clones of the `Arc`.
//!
//! `state` has three values:
//! - `EMPTY`: running, queued, or on its way to parking;
//! - `NOTIFIED`: as `EMPTY`, plus a wake-up token the next park will consume;
//! - `PARKED`: switched out and in no queue; the unparker that moves it back to `EMPTY` creates
//!   the one `Task` for it.
//!
//! Only the processor that switched the fiber out stores `PARKED` (after the switch is complete),
//! so a fiber can never be resumed on two threads at once. The state machine itself is in
//! `fiber::park`.
//!
//! The record names its cluster only as a [`Scheduler`], and the fiber layer reaches the
//! scheduler only through it and the [`Hooks`] the runtime installs: the scheduler is a layer
//! above (ARCHITECTURE.md, "Layers").

use std::cell::{Cell, UnsafeCell};
use std::sync::OnceLock;
use std::time::Instant;

use crate::loom::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use corosensei::{Coroutine, Yielder};

use super::stack::FiberStack;
use crate::ctx::{LocalMap, WaitNode};

pub(crate) use super::park::state::EMPTY;

/// The cluster a fiber belongs to, as the fiber layer sees it: `runtime::ClusterShared` is the
/// one implementation.
pub(crate) trait Scheduler: Send + Sync + 'static {
    /// Queues a started fiber's task on this cluster's processor `home`.
    fn push_home(&self, home: usize, task: Task);
    /// Queues a task on this cluster from outside its processors.
    fn push_remote(&self, task: Task);
}

/// What the fiber layer calls up into the scheduler for; installed once by the runtime before
/// the first fiber exists (`ClusterBuilder::build`).
pub(crate) struct Hooks {
    /// Makes a woken fiber's new `Task` runnable (`runtime::schedule`, `Origin::Wake`).
    pub(crate) wake: fn(Task),
    /// Arms a timer on the current processor (`runtime::add_timer`); `false` outside
    /// processors.
    pub(crate) arm_timer: fn(Instant, FiberRef, u64) -> bool,
}

static HOOKS: OnceLock<Hooks> = OnceLock::new();

/// Installs the scheduler's hooks; later calls change nothing (there is one scheduler).
pub(crate) fn install_hooks(hooks: Hooks) {
    let _ = HOOKS.set(hooks);
}

/// The scheduler's hooks. Only called for a fiber, which exists only once a cluster was built.
#[inline]
pub(crate) fn hooks() -> &'static Hooks {
    HOOKS
        .get()
        .expect("a fiber exists only once a cluster installed the scheduler hooks")
}

/// Why a fiber switched back to its processor.
pub(crate) enum Suspend {
    /// `yield_now`: queue me on the cluster's yield queue.
    Yield,
    /// Park me unless a wake-up token is already there.
    Park,
    /// Queue me on another cluster.
    Migrate(Arc<dyn Scheduler>),
}

pub(crate) type FiberCoroutine = Coroutine<(), Suspend, (), FiberStack>;

/// What a fiber runs, from spawn to its first run and after.
pub(crate) enum FiberBody {
    /// Spawned, never run: its stack is mapped but not touched, its entry waits on the heap.
    /// The coroutine is made by the processor that first runs the fiber, so the stack's first
    /// pages are faulted in by that processor's CPU: from its own lists of free pages, which
    /// spreads a processor's stacks over the cache's colours (made by the spawning thread, the
    /// stacks of fibers dealt out to two processors alternately shared out the colours
    /// between them: `yield` at 2 processors ran 63–65 M/s against 82–88 made at home).
    Unstarted {
        stack: FiberStack,
        entry: Box<dyn FnOnce(&FiberYielder) + Send>,
    },
    /// Made on the first run.
    Coroutine(FiberCoroutine),
    /// Finished (its stack given back), or moved out while being started.
    Gone,
}

impl FiberBody {
    /// The coroutine, made now if the fiber never ran. Only the holder of the fiber's `Task`
    /// calls this, on the processor about to resume it.
    pub(crate) fn coroutine(&mut self) -> &mut FiberCoroutine {
        if matches!(self, FiberBody::Unstarted { .. }) {
            let FiberBody::Unstarted { stack, entry } = std::mem::replace(self, FiberBody::Gone)
            else {
                unreachable!("checked above")
            };
            *self = FiberBody::Coroutine(Coroutine::with_stack(
                stack,
                move |yielder: &FiberYielder, ()| entry(yielder),
            ));
        }
        match self {
            FiberBody::Coroutine(co) => co,
            _ => panic!("weft: a runnable fiber has no body (it already returned)"),
        }
    }

    /// The finished coroutine, leaving `Gone`.
    pub(crate) fn take_finished(&mut self) -> Option<FiberCoroutine> {
        match std::mem::replace(self, FiberBody::Gone) {
            FiberBody::Coroutine(co) => Some(co),
            other => {
                *self = other;
                None
            }
        }
    }
}
pub(crate) type FiberYielder = Yielder<(), Suspend>;

/// Everything the runtime knows about one fiber.
///
/// `repr(C)` with the fields every park, wake-up and resumption touches first, next to the
/// `Arc`'s counts: a fiber woken by another processor drags these cache lines across cores,
/// and the fewer they are the cheaper the hand-off (`churn`, `cycle`).
///
/// Not aligned to cache lines (tokio aligns its task cells to 128 bytes): measured, the aligned
/// allocation cost spawn + join 20–30 ns and changed no hand-off benchmark.
#[repr(C)]
pub(crate) struct Fiber {
    /// `EMPTY`, `NOTIFIED` or `PARKED`; see the module docs.
    pub(crate) state: AtomicU8,
    /// Set by `JoinHandle::cancel`; sticky.
    pub(crate) cancelled: AtomicBool,
    /// Which processor the fiber is bound to once it has started (see [`Placement`]): read by
    /// every wake-up, so next to `state`.
    pub(crate) placement: Placement,
    /// The fiber's node for `sync` wait lists: a fiber waits in at most one list at a time, so
    /// one node per fiber spares every wait an allocation (see `sync::wait_queue`).
    pub(crate) wait_node: WaitNode,
    /// Set by the coroutine when it starts; used by the fiber itself to switch out.
    pub(crate) yielder: Cell<*const FiberYielder>,
    /// Roughly where the fiber's stack pointer was when it last parked (written by the fiber
    /// itself): the waker prefetches those lines, so they are on their way while the waker
    /// finishes its own turn.
    pub(crate) stack_hint: AtomicUsize,
    /// The cluster the fiber runs on. Written only by the processor handling a `Migrate` (while
    /// the fiber is switched out and not parked); read by whoever holds its `Task`.
    pub(crate) cluster: UnsafeCell<Arc<dyn Scheduler>>,
    /// The body (entry, then coroutine): touched only by the holder of the fiber's `Task`.
    pub(crate) coroutine: UnsafeCell<FiberBody>,
    /// Bumped by the fiber itself whenever it gives up the timer entry it armed last (see
    /// `park::switch`, "Timer entries outlive a wake-up"); an entry armed under an older
    /// generation is stale (see `runtime::timer`). Written only by the fiber, read by the
    /// processors that hold its timer entries.
    pub(crate) timer_gen: AtomicU64,
    /// The deadline of the fiber's live timer entry (armed under the current `timer_gen`), if
    /// it may still be in a heap: touched only by the fiber itself.
    pub(crate) timer_live: Cell<Option<Instant>>,
    /// Process-unique, never reused.
    pub(crate) id: u64,
    /// Given at spawn; shown in panics, stack-overflow reports and `Debug`.
    pub(crate) name: Option<Arc<str>>,
    /// Fiber-local values: touched only by the fiber itself.
    pub(crate) locals: UnsafeCell<LocalMap>,
    /// The stack's guard page `[low, high)` and usable size, for overflow reports.
    pub(crate) guard: (usize, usize),
    pub(crate) stack_size: usize,
    /// When the fiber's current `Task` was queued (`runtime::sched_stats` clock), written only
    /// while scheduling statistics are on, by whoever queues the Task.
    pub(crate) queued_ns: AtomicU64,
    /// Which processor queued the current `Task` (index + 1, in the top 16 bits; 0: not a
    /// processor of its cluster) and that processor's round then (the low 48 bits).
    pub(crate) queued_round: AtomicU64,
    /// The round stamp (as `queued_round`) by which the processor holding the current `Task`
    /// orders it against its other queue (`runtime::processor`, `next_task`): when it became
    /// runnable there, or for a fiber spawned there, when its spawner did. Always written,
    /// by whoever queues the Task (0 from outside the cluster's processors).
    pub(crate) ready_round: AtomicU64,
}

// SAFETY: the fields that are not thread-safe (`cluster`, `coroutine`, `yielder`, `locals`,
// `timer_live`) are only touched by the one thread that holds the fiber's Task or is running
// the fiber, as the state machine in the module docs guarantees; the hand-off between threads
// goes through the queues' and `state`'s release/acquire edges. What runs *inside* the coroutine may be `!Send`:
// it never changes OS thread once started, because the runtime only resumes a started fiber on
// its home processor (`Placement`); the `unsafe` migratable opt-in puts that on the caller.
unsafe impl Send for Fiber {}
// SAFETY: as above; shared access from other threads is limited to the atomics and `id`/`name`.
unsafe impl Sync for Fiber {}

impl Drop for Fiber {
    fn drop(&mut self) {
        // A fiber that never ran drops its entry and unmaps its stack as usual.
        if let Some(co) = self.coroutine.get_mut().take_finished() {
            if co.started() && !co.done() {
                // A suspended fiber that nobody can wake any more. Unwinding it here would run
                // its destructors on whatever thread dropped the last reference, and reusing
                // its stack is unsafe while in-flight I/O may point into it: leak both.
                std::mem::forget(co);
            }
        }
    }
}

/// Where a fiber may run: the soundness half of the fiber contract (see `crate::spawn`).
///
/// A fiber that has not started yet has no home and may go to any processor of its cluster
/// (stealing spreads new work). When a processor first resumes it, that processor becomes its
/// **home** and the fiber runs nowhere else: every later wake-up, yield and re-queue goes to the
/// home processor's own queues, never to a place another processor takes from. So the OS
/// thread under a started fiber never changes, and `thread_local!`, `!Send` values and std's
/// per-thread panic count stay sound across blocking calls.
///
/// Only a fiber spawned with the `unsafe` migratable opt-in stays homeless after it starts;
/// even that one gets a home the first time it switches out while its thread is panicking
/// (unwinding must end on the thread it began on: std counts panics per thread).
///
/// `home` is written by the processor that holds the fiber's `Task` (before resuming it, or
/// after it switched out) and read by whoever holds the `Task` next, after the queue or
/// `state` hand-off's acquire edge: relaxed accesses are enough.
pub(crate) struct Placement {
    /// Home processor index + 1; 0: none (not started yet, or migratable).
    home: AtomicU32,
    /// Spawned with the `unsafe` opt-in: stays homeless after it starts.
    migratable: bool,
}

impl Placement {
    crate::loom::const_fn_unless_loom! {
        pub(crate) const fn new(migratable: bool) -> Placement {
            Placement {
                home: AtomicU32::new(0),
                migratable,
            }
        }
    }

    /// Bound to processor `index` from the start (`Builder::processor`): it first runs there
    /// and only there, like a fiber that happened to first run there.
    pub(crate) fn bound_to(index: usize) -> Placement {
        let placement = Placement::new(false);
        placement.bind(index);
        placement
    }

    /// The processor the fiber is bound to, if any.
    #[inline]
    pub(crate) fn home(&self) -> Option<usize> {
        match self.home.load(Ordering::Relaxed) {
            0 => None,
            h => Some(h as usize - 1),
        }
    }

    /// Called by processor `index` right before it resumes the fiber: binds an unbound fiber
    /// here unless it is migratable.
    #[inline]
    pub(crate) fn starting_on(&self, index: usize) {
        if !self.migratable && self.home.load(Ordering::Relaxed) == 0 {
            self.bind(index);
        }
    }

    /// Called by processor `index` right after the fiber switched out (still on this
    /// thread): a migratable fiber that switched out while its thread is panicking is bound
    /// here for good, so its unwinding ends on the thread where it began.
    #[inline]
    pub(crate) fn switched_out_on(&self, index: usize) {
        if self.migratable && self.home.load(Ordering::Relaxed) == 0 && std::thread::panicking() {
            self.bind(index);
        }
    }

    /// Forgets the home: the fiber moves to another cluster (`crate::migrate`, `unsafe`).
    pub(crate) fn unbind(&self) {
        self.home.store(0, Ordering::Relaxed);
    }

    fn bind(&self, index: usize) {
        let h = u32::try_from(index + 1).expect("fewer than 2^32 processors");
        self.home.store(h, Ordering::Relaxed);
    }
}

/// A runnable fiber. The scheduling policies move these between queues; each is popped once.
pub struct Task(pub(crate) Arc<Fiber>);

impl Task {
    /// The fiber's id, for policies that want to log or hash.
    pub fn fiber_id(&self) -> u64 {
        self.0.id
    }
}

impl std::fmt::Debug for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Task(fiber {})", self.0.id)
    }
}

/// A counted reference to a fiber, held by whoever may want to wake it.
#[derive(Clone)]
pub(crate) struct FiberRef(pub(crate) Arc<Fiber>);

impl FiberRef {
    pub(crate) fn id(&self) -> u64 {
        self.0.id
    }

    pub(crate) fn ptr_eq(&self, other: &FiberRef) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Wakes the fiber: schedules it if parked, else leaves it a token.
    pub(crate) fn unpark(&self) {
        super::park::unpark(&self.0);
    }
}

/// The fiber whose record holds `node` as its `wait_node` (the pointer `Arc::as_ptr` gives).
///
/// Only meaningful for a fiber's node; the caller checks that (a thread's node has its thread).
pub(crate) fn fiber_of_node(node: *const WaitNode) -> *const Fiber {
    node.cast::<u8>()
        .wrapping_sub(std::mem::offset_of!(Fiber, wait_node))
        .cast::<Fiber>()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use corosensei::stack::Stack;

    /// Whether the page holding `addr` is resident (`mincore`).
    fn resident(addr: usize) -> bool {
        let page = super::super::stack::page_size();
        let start = addr & !(page - 1);
        let mut vec = 0u8;
        // SAFETY: `start` is page-aligned and lies in a mapping the test owns; `vec` has room
        // for the one page asked about.
        let rc = unsafe { libc::mincore(start as *mut libc::c_void, page, &mut vec) };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        vec & 1 == 1
    }

    #[test]
    fn an_unstarted_body_leaves_its_stack_untouched_until_its_coroutine_is_made() {
        let stack = FiberStack::new(64 * 1024).unwrap();
        let top = stack.base().get() - 1;
        let mut body = FiberBody::Unstarted {
            stack,
            entry: Box::new(|_: &FiberYielder| {}),
        };
        assert!(!resident(top), "spawning touched the stack");
        // Made here, by the thread that will run it: its first pages are faulted in now.
        let co = body.coroutine();
        assert!(!co.started());
        assert!(resident(top), "making the coroutine wrote its first frame");
        assert!(body.take_finished().is_some());
        assert!(matches!(body, FiberBody::Gone));
    }
}
