//! Unix-domain stream sockets: [`UnixListener`] and [`UnixStream`], on the same operation
//! protocol as TCP (see [`crate::io`]).
//!
//! Invariants: descriptors are always `O_NONBLOCK | O_CLOEXEC`; every blocking call honours the
//! stream's timeouts and fiber cancellation and returns only once the kernel is done with the
//! caller's buffers. Addresses are returned as `std::os::unix::net::SocketAddr`.

use crate::loom::AtomicU64;
use std::io::{self, IoSliceMut, Read};
use std::mem::ManuallyDrop;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, RawFd};
use std::os::unix::net::SocketAddr;
use std::path::Path;

use io_uring::{opcode, types::Fd};
use socket2::{Domain, SockAddr, Socket, Type};

use super::send_side::SendSide;
use super::sockio::{self, deadline};
use crate::io::op::{self, Dir, Registration};

/// Default `listen(2)` backlog (the kernel clamps it to `net.core.somaxconn`).
const DEFAULT_BACKLOG: i32 = 1024;

fn new_socket() -> io::Result<Socket> {
    Socket::new(Domain::UNIX, Type::STREAM.nonblocking().cloexec(), None)
}

/// `std`'s view of a descriptor we own, to reuse its address accessors.
fn std_view(fd: RawFd) -> ManuallyDrop<std::os::unix::net::UnixStream> {
    // SAFETY: `fd` is a live descriptor owned by the caller; `ManuallyDrop` keeps `std` from
    // closing it.
    ManuallyDrop::new(unsafe { std::os::unix::net::UnixStream::from_raw_fd(fd) })
}

/// A Unix-domain socket server, like `std::os::unix::net::UnixListener`.
#[derive(Debug)]
pub struct UnixListener {
    sock: Socket,
    /// The epoll instances that watch it.
    reg: Registration,
}

impl UnixListener {
    /// Binds to `path` (which must not exist) and listens, backlog 1024.
    pub fn bind(path: impl AsRef<Path>) -> io::Result<UnixListener> {
        let sock = new_socket()?;
        sock.bind(&SockAddr::unix(path)?)?;
        sock.listen(DEFAULT_BACKLOG)?;
        Ok(UnixListener {
            sock,
            reg: Registration::new(),
        })
    }

    /// Waits for a connection.
    pub fn accept(&self) -> io::Result<(UnixStream, SocketAddr)> {
        let fd = self.sock.as_raw_fd();
        let flags = libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
        // SAFETY: the storage `try_init` lends lives across the closure, which is the whole
        // operation.
        let (new_fd, _) = unsafe {
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
        let stream = UnixStream::from_socket(unsafe { Socket::from_raw_fd(new_fd as RawFd) });
        let addr = stream.peer_addr()?;
        Ok((stream, addr))
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        std_view(self.sock.as_raw_fd()).local_addr()
    }

    /// An iterator of `accept` results.
    pub fn incoming(&self) -> impl Iterator<Item = io::Result<UnixStream>> + '_ {
        std::iter::repeat_with(move || self.accept().map(|(s, _)| s))
    }
}

impl AsRawFd for UnixListener {
    fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

impl AsFd for UnixListener {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

/// A Unix-domain stream connection, like `std::os::unix::net::UnixStream`. `Read` and `Write`
/// are implemented for it and for `&UnixStream`.
#[derive(Debug)]
pub struct UnixStream {
    /// The socket, the write timeout and the connection's write-behind slot.
    send: SendSide,
    /// The epoll instances that watch it.
    reg: Registration,
    /// Read timeout in nanoseconds; 0 for none.
    read_timeout_ns: AtomicU64,
}

impl UnixStream {
    fn from_socket(sock: Socket) -> UnixStream {
        UnixStream::from_send_side(SendSide::new(sock))
    }

    fn from_send_side(send: SendSide) -> UnixStream {
        UnixStream {
            send,
            reg: Registration::new(),
            read_timeout_ns: AtomicU64::new(0),
        }
    }

    /// Connects to the socket bound at `path`.
    ///
    /// A Unix `connect` either completes at once or fails with `EAGAIN` when the listener's
    /// backlog is full; then it waits for the socket to become writable and tries again.
    pub fn connect(path: impl AsRef<Path>) -> io::Result<UnixStream> {
        let sock = new_socket()?;
        let sa = SockAddr::unix(path)?;
        let fd = sock.as_raw_fd();
        let stream = UnixStream::from_socket(sock);
        // SAFETY: `sa` outlives the call.
        unsafe {
            op::run(
                fd,
                &stream.reg,
                Dir::Write,
                false,
                None,
                || opcode::Connect::new(Fd(fd), sa.as_ptr().cast(), sa.len()).build(),
                || {
                    let r = libc::connect(fd, sa.as_ptr().cast(), sa.len());
                    if r < 0 && *libc::__errno_location() == libc::EISCONN {
                        return 0;
                    }
                    r as isize
                },
            )?;
        }
        Ok(stream)
    }

    /// A connected pair of streams (`socketpair(2)`).
    pub fn pair() -> io::Result<(UnixStream, UnixStream)> {
        let (a, b) = Socket::pair(Domain::UNIX, Type::STREAM.nonblocking().cloexec(), None)?;
        Ok((UnixStream::from_socket(a), UnixStream::from_socket(b)))
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        std_view(self.send.sock().as_raw_fd()).local_addr()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        std_view(self.send.sock().as_raw_fd()).peer_addr()
    }
}

impl UnixStream {
    /// Receives into a buffer the processor lends; see [`crate::net::TcpStream::recv_lent`].
    pub fn recv_lent(&self) -> io::Result<crate::io::Lent> {
        sockio::recv_lent(
            self.send.sock().as_raw_fd(),
            &self.reg,
            deadline(&self.read_timeout_ns),
            false,
        )
    }
}

impl Read for &UnixStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        sockio::recv(
            self.send.sock().as_raw_fd(),
            &self.reg,
            buf,
            deadline(&self.read_timeout_ns),
            false,
        )
    }

    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        let buf = bufs
            .iter_mut()
            .find(|b| !b.is_empty())
            .map_or(&mut [][..], |b| &mut **b);
        self.read(buf)
    }
}

sockio::stream_plumbing!(UnixStream);
