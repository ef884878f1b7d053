//! The operation protocol: a completion record on the fiber's stack, park, cancel safely.
//!
//! A fiber that starts an operation on its processor's driver builds a [`Completion`] on its
//! own stack, hands the driver its address (an SQE's `user_data`, or the epoll waiter table),
//! and parks until the processor marks it `DONE`. The record outlives every use the driver makes
//! of it because the fiber does not return, and so does not pop the record, before:
//! - `DONE` is set (the kernel has finished with the operation and its buffers), and
//! - if it asked for a cancel (`CANCEL`), `ACK` is set too (the driver has finished with the
//!   cancel request, which also names the record).
//!
//! On a deadline or a fiber cancellation the fiber sets `CANCEL` and has the *owning*
//! processor cancel the operation (directly when it still runs there; through
//! [`DriverShared::request_cancel`] when it was moved elsewhere meanwhile), then keeps waiting,
//! uncancellably, for both bits. Only then does the call return, so the kernel never touches a
//! buffer after the call returned. If the operation completed anyway (the cancel lost the
//! race), its real result is returned: data that was read is never dropped.
//!
//! The processor finishing a record clones the waiter out *before* publishing the bit: once a
//! bit is published the fiber may return and its stack frame be reused.

use std::io;
use std::sync::Arc;
use std::time::Instant;

pub(crate) use super::driver::epoll::Registration;
use super::driver::{Driver, DriverShared};
use crate::ctx;
use crate::error::Cancelled;
use crate::fiber::core::FiberRef;
use crate::fiber::current::{self as fiber, yield_now};
use crate::fiber::park::{park_current, park_unjudged, Parked};
use crate::loom::{AtomicI32, AtomicU32, AtomicU64, AtomicU8};

use super::op_state as protocol;
pub(crate) use super::op_state::{ACK, DONE};

/// Which way a readiness wait goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    Read,
    Write,
}

/// One in-flight operation, on the stack of the fiber waiting for it.
pub(crate) struct Completion {
    /// The operation's result (`-errno` on failure); valid once `DONE` is set.
    result: AtomicI32,
    /// The completion's flags (io_uring's `cqe.flags`: which provided buffer a receive
    /// used); written before `DONE` is published, like `result`.
    cqe_flags: AtomicU32,
    /// [`WANT_ARRIVAL`] when the fiber asked for the completion's arrival ticket, and then
    /// the ticket of the batch the driver reaped it in ([`super::arrival`]), written before
    /// `DONE` is published; 0 otherwise (no ticket is taken for it).
    arrival: AtomicU64,
    /// `DONE`, `CANCEL`, `ACK` bits.
    state: AtomicU8,
    /// The fiber to wake.
    waiter: FiberRef,
    /// The driver the operation was started on: cancels must go there.
    owner: Arc<DriverShared>,
    /// The descriptor (epoll's waiter table is keyed by it).
    pub(crate) fd: i32,
    /// Which way the fiber waits (epoll).
    pub(crate) dir: Dir,
}

/// [`Completion::arrival`] of an operation whose fiber wants its arrival ticket (no ticket is
/// ever this large: the counter grows by one a batch or a check).
pub(crate) const WANT_ARRIVAL: u64 = u64::MAX;

/// Why a wait gave up.
#[derive(Debug, Clone, Copy)]
enum GaveUp {
    TimedOut,
    Cancelled,
}

pub(crate) fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "weft: I/O operation timed out")
}

/// The error blocking I/O returns in a cancelled fiber: kind `Other` wrapping [`Cancelled`]
/// (not `Interrupted`, which `std`'s `read_exact` and `write_all` silently retry).
pub(crate) fn cancelled() -> io::Error {
    io::Error::other(Cancelled)
}

impl Completion {
    /// A record for the current fiber's operation on `driver`. Call from a fiber only.
    pub(crate) fn new(driver: &Driver, fd: i32, dir: Dir) -> Completion {
        Completion {
            result: AtomicI32::new(0),
            cqe_flags: AtomicU32::new(0),
            arrival: AtomicU64::new(0),
            state: AtomicU8::new(0),
            waiter: fiber::current_ref().expect("weft: I/O completion record outside a fiber"),
            owner: driver.shared().clone(),
            fd,
            dir,
        }
    }

    /// The driver's side: stores `result` (if any), sets `bits` and wakes the fiber.
    ///
    /// # Safety
    /// `record` is the address of a live `Completion` whose fiber is waiting for `bits`, and
    /// the caller runs on the record's owning processor.
    pub(crate) unsafe fn finish(record: usize, result: Option<i32>, bits: u8) {
        // SAFETY: the caller promises the record is alive until the `fetch_or` below.
        let rec = unsafe { &*(record as *const Completion) };
        let waiter = rec.waiter.clone();
        protocol::publish(&rec.state, &rec.result, result, bits);
        // From here on the record may be gone. The clone becomes the woken fiber's task (no
        // second clone, no drop: the count's line is written once here).
        crate::fiber::park::unpark_owned(waiter.0);
    }

    /// The driver's side for an io_uring operation's completion: stores its result and
    /// flags, and, if the fiber wants one, the batch's arrival ticket (`batch_arrival`, taken
    /// here by the batch's first record that wants it, after the batch was read from the
    /// ring; 0 until then), sets `DONE` and wakes the fiber.
    ///
    /// # Safety
    /// As for [`Completion::finish`].
    pub(crate) unsafe fn finish_op(
        record: usize,
        result: i32,
        cqe_flags: u32,
        batch_arrival: &mut u64,
    ) {
        // SAFETY: the caller promises the record is alive (and `finish` publishes these
        // stores with `DONE`).
        let rec = unsafe { &*(record as *const Completion) };
        if cqe_flags != 0 {
            rec.cqe_flags
                .store(cqe_flags, crate::loom::Ordering::Relaxed);
        }
        // Only this thread writes the field while the operation is in flight (the fiber
        // set it before submitting, on this thread: single-issuer rings).
        if rec.arrival.load(crate::loom::Ordering::Relaxed) == WANT_ARRIVAL {
            if *batch_arrival == 0 {
                *batch_arrival = super::arrival::stamp();
            }
            rec.arrival
                .store(*batch_arrival, crate::loom::Ordering::Relaxed);
        }
        // SAFETY: forwarded from the caller.
        unsafe { Completion::finish(record, Some(result), DONE) };
    }

    /// Asks the CPU to start loading the fiber that `record`'s completion will wake, so that
    /// a batch of completions pays its fibers' cache misses together rather than one after
    /// another. Only a hint: nothing is read through the address it computes.
    ///
    /// # Safety
    /// As for [`Completion::finish`]: `record` is a live record whose completion is reaped
    /// and not finished yet (it is read, not written).
    pub(crate) unsafe fn prefetch_waiter(record: usize) {
        // SAFETY: forwarded from the caller.
        let rec = unsafe { &*(record as *const Completion) };
        crate::fiber::park::prefetch(Arc::as_ptr(&rec.waiter.0).cast());
    }

    /// The fiber's side: parks until the operation is over (see the module docs). Returns the
    /// kernel's result, or why the wait gave up if the operation was cancelled.
    pub(crate) fn wait(&self, deadline: Option<Instant>) -> io::Result<i32> {
        let mut gave_up = None;
        loop {
            let state = protocol::load(&self.state);
            if protocol::finished(state) {
                break;
            }
            if gave_up.is_some() {
                // Uncancellable: the kernel may still write into our buffers.
                park_current(None);
                continue;
            }
            // The completion itself is what wakes the fiber nearly always: the clock is read
            // only when the operation is not over yet.
            let why = match park_unjudged(deadline) {
                Parked::Woken => {
                    if protocol::finished(protocol::load(&self.state)) {
                        break;
                    }
                    match deadline {
                        Some(d) if Instant::now() >= d => GaveUp::TimedOut,
                        _ => continue,
                    }
                }
                Parked::TimedOut => GaveUp::TimedOut,
                Parked::Cancelled => GaveUp::Cancelled,
            };
            gave_up = Some(why);
            if !protocol::claim_cancel(&self.state) {
                // DONE already: nothing to cancel.
                continue;
            }
            self.send_cancel();
        }
        let result = protocol::result(&self.result);
        match gave_up {
            Some(why) if result == -libc::ECANCELED || result == -libc::EINTR => Err(match why {
                GaveUp::TimedOut => timed_out(),
                GaveUp::Cancelled => cancelled(),
            }),
            _ => Ok(result),
        }
    }

    /// Asks for the operation to be cancelled now (not on a deadline); a later [`wait`] still
    /// returns only once the driver is done with the record. Used to stop the second half of a
    /// linked pair whose first half came up empty. Does nothing once the operation is done.
    ///
    /// [`wait`]: Completion::wait
    pub(crate) fn cancel_now(&self) {
        if protocol::claim_cancel(&self.state) {
            self.send_cancel();
        }
    }

    fn send_cancel(&self) {
        // SAFETY: a non-null driver is this processor thread's live one; the borrow ends
        // before the fiber switches out.
        if let Some(driver) = unsafe { thread_driver().as_ref() } {
            if Arc::ptr_eq(driver.shared(), &self.owner) {
                driver.cancel_local(self);
                return;
            }
        }
        self.owner.request_cancel(self);
    }
}

/// The driver of the processor running the calling fiber; `None` on plain threads.
///
/// The reference is only good until the fiber next switches out (it may resume elsewhere).
pub(crate) fn current_driver<'a>() -> Option<&'a Driver> {
    if !fiber::in_fiber() {
        return None;
    }
    // SAFETY: a non-null driver is this processor thread's live one, which outlives the
    // fiber's stay on this thread; callers drop the reference before switching out.
    unsafe { thread_driver().as_ref() }
}

/// This processor thread's driver, or null: the context's driver slot, which the processor
/// sets to its own `Driver` for the thread's whole life (`runtime::processor`).
fn thread_driver() -> *const Driver {
    ctx::driver().cast::<Driver>()
}

/// Counts one operation that completed without parking; when the running fiber has used up
/// its budget ([`ctx::OP_BUDGET_PER_RUN`]) it yields (to the back of the yield queue) and gets
/// a fresh one on resumption. No-op outside fibers. Never inlined: it reads a thread-local and
/// may switch (see `ctx`).
#[inline(never)]
pub(crate) fn spend_op_budget() {
    if ctx::spend_op() && fiber::in_fiber() {
        yield_now();
    }
}

/// Waits until `fd` is ready for `dir`, for code that tries non-blocking syscalls (the epoll
/// backend, and plain threads, which block in `poll(2)`). Call it only after such a syscall
/// failed with `EAGAIN` (the epoll backend is edge-triggered); `reg` is the socket's record
/// of the epolls that watch it.
pub(crate) fn wait_ready(
    fd: i32,
    reg: &Registration,
    dir: Dir,
    deadline: Option<Instant>,
) -> io::Result<()> {
    match current_driver() {
        Some(Driver::Epoll(e)) => {
            let driver = current_driver().expect("checked");
            let record = Completion::new(driver, fd, dir);
            e.register(&record, reg)?;
            record.wait(deadline).map(|_| ())
        }
        Some(Driver::Uring(u)) => {
            let driver = current_driver().expect("checked");
            let record = Completion::new(driver, fd, dir);
            let events = match dir {
                Dir::Read => libc::POLLIN,
                Dir::Write => libc::POLLOUT,
            };
            let entry = io_uring::opcode::PollAdd::new(io_uring::types::Fd(fd), events as u32)
                .build()
                .user_data(&record as *const Completion as u64);
            // SAFETY: `record` lives until `wait` has seen DONE (and ACK if it cancelled).
            unsafe { u.push(&entry) };
            let r = record.wait(deadline)?;
            if r < 0 {
                return Err(io::Error::from_raw_os_error(-r));
            }
            Ok(())
        }
        None => poll_thread(fd, dir, deadline),
    }
}

/// A plain thread blocks in `poll(2)`.
fn poll_thread(fd: i32, dir: Dir, deadline: Option<Instant>) -> io::Result<()> {
    let events = match dir {
        Dir::Read => libc::POLLIN,
        Dir::Write => libc::POLLOUT,
    };
    loop {
        let timeout_ms = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(timed_out());
                }
                left.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32
            }
        };
        let mut pfd = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if r > 0 {
            return Ok(());
        }
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// Runs one operation on the calling fiber's io_uring and waits for it; `None` (and `sqe` is
/// not called) when the caller is not a fiber on a uring processor. `Some(Ok(r))` holds the
/// kernel's result, which is `-errno` on failure.
///
/// # Safety
/// The pointers in the entry `sqe` builds must be valid for the duration of this call.
pub(crate) unsafe fn on_uring(
    fd: i32,
    deadline: Option<Instant>,
    sqe: impl FnOnce() -> io_uring::squeue::Entry,
) -> Option<io::Result<i32>> {
    // SAFETY: forwarded from the caller.
    unsafe { on_uring_with_flags(fd, deadline, sqe) }.map(|r| r.map(|(result, _)| result))
}

/// [`on_uring`], returning the completion's flags too (`cqe.flags`: for a receive with
/// `IOSQE_BUFFER_SELECT`, which provided buffer it used).
///
/// # Safety
/// As for [`on_uring`].
pub(crate) unsafe fn on_uring_with_flags(
    fd: i32,
    deadline: Option<Instant>,
    sqe: impl FnOnce() -> io_uring::squeue::Entry,
) -> Option<io::Result<(i32, u32)>> {
    let Some(Driver::Uring(u)) = current_driver() else {
        return None;
    };
    if fiber::is_cancelled() {
        return Some(Err(cancelled()));
    }
    let driver = current_driver().expect("checked");
    let record = Completion::new(driver, fd, Dir::Read);
    let entry = sqe().user_data(&record as *const Completion as u64);
    // SAFETY: the caller keeps the entry's pointers valid during this call; `record` outlives
    // the operation (see the module docs).
    unsafe { u.push(&entry) };
    let result = record.wait(deadline);
    // `wait` returned, so DONE was published (with the flags before it).
    let flags = record.cqe_flags.load(crate::loom::Ordering::Relaxed);
    Some(result.map(|r| (r, flags)))
}

/// Runs two operations linked with `IOSQE_IO_LINK` (the second starts once the first has
/// succeeded, and fails with `ECANCELED` if it did not) on the calling fiber's io_uring.
/// `None` when the caller is not a fiber on a uring processor. Returns both kernel results.
///
/// If the first comes back with 0 (nothing to pass on), the second is cancelled rather than
/// left waiting. Both are finished with before this returns.
///
/// # Safety
/// The pointers in both entries must be valid for the duration of this call.
pub(crate) unsafe fn linked_pair_on_uring(
    fd: i32,
    deadline: Option<Instant>,
    first: io_uring::squeue::Entry,
    second: io_uring::squeue::Entry,
) -> Option<(io::Result<i32>, io::Result<i32>)> {
    let Some(Driver::Uring(u)) = current_driver() else {
        return None;
    };
    if fiber::is_cancelled() {
        return Some((Err(cancelled()), Err(cancelled())));
    }
    let driver = current_driver().expect("checked");
    let rec1 = Completion::new(driver, fd, Dir::Read);
    let rec2 = Completion::new(driver, fd, Dir::Write);
    let e1 = first
        .flags(io_uring::squeue::Flags::IO_LINK)
        .user_data(&rec1 as *const Completion as u64);
    let e2 = second.user_data(&rec2 as *const Completion as u64);
    // SAFETY: the caller keeps the entries' pointers valid during this call; both records
    // outlive their operations: we wait for both below, whatever happens.
    unsafe { u.push_linked(&[e1, e2]) };
    let r1 = rec1.wait(deadline);
    if !matches!(r1, Ok(r) if r > 0) {
        rec2.cancel_now();
    }
    let r2 = rec2.wait(deadline);
    Some((r1, r2))
}

/// Like [`run`], but on io_uring the non-blocking syscall is tried once before the ring: for
/// operations that usually find their work already there and whose fiber should take it all in
/// one turn, such as `accept` during a burst of connections (one ring round trip per accepted
/// connection would hand the accepting fiber one connection per pass of the run queue, while
/// the others wait in the kernel's queue). A success spends the fiber's operation budget like
/// any operation that completed without parking, so the fiber still switches out within
/// [`ctx::OP_BUDGET_PER_RUN`] operations. On epoll and on plain threads this is [`run`],
/// which tries the syscall first anyway.
///
/// # Safety
/// As for [`run`].
pub(crate) unsafe fn run_syscall_first(
    fd: i32,
    reg: &Registration,
    dir: Dir,
    deadline: Option<Instant>,
    sqe: impl FnOnce() -> io_uring::squeue::Entry,
    mut sys: impl FnMut() -> isize,
) -> io::Result<usize> {
    if let Some(Driver::Uring(_)) = current_driver() {
        if fiber::is_cancelled() {
            return Err(cancelled());
        }
        let r = sys();
        if r >= 0 {
            spend_op_budget();
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        if !matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EINTR)) {
            return Err(e);
        }
    }
    // SAFETY: forwarded from the caller.
    unsafe { run(fd, reg, dir, false, deadline, sqe, sys) }
}

/// Runs one socket operation for the caller, whatever it is.
///
/// - On a uring processor: `sqe` is submitted with a [`Completion`] and the fiber parks.
/// - On an epoll processor or a plain thread: `sys` (the non-blocking syscall, returning `-1`
///   with `errno` on failure) is tried, and on `EAGAIN` the caller waits for readiness in
///   direction `dir` and tries again.
///
/// `drained` (receives only) says the caller's previous receive came back short. On uring the
/// `sqe` closure uses it (poll first); on epoll, if no read edge was reported since, the
/// syscall is skipped and the fiber waits straight away.
///
/// # Safety
/// The pointers in the entry `sqe` builds must be valid for the duration of this call.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(crate) unsafe fn run(
    fd: i32,
    reg: &Registration,
    dir: Dir,
    drained: bool,
    deadline: Option<Instant>,
    sqe: impl FnOnce() -> io_uring::squeue::Entry,
    sys: impl FnMut() -> isize,
) -> io::Result<usize> {
    // SAFETY: forwarded from the caller.
    unsafe { run_stamped(fd, reg, dir, drained, deadline, sqe, sys, false) }.map(|(n, _)| n)
}

/// [`run`], returning with the result the arrival ticket the driver stamped on the
/// operation's completion ([`super::arrival`]) when `want_arrival` asks for one, else 0; 0
/// too when the result came from `sys`, called by this fiber just before returning (the
/// caller takes a fresh ticket then, if it needs one). Only an operation that asks makes the
/// driver take a ticket (the memcached server's receives, say, never do).
///
/// # Safety
/// As for [`run`].
#[allow(clippy::too_many_arguments)]
#[inline]
pub(crate) unsafe fn run_stamped(
    fd: i32,
    reg: &Registration,
    dir: Dir,
    drained: bool,
    deadline: Option<Instant>,
    sqe: impl FnOnce() -> io_uring::squeue::Entry,
    mut sys: impl FnMut() -> isize,
    want_arrival: bool,
) -> io::Result<(usize, u64)> {
    if fiber::is_cancelled() {
        return Err(cancelled());
    }
    if let Some(Driver::Uring(u)) = current_driver() {
        let driver = current_driver().expect("checked");
        let record = Completion::new(driver, fd, dir);
        if want_arrival {
            record
                .arrival
                .store(WANT_ARRIVAL, crate::loom::Ordering::Relaxed);
        }
        let entry = sqe().user_data(&record as *const Completion as u64);
        // SAFETY: the caller keeps the entry's pointers valid during this call, and `record`
        // outlives the operation (see the module docs).
        unsafe { u.push(&entry) };
        let r = record.wait(deadline)?;
        if r >= 0 {
            // `wait` returned, so DONE was published (with the ticket before it).
            let stamp = match record.arrival.load(crate::loom::Ordering::Relaxed) {
                WANT_ARRIVAL => 0,
                stamp => stamp,
            };
            return Ok((r as usize, stamp));
        }
        if r != -libc::EAGAIN {
            return Err(io::Error::from_raw_os_error(-r));
        }
        // The kernel reports EAGAIN for a non-blocking descriptor in some cases: fall through
        // to readiness waiting (a POLL_ADD on the ring) and the syscall.
        wait_ready(fd, reg, dir, deadline)?;
    } else if drained && dir == Dir::Read {
        if let Some(Driver::Epoll(e)) = current_driver() {
            if e.drained_still(fd, reg) {
                wait_ready(fd, reg, dir, deadline)?;
            }
        }
    }
    loop {
        if dir == Dir::Read {
            if let Some(Driver::Epoll(e)) = current_driver() {
                e.receiving(fd);
            }
        }
        let r = sys();
        if r >= 0 {
            spend_op_budget();
            return Ok((r as usize, 0));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => {}
            Some(libc::EAGAIN) => wait_ready(fd, reg, dir, deadline)?,
            _ => return Err(e),
        }
        if fiber::is_cancelled() {
            return Err(cancelled());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::driver::uring::Uring;
    use crate::io::driver::{DriverShared, PollMode, Waker};
    use crate::io::op_state::CANCEL;
    use crate::io::IoBackend;
    use std::time::Duration;

    /// The race of a forwarded cancel: the fiber marked its operation `CANCEL` from another
    /// processor, the owning processor reaped the operation's completion (nothing left in
    /// flight there), and only then did the cancel request arrive. The owner must take it on
    /// its next busy rounds and acknowledge it, not leave the fiber waiting for `ACK` until the
    /// owner next goes idle (a busy owner may never).
    #[test]
    fn a_cancel_forwarded_after_the_completion_was_reaped_is_acknowledged_by_busy_polls() {
        let cluster = crate::Cluster::builder()
            .name("forwarded-cancel")
            .processors(1)
            .io(IoBackend::Uring)
            .build()
            .unwrap();
        cluster
            .spawn(|| {
                let waker = Arc::new(Waker::new(IoBackend::Uring).unwrap());
                let shared = Arc::new(DriverShared::new(waker));
                // A ring of our own, standing for the owning processor's: this test fiber is
                // its only user, on the one thread of its cluster.
                let ring = Uring::new(shared.clone(), Duration::ZERO).expect("io_uring works here");
                ring.flush();
                // The state the race leaves: cancel asked, completion already reaped.
                let record = Completion {
                    result: AtomicI32::new(0),
                    cqe_flags: AtomicU32::new(0),
                    arrival: AtomicU64::new(0),
                    state: AtomicU8::new(DONE | CANCEL),
                    waiter: fiber::current_ref().unwrap(),
                    owner: shared.clone(),
                    fd: -1,
                    dir: Dir::Read,
                };
                shared.request_cancel(&record);
                for tick in 1..=64u64 {
                    ring.poll(tick, PollMode::Busy);
                    if protocol::load(&record.state) & ACK != 0 {
                        return;
                    }
                }
                panic!("a forwarded cancel was not acknowledged in 64 busy rounds");
            })
            .join()
            .unwrap();
    }
}
