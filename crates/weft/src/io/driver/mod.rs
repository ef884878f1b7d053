//! One I/O driver per processor, and the waker that ends its sleep.
//!
//! A [`Driver`] is owned by one processor and used only on that processor's thread (by the
//! processor's loop and by the fibers it runs). It does three jobs:
//! - it carries the operations fibers start ([`uring`]: SQEs submitted lazily in batches;
//!   [`epoll`]: one-shot readiness interest);
//! - it turns completions into wake-ups ([`Driver::poll`] without blocking, every scheduling
//!   round or every few rounds);
//! - it is where the processor sleeps ([`Driver::park`]): in `io_uring_enter` or `epoll_wait`,
//!   bounded by the processor's next timer, and ended early by the processor's [`Waker`];
//!   while the processor is serving, a sleep first arms the tick keeper's timer
//!   ([`keep_tick`]) so the kernel keeps the CPU's tick running.
//!
//! Architecture Invariant: the driver knows nothing of run queues or clusters. It wakes fibers
//! through `FiberRef::unpark`, which queues them on the current processor when the fiber
//! belongs to its cluster (locality) and through the fiber's cluster otherwise (a fiber that
//! migrated, or that was woken by another cluster's ring).
//!
//! Other threads reach a driver only through its [`DriverShared`]: the waker (an eventfd) and
//! the queue of cancellation requests from fibers that moved to another processor while their
//! operation was in flight on this one (`io_uring` rings are single-issuer: only the owning
//! thread may submit the `ASYNC_CANCEL`).

pub(crate) mod epoll;
pub(crate) mod keep_tick;
pub(crate) mod uring;

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use super::lend::LendPool;
use super::op::Completion;
use super::IoBackend;
use crate::loom::{AtomicBool, Mutex, Ordering, StaticAtomicU64};
use crate::poison::Recover;

/// Ends a processor's sleep from any thread: an eventfd the driver always watches.
///
/// Writing it makes the sleeping `io_uring_enter` / `epoll_wait` return (or the next one return
/// at once: the eventfd counter persists until the driver reads it, so a wake-up sent just
/// before the sleep is not lost).
pub(crate) struct Waker {
    /// The eventfd. Blocking for the uring backend (the ring's posted `READ` waits on it);
    /// non-blocking for epoll, which reads it only after readiness.
    fd: OwnedFd,
}

impl Waker {
    pub(crate) fn new(backend: IoBackend) -> io::Result<Waker> {
        let flags = match backend {
            IoBackend::Uring => libc::EFD_CLOEXEC,
            IoBackend::Epoll => libc::EFD_CLOEXEC | libc::EFD_NONBLOCK,
        };
        // SAFETY: plain syscall; on success we own the returned descriptor.
        let fd = unsafe { libc::eventfd(0, flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Waker { fd })
    }

    /// Wakes the processor that owns this waker. Any thread; never blocks.
    pub(crate) fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd. Failure is only possible
        // when the counter would overflow, i.e. a wake-up is pending anyway.
        unsafe {
            libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8);
        }
    }

    pub(crate) fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }
}

/// Cancellations forwarded to another processor's driver since the process started.
pub(crate) static FORWARDED_CANCELS: StaticAtomicU64 = StaticAtomicU64::new(0);

/// The part of a driver other threads may touch.
pub(crate) struct DriverShared {
    /// The owning processor's waker.
    pub(crate) waker: Arc<Waker>,
    /// Completion records whose fiber wants the operation cancelled but now runs elsewhere.
    /// Bounded by the number of fibers with an operation in flight on this driver.
    cancels: Mutex<Vec<usize>>,
    /// Whether `cancels` may be non-empty: lets `poll` skip the lock.
    has_cancels: AtomicBool,
}

impl DriverShared {
    pub(crate) fn new(waker: Arc<Waker>) -> DriverShared {
        DriverShared {
            waker,
            cancels: Mutex::new(Vec::new()),
            has_cancels: AtomicBool::new(false),
        }
    }

    /// Asks the owning processor to cancel the operation of `record` (from another thread).
    pub(crate) fn request_cancel(&self, record: *const Completion) {
        FORWARDED_CANCELS.fetch_add(1, Ordering::Relaxed);
        self.cancels.lock().recover().push(record as usize);
        self.has_cancels.store(true, Ordering::Release);
        self.waker.wake();
    }

    /// Whether a cancel may be waiting for [`Self::take_cancels`].
    #[inline]
    pub(crate) fn has_cancels(&self) -> bool {
        self.has_cancels.load(Ordering::Acquire)
    }

    #[inline]
    fn take_cancels(&self, into: &mut Vec<usize>) {
        if self.has_cancels.load(Ordering::Acquire) {
            self.take_cancels_locked(into);
        }
    }

    #[inline(never)]
    fn take_cancels_locked(&self, into: &mut Vec<usize>) {
        let mut list = self.cancels.lock().recover();
        self.has_cancels.store(false, Ordering::Relaxed);
        into.append(&mut list);
    }
}

/// What a processor's round asks of [`Driver::poll`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PollMode {
    /// Fibers are runnable: reap what is ready without a syscall where possible; submit the
    /// batched operations, and run the kernel's pending completion work, only when a batch is
    /// due, so the runnable fibers go first and completions are reaped in batches.
    Busy,
    /// The run queue is empty and the processor will search (steal) before it sleeps: submit
    /// the batch now, so it does not wait out the search, and ask the kernel for what is ready
    /// even if that costs a syscall.
    Idle,
    /// The run queue is empty and the processor goes straight to [`Driver::park`] (it has no
    /// one to steal from): reap what is already there without a syscall and leave the batch to
    /// the sleeping `io_uring_enter` / `epoll_wait`, which submits it and returns at once if
    /// something is ready. One syscall per idle transition instead of two.
    BeforePark,
}

/// One processor's I/O driver. See the module docs.
pub(crate) enum Driver {
    /// Boxed: the ring's bookkeeping is several times the size of the epoll driver.
    Uring(Box<uring::Uring>),
    Epoll(epoll::Epoll),
}

impl Driver {
    /// Builds the driver on the processor's own thread (single-issuer rings belong to the thread
    /// that creates them). Falls back to epoll if this ring cannot be set up after all.
    /// `keep_tick`: the tick keeper's period ([`keep_tick`]; zero: none).
    pub(crate) fn new(
        backend: IoBackend,
        waker: Arc<Waker>,
        keep_tick: Duration,
    ) -> io::Result<Driver> {
        let shared = Arc::new(DriverShared::new(waker));
        match backend {
            IoBackend::Uring => match uring::Uring::new(shared.clone(), keep_tick) {
                Ok(u) => Ok(Driver::Uring(Box::new(u))),
                Err(e) => {
                    super::log_fallback(&e);
                    // The waker is a blocking eventfd: make it non-blocking for epoll.
                    // SAFETY: fcntl on our own descriptor.
                    unsafe {
                        let fd = shared.waker.raw_fd();
                        let fl = libc::fcntl(fd, libc::F_GETFL);
                        libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
                    }
                    Ok(Driver::Epoll(epoll::Epoll::new(shared, keep_tick)?))
                }
            },
            IoBackend::Epoll => Ok(Driver::Epoll(epoll::Epoll::new(shared, keep_tick)?)),
        }
    }

    pub(crate) fn backend(&self) -> IoBackend {
        match self {
            Driver::Uring(_) => IoBackend::Uring,
            Driver::Epoll(_) => IoBackend::Epoll,
        }
    }

    pub(crate) fn shared(&self) -> &Arc<DriverShared> {
        match self {
            Driver::Uring(u) => &u.shared,
            Driver::Epoll(e) => &e.shared,
        }
    }

    /// The processor's receive buffers ([`crate::io::lend`]), if it has made them.
    pub(crate) fn lend(&self) -> Option<&Arc<LendPool>> {
        match self {
            Driver::Uring(u) => u.lend_pool_made(),
            Driver::Epoll(e) => e.lend_pool_made(),
        }
    }

    /// Drains completions without blocking and wakes their fibers; `mode` says how far to go
    /// (see [`PollMode`]). Returns how many fibers were woken.
    #[inline]
    pub(crate) fn poll(&self, tick: u64, mode: PollMode) -> usize {
        match self {
            Driver::Uring(u) => u.poll(tick, mode),
            Driver::Epoll(e) => e.poll(tick, mode),
        }
    }

    /// Hands the batched operations to the kernel now (uring: one `io_uring_enter` if any are
    /// waiting; epoll has no batch). For a processor that left its batch to a sleep it then did
    /// not take.
    pub(crate) fn flush(&self) {
        if let Driver::Uring(u) = self {
            u.flush();
        }
    }

    /// Whether this driver can be polled by an idle processor without a syscall
    /// (`runtime/idle_poll.rs`): io_uring can; epoll would need one `epoll_wait` per look.
    pub(crate) fn can_poll_idle(&self) -> bool {
        matches!(self, Driver::Uring(_))
    }

    /// Submits the batch and reaps everything ready, running the kernel's pending completion
    /// work; returns how many completions were reaped (uring; epoll reaps nothing here).
    pub(crate) fn reap_all(&self) -> usize {
        match self {
            Driver::Uring(u) => u.reap_all(),
            Driver::Epoll(_) => 0,
        }
    }

    /// Whether anything waits to be reaped, from the rings alone (uring; false on epoll).
    /// Meaningful after [`Driver::reap_all`].
    #[inline]
    pub(crate) fn ready_now(&self) -> bool {
        match self {
            Driver::Uring(u) => u.ready_now(),
            Driver::Epoll(_) => false,
        }
    }

    /// Sleeps until a completion, a wake-up of the [`Waker`], or `timeout` has passed; then
    /// drains. The caller turns its deadline into the timeout with the clock reading it
    /// already took (one read a sleep, not two).
    pub(crate) fn park(&self, timeout: Option<Duration>) {
        match self {
            Driver::Uring(u) => u.park(timeout),
            Driver::Epoll(e) => e.park(timeout),
        }
    }

    /// Cancels the operation of `record`, started on this driver, from its own thread.
    pub(crate) fn cancel_local(&self, record: *const Completion) {
        match self {
            Driver::Uring(u) => u.cancel(record),
            Driver::Epoll(e) => e.cancel(record),
        }
    }
}

/// The forwarded-cancel queue under loom: a record pushed by another thread while the owner
/// polls is taken by that poll or stays announced by `has_cancels` for the next one (the
/// canceller wakes the owner for it), and is taken exactly once.
#[cfg(all(test, loom))]
mod loom {
    use ::loom::sync::Arc;
    use ::loom::thread;

    use super::*;

    #[test]
    fn loom_forwarded_cancels_are_taken_once_and_not_stranded() {
        crate::loom::model_bounded(2, || {
            let waker = std::sync::Arc::new(Waker::new(IoBackend::Epoll).unwrap());
            let shared = Arc::new(DriverShared::new(waker));
            let cancellers: Vec<_> = [0x40usize, 0x80]
                .into_iter()
                .map(|record| {
                    let s = shared.clone();
                    thread::spawn(move || s.request_cancel(record as *const Completion))
                })
                .collect();
            let mut taken = Vec::new();
            shared.take_cancels(&mut taken);
            for c in cancellers {
                c.join().unwrap();
            }
            // The poll the cancellers' wake-ups bring about.
            shared.take_cancels(&mut taken);
            taken.sort_unstable();
            assert_eq!(taken, [0x40, 0x80]);
            assert!(!shared.has_cancels());
        });
    }
}
