//! The epoll driver: readiness, one-shot, per processor (the libfibre / Go netpoller shape).
//!
//! Descriptors are non-blocking. A fiber tries the syscall; on `EAGAIN` it registers its
//! [`Completion`] as the reader or writer of the descriptor on its processor's epoll and parks;
//! the processor's next `epoll_wait` wakes it and it tries again.
//!
//! One epoll entry per descriptor carries the union of its waiters' interests with
//! `EPOLLONESHOT`, and `data` is the descriptor number, looked up in this processor's waiter
//! table. A readiness report for a descriptor nobody waits on (closed and reused, or already
//! cancelled) is ignored; a fiber woken for nothing simply finds `EAGAIN` and registers again,
//! so a stale report can cost a spurious wake-up but never a wrong result.
//! A fiber that later runs on another processor registers there; the old processor's entry stays
//! disarmed (one-shot) until the descriptor closes.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::Instant;

use super::DriverShared;
use crate::io::op::{Completion, Dir, ACK, DONE};

/// `data` of the waker's entry (descriptor numbers are non-negative `i32`s).
const WAKER: u64 = u64::MAX;
/// Events fetched per `epoll_wait`.
const EVENTS: usize = 256;
/// Outside idle moments, look at the epoll only every this many scheduling rounds: it costs
/// a syscall.
const POLL_INTERVAL: u64 = 61;

/// The fibers waiting on one descriptor on this processor. Usually one reader and one
/// writer; several when fibers share a socket (say, many acceptors on one listener), and then
/// readiness wakes them all and they race for the data (the losers register again).
/// Entries are kept once created, so a busy descriptor does not allocate per wait; the table
/// is bounded by the process's descriptor limit.
#[derive(Default)]
struct FdWaiters {
    /// The waiting readers' `Completion`s.
    read: Vec<usize>,
    /// The waiting writers' `Completion`s.
    write: Vec<usize>,
}

/// One processor's epoll instance.
pub(crate) struct Epoll {
    pub(crate) shared: Arc<DriverShared>,
    epfd: OwnedFd,
    /// Who waits on which descriptor. Touched only on the owning thread.
    waiters: RefCell<HashMap<RawFd, FdWaiters>>,
    /// How many records `waiters` holds in all: with none, `poll` skips the syscall.
    waiting: Cell<usize>,
    /// Scratch list of records to wake.
    ready: RefCell<Vec<usize>>,
    events: RefCell<Vec<libc::epoll_event>>,
    /// Scratch list for forwarded cancellations.
    cancels: RefCell<Vec<usize>>,
}

fn cvt(r: i32) -> io::Result<i32> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

impl Epoll {
    pub(crate) fn new(shared: Arc<DriverShared>) -> io::Result<Epoll> {
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
        Ok(Epoll {
            shared,
            epfd,
            waiters: RefCell::new(HashMap::new()),
            waiting: Cell::new(0),
            ready: RefCell::new(Vec::new()),
            events: RefCell::new(vec![libc::epoll_event { events: 0, u64: 0 }; EVENTS]),
            cancels: RefCell::new(Vec::new()),
        })
    }

    /// Adds `record` to the waiters of its descriptor and direction and arms the epoll entry.
    /// The caller parks until the record is DONE.
    pub(crate) fn register(&self, record: &Completion) -> io::Result<()> {
        let fd = record.fd;
        let me = record as *const Completion as usize;
        {
            let mut waiters = self.waiters.borrow_mut();
            let w = waiters.entry(fd).or_default();
            match record.dir {
                Dir::Read => w.read.push(me),
                Dir::Write => w.write.push(me),
            }
        }
        self.waiting.set(self.waiting.get() + 1);
        if let Err(e) = self.arm(fd) {
            self.remove(fd, record.dir, me);
            return Err(e);
        }
        Ok(())
    }

    /// Takes `record` out of `fd`'s `dir` waiters; whether it was there.
    fn remove(&self, fd: RawFd, dir: Dir, record: usize) -> bool {
        let mut waiters = self.waiters.borrow_mut();
        let Some(w) = waiters.get_mut(&fd) else {
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

    /// Arms `fd`'s entry with the union of its waiters' interests.
    fn arm(&self, fd: RawFd) -> io::Result<()> {
        let events = {
            let waiters = self.waiters.borrow();
            let Some(w) = waiters.get(&fd) else {
                return Ok(());
            };
            let mut events = libc::EPOLLONESHOT as u32;
            if !w.read.is_empty() {
                events |= (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
            }
            if !w.write.is_empty() {
                events |= libc::EPOLLOUT as u32;
            }
            events
        };
        let mut ev = libc::epoll_event {
            events,
            u64: fd as u64,
        };
        let epfd = self.epfd.as_raw_fd();
        // SAFETY: `ev` is valid; a bad `fd` is reported as an error.
        let r = unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_MOD, fd, &mut ev) };
        if r == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::ENOENT) {
            return Err(err);
        }
        // SAFETY: as above.
        cvt(unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) }).map(|_| ())
    }

    /// Withdraws `record` (on this thread). If it was still waiting it completes with
    /// `ECANCELED`; either way the cancel is acknowledged. The epoll entry may stay armed: a
    /// report for nobody is ignored.
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

    fn take_cancels(&self) {
        let mut list = self.cancels.borrow_mut();
        self.shared.take_cancels(&mut list);
        for record in list.drain(..) {
            self.cancel(record as *const Completion);
        }
    }

    pub(crate) fn poll(&self, tick: u64, idle: bool) -> usize {
        self.take_cancels();
        if !idle && tick % POLL_INTERVAL != 0 {
            return 0;
        }
        if self.waiting.get() == 0 {
            // Nobody waits on a descriptor here: only the waker could be ready, and the
            // processor checks its queues anyway.
            return 0;
        }
        self.wait(0)
    }

    pub(crate) fn park(&self, deadline: Option<Instant>) {
        self.take_cancels();
        let timeout_ms = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                // Round up: waking before the deadline would only make us sleep again.
                left.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32
            }
        };
        self.wait(timeout_ms);
    }

    /// One `epoll_wait`; wakes the fibers whose descriptors are ready.
    fn wait(&self, timeout_ms: i32) -> usize {
        let mut events = self.events.borrow_mut();
        // SAFETY: `events` has room for `EVENTS` entries.
        let n = unsafe {
            libc::epoll_wait(
                self.epfd.as_raw_fd(),
                events.as_mut_ptr(),
                EVENTS as i32,
                timeout_ms,
            )
        };
        let mut woken = 0;
        for ev in events.iter().take(n.max(0) as usize) {
            let data = ev.u64;
            if data == WAKER {
                let mut buf = 0u64;
                // SAFETY: reads 8 bytes into a live u64 from our non-blocking eventfd.
                unsafe { libc::read(self.shared.waker.raw_fd(), (&mut buf as *mut u64).cast(), 8) };
                continue;
            }
            let fd = data as RawFd;
            let flags = ev.events;
            let err = (libc::EPOLLERR | libc::EPOLLHUP) as u32;
            let readable = flags & ((libc::EPOLLIN | libc::EPOLLRDHUP) as u32 | err) != 0;
            let writable = flags & (libc::EPOLLOUT as u32 | err) != 0;
            let mut ready = self.ready.borrow_mut();
            let rearm = {
                let mut waiters = self.waiters.borrow_mut();
                let Some(w) = waiters.get_mut(&fd) else {
                    continue;
                };
                if readable {
                    ready.append(&mut w.read);
                }
                if writable {
                    ready.append(&mut w.write);
                }
                !w.read.is_empty() || !w.write.is_empty()
            };
            self.waiting.set(self.waiting.get() - ready.len());
            woken += ready.len();
            for record in ready.drain(..) {
                // SAFETY: a registered record lives until its fiber sees DONE.
                unsafe { Completion::finish(record, Some(0), DONE) };
            }
            drop(ready);
            if rearm {
                // The one-shot entry fired for one direction; keep the other armed. On error
                // the remaining waiters are woken to find out for themselves.
                if self.arm(fd).is_err() {
                    self.wake_all_on(fd);
                }
            }
        }
        woken
    }

    fn wake_all_on(&self, fd: RawFd) {
        let mut ready = Vec::new();
        if let Some(w) = self.waiters.borrow_mut().get_mut(&fd) {
            ready.append(&mut w.read);
            ready.append(&mut w.write);
        }
        self.waiting.set(self.waiting.get() - ready.len());
        for record in ready {
            // SAFETY: as in `wait`.
            unsafe { Completion::finish(record, Some(0), DONE) };
        }
    }
}
