//! The io_uring driver: one ring per processor.
//!
//! ## Ring flags, and why
//! The ring is built with the first of these that the kernel accepts:
//! 1. `SINGLE_ISSUER | DEFER_TASKRUN | TASKRUN_FLAG | SUBMIT_ALL` (Linux 6.1+). Only the
//!    processor's thread ever submits (cancellations from other threads are forwarded to it, see
//!    [`super::DriverShared`]), which is what `SINGLE_ISSUER` promises and lets the kernel drop
//!    its submission lock. `DEFER_TASKRUN` runs completion work only when we ask for events, so
//!    the processor is never interrupted by task-work IPIs in the middle of running fibers; the
//!    completions are reaped at our batching points instead. `TASKRUN_FLAG` sets
//!    `IORING_SQ_TASKRUN` when such work is pending, so the poll is a flag load and
//!    costs a syscall only when there is something to reap. `SUBMIT_ALL` keeps a bad SQE from
//!    stranding the rest of a batch (they belong to other fibers).
//! 2. `COOP_TASKRUN | TASKRUN_FLAG | SUBMIT_ALL` (5.19+): the same batching without the
//!    single-issuer promise.
//! 3. No flags: works everywhere io_uring does.
//!
//! The ring must be created on the processor's own thread: a single-issuer ring belongs to the
//! task that created it, and deferred task work can only be run by that task.
//!
//! ## user_data
//! An operation's SQE carries the address of its [`Completion`] record (8-aligned, on the
//! submitting fiber's stack). Its `ASYNC_CANCEL` carries the same address with bit 0 set, so
//! its completion can acknowledge the cancel. A write-behind send (`io/behind.rs`) carries its
//! slot's address with bit 1 set (`behind::TAG`; the send of a rest the socket could not take
//! at once has bit 2 too, `behind::RESEND_TAG`, and may be linked to a timeout whose
//! `user_data` is `behind::RESEND_TIMEOUT`); nobody waits on it, so its completion wakes
//! a fiber only if one asked to be woken. `WAKER` (`1`) is the `READ` posted on the
//! processor's eventfd, which stays posted while the processor sleeps so another thread ends
//! the sleep by writing the eventfd.
//!
//! ## Batching
//! SQEs are pushed to the ring by fibers and submitted when the processor runs out of runnable
//! fibers, when `SUBMIT_BATCH` are waiting, every `SUBMIT_EVERY_ROUNDS` scheduling rounds, when
//! the submission queue is full, or as part of the sleeping `io_uring_enter`. A processor that
//! goes straight from an empty run queue to sleep ([`PollMode::BeforePark`]) leaves the whole
//! batch to that sleeping enter: one syscall submits, reaps what completed inline, and waits.
//! The batch's write-behind sends complete as that enter submits them (and promptly in any
//! case: `MSG_DONTWAIT`), so while the tick keeper is in flight it waits for one completion
//! more than it holds sends: a reply's own send does not end the sleep it was submitted by
//! (which cost a second enter and a second pass of the processor's loop a request at one
//! request a wake-up). The keeper bounds that sleep: a send the socket took only in part
//! needs a drain to hand its rest back to the ring. Without a keeper in flight the sleep
//! waits for one completion.
//! Completions go the same way: every round reaps what the completion queue holds (loads only),
//! but the kernel's pending completion work (`IORING_SQ_TASKRUN`) is run by an enter only when
//! the run queue empties or on a submission round once the fibers the last drain woke had their
//! turns (`busy_reap_allowed`), so a loaded processor runs the fibers it has and then reaps what
//! completed meanwhile in one enter. An enter that only submits a full batch does not carry
//! `GETEVENTS`: each such enter ran about 40 items of completion work while 16 fibers ran, so
//! after a stall the backlog's receives ran ahead of its replies.

use std::cell::{Cell, OnceCell, RefCell, UnsafeCell};
use std::io;
use std::mem::MaybeUninit;
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use super::keep_tick::{monotonic_now_ns, split_ns, KeepTick};
use super::{DriverShared, PollMode};
use crate::fiber::park::prefetch;
use crate::io::behind;
use crate::io::lend::{self, LendPool};
use crate::io::op::{Completion, ACK};

/// Submission queue entries per ring.
const SQ_ENTRIES: u32 = 256;
/// Completion queue entries per ring: room for many in-flight operations per processor
/// (the kernel buffers overflow beyond that, `IORING_FEAT_NODROP`).
const CQ_ENTRIES: u32 = 4096;
/// Submit once this many SQEs wait, even if fibers are still runnable.
const SUBMIT_BATCH: u32 = 32;
/// Submit at least every this many scheduling rounds, so a processor kept busy by fibers that
/// yield or spawn (its run queue never empties) does not hold a lone SQE back indefinitely.
const SUBMIT_EVERY_ROUNDS: u64 = 16;
/// `IORING_ENTER_GETEVENTS` (`include/uapi/linux/io_uring.h`).
const ENTER_GETEVENTS: u32 = 1;
/// How many completions `drain` takes from the ring at a time (and prefetches ahead).
const DRAIN_BATCH: usize = 32;
/// `user_data` of the eventfd read.
const WAKER: u64 = 1;
/// `user_data` of the `ASYNC_CANCEL` for the eventfd read, when the ring is dropped.
const WAKER_CANCEL: u64 = 3;
/// `user_data` of the tick keeper's `TIMEOUT` ([`super::keep_tick`]).
const KEEPER: u64 = 5;
/// How long dropping a ring waits for its eventfd read to be cancelled.
const DROP_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// One processor's ring.
pub(crate) struct Uring {
    pub(crate) shared: Arc<DriverShared>,
    /// The ring. Borrowed only for short stretches on the owning thread, never across a
    /// fiber switch.
    ring: RefCell<IoUring>,
    /// Where the posted eventfd `READ` writes; boxed so its address is stable.
    wake_buf: Box<UnsafeCell<u64>>,
    /// Whether the eventfd `READ` is in the ring (posted and not completed yet).
    waker_posted: Cell<bool>,
    /// SQEs pushed but not submitted yet.
    unsubmitted: Cell<u32>,
    /// How many of them are write-behind sends ([`behind::TAG`], not the sends of their
    /// rests). Each completes while the enter that submits it runs (`MSG_DONTWAIT`), so the
    /// sleeping enter waits for one completion more than these while the tick keeper is in
    /// flight ([`Uring::park`]).
    sends_unsubmitted: Cell<u32>,
    /// The first round at which a busy processor may run the kernel's pending completion work
    /// again: the round of the last drain plus the fibers it woke ([`busy_reap_allowed`]).
    reap_after: Cell<u64>,
    /// Operations and cancels pushed whose completion has not been reaped (the posted eventfd
    /// read is not counted). While it is 0 and nothing is unsubmitted, a round's `poll` has
    /// nothing to do and returns after one load: compute-bound rounds pay nothing for I/O.
    in_flight: Cell<u32>,
    /// Scratch list for forwarded cancellations.
    cancels: RefCell<Vec<usize>>,
    /// The tick keeper: when to arm its timer.
    keep: KeepTick,
    /// The keeper's expiry (absolute, `CLOCK_MONOTONIC`), where its `TIMEOUT` SQE points: set
    /// just before the SQE is pushed, while no keeper is in flight; the kernel copies it when
    /// the SQE is submitted. Boxed so its address is stable.
    keeper_ts: Box<Cell<types::Timespec>>,
    /// Which setup flags the kernel accepted (for logs and `Debug`).
    pub(crate) flags: &'static str,
    /// The receive buffers this processor lends ([`crate::io::lend`]), made and registered
    /// as the ring's provided buffers ([`lend::BUFFER_GROUP`]) on the first receive that
    /// wants one ([`Uring::lend_pool`]); `None` inside when that failed (kernels before 5.19,
    /// or no memory to map), and receives that want a lent buffer get a heap buffer.
    lend: OnceCell<Option<Arc<LendPool>>>,
}

/// Builds a ring with the best flags the kernel accepts; see the module docs.
pub(crate) fn build_ring() -> io::Result<(IoUring, &'static str)> {
    let mut first_err = None;
    for tier in 0..3 {
        let mut b = IoUring::builder();
        b.setup_cqsize(CQ_ENTRIES);
        let name = match tier {
            0 => {
                b.setup_single_issuer()
                    .setup_defer_taskrun()
                    .setup_taskrun_flag()
                    .setup_submit_all();
                "SINGLE_ISSUER|DEFER_TASKRUN|TASKRUN_FLAG|SUBMIT_ALL"
            }
            1 => {
                b.setup_coop_taskrun()
                    .setup_taskrun_flag()
                    .setup_submit_all();
                "COOP_TASKRUN|TASKRUN_FLAG|SUBMIT_ALL"
            }
            _ => "none",
        };
        match b.build(SQ_ENTRIES) {
            Ok(ring) => {
                if !ring.params().is_feature_ext_arg() {
                    return Err(io::Error::new(
                        io::ErrorKind::Unsupported,
                        "io_uring lacks IORING_FEAT_EXT_ARG (needs Linux 5.11+)",
                    ));
                }
                return Ok((ring, name));
            }
            Err(e) => {
                // EINVAL: flags unknown to this kernel; try fewer. Anything else (EPERM,
                // ENOSYS, ENOMEM) will not get better with fewer flags.
                let retry = e.raw_os_error() == Some(libc::EINVAL);
                first_err.get_or_insert(e);
                if !retry {
                    break;
                }
            }
        }
    }
    Err(first_err.expect("at least one attempt"))
}

impl Uring {
    /// The processor's lent buffers, made and registered with the ring on first use (a
    /// processor whose fibers never ask, such as weft http's, maps none); `None` when the
    /// kernel or the memory refused them (said once per process, [`lend::made_or_said`]).
    pub(crate) fn lend_pool(&self) -> Option<&Arc<LendPool>> {
        self.lend
            .get_or_init(|| {
                let pool = lend::made_or_said(LendPool::ring())?;
                let ring_addr = pool.ring_addr().expect("a ring pool");
                // SAFETY: the pool's ring page and buffers live as long as the pool, which
                // `Drop` unregisters before the pool can go (or leaks when that fails); a
                // pool that fails to register is dropped here, never having been the
                // kernel's.
                let registered = unsafe {
                    self.ring.borrow().submitter().register_buf_ring_with_flags(
                        ring_addr,
                        lend::LENT_BUFFERS,
                        lend::BUFFER_GROUP,
                        0,
                    )
                };
                lend::made_or_said(registered).map(|()| Arc::new(pool))
            })
            .as_ref()
    }

    /// The lent buffers if they have been made and registered (never makes them).
    pub(crate) fn lend_pool_made(&self) -> Option<&Arc<LendPool>> {
        self.lend.get().and_then(Option::as_ref)
    }

    /// A ring for the calling thread, with a tick keeper of `keep_tick` (zero: none).
    pub(crate) fn new(shared: Arc<DriverShared>, keep_tick: Duration) -> io::Result<Uring> {
        let (ring, flags) = build_ring()?;
        let keep = KeepTick::new(keep_tick);
        let u = Uring {
            shared,
            ring: RefCell::new(ring),
            wake_buf: Box::new(UnsafeCell::new(0)),
            waker_posted: Cell::new(false),
            unsubmitted: Cell::new(0),
            sends_unsubmitted: Cell::new(0),
            reap_after: Cell::new(0),
            in_flight: Cell::new(0),
            cancels: RefCell::new(Vec::new()),
            keeper_ts: Box::new(Cell::new(types::Timespec::new())),
            keep,
            flags,
            lend: OnceCell::new(),
        };
        u.post_waker();
        Ok(u)
    }

    /// Records that every SQE pushed so far went to the kernel.
    #[inline]
    fn submitted(&self) {
        self.unsubmitted.set(0);
        self.sends_unsubmitted.set(0);
    }

    /// Queues `entry` for submission.
    ///
    /// # Safety
    /// Every pointer in `entry` (buffers, addresses, and the `Completion` named by its
    /// `user_data`) must stay valid until its completion has been reaped.
    pub(crate) unsafe fn push(&self, entry: &squeue::Entry) {
        loop {
            let mut ring = self.ring.borrow_mut();
            // SAFETY: forwarded from the caller.
            if unsafe { ring.submission().push(entry) }.is_ok() {
                break;
            }
            // Full: submit what is there and reap, then try again.
            let _ = ring.submit();
            self.submitted();
            drop(ring);
            self.drain();
        }
        self.unsubmitted.set(self.unsubmitted.get() + 1);
        let data = entry.get_user_data();
        // Not the send of a rest: that one waits for room.
        if data & 7 == behind::TAG {
            self.sends_unsubmitted.set(self.sends_unsubmitted.get() + 1);
        }
        if data != WAKER && data != WAKER_CANCEL && data != KEEPER {
            self.in_flight.set(self.in_flight.get() + 1);
        }
    }

    /// Queues a chain of linked entries so that they go to the kernel in one submission (a
    /// chain split across two submissions would not stay linked).
    ///
    /// # Safety
    /// As for [`Uring::push`], for every entry.
    pub(crate) unsafe fn push_linked(&self, entries: &[squeue::Entry]) {
        let n = entries.len();
        loop {
            let mut ring = self.ring.borrow_mut();
            let sq = ring.submission();
            if sq.capacity() - sq.len() >= n {
                break;
            }
            drop(sq);
            let _ = ring.submit();
            self.submitted();
            drop(ring);
            self.drain();
        }
        for e in entries {
            // SAFETY: forwarded from the caller; there is room for all of them, so `push`
            // does not submit in between.
            unsafe { self.push(e) };
        }
    }

    fn post_waker(&self) {
        if self.waker_posted.get() {
            return;
        }
        let entry = opcode::Read::new(
            types::Fd(self.shared.waker.raw_fd()),
            self.wake_buf.get().cast(),
            8,
        )
        .offset(u64::MAX)
        .build()
        .user_data(WAKER);
        // SAFETY: `wake_buf` is boxed, and `Drop` cancels the read (and waits for it) before
        // freeing it.
        unsafe { self.push(&entry) };
        self.waker_posted.set(true);
    }

    /// Submits an `ASYNC_CANCEL` for `record`'s operation; its completion acknowledges.
    pub(crate) fn cancel(&self, record: *const Completion) {
        let key = record as u64;
        let entry = opcode::AsyncCancel::new(key).build().user_data(key | 1);
        // SAFETY: the record lives until its fiber sees both DONE and ACK.
        unsafe { self.push(&entry) };
    }

    #[inline]
    fn take_cancels(&self) {
        if self.shared.has_cancels() {
            self.take_cancels_now();
        }
    }

    #[inline(never)]
    fn take_cancels_now(&self) {
        let mut list = self.cancels.borrow_mut();
        self.shared.take_cancels(&mut list);
        for record in list.drain(..) {
            self.cancel(record as *const Completion);
        }
    }

    #[inline]
    pub(crate) fn poll(&self, tick: u64, mode: PollMode) -> usize {
        // Nothing in flight and nothing to submit: nothing to do, except that a forwarded
        // cancel may arrive after the operation it names was reaped here (its fiber marked it
        // CANCEL first), and that fiber waits for the cancel's ACK. A busy processor looks for
        // one on its submission rounds, so it is taken within `SUBMIT_EVERY_ROUNDS` rounds,
        // not at the next idle moment, and other rounds pay no shared load.
        if self.in_flight.get() == 0
            && self.unsubmitted.get() == 0
            && (tick % SUBMIT_EVERY_ROUNDS != 0 || !self.shared.has_cancels())
        {
            return 0;
        }
        self.poll_ring(tick, mode)
    }

    #[inline(never)]
    fn poll_ring(&self, tick: u64, mode: PollMode) -> usize {
        self.take_cancels();
        let (need_enter, get_events) = {
            let mut ring = self.ring.borrow_mut();
            let sq = ring.submission();
            let pending = self.unsubmitted.get();
            // Before a park the batch waits for the sleeping enter, which submits it.
            let due = match mode {
                PollMode::Busy => tick % SUBMIT_EVERY_ROUNDS == 0,
                PollMode::Idle => true,
                PollMode::BeforePark => false,
            };
            // Completions whose task work is pending (`taskrun`) or that overflowed reach the
            // queue only through an enter with GETEVENTS. A busy processor runs that work only
            // on its submission rounds, and only once the fibers the last drain woke had their
            // turns ([`busy_reap_allowed`]); an out-of-work one always.
            let reap = match mode {
                PollMode::Busy => due && busy_reap_allowed(tick, self.reap_after.get()),
                PollMode::Idle | PollMode::BeforePark => true,
            };
            let get_events = (reap && sq.taskrun()) || sq.cq_overflow();
            (
                (due && pending > 0) || pending >= SUBMIT_BATCH || get_events,
                get_events,
            )
        };
        if need_enter {
            let ring = self.ring.borrow();
            let to_submit = self.unsubmitted.get();
            let flags = if get_events { ENTER_GETEVENTS } else { 0 };
            // SAFETY: no argument pointer is passed (`None`), `to_submit` counts SQEs already
            // in the ring (every one pushed through `push`, whose pointers stay valid by its
            // contract), and `min_complete` 0 never waits.
            let entered = unsafe {
                ring.submitter()
                    .enter::<libc::sigset_t>(to_submit, 0, flags, None)
            };
            // Errors (EINTR, EBUSY) leave the SQEs for the next submission.
            if entered.is_ok() {
                self.submitted();
            }
        }
        let woken = self.drain();
        self.reap_after
            .set(self.reap_after.get().max(tick + woken as u64));
        woken
    }

    /// Whether something is there to reap or run, by looking at the rings only (no syscall):
    /// a completion, the kernel's pending completion work (`IORING_SQ_TASKRUN`), or an
    /// overflow. For an idle processor's poll (`runtime/idle_poll.rs`), after
    /// [`Uring::reap_all`]: the task-run flag is set when work is added to an empty list, and
    /// only `reap_all` guarantees the list was emptied (an enter runs a bounded number of
    /// items and does not set the flag again for the rest).
    pub(crate) fn ready_now(&self) -> bool {
        let mut ring = self.ring.borrow_mut();
        {
            let sq = ring.submission();
            if sq.taskrun() || sq.cq_overflow() {
                return true;
            }
        }
        let empty = ring.completion().is_empty();
        !empty
    }

    /// Submits the batch, runs all of the kernel's pending completion work and reaps; returns
    /// how many completions were reaped. One `io_uring_enter` with `GETEVENTS` and no wait.
    pub(crate) fn reap_all(&self) -> usize {
        self.take_cancels();
        {
            let ring = self.ring.borrow();
            let submitter = ring.submitter();
            let to_submit = self.unsubmitted.get();
            let flags = ENTER_GETEVENTS;
            // SAFETY: no argument pointer is passed (`None`), `to_submit` counts SQEs already
            // in the ring (every one pushed through `push`, whose pointers stay valid by its
            // contract), and GETEVENTS with `min_complete` 0 never waits.
            let entered = unsafe { submitter.enter::<libc::sigset_t>(to_submit, 0, flags, None) };
            // Errors (EINTR, EBUSY) leave completions for the drain below or the next look.
            let _ = entered;
            self.submitted();
        }
        self.drain()
    }

    /// Submits the SQEs pushed since the last submission, if any.
    pub(crate) fn flush(&self) {
        if self.unsubmitted.get() > 0 {
            let _ = self.ring.borrow().submit();
            self.submitted();
        }
    }

    pub(crate) fn park(&self, timeout: Option<Duration>) {
        self.take_cancels();
        self.post_waker();
        // One clock reading for arming the keeper and for judging the timeout against it.
        let mut now_ns = None;
        if let Some(expiry_ns) = self.keep.arm(|| *now_ns.insert(monotonic_now_ns())) {
            let (sec, nsec) = split_ns(expiry_ns);
            self.keeper_ts
                .set(types::Timespec::new().sec(sec).nsec(nsec));
            let entry = opcode::Timeout::new(self.keeper_ts.as_ptr() as *const types::Timespec)
                .flags(types::TimeoutFlags::ABS)
                .build()
                .user_data(KEEPER);
            // SAFETY: `keeper_ts` is boxed and lives as long as the ring; the kernel copies it
            // when the SQE is submitted, by the enter below at the latest, and it is not set
            // again before this keeper's completion is reaped (`arm` returns None while one is
            // in flight).
            unsafe { self.push(&entry) };
        }
        // With the keeper due first the kernel needs no timer of its own for this sleep.
        let timeout = self
            .keep
            .wait_timeout(timeout, || now_ns.unwrap_or_else(monotonic_now_ns));
        {
            let ring = self.ring.borrow();
            let submitter = ring.submitter();
            // The batch's write-behind sends complete while this enter submits them; waiting
            // for one completion would end the sleep on the first of them, and the processor
            // would go round its loop to a second enter (0.96 a request at one request a
            // wake-up, docs/notes/scale.md). So it waits for one more than they are, while
            // the tick keeper is in flight: a send the socket took only in part must have its
            // rest handed back to the ring (`behind::complete`), which only a drain does, and
            // the keeper's expiry (within a tick) ends the sleep if nothing else does. With no
            // keeper in flight (an idle processor's sporadic request, or keepers turned off) it
            // waits for one completion: a short send would otherwise wait for the next
            // request, which the client sends only once it has the whole reply.
            let want = if self.keep.is_armed() {
                1 + self.sends_unsubmitted.get() as usize
            } else {
                1
            };
            let result = match timeout {
                None => submitter.submit_and_wait(want),
                Some(left) => {
                    if left.is_zero() {
                        submitter.submit()
                    } else {
                        let ts = types::Timespec::from(left);
                        let args = types::SubmitArgs::new().timespec(&ts);
                        submitter.submit_with_args(want, &args)
                    }
                }
            };
            // ETIME (deadline), EINTR (signal), EBUSY (completions to reap first) all mean:
            // reap and go round again. Submission errors are reported per SQE.
            let _ = result;
            self.submitted();
        }
        self.drain();
    }

    /// Reaps every completion in the ring and wakes their fibers.
    fn drain(&self) -> usize {
        let mut woken = 0;
        let mut waked = false;
        let mut batch = [const { MaybeUninit::<cqueue::Entry>::uninit() }; DRAIN_BATCH];
        loop {
            let cqes = {
                let mut ring = self.ring.borrow_mut();
                let mut cq = ring.completion();
                cq.fill(&mut batch)
            };
            if cqes.is_empty() {
                break;
            }
            // Two passes of hints before the real one: the records (on their fibers'
            // stacks), then the fibers they name, so the batch's cold lines load together.
            for cqe in cqes.iter() {
                if is_operation(cqe.user_data()) {
                    prefetch(cqe.user_data() as *const u8);
                }
            }
            // The batch's arrival ticket, taken (by `finish_op`) after its completions were
            // read, for the first record that wants one: every byte they return was in
            // before it (`io::arrival`). One a batch, not one a receive, so the requests
            // reaped together can share one check; none for a batch nobody asked one of.
            let mut arrival = 0;
            for cqe in cqes.iter() {
                if is_operation(cqe.user_data()) {
                    // SAFETY: an operation's record lives until its fiber sees DONE, which
                    // the loop below publishes only after this pass.
                    unsafe { Completion::prefetch_waiter(cqe.user_data() as usize) };
                }
            }
            for cqe in cqes.iter() {
                let data = cqe.user_data();
                if data == WAKER {
                    self.waker_posted.set(false);
                    self.post_waker();
                    waked = true;
                } else if data == WAKER_CANCEL {
                    // Only submitted by `drop`.
                } else if data == KEEPER {
                    self.keep.fired();
                } else if data & 3 == behind::TAG {
                    // SAFETY: a write-behind send's completion, reported once, here, on the
                    // ring's own thread.
                    unsafe { behind::complete(Some(self), data, cqe.result()) };
                    self.in_flight.set(self.in_flight.get() - 1);
                } else if data == behind::RESEND_TIMEOUT {
                    // The send it was linked to says the outcome.
                    self.in_flight.set(self.in_flight.get() - 1);
                } else if data & 1 == 1 {
                    // SAFETY: a cancel's record lives until its fiber sees ACK
                    // (op::Completion).
                    unsafe { Completion::finish(data as usize & !1, None, ACK) };
                    self.in_flight.set(self.in_flight.get() - 1);
                    woken += 1;
                } else {
                    if cqueue::buffer_select(cqe.flags()).is_some() {
                        if let Some(pool) = self.lend_pool_made() {
                            // SAFETY: this is the pool's own thread; once for this completion.
                            unsafe { pool.taken_by_kernel() };
                        }
                    }
                    // SAFETY: an operation's record lives until its fiber sees DONE.
                    unsafe {
                        Completion::finish_op(
                            data as usize,
                            cqe.result(),
                            cqe.flags(),
                            &mut arrival,
                        )
                    };
                    self.in_flight.set(self.in_flight.get() - 1);
                    woken += 1;
                }
            }
        }
        if woken > 0 || waked {
            self.keep.worked();
        }
        woken
    }
}

/// Whether a busy processor at round `tick` may run the kernel's pending completion work:
/// not before the fibers woken by earlier drains had their turns (`reap_after`, the round of
/// a drain plus the fibers it woke). Taking more first only queues them behind those: after a
/// stall of the processor, each enter ran 40 receives of the backlog while 16 fibers ran
/// between enters, so the receives ran ahead of the replies for 7-9 ms
/// (`docs/notes/scale.md`, "Injected stalls").
fn busy_reap_allowed(tick: u64, reap_after: u64) -> bool {
    tick >= reap_after
}

/// Whether a completion's `user_data` is an operation's record (not a cancel, a write-behind
/// send, or one of the driver's own).
fn is_operation(data: u64) -> bool {
    data & 3 == 0
        && data != WAKER
        && data != WAKER_CANCEL
        && data != KEEPER
        && data != behind::RESEND_TIMEOUT
}

impl Drop for Uring {
    /// Takes the eventfd read back before `wake_buf` is freed: closing the ring cancels
    /// requests asynchronously, and a wake-up racing with that would write freed memory.
    /// Other operations still in flight belong to fibers abandoned with their (leaked) stacks
    /// when the cluster stopped; they are not reaped. Write-behind sends completing meanwhile
    /// are reported (their streams may live on); one that does not complete by then keeps its
    /// slot, which then leaks.
    fn drop(&mut self) {
        if let Some(Some(pool)) = self.lend.get() {
            if self
                .ring
                .get_mut()
                .submitter()
                .unregister_buf_ring(lend::BUFFER_GROUP)
                .is_err()
            {
                // The kernel may still pick buffers from the pool: never free them.
                std::mem::forget(pool.clone());
            }
        }
        if !self.waker_posted.get() {
            return;
        }
        let entry = opcode::AsyncCancel::new(WAKER)
            .build()
            .user_data(WAKER_CANCEL);
        let ring = self.ring.get_mut();
        // SAFETY: the cancel carries no pointers.
        if unsafe { ring.submission().push(&entry) }.is_err() {
            let _ = ring.submit();
            // SAFETY: as above.
            if unsafe { ring.submission().push(&entry) }.is_err() {
                std::mem::forget(std::mem::take(&mut self.wake_buf));
                return;
            }
        }
        let give_up = Instant::now() + DROP_WAIT;
        loop {
            let ts = types::Timespec::from(std::time::Duration::from_millis(10));
            let args = types::SubmitArgs::new().timespec(&ts);
            let _ = ring.submitter().submit_with_args(1, &args);
            let mut waker_done = false;
            for cqe in ring.completion() {
                let data = cqe.user_data();
                if data == WAKER {
                    waker_done = true;
                } else if data & 3 == behind::TAG {
                    // Its stream may outlive this ring and waits for it (and sends any rest
                    // itself: there is no ring to hand the rest to).
                    // SAFETY: a write-behind send's completion, reported once, here.
                    unsafe { behind::complete(None, data, cqe.result()) };
                }
            }
            if waker_done {
                return;
            }
            if Instant::now() >= give_up {
                // Never free memory the kernel may still write.
                std::mem::forget(std::mem::take(&mut self.wake_buf));
                return;
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::io::driver::Waker;
    use crate::io::IoBackend;

    #[test]
    fn the_lent_buffers_are_made_on_the_first_receive_that_wants_them() {
        let waker = Arc::new(Waker::new(IoBackend::Uring).unwrap());
        let shared = Arc::new(DriverShared::new(waker));
        let ring = Uring::new(shared, Duration::ZERO).expect("io_uring works here");
        assert!(
            ring.lend_pool_made().is_none(),
            "no buffers before a receive asks"
        );
        let pool = ring.lend_pool().expect("buffer rings work here").clone();
        let again = ring.lend_pool().expect("made once");
        assert!(Arc::ptr_eq(&pool, again), "the same pool every time");
        assert!(ring.lend_pool_made().is_some());
        drop(ring);
        // Unregistered on drop: the ring's reference is gone, ours is the last.
        assert_eq!(Arc::strong_count(&pool), 1);
    }

    #[test]
    fn a_sleep_with_a_send_in_its_batch_ends_on_another_completion() {
        use std::io::Read;
        use std::os::fd::AsRawFd;

        let waker = Arc::new(Waker::new(IoBackend::Uring).unwrap());
        let shared = Arc::new(DriverShared::new(Arc::clone(&waker)));
        let ring =
            Uring::new(shared, super::super::keep_tick::MAX_PERIOD).expect("io_uring works here");
        let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        let slot = behind::Slot::new();
        let mut claim = slot.claim();
        let queued = claim.queue(&ring, a.as_raw_fd(), 0, &[io::IoSlice::new(b"reply")]);
        assert_eq!(queued, 5);
        // The sleeping enter arms the tick keeper and submits the send, which completes at
        // once; the sleep must last until something else completes (here the keeper, due
        // within 10 ms), not end on the send.
        ring.park(Some(Duration::from_secs(30)));
        assert!(
            !ring.keep.is_armed(),
            "the sleep ended on its own batch's send, before the keeper expired"
        );
        claim
            .settle(false, |_| panic!("the send went out whole"))
            .expect("the send succeeded");
        let mut got = [0u8; 5];
        b.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"reply");
    }

    #[test]
    fn the_rest_of_a_send_the_socket_took_in_part_goes_back_to_the_ring() {
        use std::io::{Read, Write};
        use std::os::fd::AsRawFd;

        let waker = Arc::new(Waker::new(IoBackend::Uring).unwrap());
        let shared = Arc::new(DriverShared::new(Arc::clone(&waker)));
        // No keeper: the sleep that submits the send ends on its completion.
        let ring = Uring::new(shared, Duration::ZERO).expect("io_uring works here");
        let (mut a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        // Fill the socket, so the send can take nothing at once.
        a.set_nonblocking(true).unwrap();
        let mut filled = 0usize;
        loop {
            match a.write(&[7u8; 4096]) {
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        let reply: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let slot = behind::Slot::new();
        let mut claim = slot.claim();
        assert_eq!(
            claim.queue(&ring, a.as_raw_fd(), 0, &[io::IoSlice::new(&reply)]),
            reply.len()
        );
        let started = Instant::now();
        ring.park(Some(Duration::from_secs(30)));
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the sleep did not end on the short send"
        );
        // The peer reads everything; the processor only goes on sleeping and reaping (the
        // writer writes nothing more, so no settle sends the rest for it).
        let want = filled + reply.len();
        let reader = std::thread::spawn(move || {
            b.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut all = vec![0u8; want];
            b.read_exact(&mut all).map(|()| all)
        });
        while !reader.is_finished() {
            ring.park(Some(Duration::from_millis(20)));
        }
        let all = reader
            .join()
            .unwrap()
            .expect("the rest of the send reached the peer");
        assert!(all[filled..] == reply[..], "the rest arrived in order");
        claim
            .settle(false, |_| panic!("the ring sent the rest"))
            .expect("the send succeeded in the end");
    }
}
