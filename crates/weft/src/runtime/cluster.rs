//! Clusters: a set of processors sharing one scheduling policy and one yield queue.
//!
//! Clusters are how schedulers compose: an accept loop on one cluster, CPU-heavy work on another,
//! pipeline stages joined by bounded channels. A fiber belongs to one cluster at a time and can
//! move with [`crate::migrate`].
//!
//! Lifetime: a [`Cluster`] value is a counted owner handle. When the last one is dropped (or
//! [`Cluster::shutdown`] is called) the processors finish every runnable fiber and exit; fibers
//! still parked then are abandoned (their stacks are leaked, never reused). The default cluster,
//! used by [`crate::spawn`] outside any cluster, lives as long as the process.

use crate::loom::{AtomicBool, AtomicUsize, Ordering, StaticAtomicU64};
use std::io;
use std::sync::{mpsc, Arc, Barrier, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use super::home::HomeInbox;
use super::idle::Idle;
use super::processor::{self, Processor, Started};
use super::sched_stats::{self, ProcessorStats, SchedStats};
use super::yield_queue::{self, YieldShared};
use crate::fiber::core::{Scheduler, Task};
use crate::fiber::stack;
use crate::io::driver::{keep_tick, Waker};
use crate::io::IoBackend;
use crate::poison::Recover;
use crate::sched::{self, Policy};

static NEXT_CLUSTER_ID: StaticAtomicU64 = StaticAtomicU64::new(1);

/// The part of a cluster its processors and fibers share.
pub(crate) struct ClusterShared {
    pub(crate) id: u64,
    pub(crate) name: Arc<str>,
    pub(crate) policy: Arc<dyn Policy>,
    /// Migratable fibers that called `yield_now`: one shared FIFO reached in batches (see
    /// `yield_queue`).
    pub(crate) yielded: YieldShared,
    pub(crate) idle: Idle,
    /// One per processor: wake-ups of its started fibers made on other threads (see `home`).
    pub(crate) inboxes: Box<[HomeInbox]>,
    /// One per processor, for waking it from its driver's sleep; made before any processor
    /// runs.
    pub(crate) wakers: Vec<Arc<Waker>>,
    /// The I/O backend its processors' drivers use.
    pub(crate) io: IoBackend,
    /// Stack size for fibers spawned here without their own.
    pub(crate) stack_size: usize,
    /// The longest an idle processor polls its driver before it sleeps (`idle_poll`), in
    /// nanoseconds; 0: never.
    pub(crate) idle_poll_ns: u64,
    /// The period of each processor's tick keeper (`keep_tick`); zero: none.
    pub(crate) keep_tick: Duration,
    pub(crate) processors: usize,
    stopping: AtomicBool,
    /// One per processor when scheduling statistics are on (see `sched_stats`).
    pub(crate) stats: Option<Box<[ProcessorStats]>>,
    handles: Mutex<Vec<JoinHandle<()>>>,
    /// Live `Cluster` handles; the last one to go stops the processors.
    owners: AtomicUsize,
}

impl ClusterShared {
    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Queues work from outside the cluster's processors.
    pub(crate) fn push_remote(&self, task: Task) {
        // Not queued by one of this cluster's processors: no round to count from (the one
        // that takes it orders it by the round it takes it in, `Processor::next_task`).
        task.0.ready_round.store(0, Ordering::Relaxed);
        if self.stats.is_some() {
            task.0.queued_round.store(0, Ordering::Relaxed);
            task.0
                .queued_ns
                .store(sched_stats::now_ns(), Ordering::Relaxed);
        }
        self.policy.push_remote(task);
        self.idle.notify_work(&self.wakers);
    }

    /// Queues a started fiber bound to processor `home` from any thread but that processor's,
    /// and wakes it if it sleeps.
    pub(crate) fn push_home(&self, home: usize, task: Task) {
        // Ordered by the round its processor takes it from the inbox in
        // (`HomeQueue::take_inbox`); counted from the ns clock only.
        if self.stats.is_some() {
            task.0.queued_round.store(0, Ordering::Relaxed);
            task.0
                .queued_ns
                .store(sched_stats::now_ns(), Ordering::Relaxed);
        }
        if self.inboxes[home].push(task) {
            // It registered asleep and this push took the flag: nobody else wakes it.
            self.wakers[home].wake();
        }
    }

    pub(crate) fn notify_work(&self) {
        if self.processors > 1 {
            self.idle.notify_work(&self.wakers);
        }
    }

    /// Called by one of this cluster's processors after it queued work on itself: wakes a
    /// sleeper only if the work is where a sleeper could take it (see `Idle::notify_work_if`).
    pub(crate) fn notify_local_work(&self) {
        if self.processors > 1 {
            self.idle.notify_work_if(&self.wakers, || self.has_work());
        }
    }

    /// Whether any processor could find work in a shared place.
    pub(crate) fn has_work(&self) -> bool {
        self.yielded.has_work() || self.policy.has_work()
    }

    fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        self.idle.wake_all(&self.wakers);
        let on_own_processor = {
            let p = processor::current();
            // SAFETY: `current` is this thread's live processor or null.
            !p.is_null() && unsafe { &*p }.cluster.id == self.id
        };
        if !on_own_processor {
            let handles = std::mem::take(&mut *self.handles.lock().recover());
            for h in handles {
                let _ = h.join();
            }
        }
    }
}

/// The cluster as the fiber layer sees it (the type of a fiber record's `cluster`).
impl Scheduler for ClusterShared {
    fn push_home(&self, home: usize, task: Task) {
        ClusterShared::push_home(self, home, task);
    }

    fn push_remote(&self, task: Task) {
        ClusterShared::push_remote(self, task);
    }
}

/// A handle to a cluster of processors. Clone it freely; see the module docs for its lifetime.
pub struct Cluster {
    pub(crate) shared: Arc<ClusterShared>,
}

impl Cluster {
    /// Starts describing a cluster.
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder::default()
    }

    /// The cluster the calling fiber runs on, or `None` outside any fiber or processor.
    pub fn current() -> Option<Cluster> {
        let p = processor::current();
        if p.is_null() {
            return None;
        }
        // SAFETY: a non-null `current` is this thread's live processor.
        let shared = unsafe { (*p).cluster.clone() };
        Some(Cluster::from_shared(shared))
    }

    pub(crate) fn from_shared(shared: Arc<ClusterShared>) -> Cluster {
        shared.owners.fetch_add(1, Ordering::Relaxed);
        Cluster { shared }
    }

    /// Spawns a fiber on this cluster. Panics where [`crate::spawn`] does.
    pub fn spawn<F, T>(&self, f: F) -> super::spawn::JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        super::spawn::Builder::new()
            .cluster(self)
            .spawn(f)
            .unwrap_or_else(|e| panic!("weft: cannot spawn a fiber: {e}"))
    }

    /// The cluster's name (processor threads are named `weft-<name>-<index>`).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// How many processors (OS threads) it has.
    pub fn processors(&self) -> usize {
        self.shared.processors
    }

    /// The name of its scheduling policy.
    pub fn scheduler(&self) -> &'static str {
        self.shared.policy.name()
    }

    /// The I/O backend its processors use (after any fallback from io_uring to epoll).
    pub fn io_backend(&self) -> IoBackend {
        self.shared.io
    }

    /// The cluster's scheduling statistics so far, merged over its processors, or `None` when
    /// they are off ([`ClusterBuilder::sched_stats`], `WEFT_SCHED_STATS=1`).
    pub fn sched_stats(&self) -> Option<SchedStats> {
        let per = self.shared.stats.as_ref()?;
        let mut all = SchedStats::default();
        for p in per.iter() {
            all.merge(&p.snapshot());
        }
        Some(all)
    }

    /// Stops the processors once every runnable fiber has run, and waits for them (unless called
    /// from one of them). Parked fibers are abandoned.
    pub fn shutdown(self) {
        self.shared.stop();
    }
}

impl Clone for Cluster {
    fn clone(&self) -> Self {
        Cluster::from_shared(self.shared.clone())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.shared.owners.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.shared.stop();
        }
    }
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("name", &self.shared.name)
            .field("processors", &self.shared.processors)
            .field("scheduler", &self.shared.policy.name())
            .field("io", &self.shared.io)
            .finish()
    }
}

enum PolicyChoice {
    Named(String),
    Given(Arc<dyn Policy>),
}

/// Describes a cluster before it starts: [`Cluster::builder`].
pub struct ClusterBuilder {
    name: String,
    processors: Option<usize>,
    policy: PolicyChoice,
    stack_size: usize,
    io: Option<IoBackend>,
    sched_stats: bool,
    idle_poll: Duration,
    keep_tick: Duration,
}

impl Default for ClusterBuilder {
    fn default() -> Self {
        ClusterBuilder {
            name: "cluster".to_owned(),
            processors: None,
            policy: PolicyChoice::Named(sched::DEFAULT_POLICY.to_owned()),
            stack_size: stack::DEFAULT_STACK_SIZE,
            io: None,
            sched_stats: false,
            idle_poll: super::idle_poll::DEFAULT_MAX,
            keep_tick: keep_tick::DEFAULT_PERIOD,
        }
    }
}

impl ClusterBuilder {
    /// Names the cluster (default `"cluster"`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// How many processors (default: the number of CPUs this process may use).
    pub fn processors(mut self, n: usize) -> Self {
        self.processors = Some(n);
        self
    }

    /// A built-in scheduling policy by name (see [`crate::sched::POLICIES`]).
    pub fn scheduler(mut self, name: impl Into<String>) -> Self {
        self.policy = PolicyChoice::Named(name.into());
        self
    }

    /// A policy built by the caller; it must have been built for this many processors.
    pub fn policy(mut self, policy: Arc<dyn Policy>) -> Self {
        self.policy = PolicyChoice::Given(policy);
        self
    }

    /// Default stack size of fibers spawned on this cluster (default 256 KiB).
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = bytes;
        self
    }

    /// The I/O backend (default: `WEFT_IO`, else io_uring, falling back to epoll when io_uring
    /// is unavailable; see [`crate::io`]).
    pub fn io(mut self, backend: IoBackend) -> Self {
        self.io = Some(backend);
        self
    }

    /// Keeps scheduling statistics ([`Cluster::sched_stats`]): how long runnable fibers wait
    /// (in rounds and nanoseconds), how long they run, how often completions are reaped. Also
    /// on for every cluster when `WEFT_SCHED_STATS=1`, and then each processor prints its
    /// figures to standard error when it stops. Costs a few clock reads per scheduled fiber.
    pub fn sched_stats(mut self, on: bool) -> Self {
        self.sched_stats = on;
        self
    }

    /// Lets an idle processor poll its completion queue for up to `max` before it sleeps
    /// (default [`crate::DEFAULT_IDLE_POLL`], zero: never). A request arriving meanwhile is taken without the
    /// inter-processor interrupt and wake-up that a sleeping thread needs, which on a virtual
    /// machine can be most of a short request's latency; the processor spends the CPU it
    /// polls. It polls only while at least half of its recent idle periods (about 16) ended
    /// within `max`, so a lightly loaded processor sleeps at once, and a processor that slept
    /// less than 10 % of the last 10 ms does not poll. io_uring only (epoll would need a
    /// syscall per look); capped at [`crate::MAX_IDLE_POLL`] (1 ms).
    pub fn idle_poll(mut self, max: Duration) -> Self {
        self.idle_poll = max.min(super::idle_poll::MAX_MAX);
        self
    }

    /// While a processor is serving, it keeps a timer armed whenever it sleeps, due at the
    /// kernel's next tick or `period` from now if that is sooner (default 4 ms: the next tick
    /// at `HZ` 250 and up; zero turns it off), so that a tickless kernel keeps the CPU's tick
    /// running and the wake-up that ends the sleep does not restart it. Restarting the tick
    /// reprograms the CPU's timer device, which on a virtual machine traps to the hypervisor:
    /// on the development VM that was 4–5 µs of every request that found the server asleep.
    /// Due with the tick, the timer is not the CPU's earliest, so arming it reprograms nothing
    /// and it expires in the tick's interrupt; a shorter `period` (1 ms was the first default)
    /// makes it the earliest timer, with a reprogram and an interrupt of its own each period.
    /// The timer is never cancelled, only left to expire, and after 4 periods in which nothing
    /// else happened the processor stops arming it: an idle processor takes no wake-ups for
    /// it. Capped at 10 ms (beyond one tick it keeps nothing running). Both backends (io_uring:
    /// a `TIMEOUT` in the ring; epoll: a timerfd).
    pub fn keep_tick(mut self, period: Duration) -> Self {
        self.keep_tick = period.min(keep_tick::MAX_PERIOD);
        self
    }

    /// Starts the processors.
    pub fn build(self) -> io::Result<Cluster> {
        super::install_hooks();
        let processors = match self.processors {
            Some(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a cluster needs at least one processor",
                ))
            }
            Some(n) => n,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        stack::checked_size(self.stack_size)?;
        let stack_size = self.stack_size.next_multiple_of(stack::page_size());
        let policy = match self.policy {
            PolicyChoice::Named(name) => sched::by_name(&name, processors)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?,
            PolicyChoice::Given(p) => p,
        };
        let (yielded, yield_locals) = yield_queue::new(processors);
        let io = crate::io::resolve(self.io)?;
        let wakers = (0..processors)
            .map(|_| Waker::new(io).map(Arc::new))
            .collect::<io::Result<Vec<_>>>()
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot create a processor's eventfd: {e}"),
                )
            })?;
        let shared = Arc::new(ClusterShared {
            id: NEXT_CLUSTER_ID.fetch_add(1, Ordering::Relaxed),
            name: self.name.into(),
            policy: policy.clone(),
            yielded,
            idle: Idle::new(processors),
            inboxes: (0..processors).map(|_| HomeInbox::default()).collect(),
            wakers,
            io,
            stack_size,
            idle_poll_ns: self.idle_poll.as_nanos() as u64,
            keep_tick: self.keep_tick,
            processors,
            stopping: AtomicBool::new(false),
            stats: (self.sched_stats || sched_stats::env_enabled())
                .then(|| (0..processors).map(|_| ProcessorStats::new()).collect()),
            handles: Mutex::new(Vec::new()),
            owners: AtomicUsize::new(1),
        });
        let start = Arc::new(Barrier::new(processors + 1));
        let (started_tx, started_rx) = mpsc::channel();
        let mut handles = Vec::with_capacity(processors);
        for (index, yields) in yield_locals.into_iter().enumerate() {
            let policy = policy.clone();
            let cluster = shared.clone();
            let gate = start.clone();
            let started = started_tx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("weft-{}-{index}", shared.name))
                .spawn(move || {
                    gate.wait();
                    // The processor's half of the policy is allocated by its own thread, away
                    // from the other processors' halves: built by the building thread they came
                    // out of the allocator side by side, and each processor writes its half
                    // every round (LIFO slot, counters). No effect was measurable on this
                    // 2-vCPU host; it costs nothing.
                    let local = policy.local(index);
                    Processor::run(index, cluster, local, yields, started);
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    // The threads already started are waiting on the barrier: let them go and
                    // stop them.
                    shared.stopping.store(true, Ordering::Release);
                    for _ in handles.len()..processors {
                        std::thread::spawn({
                            let start = start.clone();
                            move || {
                                start.wait();
                            }
                        });
                    }
                    start.wait();
                    for h in handles {
                        let _ = h.join();
                    }
                    return Err(io::Error::new(
                        e.kind(),
                        format!("cannot start processor thread {index}: {e}"),
                    ));
                }
            }
        }
        drop(started_tx);
        *shared.handles.lock().recover() = handles;
        start.wait();
        // Every processor reports whether its I/O driver started (a ring or an epoll needs a
        // descriptor, and the process may be at its limit). One that failed has returned; the
        // others are stopped, so the caller gets the error instead of a cluster that never runs
        // what is queued on the missing processor.
        let mut failed = None;
        for _ in 0..processors {
            match started_rx.recv() {
                Ok(Started { driver: Ok(()), .. }) => {}
                Ok(Started {
                    index,
                    driver: Err(e),
                }) => {
                    failed.get_or_insert_with(|| {
                        io::Error::new(
                            e.kind(),
                            format!("processor {index} cannot start its {io} driver: {e}"),
                        )
                    });
                }
                Err(_) => {
                    failed.get_or_insert_with(|| {
                        io::Error::other("a processor thread exited before it started")
                    });
                    break;
                }
            }
        }
        if let Some(e) = failed {
            shared.stop();
            return Err(e);
        }
        Ok(Cluster { shared })
    }
}

static DEFAULT: OnceLock<Cluster> = OnceLock::new();

/// The cluster `spawn` uses outside any cluster, started on first use. Its size and policy come
/// from `WEFT_PROCESSORS` and `WEFT_SCHEDULER` when set.
pub fn default_cluster() -> &'static Cluster {
    DEFAULT.get_or_init(|| {
        let mut builder = Cluster::builder().name("default");
        if let Ok(n) = std::env::var("WEFT_PROCESSORS") {
            match n.parse::<usize>() {
                Ok(n) if n > 0 => builder = builder.processors(n),
                _ => panic!("weft: WEFT_PROCESSORS={n:?} is not a positive number"),
            }
        }
        // WEFT_IO is read by `build` for every cluster without an explicit backend.
        if let Ok(name) = std::env::var("WEFT_SCHEDULER") {
            builder = builder.scheduler(name);
        }
        builder
            .build()
            .unwrap_or_else(|e| panic!("weft: cannot start the default cluster: {e}"))
    })
}
