//! The stream-socket calls TCP and Unix streams share: `recv`, `send`, and timeout bookkeeping.
//!
//! Invariant: every function here returns only once the kernel is done with the buffer it was
//! given (the guarantee of [`op::run`]).

use crate::loom::{AtomicU64, Ordering};
use std::io;
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types::Fd};

use crate::io::driver::Driver;
use crate::io::lend::{self, Lent, LENT_BUFFER_BYTES};
use crate::io::op::{self, Dir, Registration};

/// The longest single read or write handed to the kernel.
const MAX_IO_BYTES: usize = i32::MAX as usize;

/// The deadline a timeout stored in nanoseconds (0: none) gives a call starting now.
pub(crate) fn deadline(timeout_ns: &AtomicU64) -> Option<Instant> {
    match timeout_ns.load(Ordering::Relaxed) {
        0 => None,
        ns => Some(Instant::now() + Duration::from_nanos(ns)),
    }
}

/// A timeout as stored (nanoseconds, 0 for none); a zero duration is an error, as in `std`.
pub(crate) fn timeout_ns(timeout: Option<Duration>) -> io::Result<u64> {
    match timeout {
        None => Ok(0),
        Some(d) if d.is_zero() => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "cannot set a 0 duration timeout",
        )),
        Some(d) => Ok(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
    }
}

/// The stored timeout back as a `Duration`.
pub(crate) fn stored_timeout(ns: &AtomicU64) -> Option<Duration> {
    match ns.load(Ordering::Relaxed) {
        0 => None,
        ns => Some(Duration::from_nanos(ns)),
    }
}

/// Sets `errno` (for syscall closures that translate one error into another).
pub(crate) fn set_errno(e: i32) {
    // SAFETY: errno is a thread-local int.
    unsafe { *libc::__errno_location() = e };
}

/// `IORING_RECVSEND_POLL_FIRST`: arm the poll before trying the receive.
const RECV_POLL_FIRST: u16 = 1;

/// `recv(2)` on a connected stream socket, as the caller's context does it.
///
/// `poll_first` says the socket is probably empty: callers pass whether their previous
/// receive came back short and non-empty (the socket was drained then), as in request/response
/// traffic. io_uring then arms its poll without first trying a receive that would fail; the
/// epoll driver waits straight away unless a read edge came since (see `driver/epoll.rs`).
pub(crate) fn recv(
    fd: i32,
    reg: &Registration,
    buf: &mut [u8],
    deadline: Option<Instant>,
    poll_first: bool,
) -> io::Result<usize> {
    recv_stamped(fd, reg, buf, deadline, poll_first, false).map(|(n, _)| n)
}

/// [`recv`], returning too, when `want_arrival` asks, the arrival ticket the driver stamped on
/// the receive's completion; 0 when none was asked for or a system call this fiber just made
/// got the bytes (see [`op::run_stamped`]).
pub(crate) fn recv_stamped(
    fd: i32,
    reg: &Registration,
    buf: &mut [u8],
    deadline: Option<Instant>,
    poll_first: bool,
    want_arrival: bool,
) -> io::Result<(usize, u64)> {
    let (ptr, len) = (buf.as_mut_ptr(), buf.len());
    // SAFETY: `buf` is borrowed for the whole call, and the call returns only once the
    // kernel is done with it.
    unsafe { recv_raw(fd, reg, ptr, len, deadline, poll_first, want_arrival) }
}

/// [`recv_stamped`] into `len` bytes at `ptr`, which need not be initialised; the arrival
/// ticket (0 when none was stamped) is asked for only with `want_arrival`.
///
/// # Safety
/// `ptr..ptr + len` is writable memory the caller owns for the whole call.
unsafe fn recv_raw(
    fd: i32,
    reg: &Registration,
    ptr: *mut u8,
    len: usize,
    deadline: Option<Instant>,
    poll_first: bool,
    want_arrival: bool,
) -> io::Result<(usize, u64)> {
    let len = len.min(MAX_IO_BYTES);
    let sqe = || {
        opcode::Recv::new(Fd(fd), ptr, len as u32)
            .ioprio(if poll_first { RECV_POLL_FIRST } else { 0 })
            .build()
    };
    // SAFETY: `sys` writes at most `len` bytes at `ptr`, memory the caller owns.
    let sys = || unsafe { libc::recv(fd, ptr.cast(), len, 0) };
    // SAFETY: the caller owns the memory for the whole call, and the call returns only once
    // the kernel is done with it.
    unsafe {
        op::run_stamped(
            fd,
            reg,
            Dir::Read,
            poll_first,
            deadline,
            sqe,
            sys,
            want_arrival,
        )
    }
}

/// `recv(2)` into a buffer the processor lends ([`crate::io::lend`]), as the caller's
/// context does it: on io_uring a receive that lets the kernel pick one of the ring's
/// provided buffers when the data is there; on epoll a `recv(2)` into a buffer taken from the
/// processor's free list just before (and given back before waiting); on a plain thread,
/// when no buffer is free, or when the processor could not map its buffers (they are made on
/// its first lent receive), a heap buffer. `poll_first` as for [`recv`].
pub(crate) fn recv_lent(
    fd: i32,
    reg: &Registration,
    deadline: Option<Instant>,
    poll_first: bool,
) -> io::Result<Lent> {
    match op::current_driver() {
        Some(Driver::Uring(_)) => recv_provided(fd, reg, deadline, poll_first),
        Some(Driver::Epoll(_)) => recv_from_list(fd, reg, deadline, poll_first),
        None => recv_heap(fd, reg, deadline, poll_first),
    }
}

/// The io_uring receive with `IOSQE_BUFFER_SELECT` from the ring of the processor the fiber
/// runs on when it submits (it may run elsewhere after a wait: the buffer comes from the
/// pool of the ring that took the receive).
fn recv_provided(
    fd: i32,
    reg: &Registration,
    deadline: Option<Instant>,
    poll_first: bool,
) -> io::Result<Lent> {
    let mut poll_first = poll_first;
    loop {
        let pool = match op::current_driver() {
            Some(Driver::Uring(u)) => {
                let Some(pool) = u.lend_pool() else {
                    return recv_heap(fd, reg, deadline, poll_first);
                };
                // SAFETY: `u` is this thread's driver, so this is the pool's owner thread.
                unsafe { pool.take_back_returned() };
                if !pool.ring_has_room() {
                    // Most buffers are lent out (a burst, or more work than the processor
                    // keeps up with): the heap, in one round trip.
                    return recv_heap(fd, reg, deadline, poll_first);
                }
                pool.clone()
            }
            _ => return recv_heap(fd, reg, deadline, poll_first),
        };
        // SAFETY: the entry carries no buffer pointer (the kernel picks a provided buffer,
        // which stays the pool's until the `Lent` made of it is dropped). Nothing switches
        // the fiber out between taking `pool` and this submission, so the receive goes to
        // that pool's ring.
        let done = unsafe {
            op::on_uring_with_flags(fd, deadline, || {
                opcode::Recv::new(Fd(fd), std::ptr::null_mut(), LENT_BUFFER_BYTES as u32)
                    .buf_group(lend::BUFFER_GROUP)
                    .ioprio(if poll_first { RECV_POLL_FIRST } else { 0 })
                    .build()
                    .flags(squeue::Flags::BUFFER_SELECT)
            })
        };
        let (r, flags) = match done {
            Some(done) => done?,
            None => unreachable!("weft: the fiber left its uring processor without switching"),
        };
        if r >= 0 {
            return Ok(match cqueue::buffer_select(flags) {
                Some(bid) => Lent::pooled(pool, bid, r as usize),
                None => Lent::empty(),
            });
        }
        match -r {
            // Every buffer is lent out: this receive goes to the heap.
            libc::ENOBUFS => return recv_heap(fd, reg, deadline, false),
            libc::EAGAIN => {
                op::wait_ready(fd, reg, Dir::Read, deadline)?;
                poll_first = false;
            }
            e => return Err(io::Error::from_raw_os_error(e)),
        }
    }
}

/// The epoll receive: a buffer from the processor's free list for each `recv(2)` tried.
fn recv_from_list(
    fd: i32,
    reg: &Registration,
    deadline: Option<Instant>,
    poll_first: bool,
) -> io::Result<Lent> {
    if let Some(Driver::Epoll(e)) = op::current_driver() {
        if poll_first && e.drained_still(fd, reg) {
            op::wait_ready(fd, reg, Dir::Read, deadline)?;
        }
    }
    loop {
        if crate::fiber::current::is_cancelled() {
            return Err(op::cancelled());
        }
        // Looked up again on each try: the fiber may have moved while it waited.
        let Some(Driver::Epoll(e)) = op::current_driver() else {
            return recv_heap(fd, reg, deadline, false);
        };
        let Some(pool) = e.lend_pool() else {
            return recv_heap(fd, reg, deadline, false);
        };
        e.receiving(fd);
        // SAFETY: `e` is this thread's driver, so this is the pool's owner thread.
        unsafe { pool.take_back_returned() };
        // SAFETY: as above.
        let bid = unsafe { pool.take() };
        let mut heap = None;
        let ptr = match bid {
            Some(bid) => pool.buffer(bid).as_ptr(),
            None => heap.insert(Lent::heap_buffer()).as_mut_ptr().cast::<u8>(),
        };
        // SAFETY: `ptr` is a free buffer of LENT_BUFFER_BYTES this call owns (taken from the
        // list, or the heap box held in `heap`).
        let r = unsafe { libc::recv(fd, ptr.cast(), LENT_BUFFER_BYTES, 0) };
        if r >= 0 {
            let lent = match (bid, heap) {
                (Some(bid), _) => Lent::pooled(pool.clone(), bid, r as usize),
                // SAFETY: `recv` wrote the first `r` bytes.
                (None, Some(buf)) => unsafe { Lent::heap(buf, r as usize) },
                (None, None) => unreachable!("one of the two was taken"),
            };
            op::spend_op_budget();
            return Ok(lent);
        }
        let err = io::Error::last_os_error();
        if let Some(bid) = bid {
            // SAFETY: owner thread (as above); the buffer was taken and not lent.
            unsafe { pool.put(bid) };
        }
        match err.raw_os_error() {
            Some(libc::EINTR) => {}
            Some(libc::EAGAIN) => op::wait_ready(fd, reg, Dir::Read, deadline)?,
            _ => return Err(err),
        }
    }
}

/// A receive into a fresh heap buffer (plain threads, and when no lent buffer is free).
fn recv_heap(
    fd: i32,
    reg: &Registration,
    deadline: Option<Instant>,
    poll_first: bool,
) -> io::Result<Lent> {
    let mut buf = Lent::heap_buffer();
    // SAFETY: the buffer is owned here for the whole call, which returns only once the kernel
    // is done with it.
    let (n, _) = unsafe {
        recv_raw(
            fd,
            reg,
            buf.as_mut_ptr().cast(),
            buf.len(),
            deadline,
            poll_first,
            false,
        )
    }?;
    // SAFETY: the receive wrote the first `n` bytes.
    Ok(unsafe { Lent::heap(buf, n) })
}

/// `recv(2)` with `MSG_DONTWAIT`: what is waiting in the socket now, or `WouldBlock`; never
/// waits and never switches a fiber out.
pub(crate) fn try_recv(fd: i32, buf: &mut [u8]) -> io::Result<usize> {
    let len = buf.len().min(MAX_IO_BYTES);
    // SAFETY: `recv` writes at most `len` bytes into `buf`, which is borrowed for the call;
    // MSG_DONTWAIT makes it return at once.
    let r = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), len, libc::MSG_DONTWAIT) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// `send(2)` with `MSG_NOSIGNAL` on a connected stream socket, waiting for the kernel to take
/// the bytes (the ordinary path; streams write through `send_side`, which may send behind).
pub(crate) fn send_now(
    fd: i32,
    reg: &Registration,
    buf: &[u8],
    deadline: Option<Instant>,
) -> io::Result<usize> {
    send_flagged(fd, reg, buf, deadline, false)
}

/// `send(2)` with `MSG_NOSIGNAL | MSG_MORE`: the kernel keeps the bytes back for the caller's
/// next send on the socket, which joins them in one segment. Tried as a system call first, as
/// a small write into an empty socket buffer takes at once; the ring (or readiness waiting)
/// only when the socket pushes back. Whoever sends with it owes the socket a write without
/// `MSG_MORE`, or [`push`], or the bytes wait.
pub(crate) fn send_more_now(
    fd: i32,
    reg: &Registration,
    buf: &[u8],
    deadline: Option<Instant>,
) -> io::Result<usize> {
    send_flagged(fd, reg, buf, deadline, true)
}

/// [`send_now`], or with `more` [`send_more_now`].
fn send_flagged(
    fd: i32,
    reg: &Registration,
    buf: &[u8],
    deadline: Option<Instant>,
    more: bool,
) -> io::Result<usize> {
    let len = buf.len().min(MAX_IO_BYTES);
    let ptr = buf.as_ptr();
    let flags = libc::MSG_NOSIGNAL | if more { libc::MSG_MORE } else { 0 };
    let sqe = || {
        opcode::Send::new(Fd(fd), ptr, len as u32)
            .flags(flags)
            .build()
    };
    // SAFETY: as in `recv`: `buf` outlives the call, which returns only once the kernel is
    // done with it.
    unsafe {
        let sys = || libc::send(fd, ptr.cast(), len, flags);
        if more {
            op::run_syscall_first(fd, reg, Dir::Write, deadline, sqe, sys)
        } else {
            op::run(fd, reg, Dir::Write, false, deadline, sqe, sys)
        }
    }
}

/// Sends what [`send_more_now`] kept back, now (turning `TCP_CORK` off pushes a TCP socket's
/// pending bytes whatever its settings were; other sockets keep nothing back). Best effort:
/// closing the socket sends them too.
pub(crate) fn push(fd: i32) {
    let off: libc::c_int = 0;
    // SAFETY: setsockopt with an int option that outlives the call; a socket that is not TCP
    // fails harmlessly.
    unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CORK,
            (&off as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// `sendmsg(2)` of several buffers with `MSG_NOSIGNAL` (the ordinary path, as `send_now`).
pub(crate) fn send_vectored_now(
    fd: i32,
    reg: &Registration,
    bufs: &[io::IoSlice<'_>],
    deadline: Option<Instant>,
) -> io::Result<usize> {
    send_vectored_flagged(fd, reg, bufs, deadline, false)
}

/// [`send_vectored_now`] with `MSG_MORE`, tried as a system call first: as [`send_more_now`]
/// for several buffers.
pub(crate) fn send_vectored_more_now(
    fd: i32,
    reg: &Registration,
    bufs: &[io::IoSlice<'_>],
    deadline: Option<Instant>,
) -> io::Result<usize> {
    send_vectored_flagged(fd, reg, bufs, deadline, true)
}

/// [`send_vectored_now`], or with `more` [`send_vectored_more_now`].
fn send_vectored_flagged(
    fd: i32,
    reg: &Registration,
    bufs: &[io::IoSlice<'_>],
    deadline: Option<Instant>,
    more: bool,
) -> io::Result<usize> {
    let iovlen = bufs.len().min(libc::UIO_MAXIOV as usize);
    // SAFETY: an all-zero msghdr is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // `IoSlice` is guaranteed ABI-compatible with `iovec` on Unix.
    msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = iovlen;
    let msg_ptr = &msg as *const libc::msghdr;
    let flags = libc::MSG_NOSIGNAL | if more { libc::MSG_MORE } else { 0 };
    let sqe = || {
        opcode::SendMsg::new(Fd(fd), msg_ptr)
            .flags(flags as u32)
            .build()
    };
    // SAFETY: `msg` and the buffers it points at outlive the call, which returns only once
    // the kernel is done with them.
    unsafe {
        let sys = || libc::sendmsg(fd, msg_ptr, flags);
        if more {
            op::run_syscall_first(fd, reg, Dir::Write, deadline, sqe, sys)
        } else {
            op::run(fd, reg, Dir::Write, false, deadline, sqe, sys)
        }
    }
}

/// A connected stream socket that file sending can write to ([`crate::fs::send_file`]).
/// Implemented for [`super::TcpStream`] and [`super::UnixStream`]; sealed.
pub trait StreamSocket: sealed::Sealed {
    #[doc(hidden)]
    fn socket_fd(&self) -> i32;
    #[doc(hidden)]
    fn write_deadline(&self) -> Option<Instant>;
    #[doc(hidden)]
    fn registration(&self) -> &Registration;
    /// Waits until every byte written before through the stream is with the kernel.
    #[doc(hidden)]
    fn settle_writes(&self) -> io::Result<()>;
}

pub(crate) mod sealed {
    pub trait Sealed {}
}

/// The plumbing every stream socket type shares, for a type with fields `send` (its
/// [`super::send_side::SendSide`], which owns the socket), `reg` (its epoll [`Registration`]) and
/// `read_timeout_ns`, and a `from_send_side` constructor: the timeout
/// accessors, `try_clone`, `take_error`, `Read`/`Write` on the owned value (delegating to the
/// `&T` impls the type writes itself), the fd conversions, and `StreamSocket`.
macro_rules! stream_plumbing {
    ($t:ty) => {
        impl $t {
            /// Every later read gives up after `timeout` with error kind `TimedOut` (`None`:
            /// never). A zero duration is an error, as in `std`.
            pub fn set_read_timeout(
                &self,
                timeout: Option<std::time::Duration>,
            ) -> std::io::Result<()> {
                self.read_timeout_ns.store(
                    $crate::net::sockio::timeout_ns(timeout)?,
                    $crate::loom::Ordering::Relaxed,
                );
                Ok(())
            }

            /// Every later write gives up after `timeout` with error kind `TimedOut` (`None`:
            /// never). A zero duration is an error, as in `std`.
            pub fn set_write_timeout(
                &self,
                timeout: Option<std::time::Duration>,
            ) -> std::io::Result<()> {
                self.send.timeout_ns().store(
                    $crate::net::sockio::timeout_ns(timeout)?,
                    $crate::loom::Ordering::Relaxed,
                );
                Ok(())
            }

            /// The read timeout.
            pub fn read_timeout(&self) -> std::io::Result<Option<std::time::Duration>> {
                Ok($crate::net::sockio::stored_timeout(&self.read_timeout_ns))
            }

            /// The write timeout.
            pub fn write_timeout(&self) -> std::io::Result<Option<std::time::Duration>> {
                Ok($crate::net::sockio::stored_timeout(self.send.timeout_ns()))
            }

            /// A second handle to the same connection (a `dup`ed descriptor); timeouts start
            /// unset. Writes through either handle go out in the order they were made.
            pub fn try_clone(&self) -> std::io::Result<$t> {
                let sock = self.send.sock().try_clone()?;
                Ok(<$t>::from_send_side(self.send.sharing(sock)))
            }

            /// Takes the pending socket error (`SO_ERROR`).
            pub fn take_error(&self) -> std::io::Result<Option<std::io::Error>> {
                self.send.sock().take_error()
            }

            /// Shuts down the read half, the write half, or both. Bytes written before go out
            /// first; if one of them could not be sent, its error is returned (after the
            /// shutdown).
            pub fn shutdown(&self, how: std::net::Shutdown) -> std::io::Result<()> {
                let settled = self.send.settle(&self.reg);
                self.send.sock().shutdown(how)?;
                settled
            }
        }
        impl std::io::Read for $t {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                std::io::Read::read(&mut &*self, buf)
            }

            fn read_vectored(
                &mut self,
                bufs: &mut [std::io::IoSliceMut<'_>],
            ) -> std::io::Result<usize> {
                std::io::Read::read_vectored(&mut &*self, bufs)
            }
        }

        impl std::io::Write for $t {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                std::io::Write::write(&mut &*self, buf)
            }

            fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
                std::io::Write::write_vectored(&mut &*self, bufs)
            }

            fn flush(&mut self) -> std::io::Result<()> {
                std::io::Write::flush(&mut &*self)
            }
        }

        impl std::io::Write for &$t {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.send
                    .send_vectored(&self.reg, &[std::io::IoSlice::new(buf)])
            }

            fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
                self.send.send_vectored(&self.reg, bufs)
            }

            /// Waits until every byte written before is with the kernel (writes from a fiber
            /// on io_uring may still be on their way, see `io/behind.rs`), and returns the
            /// error that stopped one, if any.
            fn flush(&mut self) -> std::io::Result<()> {
                self.send.settle(&self.reg)
            }
        }

        impl std::os::fd::AsRawFd for $t {
            fn as_raw_fd(&self) -> std::os::fd::RawFd {
                std::os::fd::AsRawFd::as_raw_fd(self.send.sock())
            }
        }

        impl std::os::fd::AsFd for $t {
            fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
                std::os::fd::AsFd::as_fd(self.send.sock())
            }
        }

        impl std::os::fd::IntoRawFd for $t {
            /// The descriptor, once every byte written before is with the kernel.
            fn into_raw_fd(self) -> std::os::fd::RawFd {
                std::os::fd::IntoRawFd::into_raw_fd(self.send.into_socket(&self.reg))
            }
        }

        impl From<$t> for std::os::fd::OwnedFd {
            /// The descriptor, once every byte written before is with the kernel.
            fn from(s: $t) -> std::os::fd::OwnedFd {
                s.send.into_socket(&s.reg).into()
            }
        }

        impl $crate::net::sockio::sealed::Sealed for $t {}

        impl $crate::net::sockio::StreamSocket for $t {
            fn socket_fd(&self) -> i32 {
                std::os::fd::AsRawFd::as_raw_fd(self.send.sock())
            }

            fn write_deadline(&self) -> Option<std::time::Instant> {
                self.send.deadline()
            }

            fn settle_writes(&self) -> std::io::Result<()> {
                self.send.settle(&self.reg)
            }

            fn registration(&self) -> &$crate::io::op::Registration {
                &self.reg
            }
        }
    };
}
pub(crate) use stream_plumbing;
