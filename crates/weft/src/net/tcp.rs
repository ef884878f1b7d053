//! TCP listeners and streams.

use crate::loom::{AtomicBool, AtomicU64, Ordering};
use std::io::{self, IoSliceMut, Read};
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, RawFd};
use std::time::{Duration, Instant};

use io_uring::{opcode, types::Fd};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::send_side::SendSide;
use super::sockio::{self, deadline, set_errno};
use crate::io::arrival::Arrival;
use crate::io::op::{self, Dir, Registration};

/// Default `listen(2)` backlog (the kernel clamps it to `net.core.somaxconn`).
const DEFAULT_BACKLOG: i32 = 1024;
/// Accept's back-off while the process or system is out of descriptors.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_millis(100);

fn new_socket(addr: &SocketAddr) -> io::Result<Socket> {
    Socket::new(
        Domain::for_address(*addr),
        Type::STREAM.nonblocking().cloexec(),
        Some(Protocol::TCP),
    )
}

fn sock_addr(addr: SockAddr) -> io::Result<SocketAddr> {
    addr.as_socket()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not an IP socket address"))
}

/// Tries every address `addrs` resolves to, like `std::net`.
fn each_addr<T>(
    addrs: impl ToSocketAddrs,
    mut f: impl FnMut(&SocketAddr) -> io::Result<T>,
) -> io::Result<T> {
    let mut last = None;
    for addr in addrs.to_socket_addrs()? {
        match f(&addr) {
            Ok(t) => return Ok(t),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "could not resolve to any address",
        )
    }))
}

/// Configures a listener before it binds: [`TcpListener::builder`].
#[derive(Debug, Clone)]
pub struct TcpListenerBuilder {
    backlog: i32,
    reuse_port: bool,
    reuse_address: bool,
}

impl TcpListenerBuilder {
    /// The `listen(2)` backlog (default 1024).
    pub fn backlog(mut self, backlog: i32) -> Self {
        self.backlog = backlog;
        self
    }

    /// Sets `SO_REUSEPORT`, so several listeners (one per processor, say) share the port and
    /// the kernel spreads connections over them (default off).
    pub fn reuse_port(mut self, on: bool) -> Self {
        self.reuse_port = on;
        self
    }

    /// Sets `SO_REUSEADDR` (default on, as servers want after a restart).
    pub fn reuse_address(mut self, on: bool) -> Self {
        self.reuse_address = on;
        self
    }

    /// Binds and listens on the first address that works.
    pub fn bind(&self, addr: impl ToSocketAddrs) -> io::Result<TcpListener> {
        each_addr(addr, |addr| {
            let sock = new_socket(addr)?;
            sock.set_reuse_address(self.reuse_address)?;
            if self.reuse_port {
                sock.set_reuse_port(true)?;
            }
            sock.bind(&SockAddr::from(*addr))?;
            sock.listen(self.backlog)?;
            Ok(TcpListener {
                sock,
                reg: Registration::new(),
                logged_out_of_fds: AtomicBool::new(false),
            })
        })
    }
}

/// A TCP socket server, like `std::net::TcpListener`.
#[derive(Debug)]
pub struct TcpListener {
    sock: Socket,
    /// The epoll instances that watch it.
    reg: Registration,
    /// Whether the "out of descriptors" condition was reported (it is reported once).
    logged_out_of_fds: AtomicBool,
}

impl TcpListener {
    /// Binds with default options (backlog 1024, `SO_REUSEADDR`).
    pub fn bind(addr: impl ToSocketAddrs) -> io::Result<TcpListener> {
        TcpListener::builder().bind(addr)
    }

    /// Options for binding: backlog, `SO_REUSEPORT`, `SO_REUSEADDR`.
    pub fn builder() -> TcpListenerBuilder {
        TcpListenerBuilder {
            backlog: DEFAULT_BACKLOG,
            reuse_port: false,
            reuse_address: true,
        }
    }

    /// Waits for a connection.
    ///
    /// When the process or system runs out of descriptors (`EMFILE`, `ENFILE`) it backs off
    /// (10 ms, doubling to 100 ms) and tries again rather than failing, so a server keeps
    /// serving its established connections and accepts again once descriptors free up; the
    /// condition is logged to stderr once per listener.
    pub fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let mut backoff = ACCEPT_BACKOFF_MIN;
        loop {
            match self.accept_once() {
                Ok(r) => return Ok(r),
                Err(e) => match e.raw_os_error() {
                    Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => {
                        if !self.logged_out_of_fds.swap(true, Ordering::Relaxed) {
                            eprintln!(
                                "weft: accept on {}: {e}; retrying every <= {} ms until \
                                 descriptors free up (raise RLIMIT_NOFILE with `ulimit -n`)",
                                self.local_addr()
                                    .map_or_else(|_| "?".to_owned(), |a| a.to_string()),
                                ACCEPT_BACKOFF_MAX.as_millis()
                            );
                        }
                        crate::fiber::current::sleep(backoff).map_err(|_| op::cancelled())?;
                        backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                    }
                    Some(libc::ECONNABORTED) => {}
                    _ => return Err(e),
                },
            }
        }
    }

    fn accept_once(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let fd = self.sock.as_raw_fd();
        let flags = libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
        // SAFETY: `try_init` hands us storage and length that live across the closure, which
        // is the whole operation (`op::run` returns only once the kernel is done with them).
        let (new_fd, addr) = unsafe {
            SockAddr::try_init(|storage, len| {
                // Syscall first: a burst of connections is taken in one turn of this fiber.
                op::run_syscall_first(
                    fd,
                    &self.reg,
                    Dir::Read,
                    None,
                    || {
                        opcode::Accept::new(Fd(fd), storage.cast(), len)
                            .flags(flags)
                            .build()
                    },
                    || libc::accept4(fd, storage.cast(), len, flags) as isize,
                )
            })?
        };
        // SAFETY: the kernel just gave us this descriptor.
        let sock = unsafe { Socket::from_raw_fd(new_fd as RawFd) };
        Ok((TcpStream::from_socket(sock), sock_addr(addr)?))
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        sock_addr(self.sock.local_addr()?)
    }

    /// An iterator of `accept` results, like `std::net::TcpListener::incoming`.
    pub fn incoming(&self) -> impl Iterator<Item = io::Result<TcpStream>> + '_ {
        std::iter::repeat_with(move || self.accept().map(|(s, _)| s))
    }
}

impl AsRawFd for TcpListener {
    fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

impl AsFd for TcpListener {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

/// A TCP connection, like `std::net::TcpStream`. `Read` and `Write` are implemented for it and
/// for `&TcpStream` (so one fiber can read while another writes).
#[derive(Debug)]
pub struct TcpStream {
    /// The socket, the write timeout and the connection's write-behind slot.
    send: SendSide,
    /// The epoll instances that watch it.
    reg: Registration,
    /// Read timeout in nanoseconds; 0 for none.
    read_timeout_ns: AtomicU64,
    /// Whether the last receive came back short (the socket was drained): the next one then
    /// asks io_uring to poll first rather than try a receive that would fail, and on epoll
    /// waits straight away unless a read edge came meanwhile.
    recv_drained: AtomicBool,
}

impl TcpStream {
    fn from_socket(sock: Socket) -> TcpStream {
        TcpStream::from_send_side(SendSide::new(sock))
    }

    fn from_send_side(send: SendSide) -> TcpStream {
        TcpStream {
            send,
            reg: Registration::new(),
            read_timeout_ns: AtomicU64::new(0),
            recv_drained: AtomicBool::new(false),
        }
    }

    /// Connects to the first address that accepts.
    pub fn connect(addr: impl ToSocketAddrs) -> io::Result<TcpStream> {
        each_addr(addr, |a| TcpStream::connect_deadline(a, None))
    }

    /// Connects to `addr`, giving up after `timeout` (error kind `TimedOut`).
    pub fn connect_timeout(addr: &SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
        TcpStream::connect_deadline(addr, Some(Instant::now() + timeout))
    }

    fn connect_deadline(addr: &SocketAddr, deadline: Option<Instant>) -> io::Result<TcpStream> {
        let sock = new_socket(addr)?;
        let sa = SockAddr::from(*addr);
        let fd = sock.as_raw_fd();
        let stream = TcpStream::from_socket(sock);
        let mut started = false;
        // SAFETY: `sa` outlives the call.
        unsafe {
            op::run(
                fd,
                &stream.reg,
                Dir::Write,
                false,
                deadline,
                || opcode::Connect::new(Fd(fd), sa.as_ptr().cast(), sa.len()).build(),
                || {
                    if !started {
                        started = true;
                        let r = libc::connect(fd, sa.as_ptr().cast(), sa.len());
                        if r < 0 && *libc::__errno_location() == libc::EINPROGRESS {
                            set_errno(libc::EAGAIN);
                        }
                        return r as isize;
                    }
                    // Writable after EINPROGRESS: the outcome is in SO_ERROR.
                    let mut err: libc::c_int = 0;
                    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
                    let r = libc::getsockopt(
                        fd,
                        libc::SOL_SOCKET,
                        libc::SO_ERROR,
                        (&mut err as *mut libc::c_int).cast(),
                        &mut len,
                    );
                    if r < 0 {
                        return -1;
                    }
                    if err != 0 {
                        set_errno(err);
                        return -1;
                    }
                    0
                },
            )?;
        }
        Ok(stream)
    }

    fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.recv_stamped(buf, false).map(|(n, _)| n)
    }

    /// The receive behind [`Read::read`] and (`want_arrival`) [`TcpStream::read_arrived`]: the
    /// bytes, and the arrival ticket the driver stamped (0: none asked for, or a system call
    /// just made got them).
    #[inline]
    fn recv_stamped(&self, buf: &mut [u8], want_arrival: bool) -> io::Result<(usize, u64)> {
        let poll_first = self.recv_drained.load(Ordering::Relaxed);
        let (fd, timeout) = (
            self.send.sock().as_raw_fd(),
            deadline(&self.read_timeout_ns),
        );
        let r = sockio::recv_stamped(fd, &self.reg, buf, timeout, poll_first, want_arrival);
        // Only a short, non-empty receive says the socket was drained: after end of stream
        // or an error no further readiness may come, so the next receive must try.
        let drained = matches!(r, Ok((n, _)) if n > 0 && n < buf.len());
        if drained != poll_first {
            self.recv_drained.store(drained, Ordering::Relaxed);
        }
        if matches!(r, Ok((n, _)) if n > 0) {
            self.send.prefetch_for_reply();
        }
        r
    }

    /// [`Read::read`] (the read timeout applies), returning with the byte count the bytes'
    /// [`Arrival`] ticket: every byte read was in the kernel before any later ticket was
    /// taken, so a check of outside state (a file's `fstat`) that took a later ticket before
    /// it looked saw whatever changed before these bytes were sent ([`crate::io::arrival`]).
    /// On io_uring it is the ticket of the batch the receive's completion was reaped in, which
    /// the requests reaped with it share; otherwise one taken just after the system call.
    pub fn read_arrived(&self, buf: &mut [u8]) -> io::Result<(usize, Arrival)> {
        let (n, stamp) = self.recv_stamped(buf, true)?;
        Ok((n, Arrival::stamped_or_now(stamp)))
    }

    /// Starts fetching the state a write through this stream touches first (its write-behind
    /// slot), for a caller that will write to it soon and has other work first: with
    /// thousands of connections that state is cold by the time a connection's turn comes. A
    /// hint only: it reads and changes nothing.
    #[inline]
    pub fn prefetch_for_write(&self) {
        self.send.prefetch_for_reply();
    }

    /// Receives into a buffer the processor lends instead of one of the caller's
    /// ([`crate::io::Lent`]; up to [`crate::io::LENT_BUFFER_BYTES`] bytes). Waits as
    /// [`Read::read`] does; an empty `Lent` is end of stream. For servers with thousands of
    /// connections: each receive lands in one of a few hundred buffers the processor's
    /// connections share, still in the CPU's cache, rather than in the connection's own,
    /// long gone cold; and a connection needs no buffer of its own while it waits. Drop the
    /// `Lent` soon (copy out what must be kept).
    pub fn recv_lent(&self) -> io::Result<crate::io::Lent> {
        let poll_first = self.recv_drained.load(Ordering::Relaxed);
        let r = sockio::recv_lent(
            self.send.sock().as_raw_fd(),
            &self.reg,
            deadline(&self.read_timeout_ns),
            poll_first,
        );
        // As in `recv`.
        let drained = matches!(&r, Ok(l) if !l.is_empty() && !l.filled());
        if drained != poll_first {
            self.recv_drained.store(drained, Ordering::Relaxed);
        }
        if matches!(&r, Ok(l) if !l.is_empty()) {
            self.send.prefetch_for_reply();
        }
        r
    }

    /// Writes like [`Write::write_vectored`](std::io::Write::write_vectored), telling the kernel that more follows
    /// (`MSG_MORE`): the bytes go to the socket now (never behind the fiber, see
    /// `io/behind.rs`), but a tail shorter than a segment is kept back until the next write
    /// without it, a [`shutdown`](Self::shutdown) or the close, and leaves with that. For a
    /// server's last response on a connection: written this way and followed by the close,
    /// the response and the FIN share one segment, as nginx's do (with `TCP_CORK`), instead of
    /// the FIN following in one of its own. Whoever writes with it owes the socket one of
    /// those, or the tail waits (for the kernel's 200 ms probe timer at most).
    pub fn write_vectored_more(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.send.send_vectored_more(&self.reg, bufs)
    }

    /// Reads what is already waiting in the socket, without waiting: error kind `WouldBlock`
    /// when nothing is (as tokio's `try_read`). Never switches the fiber out, so a caller that
    /// expects data (a request sent with the connection) saves the round trip a [`Read::read`]
    /// through io_uring costs, and learns at once when it would have to wait.
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let r = sockio::try_recv(self.send.sock().as_raw_fd(), buf);
        // As in `recv`: a short non-empty read or an empty socket says the next receive may
        // wait for readiness first.
        let drained = match &r {
            Ok(n) => *n > 0 && *n < buf.len(),
            Err(e) => e.kind() == io::ErrorKind::WouldBlock,
        };
        self.recv_drained.store(drained, Ordering::Relaxed);
        r
    }

    /// The remote address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        sock_addr(self.send.sock().peer_addr()?)
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        sock_addr(self.send.sock().local_addr()?)
    }

    /// Sets `TCP_NODELAY` (disables Nagle's algorithm).
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.send.sock().set_tcp_nodelay(nodelay)
    }

    /// Whether `TCP_NODELAY` is set.
    pub fn nodelay(&self) -> io::Result<bool> {
        self.send.sock().tcp_nodelay()
    }

    /// Sets `SO_LINGER`. `Some(Duration::ZERO)` makes dropping the stream reset the
    /// connection instead of closing it gracefully: no `TIME_WAIT` is left on this side, and
    /// unsent data is discarded. `None` restores the default (a graceful close in the
    /// background).
    pub fn set_linger(&self, linger: Option<std::time::Duration>) -> io::Result<()> {
        self.send.sock().set_linger(linger)
    }

    /// The `SO_LINGER` setting.
    pub fn linger(&self) -> io::Result<Option<std::time::Duration>> {
        self.send.sock().linger()
    }
}

impl Read for &TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.recv(buf)
    }

    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        let buf = bufs
            .iter_mut()
            .find(|b| !b.is_empty())
            .map_or(&mut [][..], |b| &mut **b);
        self.recv(buf)
    }
}

impl From<std::net::TcpStream> for TcpStream {
    /// Adopts a connected std stream (made non-blocking, as weft's sockets always are).
    fn from(s: std::net::TcpStream) -> TcpStream {
        let sock = Socket::from(s);
        // Setting O_NONBLOCK on an open socket does not fail.
        let _ = sock.set_nonblocking(true);
        TcpStream::from_socket(sock)
    }
}

impl From<std::net::TcpListener> for TcpListener {
    /// Adopts a listening std socket (made non-blocking).
    fn from(l: std::net::TcpListener) -> TcpListener {
        let sock = Socket::from(l);
        let _ = sock.set_nonblocking(true);
        TcpListener {
            sock,
            reg: Registration::new(),
            logged_out_of_fds: AtomicBool::new(false),
        }
    }
}

sockio::stream_plumbing!(TcpStream);
