//! A processor: one OS thread running fibers of one cluster.
//!
//! The scheduling loop, each round: fire due timers (every few rounds), take the next task
//! (the cluster's yield queue every `YIELD_CHECK_INTERVAL` rounds, else the policy's local queue,
//! then the yield queue), and resume it until it switches back. With nothing to run it searches
//! (steals) for a while, then sleeps through the [`super::idle`] protocol.
//!
//! I/O: each processor owns an I/O driver ([`crate::io::driver`]). Every round it reaps
//! completions without blocking (cheap for io_uring: two loads, and the kernel's pending
//! completion work is run every few rounds; epoll looks every few rounds), waking the fibers
//! onto this processor's queue; when the run queue empties it submits
//! the batched SQEs and reaps again; and it sleeps *in* the driver (`io_uring_enter` /
//! `epoll_wait`), bounded by its earliest timer and ended early by its eventfd waker; while
//! it serves, the driver keeps the CPU's tick running across those sleeps (`keep_tick`).
//! A cluster built with `idle_poll` first polls its rings for a while (`idle_poll`).
//!
//! Invariants:
//! - the context's processor slot (`ctx`) points at this thread's `Processor` for the thread's
//!   whole life and is only read through the non-inlined [`current`], so a fiber that moved
//!   threads never sees the old one; the driver slot points at its driver for as long;
//! - no `RefCell` borrow is held across `resume` (the fiber may call back into the processor);
//! - the processor touches a fiber's coroutine only while it holds the fiber's `Task`.

use crate::loom::Ordering;
use std::cell::{Cell, RefCell};
use std::io;
use std::ptr;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Instant;

use corosensei::CoroutineResult;

use super::cluster::ClusterShared;
use super::home::HomeQueue;
use super::idle_poll::IdlePoll;
use super::sched_stats::{self, ProcessorStats};
use super::timer::TimerHeap;
use super::yield_queue::YieldLocal;
use crate::ctx;
use crate::fiber::core::{Fiber, FiberRef, Suspend, Task};
use crate::fiber::park::finish_park;
use crate::fiber::stack::{self, FiberStack};
use crate::io::driver::{Driver, PollMode};
use crate::sched::{LocalQueue, Origin, OLDEST_CHECK_INTERVAL};

/// Every this many rounds the yield queue is served before the local queue.
const YIELD_CHECK_INTERVAL: u64 = 31;
/// Every this many rounds due timers are fired even when there is work.
const TIMER_CHECK_INTERVAL: u64 = 16;
/// Rounds of stealing before an idle processor goes to sleep.
const SEARCH_ROUNDS: u32 = 64;

/// What a processor thread reports once it has tried to build its I/O driver.
pub(crate) struct Started {
    pub(crate) index: usize,
    pub(crate) driver: io::Result<()>,
}

pub(crate) struct Processor {
    pub(crate) index: usize,
    pub(crate) cluster: Arc<ClusterShared>,
    local: RefCell<Box<dyn LocalQueue>>,
    /// This processor's started fibers (see `home`): never in `local`, never stolen.
    home: RefCell<HomeQueue>,
    /// This processor's side of the cluster's yield queue (its outbox and batch).
    yields: RefCell<YieldLocal>,
    timers: RefCell<TimerHeap>,
    /// Free stacks of the cluster's default size, kept here to spare the global pool's lock.
    pub(crate) stacks: RefCell<Vec<FiberStack>>,
    tick: Cell<u64>,
    /// Scratch space for fibers whose timers are due.
    due: RefCell<Vec<FiberRef>>,
    /// The clock reading the latest [`Processor::fire_timers`] took (`None` when it had no
    /// timer to check): the sleep that follows it in the same out-of-work pass judges its
    /// timeout by it instead of reading the clock again.
    clock: Cell<Option<Instant>>,
    /// This processor's I/O driver: where its fibers' operations go and where it sleeps.
    driver: Driver,
    /// When this processor last looked at its driver (`sched_stats` clock), while statistics
    /// are on.
    last_reap_ns: Cell<u64>,
    /// The policy's next task, taken out to be compared with the home queue's oldest and
    /// run when it is the older (see [`Processor::next_task`]); at most one, and only while
    /// the home queue had work when it was taken.
    held: Cell<Option<Held>>,
    /// How long it polls its driver before sleeping (`idle_poll`).
    idle_poll: RefCell<IdlePoll>,
    /// When the current idle period began (`sched_stats` clock): the start of its poll, or
    /// of its sleep.
    idle_since_ns: Cell<u64>,
}

/// A task taken from the policy, with the round stamp it is compared by: its own when this
/// processor queued it, else the round it was taken in (a stolen or remotely queued task's
/// stamp counts another processor's rounds, or none).
struct Held {
    task: Task,
    stamp: u64,
}

/// Round stamps keep the round in their low bits and the processor (index + 1) above them.
const ROUND_BITS: u32 = 48;

/// The processor running on this thread, or null (the context's processor slot, which only
/// [`Processor::run`] sets). Never inlined: see the module invariants.
#[inline(never)]
pub(crate) fn current() -> *const Processor {
    ctx::processor().cast::<Processor>()
}

impl Processor {
    /// The body of a processor thread; returns when the cluster stops and no work is left.
    ///
    /// It first builds its I/O driver and reports the outcome on `started`; if that fails it
    /// returns at once, and `ClusterBuilder::build` stops the others and returns the error.
    pub(crate) fn run(
        index: usize,
        cluster: Arc<ClusterShared>,
        local: Box<dyn LocalQueue>,
        yields: YieldLocal,
        started: Sender<Started>,
    ) {
        crate::fiber::overflow::install_handler();
        let _alt_stack = crate::fiber::overflow::AltStack::ensure();
        // Built here, not in `ClusterBuilder::build`: a single-issuer ring belongs to the thread
        // that creates it.
        let driver = match Driver::new(cluster.io, cluster.wakers[index].clone(), cluster.keep_tick)
        {
            Ok(driver) => driver,
            Err(e) => {
                let _ = started.send(Started {
                    index,
                    driver: Err(e),
                });
                return;
            }
        };
        let _ = started.send(Started {
            index,
            driver: Ok(()),
        });
        drop(started);
        // Only io_uring can be polled without a syscall per look: epoll processors never poll.
        let poll_max_ns = if driver.can_poll_idle() {
            cluster.idle_poll_ns
        } else {
            0
        };
        let idle_poll = IdlePoll::new(poll_max_ns, sched_stats::now_ns());
        let processor = Processor {
            index,
            cluster,
            local: RefCell::new(local),
            home: RefCell::new(HomeQueue::default()),
            yields: RefCell::new(yields),
            timers: RefCell::new(TimerHeap::default()),
            stacks: RefCell::new(Vec::new()),
            tick: Cell::new(0),
            due: RefCell::new(Vec::new()),
            clock: Cell::new(None),
            driver,
            last_reap_ns: Cell::new(0),
            idle_poll: RefCell::new(idle_poll),
            idle_since_ns: Cell::new(0),
            held: Cell::new(None),
        };
        ctx::set_processor(
            ptr::addr_of!(processor).cast(),
            ptr::addr_of!(processor.driver).cast(),
        );
        processor.main_loop();
        ctx::set_processor(ptr::null(), ptr::null());
        if let Some(stats) = processor.stats() {
            if sched_stats::env_enabled() {
                eprintln!(
                    "weft sched stats: cluster '{}' processor {index}: {}",
                    processor.cluster.name,
                    stats.snapshot().summary()
                );
            }
        }
    }

    fn main_loop(&self) {
        loop {
            let tick = self.tick.get().wrapping_add(1);
            self.tick.set(tick);
            if tick % TIMER_CHECK_INTERVAL == 0 {
                self.fire_timers();
            }
            self.note_reap();
            self.driver.poll(tick, PollMode::Busy);
            if let Some(task) = self.next_task(tick) {
                self.run_task(task);
                continue;
            }
            let fired = self.fire_timers();
            // Out of work: reap what is ready. A processor that will search submits the batched
            // operations first; a lone one (nobody to steal from) goes straight to sleep and
            // leaves them to the sleeping enter, one syscall instead of two.
            let mode = if self.cluster.idle.processors() == 1 {
                PollMode::BeforePark
            } else {
                PollMode::Idle
            };
            let woken = self.driver.poll(tick, mode);
            // The look above found the queues empty: only the timers just fired, the reap,
            // or a push to the inbox can have given them a task since. (Should anything else
            // have, `sleep` sees it in its own check and returns to this loop.)
            if fired + woken > 0 || !self.cluster.inboxes[self.index].is_empty() {
                if let Some(task) = self.next_task(tick) {
                    self.run_task(task);
                    continue;
                }
            }
            if let Some(task) = self.search() {
                self.run_task(task);
                continue;
            }
            if self.cluster.is_stopping()
                && !self.cluster.has_work()
                && self.cluster.inboxes[self.index].is_empty()
            {
                return;
            }
            if self.poll_idle() {
                continue;
            }
            self.sleep();
        }
    }

    /// Before sleeping, polls the driver for up to the idle-poll window (`idle_poll`); true
    /// when work came meanwhile (a completion, a push to the inbox, cluster work, a stop).
    fn poll_idle(&self) -> bool {
        let mut poll = self.idle_poll.borrow_mut();
        if !poll.enabled() {
            return false;
        }
        let start = sched_stats::now_ns();
        self.idle_since_ns.set(start);
        let limit = poll.limit_ns(start);
        drop(poll);
        if limit == 0 {
            return false;
        }
        // The poll below may outlast the timers' clock reading: the sleep reads its own.
        self.clock.set(None);
        // Afterwards the kernel has no completion work left over that the rings do not show.
        if self.driver.reap_all() > 0 {
            self.idle_poll.borrow_mut().found_while_polling();
            return true;
        }
        let mut end = start + limit;
        if let Some(d) = self.timers.borrow().next_deadline() {
            let left = d.saturating_duration_since(Instant::now()).as_nanos() as u64;
            end = end.min(start + left);
        }
        let inbox = &self.cluster.inboxes[self.index];
        let mut looks = 0u32;
        loop {
            if self.driver.ready_now()
                || !inbox.is_empty()
                || self.cluster.has_work()
                || self.cluster.is_stopping()
            {
                self.idle_poll.borrow_mut().found_while_polling();
                return true;
            }
            looks = looks.wrapping_add(1);
            if looks % 16 == 0 && sched_stats::now_ns() >= end {
                return false;
            }
            std::hint::spin_loop();
        }
    }

    fn next_task(&self, tick: u64) -> Option<Task> {
        let mut home = self.home.borrow_mut();
        home.take_inbox(&self.cluster.inboxes[self.index], self.round_stamp(tick));
        if tick % YIELD_CHECK_INTERVAL == 0 {
            if let Some(task) = self.pop_yielded(&mut home) {
                return Some(task);
            }
        }
        let mut local = self.local.borrow_mut();
        let held = self.held.take();
        // Every few rounds the policy's oldest task goes first, whatever its order; otherwise,
        // while both the home queue and the policy have work, the policy's next task when it
        // was queued before the home queue's oldest, else the two take turns: the
        // bounded-unfairness invariant (`sched::wait_rounds_bound`, `home` module docs). The
        // policy's next task is taken out to be compared and kept until it runs.
        let task = if tick % OLDEST_CHECK_INTERVAL == 0 {
            let oldest = local.pop_oldest(tick);
            if oldest.is_some() {
                self.held.set(held);
                oldest
            } else {
                held.map(|h| h.task).or_else(|| home.pop_oldest())
            }
        } else if home.has_runnable() {
            // The home queue's oldest is read only when the policy has a task to compare.
            match held.or_else(|| local.pop(tick).map(|task| self.hold(task, tick))) {
                Some(h)
                    if home.oldest_stamp().is_none_or(|oldest| h.stamp <= oldest)
                        || !home.take_turn() =>
                {
                    Some(h.task)
                }
                other => {
                    self.held.set(other);
                    home.pop()
                }
            }
        } else {
            held.map(|h| h.task).or_else(|| local.pop(tick))
        };
        drop(local);
        task.or_else(|| self.pop_yielded(&mut home))
    }

    /// This processor's round stamp for round `tick` (see [`ROUND_BITS`]).
    #[inline]
    fn round_stamp(&self, tick: u64) -> u64 {
        ((self.index as u64 + 1) << ROUND_BITS) | (tick & ((1 << ROUND_BITS) - 1))
    }

    /// `task`, taken from the policy in round `tick`, with the stamp it is compared by.
    #[inline]
    fn hold(&self, task: Task, tick: u64) -> Held {
        let queued = task.0.ready_round.load(Ordering::Relaxed);
        let stamp = if queued >> ROUND_BITS == self.index as u64 + 1 {
            queued
        } else {
            self.round_stamp(tick)
        };
        Held { task, stamp }
    }

    /// Steals for a while; returns a task, or `None` when it is time to sleep.
    fn search(&self) -> Option<Task> {
        let idle = &self.cluster.idle;
        if idle.processors() == 1 {
            // Nobody to steal from and nobody else to produce work: spinning only burns the
            // CPU a sleep would save (remote pushes and completions wake the sleeper).
            return None;
        }
        if !idle.try_start_search() {
            return self.local.borrow_mut().steal();
        }
        let mut found = None;
        for round in 0..SEARCH_ROUNDS {
            let stolen = self.local.borrow_mut().steal();
            let stolen = stolen
                .or_else(|| self.pop_yielded(&mut self.home.borrow_mut()))
                .or_else(|| self.yields.borrow_mut().steal(&self.cluster.yielded));
            if let Some(task) = stolen {
                found = Some(task);
                break;
            }
            if round % 8 == 7 {
                self.fire_timers();
                self.driver.poll(self.tick.get(), PollMode::Busy);
                let task = self.next_task(self.tick.get());
                if task.is_some() {
                    found = task;
                    break;
                }
            }
            std::hint::spin_loop();
        }
        if idle.end_search() && found.is_some() && self.cluster.has_work() {
            // The last searcher found work and more is waiting: get someone else looking.
            self.cluster.notify_work();
        }
        found
    }

    fn sleep(&self) {
        let idle = &self.cluster.idle;
        let inbox = &self.cluster.inboxes[self.index];
        idle.register_sleep(self.index);
        // The inbox has its own handshake: a push after this reports the sleep to its pusher,
        // which wakes this processor.
        let inbox_work = inbox.begin_sleep();
        // One clock reading for the due check and the sleep's timeout: the one `fire_timers`
        // took in this out-of-work pass, if any. Since then the processor only reaped without
        // blocking and looked at its queues (or polled, which drops the reading), so the
        // reading is a few microseconds old at most, and a timeout judged by it ends that
        // much late, never early.
        let timeout = self.timers.borrow().next_deadline().map(|d| {
            let now = self.clock.take().unwrap_or_else(Instant::now);
            d.saturating_duration_since(now)
        });
        let work = inbox_work
            || self.cluster.has_work()
            || !self.local.borrow().is_empty()
            || !self.home.borrow().is_empty()
            || self.cluster.is_stopping()
            || timeout.is_some_and(|t| t.is_zero());
        if work {
            idle.unregister_sleep(self.index);
            inbox.end_sleep();
            // No sleep after all: submit what `PollMode::BeforePark` left for it.
            self.driver.flush();
            return;
        }
        // Blocks in io_uring_enter / epoll_wait until a completion, the waker, or the deadline;
        // submits the batch first and reaps what arrived.
        if self.idle_poll.borrow().enabled() {
            let asleep_ns = sched_stats::now_ns();
            self.driver.park(timeout);
            let awake_ns = sched_stats::now_ns();
            self.idle_poll.borrow_mut().after_sleep(
                awake_ns.saturating_sub(self.idle_since_ns.get()),
                awake_ns - asleep_ns,
            );
        } else {
            self.driver.park(timeout);
        }
        if self.stats().is_some() {
            // Asleep is not late: the next gap starts now.
            self.last_reap_ns.set(sched_stats::now_ns());
        }
        idle.unregister_sleep(self.index);
        inbox.end_sleep();
    }

    /// The oldest yielded fiber: this processor's own started ones first, then the next of
    /// the cluster's yield queue (fibers that may move).
    fn pop_yielded(&self, home: &mut HomeQueue) -> Option<Task> {
        home.pop_yielded()
            .or_else(|| self.yields.borrow_mut().pop(&self.cluster.yielded))
    }

    /// Wakes the fibers whose timers are due; returns how many. Keeps its clock reading in
    /// `clock` for the sleep that may follow.
    fn fire_timers(&self) -> usize {
        if self.timers.borrow().is_empty() {
            self.clock.set(None);
            return 0;
        }
        let now = Instant::now();
        self.clock.set(Some(now));
        let mut due = self.due.borrow_mut();
        self.timers.borrow_mut().expire(now, &mut due);
        let fired = due.len();
        let together = fired > 1;
        for fiber in due.drain(..) {
            fiber.unpark();
        }
        if together {
            // Due in deadline order; the LIFO slot would run the latest of them first.
            self.home.borrow_mut().lifo_to_back();
        }
        fired
    }

    /// This processor's statistics, when the cluster keeps them.
    #[inline]
    fn stats(&self) -> Option<&ProcessorStats> {
        self.cluster.stats.as_ref().map(|s| &s[self.index])
    }

    /// Notes that a task is being queued here: its round stamp, by which `next_task` orders
    /// the home queue and the policy, and (while statistics are on) the time, for the wait
    /// statistics.
    #[inline]
    fn stamp(&self, task: &Task) {
        let round = self.round_stamp(self.tick.get());
        task.0.ready_round.store(round, Ordering::Relaxed);
        if self.stats().is_some() {
            task.0.queued_round.store(round, Ordering::Relaxed);
            task.0
                .queued_ns
                .store(sched_stats::now_ns(), Ordering::Relaxed);
        }
    }

    /// Records how long it has been since the driver was last looked at.
    #[inline]
    fn note_reap(&self) {
        if let Some(stats) = self.stats() {
            let now = sched_stats::now_ns();
            let last = self.last_reap_ns.replace(now);
            if last != 0 {
                stats.record_reap_gap(now - last);
            }
        }
    }

    fn run_task(&self, task: Task) {
        let fiber: &Fiber = &task.0;
        let started_ns = self.stats().map(|stats| {
            let now = sched_stats::now_ns();
            let round = fiber.queued_round.load(Ordering::Relaxed);
            let rounds = (round >> ROUND_BITS == self.index as u64 + 1).then(|| {
                self.tick
                    .get()
                    .wrapping_sub(round & ((1 << ROUND_BITS) - 1))
                    & ((1 << ROUND_BITS) - 1)
            });
            let queued = fiber.queued_ns.load(Ordering::Relaxed);
            stats.record_wait(rounds, now.saturating_sub(queued));
            now
        });
        fiber.placement.starting_on(self.index);
        ctx::set_fiber(Arc::as_ptr(&task.0).cast());
        ctx::refill_op_budget();
        // SAFETY: this processor holds the fiber's only Task, so nobody else touches the
        // coroutine until it is handed on below.
        let coroutine = unsafe { &mut *fiber.coroutine.get() }.coroutine();
        let result = coroutine.resume(());
        ctx::set_fiber(ptr::null());
        if let (Some(stats), Some(started)) = (self.stats(), started_ns) {
            stats.record_run(sched_stats::now_ns().saturating_sub(started), || {
                fiber
                    .name
                    .as_deref()
                    .map_or_else(|| format!("id {}", fiber.id), str::to_owned)
            });
        }
        if matches!(result, CoroutineResult::Yield(_)) {
            fiber.placement.switched_out_on(self.index);
        }
        match result {
            CoroutineResult::Yield(Suspend::Yield) => {
                self.stamp(&task);
                if fiber.placement.home().is_some() {
                    self.home.borrow_mut().push_yielded(task);
                } else {
                    let shared = self.yields.borrow_mut().push(&self.cluster.yielded, task);
                    if shared {
                        // Yields now wait where an idle processor could take them.
                        self.cluster.notify_local_work();
                    }
                }
            }
            CoroutineResult::Yield(Suspend::Park) => {
                let homed = fiber.placement.home().is_some();
                if let Some(task) = finish_park(task) {
                    self.stamp(&task);
                    if homed {
                        self.home.borrow_mut().push(task);
                    } else {
                        self.local.borrow_mut().push(task, Origin::Wake);
                    }
                }
            }
            CoroutineResult::Yield(Suspend::Migrate(to)) => {
                // SAFETY: we hold the fiber's Task and it is switched out: nobody else reads
                // or writes its cluster now.
                unsafe { *fiber.cluster.get() = to.clone() };
                // `migrate` is `unsafe`: the fiber gets a new home where it next runs.
                fiber.placement.unbind();
                to.push_remote(task);
            }
            CoroutineResult::Return(()) => {
                // SAFETY: as above; the coroutine has returned, so its stack is free.
                let coroutine = unsafe { &mut *fiber.coroutine.get() }
                    .take_finished()
                    .expect("a finished fiber had a coroutine");
                let stack = coroutine.into_stack();
                let size_matches = stack.usable_size() == self.cluster.stack_size;
                if size_matches {
                    stack::give_back(stack, Some(&mut self.stacks.borrow_mut()));
                } else {
                    stack::give_back(stack, None);
                }
            }
        }
    }

    /// Queues a started fiber bound to this processor, made runnable here. Nobody else could
    /// take it, so nobody is woken.
    pub(crate) fn push_home(&self, task: Task) {
        self.stamp(&task);
        self.home.borrow_mut().push(task);
    }

    /// Queues a task made runnable on this processor. A spawned fiber is stamped as queued
    /// when its spawner was (so the connections an accept fiber takes in one turn are as old
    /// as the readiness that woke it, not younger than the wake-ups queued while it ran),
    /// when the spawner was queued here; any other task as queued now.
    pub(crate) fn push_local(&self, task: Task, origin: Origin) {
        self.stamp(&task);
        if origin == Origin::Spawn {
            let spawner = crate::fiber::current::with_current(|f| {
                f.map_or(0, |f| f.ready_round.load(Ordering::Relaxed))
            });
            if spawner >> ROUND_BITS == self.index as u64 + 1 {
                task.0.ready_round.store(spawner, Ordering::Relaxed);
            }
        }
        self.local.borrow_mut().push(task, origin);
        self.cluster.notify_local_work();
    }

    /// Arms a timer on this processor (see [`TimerHeap::add`]).
    pub(crate) fn add_timer(&self, deadline: Instant, fiber: FiberRef, generation: u64) {
        self.timers.borrow_mut().add(deadline, fiber, generation)
    }

    /// Entries in this processor's timer heap, stale ones included.
    #[cfg(test)]
    pub(crate) fn timer_entries(&self) -> usize {
        self.timers.borrow().len()
    }
}
