//! Spawning fibers, joining them, and moving them between clusters: the public fiber calls
//! that need the scheduler (re-exported by `fiber`).

use std::any::Any;
use std::cell::{Cell, UnsafeCell};
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use crate::ctx::{LocalMap, WaitNode};
use crate::fiber::core::{
    Fiber, FiberBody, FiberRef, FiberYielder, Placement, Suspend, Task, EMPTY,
};
use crate::fiber::current::{current_fiber_ptr, suspend};
use crate::fiber::park::{current_unparker, park, Parked, Unparker};
use crate::fiber::stack;
use crate::loom::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering, StaticAtomicU64};
use crate::poison::Recover;
use crate::runtime::{self, Cluster};
use crate::sched::Origin;

static NEXT_FIBER_ID: StaticAtomicU64 = StaticAtomicU64::new(1);

/// Spawns a fiber running `f` and returns a handle to join it.
///
/// The fiber runs on the calling fiber's cluster, or on the [default
/// cluster](crate::default_cluster) when called from outside any fiber.
///
/// # The fiber contract
///
/// A fiber is a user-level thread with its own stack. It starts on any processor of its cluster
/// (idle processors steal fibers that have not run yet) and from then on **stays on the OS
/// thread it first ran on**: wake-ups, yields and timers bring it back to that processor, which
/// is the only one that resumes it. That is what makes safe code sound on fibers: Rust assumes
/// a function stays on one OS thread from entry to exit, and `thread_local!` (`rand::thread_rng`,
/// `std::io::stdout().lock()`'s owner check, std's per-thread panic count) and `!Send` values
/// held across a blocking call rely on it. (Go and Java virtual threads move their threads
/// freely; they have no `Send`.) The price is that load is balanced only when fibers start:
/// a processor cannot take over another's started fibers (ARCHITECTURE.md gives the measured
/// cost). Fibers that hand work to each other at a high rate are best kept together:
/// [`Builder::processor`] places a fiber on a chosen processor from the start.
///
/// Code running on a fiber keeps these rules:
///
/// - **`thread_local!` is per OS thread, not per fiber.** It is sound to use, but every fiber
///   of the processor shares the value. Use [`crate::FiberLocal`] for per-fiber state.
/// - **Never block a fiber while holding an OS lock.** A fiber that parks holding a
///   `std::sync::Mutex` lets another fiber on the same processor block the whole OS thread on it:
///   a deadlock. Use [`crate::sync::Mutex`], which parks the fiber instead.
/// - **Blocking system calls block the processor.** Use weft's I/O, or run the call through
///   [`crate::blocking()`].
/// - **Migration is `unsafe`.** A fiber spawned with [`Builder::migratable`] may be resumed on
///   any processor of its cluster after any blocking call, and [`crate::migrate`] moves a
///   fiber to another cluster: the caller then promises that the fiber's code holds nothing
///   thread-bound across a blocking call (corosensei and `may` put the same condition on
///   moving a coroutine). A migratable fiber that blocks while panicking is still kept on its
///   thread until the unwinding ends.
///
/// A panic ends only its own fiber: [`JoinHandle::join`] returns it as [`JoinError::Panicked`].
///
/// # Panics
///
/// If the fiber cannot be created (for instance the kernel's limit on memory mappings is
/// reached); use [`Builder::spawn`] to get that as an error instead.
pub fn spawn<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    Builder::new()
        .spawn(f)
        .unwrap_or_else(|e| panic!("weft: cannot spawn a fiber: {e}"))
}

/// Options for one fiber: name, stack size, cluster.
#[derive(Default)]
pub struct Builder {
    name: Option<String>,
    stack_size: Option<usize>,
    cluster: Option<Cluster>,
    migratable: bool,
    processor: Option<usize>,
}

impl Builder {
    pub fn new() -> Builder {
        Builder::default()
    }

    /// Names the fiber (shown in stack-overflow reports and by [`crate::fiber::name`]).
    pub fn name(mut self, name: impl Into<String>) -> Builder {
        self.name = Some(name.into());
        self
    }

    /// Stack size in bytes, rounded up to whole pages (default: the cluster's).
    pub fn stack_size(mut self, bytes: usize) -> Builder {
        self.stack_size = Some(bytes);
        self
    }

    /// Runs the fiber on `cluster` instead of the current or default one.
    pub fn cluster(mut self, cluster: &Cluster) -> Builder {
        self.cluster = Some(cluster.clone());
        self
    }

    /// Lets the fiber be resumed on any processor of its cluster after it started (stolen by an
    /// idle processor, woken onto the waker's processor), instead of only on the one it first
    /// ran on: better load balance for fibers that hold nothing thread-bound.
    ///
    /// # Safety
    ///
    /// Nothing that depends on the OS thread may be alive across a blocking call (park, yield,
    /// I/O, sleep, a `sync` wait) of the fiber: no `thread_local!` reference or value derived
    /// from one (`rand::thread_rng()`), no `!Send` value whose correctness depends on its thread
    /// (`std::io::StdoutLock`, a `std::sync::MutexGuard`, `std::thread::current()` compared
    /// later), including in code the fiber calls. A panic's unwinding is the runtime's concern:
    /// a fiber that blocks while panicking is kept on its thread.
    pub unsafe fn migratable(mut self) -> Builder {
        self.migratable = true;
        self
    }

    /// Binds the fiber to processor `index` of its cluster (`0..Cluster::processors()`) from
    /// the start: it runs there and only there, as if it had first run there by chance.
    ///
    /// Under the default placement a fiber stays on whichever processor first ran it, so fibers
    /// that hand work to each other at a high rate may land on different processors, and every
    /// wake-up then crosses between them (a message to the other processor's inbox and the
    /// fiber's cache lines with it). Placing such a group on one processor keeps its hand-offs
    /// local; placing groups on different processors spreads the load. Safe: the fiber never
    /// changes thread. Overrides [`Builder::migratable`].
    pub fn processor(mut self, index: usize) -> Builder {
        self.processor = Some(index);
        self
    }

    /// Spawns the fiber; see [`spawn`] for the contract. Fails when no stack can be mapped,
    /// the stack size is below the minimum, or [`Builder::processor`] names a processor the
    /// cluster does not have.
    pub fn spawn<F, T>(self, f: F) -> io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let cluster = match &self.cluster {
            Some(c) => c.shared.clone(),
            None => match runtime::current_cluster() {
                Some(c) => c,
                None => runtime::default_cluster().shared.clone(),
            },
        };
        if let Some(index) = self.processor {
            if index >= cluster.processors {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "weft: no processor {index} in cluster '{}': it has {} (0..{})",
                        cluster.name, cluster.processors, cluster.processors
                    ),
                ));
            }
        }
        let size = match self.stack_size {
            Some(s) => stack::checked_size(s)?
                .get()
                .next_multiple_of(stack::page_size()),
            None => cluster.stack_size,
        };
        let stack = runtime::take_stack(size)?;
        let guard = stack.guard_range();
        let stack_size = stack.usable_size();

        let packet: Arc<Packet<T>> = Arc::new(Packet {
            state: Mutex::new(PacketState {
                result: None,
                waiter: None,
            }),
            done: AtomicBool::new(false),
        });
        let completion = packet.clone();
        // Made into a coroutine on the processor that first runs the fiber (`FiberBody`).
        let entry: Box<dyn FnOnce(&FiberYielder) + Send> =
            Box::new(move |yielder: &FiberYielder| {
                let me = current_fiber_ptr();
                // SAFETY: the coroutine only runs as the fiber `me`, which is alive while it runs.
                let me = unsafe { &*me };
                me.yielder.set(yielder);
                let result = catch_unwind(AssertUnwindSafe(f));
                // Its live timer entry, if any, is stale from here: the sweep drops it instead
                // of keeping the finished fiber's record until the deadline.
                crate::fiber::park::drop_live_timer(me);
                // Fiber-locals die with the fiber, on its own stack.
                // SAFETY: only the fiber itself touches its locals.
                let locals = unsafe { &mut *me.locals.get() };
                if !locals.is_empty() {
                    let locals = std::mem::take(locals);
                    let _ = catch_unwind(AssertUnwindSafe(move || drop(locals)));
                }
                completion.complete(result);
            });
        let fiber = Arc::new(Fiber {
            id: NEXT_FIBER_ID.fetch_add(1, Ordering::Relaxed),
            name: self.name.map(Arc::from),
            state: AtomicU8::new(EMPTY),
            cancelled: AtomicBool::new(false),
            placement: match self.processor {
                Some(index) => Placement::bound_to(index),
                None => Placement::new(self.migratable),
            },
            timer_gen: AtomicU64::new(0),
            timer_live: Cell::new(None),
            cluster: UnsafeCell::new(cluster),
            coroutine: UnsafeCell::new(FiberBody::Unstarted { stack, entry }),
            yielder: Cell::new(std::ptr::null()),
            stack_hint: AtomicUsize::new(0),
            locals: UnsafeCell::new(LocalMap::default()),
            wait_node: WaitNode::new(),
            guard,
            stack_size,
            queued_ns: AtomicU64::new(0),
            queued_round: AtomicU64::new(0),
            ready_round: AtomicU64::new(0),
        });
        let handle = JoinHandle {
            packet,
            fiber: FiberRef(fiber.clone()),
        };
        runtime::schedule(Task(fiber), Origin::Spawn);
        Ok(handle)
    }
}

/// Moves the calling fiber to `cluster`; it continues there, on whichever of its processors
/// first takes it, and stays on that one. A no-op when it is already there.
///
/// # Safety
///
/// The fiber continues on another OS thread: nothing that depends on the OS thread may be alive
/// in the calling fiber across this call (see [`Builder::migratable`] for what that covers).
/// It must not be called while the thread is panicking (from a destructor during unwinding):
/// std counts panics per thread.
///
/// # Panics
/// When called outside a fiber, or while panicking.
pub unsafe fn migrate(cluster: &Cluster) {
    let here = runtime::current_cluster();
    let me = current_fiber_ptr();
    assert!(!me.is_null(), "weft::migrate called outside a fiber");
    if here.is_some_and(|h| std::sync::Arc::ptr_eq(&h, &cluster.shared)) {
        return;
    }
    assert!(
        !std::thread::panicking(),
        "weft::migrate called while panicking: unwinding must end on the thread it began on"
    );
    // SAFETY: `me` is the running fiber and we are on its stack.
    unsafe { suspend(me, Suspend::Migrate(cluster.shared.clone())) };
}

/// Spawns a fiber that may be resumed on any processor of its cluster after it started
/// (see [`Builder::migratable`]). Panics where [`spawn`] does.
///
/// # Safety
///
/// As for [`Builder::migratable`]: nothing thread-bound alive across the fiber's blocking
/// calls.
pub unsafe fn spawn_migratable<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    // SAFETY: forwarded from the caller.
    unsafe { Builder::new().migratable() }
        .spawn(f)
        .unwrap_or_else(|e| panic!("weft: cannot spawn a fiber: {e}"))
}

/// Where a fiber leaves its result for the one who joins it.
struct Packet<T> {
    state: Mutex<PacketState<T>>,
    /// Set (under the lock) once `result` is filled; read without it by `is_finished`.
    done: AtomicBool,
}

struct PacketState<T> {
    result: Option<std::thread::Result<T>>,
    waiter: Option<Unparker>,
}

impl<T> Packet<T> {
    fn complete(&self, result: std::thread::Result<T>) {
        let waiter = {
            let mut state = self.state.lock().recover();
            state.result = Some(result);
            self.done.store(true, Ordering::Release);
            state.waiter.take()
        };
        if let Some(w) = waiter {
            w.unpark();
        }
    }
}

/// Owns the right to join a fiber. Dropping it detaches the fiber.
pub struct JoinHandle<T> {
    packet: Arc<Packet<T>>,
    fiber: FiberRef,
}

impl<T> JoinHandle<T> {
    /// Strong counts of the fiber's record (tests check that waits give back what they take).
    #[cfg(test)]
    pub(crate) fn fiber_strong_count(&self) -> usize {
        Arc::strong_count(&self.fiber.0)
    }

    /// Waits for the fiber to finish and returns its value, or its panic.
    ///
    /// Works from a fiber (which parks) and from a plain OS thread (which blocks).
    pub fn join(self) -> Result<T, JoinError> {
        loop {
            {
                let mut state = self.packet.state.lock().recover();
                if let Some(result) = state.result.take() {
                    return result.map_err(JoinError::Panicked);
                }
                state.waiter = Some(current_unparker());
            }
            if park(None) == Parked::Cancelled {
                return Err(JoinError::Cancelled);
            }
        }
    }

    /// Whether the fiber has finished (so `join` will not wait).
    pub fn is_finished(&self) -> bool {
        self.packet.done.load(Ordering::Acquire)
    }

    /// Asks the fiber to stop: its current or next blocking point returns an error
    /// ([`crate::Cancelled`], or an I/O error of that kind). Cancellation is cooperative and
    /// sticky; the fiber decides how to wind down and what to return.
    pub fn cancel(&self) {
        self.fiber.0.cancelled.store(true, Ordering::Release);
        self.fiber.unpark();
    }

    /// The fiber's id.
    pub fn id(&self) -> u64 {
        self.fiber.0.id
    }

    /// The fiber's name, if it was given one.
    pub fn name(&self) -> Option<&str> {
        self.fiber.0.name.as_deref()
    }
}

impl<T> std::fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinHandle")
            .field("id", &self.id())
            .field("name", &self.name())
            .field("finished", &self.is_finished())
            .finish()
    }
}

/// Why [`JoinHandle::join`] returned no value.
pub enum JoinError {
    /// The fiber panicked; here is the payload.
    Panicked(Box<dyn Any + Send + 'static>),
    /// The fiber calling `join` was cancelled before the joined fiber finished (the joined
    /// fiber keeps running, detached).
    Cancelled,
}

impl JoinError {
    /// Whether the fiber panicked.
    pub fn is_panic(&self) -> bool {
        matches!(self, JoinError::Panicked(_))
    }

    /// The panic message, when the payload is a string.
    pub fn panic_message(&self) -> Option<&str> {
        match self {
            JoinError::Panicked(p) => p
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| p.downcast_ref::<String>().map(String::as_str)),
            JoinError::Cancelled => None,
        }
    }
}

impl std::fmt::Debug for JoinError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JoinError::Panicked(_) => write!(f, "Panicked({:?})", self.panic_message()),
            JoinError::Cancelled => f.write_str("Cancelled"),
        }
    }
}

impl std::fmt::Display for JoinError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JoinError::Panicked(_) => match self.panic_message() {
                Some(m) => write!(f, "the fiber panicked: {m}"),
                None => f.write_str("the fiber panicked"),
            },
            JoinError::Cancelled => f.write_str("the joining fiber was cancelled"),
        }
    }
}

impl std::error::Error for JoinError {}
