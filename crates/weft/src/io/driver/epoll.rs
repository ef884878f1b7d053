//! The epoll driver: readiness, edge-triggered, per processor (the Go netpoller / tokio shape).
//!
//! Descriptors are non-blocking. A fiber tries the syscall; on `EAGAIN` it registers its
//! [`Completion`] as the reader or writer of the descriptor on its processor's epoll and parks;
//! the processor's next `epoll_wait` wakes it and it tries again.
//!
//! A descriptor is added to a processor's epoll once, the first time a fiber waits on it there,
//! for both directions with `EPOLLET`, and stays until the kernel drops it when the file
//! closes: a wait costs no `epoll_ctl`. The socket remembers which processors' epolls watch it
//! in its [`Registration`], so the add is skipped after the first time.
//!
//! Architecture Invariant (no lost wake-up with edge triggering): a fiber registers as a
//! waiter only after a syscall on the descriptor said `EAGAIN`, and only this processor's
//! thread calls `epoll_wait` on its instance, which it cannot do between the fiber's failed
//! syscall and its registration. Any readiness after the failed syscall is therefore a new
//! edge, queued by the kernel and reported to the registered waiter; readiness before it was
//! seen by the syscall itself. `EPOLL_CTL_ADD` reports the current state, so the first add is
//! covered too.
//!
//! `data` is the descriptor number, looked up in this processor's waiter table. A report for a
//! descriptor nobody waits on (no waiter then, closed and reused, already cancelled) is ignored;
//! a fiber woken for nothing simply finds `EAGAIN` and registers again, so a stale report can
//! cost a spurious wake-up but never a wrong result.

use std::cell::{Cell, OnceCell, RefCell};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use super::keep_tick::{monotonic_now_ns, split_ns, KeepTick};
use super::{DriverShared, PollMode};
use crate::io::lend::{self, LendPool};
use crate::io::op::{Completion, Dir, ACK, DONE};
use crate::loom::{AtomicU64, Ordering, StaticAtomicBool, StaticAtomicU64};

/// `data` of the waker's entry (descriptor numbers are non-negative `i32`s).
const WAKER: u64 = u64::MAX;
/// `data` of the tick keeper's timerfd ([`super::keep_tick`]).
const KEEPER: u64 = u64::MAX - 1;
/// Events fetched per `epoll_wait`.
const EVENTS: usize = 256;
/// Outside idle moments, look at the epoll only every this many scheduling rounds: it costs
/// a syscall.
const POLL_INTERVAL: u64 = 61;

/// Whether `epoll_pwait2` is worth trying: cleared for good the first time it says `ENOSYS`
/// or `EPERM`.
static PWAIT2: StaticAtomicBool = StaticAtomicBool::new(true);

/// Numbers the epoll instances of the process, so a [`Registration`] can name them.
static NEXT_EPOLL_ID: StaticAtomicU64 = StaticAtomicU64::new(0);

/// Which processors' epoll instances already watch a socket: bit `i` for the instance numbered
/// `i < 64`. Instances numbered 64 and up (only after many clusters came and went) always try
/// the add, which reports `EEXIST` when it was done before: correct, one syscall slower.
///
/// A bit is set only after a successful add (or `EEXIST`), and the kernel keeps the entry while
/// the descriptor is open, which is at least as long as the socket owning this value.
#[doc(hidden)]
#[derive(Debug, Default)]
pub struct Registration(AtomicU64);

impl Registration {
    crate::loom::const_fn_unless_loom! {
        /// Watched by no epoll yet.
        pub const fn new() -> Registration {
            Registration(AtomicU64::new(0))
        }
    }
}

/// What this processor knows about one descriptor: who waits on it, and whether a read edge
/// came since the last receive. Usually one reader and one writer; several when fibers share a
/// socket (say, many acceptors on one listener), and then readiness wakes them all and they
/// race for the data (the losers register again).
/// Entries are kept once created, so a busy descriptor does not allocate per wait; the table
/// is indexed by descriptor number and so bounded by the process's descriptor limit.
#[derive(Default)]
struct FdWaiters {
    /// Whether a read edge (or hang-up, or error) may have come since a fiber on this processor
    /// last started a receive on the descriptor. `true` when unknown: set when the descriptor is
    /// added to the epoll and by every readable report, cleared just before each receive.
    /// While it is `false` and the last receive came back short (the socket was drained), no
    /// data arrived since, except what a report still queued in the kernel will announce, so a
    /// reader may skip the receive and wait (the tokio "short read clears readiness" rule).
    read_edge: bool,
    /// Whether a hang-up or error was reported: sticky, as no edge follows it, so readers
    /// always try (the receive returns end of stream or the error).
    read_closed: bool,
    /// The waiting readers' `Completion`s.
    read: Vec<usize>,
    /// The waiting writers' `Completion`s.
    write: Vec<usize>,
}

/// One processor's epoll instance.
pub(crate) struct Epoll {
    pub(crate) shared: Arc<DriverShared>,
    epfd: OwnedFd,
    /// This instance's number (see [`Registration`]).
    id: u64,
    /// Who waits on which descriptor. Touched only on the owning thread.
    waiters: RefCell<Vec<FdWaiters>>,
    /// How many records `waiters` holds in all: with none, `poll` skips the syscall.
    waiting: Cell<usize>,
    /// Scratch list of records to wake.
    ready: RefCell<Vec<usize>>,
    events: RefCell<Vec<libc::epoll_event>>,
    /// Scratch list for forwarded cancellations.
    cancels: RefCell<Vec<usize>>,
    /// The tick keeper: when to arm its timer.
    keep: KeepTick,
    /// The keeper's timer (a one-shot timerfd in the epoll, edge-triggered), when it is on.
    keeper: Option<OwnedFd>,
    /// The receive buffers this processor lends (a free list here), made on the first
    /// receive that wants one ([`Epoll::lend_pool`]); `Some(None)` once making them failed.
    lend: OnceCell<Option<Arc<LendPool>>>,
}

fn cvt(r: i32) -> io::Result<i32> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

impl Epoll {
    /// An epoll instance with a tick keeper of `keep_tick` (zero: none).
    pub(crate) fn new(shared: Arc<DriverShared>, keep_tick: Duration) -> io::Result<Epoll> {
        // SAFETY: plain syscall; on success we own the descriptor.
        let epfd = unsafe { OwnedFd::from_raw_fd(cvt(libc::epoll_create1(libc::EPOLL_CLOEXEC))?) };
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: WAKER,
        };
        // SAFETY: both descriptors are open; `ev` is a valid event.
        cvt(unsafe {
            libc::epoll_ctl(
                epfd.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                shared.waker.raw_fd(),
                &mut ev,
            )
        })?;
        let keep = KeepTick::new(keep_tick);
        let keeper = if keep.period().is_zero() {
            None
        } else {
            // SAFETY: plain syscall; on success we own the descriptor.
            let fd = unsafe {
                OwnedFd::from_raw_fd(cvt(libc::timerfd_create(
                    libc::CLOCK_MONOTONIC,
                    libc::TFD_CLOEXEC | libc::TFD_NONBLOCK,
                ))?)
            };
            // Edge-triggered: every expiry is one report, and re-arming resets the count, so
            // the timerfd is never read.
            let mut ev = libc::epoll_event {
                events: (libc::EPOLLIN | libc::EPOLLET) as u32,
                u64: KEEPER,
            };
            // SAFETY: both descriptors are open; `ev` is a valid event.
            cvt(unsafe {
                libc::epoll_ctl(
                    epfd.as_raw_fd(),
                    libc::EPOLL_CTL_ADD,
                    fd.as_raw_fd(),
                    &mut ev,
                )
            })?;
            Some(fd)
        };
        Ok(Epoll {
            shared,
            epfd,
            id: NEXT_EPOLL_ID.fetch_add(1, Ordering::Relaxed),
            waiters: RefCell::new(Vec::new()),
            waiting: Cell::new(0),
            ready: RefCell::new(Vec::new()),
            events: RefCell::new(vec![libc::epoll_event { events: 0, u64: 0 }; EVENTS]),
            cancels: RefCell::new(Vec::new()),
            keep,
            keeper,
            lend: OnceCell::new(),
        })
    }

    /// The receive buffers this processor lends, made on the first call (the first
    /// `recv_lent` on this processor); `None` if their memory cannot be mapped (said once
    /// per process), and then receives go to the heap. A server that never asks for a lent
    /// buffer maps none.
    pub(crate) fn lend_pool(&self) -> Option<&Arc<LendPool>> {
        self.lend
            .get_or_init(|| lend::made_or_said(LendPool::list()).map(Arc::new))
            .as_ref()
    }

    /// The lent buffers if they have been made (never makes them).
    pub(crate) fn lend_pool_made(&self) -> Option<&Arc<LendPool>> {
        self.lend.get().and_then(Option::as_ref)
    }

    /// Adds `record` to the waiters of its descriptor and direction, first adding the
    /// descriptor to this epoll if `reg` says it is not watched here yet. The caller parks until
    /// the record is DONE.
    pub(crate) fn register(&self, record: &Completion, reg: &Registration) -> io::Result<()> {
        let fd = record.fd;
        self.watch(fd, reg)?;
        let me = record as *const Completion as usize;
        let mut waiters = self.waiters.borrow_mut();
        let w = &mut waiters[fd as usize];
        match record.dir {
            Dir::Read => w.read.push(me),
            Dir::Write => w.write.push(me),
        }
        self.waiting.set(self.waiting.get() + 1);
        Ok(())
    }

    /// Makes sure this epoll watches `fd` (both directions, edge-triggered).
    fn watch(&self, fd: RawFd, reg: &Registration) -> io::Result<()> {
        let index = usize::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
        {
            let mut waiters = self.waiters.borrow_mut();
            if waiters.len() <= index {
                waiters.resize_with(index + 1, FdWaiters::default);
            }
        }
        let bit = self.bit();
        if bit != 0 && reg.0.load(Ordering::Relaxed) & bit != 0 {
            return Ok(());
        }
        // A new entry (or an old one the kernel dropped when a file closed) knows nothing.
        let mut waiters = self.waiters.borrow_mut();
        waiters[index].read_edge = true;
        waiters[index].read_closed = false;
        drop(waiters);
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32,
            u64: fd as u64,
        };
        // SAFETY: `ev` is valid; a bad `fd` is reported as an error.
        let r = unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
        if r < 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EEXIST) {
                return Err(err);
            }
        }
        reg.0.fetch_or(bit, Ordering::Relaxed);
        Ok(())
    }

    /// This instance's bit in a [`Registration`] (0 for instances numbered 64 and up).
    fn bit(&self) -> u64 {
        if self.id < 64 {
            1u64 << self.id
        } else {
            0
        }
    }

    /// Whether a reader whose last receive came back short may skip trying again and wait:
    /// this epoll watches the socket and saw no read edge since the last receive here.
    pub(crate) fn drained_still(&self, fd: RawFd, reg: &Registration) -> bool {
        let bit = self.bit();
        if bit == 0 || reg.0.load(Ordering::Relaxed) & bit == 0 {
            return false;
        }
        let waiters = self.waiters.borrow();
        waiters
            .get(fd as usize)
            .is_some_and(|w| !w.read_edge && !w.read_closed)
    }

    /// Notes that a receive on `fd` starts now (see [`FdWaiters::read_edge`]).
    pub(crate) fn receiving(&self, fd: RawFd) {
        if let Some(w) = self.waiters.borrow_mut().get_mut(fd as usize) {
            w.read_edge = false;
        }
    }

    /// Takes `record` out of `fd`'s `dir` waiters; whether it was there.
    fn remove(&self, fd: RawFd, dir: Dir, record: usize) -> bool {
        let mut waiters = self.waiters.borrow_mut();
        let Some(w) = waiters.get_mut(fd as usize) else {
            return false;
        };
        let list = match dir {
            Dir::Read => &mut w.read,
            Dir::Write => &mut w.write,
        };
        let Some(pos) = list.iter().position(|&r| r == record) else {
            return false;
        };
        list.swap_remove(pos);
        self.waiting.set(self.waiting.get() - 1);
        true
    }

    /// Withdraws `record` (on this thread). If it was still waiting it completes with
    /// `ECANCELED`; either way the cancel is acknowledged. The epoll entry stays: a report for
    /// nobody is ignored.
    pub(crate) fn cancel(&self, record: *const Completion) {
        // SAFETY: the record lives until its fiber sees DONE and ACK, which only happens below.
        let (fd, dir) = unsafe { ((*record).fd, (*record).dir) };
        if self.remove(fd, dir, record as usize) {
            // SAFETY: as above.
            unsafe { Completion::finish(record as usize, Some(-libc::ECANCELED), DONE | ACK) };
        } else {
            // SAFETY: as above.
            unsafe { Completion::finish(record as usize, None, ACK) };
        }
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
        self.take_cancels();
        let look = match mode {
            PollMode::Busy => tick % POLL_INTERVAL == 0,
            PollMode::Idle => true,
            // The park that follows asks the kernel anyway (and returns at once if ready).
            PollMode::BeforePark => false,
        };
        if !look {
            return 0;
        }
        if self.waiting.get() == 0 {
            // Nobody waits on a descriptor here: only the waker could be ready, and the
            // processor checks its queues anyway.
            return 0;
        }
        self.wait_for(Some(Duration::ZERO))
    }

    pub(crate) fn park(&self, timeout: Option<Duration>) {
        self.take_cancels();
        // One clock reading for arming the keeper and for judging the timeout against it.
        let mut now_ns = None;
        if let (Some(fd), Some(expiry_ns)) = (
            &self.keeper,
            self.keep.arm(|| *now_ns.insert(monotonic_now_ns())),
        ) {
            let (sec, nsec) = split_ns(expiry_ns);
            let spec = libc::itimerspec {
                it_interval: libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                },
                it_value: libc::timespec {
                    tv_sec: sec as libc::time_t,
                    tv_nsec: nsec as libc::c_long,
                },
            };
            // SAFETY: our own timerfd (CLOCK_MONOTONIC, as the expiry); `spec` lives through the
            // call; no old value is asked for.
            let r = unsafe {
                libc::timerfd_settime(
                    fd.as_raw_fd(),
                    libc::TFD_TIMER_ABSTIME,
                    &spec,
                    std::ptr::null_mut(),
                )
            };
            if r < 0 {
                self.keep.not_armed();
            }
        }
        // With the keeper due first the kernel needs no timer of its own for this sleep.
        self.wait_for(
            self.keep
                .wait_timeout(timeout, || now_ns.unwrap_or_else(monotonic_now_ns)),
        );
    }

    /// One wait for events, at most `timeout` long (`None`: until an event or the waker);
    /// wakes the fibers whose descriptors are ready.
    ///
    /// Uses `epoll_pwait2` (Linux 5.11) for a nanosecond timeout: `epoll_wait` counts in whole
    /// milliseconds, so a processor whose next timer is 50 µs away would sleep a full
    /// millisecond (rounding down instead would spin). On older kernels (`ENOSYS`) or under a
    /// seccomp filter that refuses it (`EPERM`) it falls back to `epoll_wait`, rounding up.
    fn wait_for(&self, timeout: Option<Duration>) -> usize {
        let mut events = self.events.borrow_mut();
        let n = if PWAIT2.load(Ordering::Relaxed) {
            let spec = timeout.map(|t| libc::timespec {
                tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
                tv_nsec: t.subsec_nanos() as libc::c_long,
            });
            let spec_ptr = spec
                .as_ref()
                .map_or(std::ptr::null(), |s| s as *const libc::timespec);
            // SAFETY: `events` has room for `EVENTS` entries; `spec_ptr` is null or points to
            // a timespec living until the call returns; a null sigmask leaves the mask alone.
            let n = unsafe {
                libc::syscall(
                    libc::SYS_epoll_pwait2,
                    self.epfd.as_raw_fd(),
                    events.as_mut_ptr(),
                    EVENTS as libc::c_int,
                    spec_ptr,
                    std::ptr::null::<libc::sigset_t>(),
                    0usize,
                )
            };
            // ENOSYS: kernel before 5.11; EPERM: a seccomp filter that does not know the call
            // (the call itself never fails with EPERM).
            let errno = io::Error::last_os_error().raw_os_error();
            if n < 0 && matches!(errno, Some(libc::ENOSYS) | Some(libc::EPERM)) {
                PWAIT2.store(false, Ordering::Relaxed);
                drop(events);
                return self.wait_for(timeout);
            }
            n as i32
        } else {
            let timeout_ms = match timeout {
                None => -1,
                // Round up: waking before the deadline would only make us sleep again.
                Some(t) => t.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32,
            };
            // SAFETY: `events` has room for `EVENTS` entries.
            unsafe {
                libc::epoll_wait(
                    self.epfd.as_raw_fd(),
                    events.as_mut_ptr(),
                    EVENTS as i32,
                    timeout_ms,
                )
            }
        };
        let mut woken = 0;
        let mut waked = false;
        for ev in events.iter().take(n.max(0) as usize) {
            let data = ev.u64;
            if data == WAKER {
                let mut buf = 0u64;
                // SAFETY: reads 8 bytes into a live u64 from our non-blocking eventfd.
                unsafe { libc::read(self.shared.waker.raw_fd(), (&mut buf as *mut u64).cast(), 8) };
                waked = true;
                continue;
            }
            if data == KEEPER {
                self.keep.fired();
                continue;
            }
            let fd = data as RawFd;
            let flags = ev.events;
            let err = (libc::EPOLLERR | libc::EPOLLHUP) as u32;
            let readable = flags & ((libc::EPOLLIN | libc::EPOLLRDHUP) as u32 | err) != 0;
            let writable = flags & (libc::EPOLLOUT as u32 | err) != 0;
            let mut ready = self.ready.borrow_mut();
            {
                let mut waiters = self.waiters.borrow_mut();
                let Some(w) = waiters.get_mut(fd as usize) else {
                    continue;
                };
                if flags & (libc::EPOLLRDHUP as u32 | err) != 0 {
                    w.read_closed = true;
                }
                if readable {
                    w.read_edge = true;
                    ready.append(&mut w.read);
                }
                if writable {
                    ready.append(&mut w.write);
                }
            }
            self.waiting.set(self.waiting.get() - ready.len());
            woken += ready.len();
            for record in ready.drain(..) {
                // SAFETY: a registered record lives until its fiber sees DONE.
                unsafe { Completion::finish(record, Some(0), DONE) };
            }
        }
        if woken > 0 || waked {
            self.keep.worked();
        }
        woken
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::io::driver::{Driver, Waker};
    use crate::io::IoBackend;

    #[test]
    fn the_lent_buffers_are_made_on_the_first_receive_that_wants_them() {
        let waker = Arc::new(Waker::new(IoBackend::Epoll).unwrap());
        let shared = Arc::new(DriverShared::new(waker));
        let driver = Driver::Epoll(Epoll::new(shared, Duration::ZERO).expect("epoll works"));
        assert!(driver.lend().is_none(), "no buffers before a receive asks");
        let Driver::Epoll(e) = &driver else {
            unreachable!("made above")
        };
        let pool = e.lend_pool().expect("anonymous memory maps here").clone();
        let again = e.lend_pool().expect("made once");
        assert!(Arc::ptr_eq(&pool, again), "the same pool every time");
        assert!(driver.lend().is_some_and(|p| Arc::ptr_eq(p, &pool)));
        drop(driver);
        assert_eq!(Arc::strong_count(&pool), 1, "the driver let its pool go");
    }
}
