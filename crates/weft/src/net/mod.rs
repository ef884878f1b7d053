//! Networking in the shape of `std::net` (TCP) and `std::os::unix::net` (Unix-domain streams), blocking from the fiber's point of view.
//!
//! A fiber calling [`TcpStream::read`](std::io::Read::read) parks while its processor runs
//! others; the operation runs on the processor's io_uring (or epoll, see [`crate::io`]). The
//! same calls from a plain OS thread are ordinary blocking syscalls. Every blocking call honours
//! the stream's timeouts (error kind `TimedOut`) and fiber cancellation (error kind `Other`
//! wrapping [`crate::Cancelled`]), and guarantees the kernel no longer touches the caller's
//! buffer once it has returned.
//!
//! Sockets are always non-blocking at the descriptor level (the epoll backend and plain threads
//! try the syscall and wait for readiness on `EAGAIN`; io_uring copes with either).
//!
//! A short write from a fiber on io_uring returns before the kernel has taken the bytes: they
//! are copied and sent behind the caller (`io/behind.rs`), and the next call that writes through
//! the connection (`write`, `flush`, `shutdown`, `send_file`, dropping the stream) first makes
//! sure they went, reporting their error if they could not. `flush` waits for them explicitly.

mod descriptors;
mod send_side;
pub(crate) mod sockio;
mod tcp;
mod unix;

pub use descriptors::{raise_descriptor_limit, reserve_descriptors};
pub use sockio::StreamSocket;
pub use tcp::{TcpListener, TcpListenerBuilder, TcpStream};
pub use unix::{UnixListener, UnixStream};
