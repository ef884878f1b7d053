//! [`send_file`]: a range of a file to a stream socket, three ways.
//!
//! - [`SendFileMethod::Sendfile`]: non-blocking `sendfile(2)`; on `EAGAIN` (socket buffer
//!   full) the fiber parks until the socket is writable (a `POLL_ADD` on the ring, an
//!   epoll interest, or `poll(2)` on a plain thread) and tries again; never a spin. The kernel
//!   copies page-cache pages straight into socket buffers. In a fiber each piece (at most
//!   1 MiB) is first checked with `cachestat(2)`; a piece not fully cached is read once on the
//!   blocking pool, which warms the page cache, so `sendfile` never waits for the disk on a
//!   processor (`fs/residency.rs`).
//! - [`SendFileMethod::Splice`] (uring only; elsewhere it is `Sendfile`): file → pipe → socket
//!   as two `SPLICE` SQEs linked with `IOSQE_IO_LINK`, one submission per pipe-full; the pipes
//!   come from a process-wide pool. The ring's workers do both halves, so a cold file never
//!   stalls the processor.
//! - [`SendFileMethod::ReadSend`]: read the range into memory, then `send` it: for small files
//!   one read and one send beat the extra machinery.
//!
//! [`SendFileMethod::Auto`] picks from the measurements in `docs/BENCHMARKS.md` ("File
//! sending"): on a uring processor, `Sendfile` up to [`AUTO_SENDFILE_MAX_BYTES`] and `Splice`
//! above it; elsewhere `Sendfile`. Up to 128 KiB `sendfile` costs the least server CPU per
//! request (11.5–21.5 µs against splice's 14–27) at the same or better throughput, and on the
//! thesis's web workload (sessions on new connections over its file set) it took about a tenth
//! off weft http's CPU a reply against a 16 KiB bound: each `SPLICE` goes to one of the ring's
//! workers, two context switches on the server's core. From 256 KiB, once a file no longer fits
//! the socket buffer, `sendfile` parks and wakes several times a file and splice's blocking
//! worker wins (2.5–3× the throughput for 0.6–0.7 of the CPU). A cold range never stalls the
//! processor either way (`fs/residency.rs`). `ReadSend` never won: it copies twice and costs
//! the most CPU from 64 KiB up.
//!
//! Invariant: a pipe goes back to the pool only when it is known to be empty.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Mutex;
use std::time::Instant;

use io_uring::{opcode, types::Fd};

use super::{residency, File};
use crate::io::op::{self, Dir, Registration};
use crate::net::sockio::{self, StreamSocket};
use crate::poison::Recover;

/// On uring, ranges up to this many bytes use `sendfile(2)` under [`SendFileMethod::Auto`],
/// longer ones `splice` (the module docs give the measurements).
pub const AUTO_SENDFILE_MAX_BYTES: usize = 128 * 1024;
/// The largest chunk read into memory at once by [`SendFileMethod::ReadSend`].
const READ_CHUNK_BYTES: usize = 1 << 20;
/// The pipe size asked for (`F_SETPIPE_SZ`); the kernel may give less.
const PIPE_BYTES: i32 = 1 << 20;
/// Pipes kept for reuse at most.
const PIPE_POOL_MAX: usize = 64;
/// The largest count handed to one `sendfile(2)`.
const MAX_SENDFILE_BYTES: usize = 0x7fff_f000;

/// How [`send_file_with`] moves the bytes (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SendFileMethod {
    /// By measurement: on uring, [`Sendfile`](Self::Sendfile) up to
    /// [`AUTO_SENDFILE_MAX_BYTES`] and [`Splice`](Self::Splice) above; elsewhere `Sendfile`.
    Auto,
    /// Non-blocking `sendfile(2)`, parking on `POLLOUT`.
    Sendfile,
    /// `splice` through a pipe with linked SQEs (uring; `Sendfile` elsewhere).
    Splice,
    /// Read into memory, then `send`.
    ReadSend,
}

impl SendFileMethod {
    /// The method that moves `len` bytes: [`Auto`](Self::Auto) resolved by size and backend
    /// (`uring`: the calling processor drives io_uring), [`Splice`](Self::Splice) as
    /// `Sendfile` off uring, any other method itself.
    pub fn resolve(self, len: usize, uring: bool) -> SendFileMethod {
        match self {
            Self::Auto | Self::Splice if !uring => Self::Sendfile,
            Self::Auto if len > AUTO_SENDFILE_MAX_BYTES => Self::Splice,
            Self::Auto => Self::Sendfile,
            m => m,
        }
    }
}

impl std::str::FromStr for SendFileMethod {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Self::Auto),
            "sendfile" => Ok(Self::Sendfile),
            "splice" => Ok(Self::Splice),
            "read-send" | "memory" => Ok(Self::ReadSend),
            other => Err(format!(
                "unknown method {other:?} (expected auto, sendfile, splice or read-send)"
            )),
        }
    }
}

/// Sends `len` bytes of `file` from `offset` to `stream` and returns how many were sent (fewer
/// only if the file ends first). Honours the stream's write timeout and fiber cancellation.
pub fn send_file(
    file: &File,
    offset: u64,
    len: usize,
    stream: &impl StreamSocket,
) -> io::Result<usize> {
    send_file_with(SendFileMethod::Auto, file, offset, len, stream)
}

/// [`send_file`] after `head` (a response's header, say): the head's bytes go first and
/// join the file's first bytes in one TCP segment (`MSG_MORE`), in one system call that
/// usually completes at once, where a write of the head and then `send_file` send it alone and,
/// on io_uring, wait for its send to complete before the file's first byte goes. Returns the
/// file bytes sent (fewer only if the file ends first); the head is sent whole or the call
/// fails. What the kernel kept back for the file goes out however the file ends.
pub fn send_file_after(
    head: &[u8],
    file: &File,
    offset: u64,
    len: usize,
    stream: &impl StreamSocket,
) -> io::Result<usize> {
    // Kept back only when file bytes are to follow.
    let more = len > 0 && !head.is_empty();
    if !head.is_empty() {
        stream.settle_writes()?;
        send_head(head, stream, more)?;
    }
    let r = send_file(file, offset, len, stream);
    if more && !matches!(r, Ok(n) if n == len) {
        // The file ended early or failed: its last write, which would have taken the head
        // along, never went.
        sockio::push(stream.socket_fd());
    }
    r
}

/// Writes all of `head` (kept back for the next write with `more`).
fn send_head(head: &[u8], stream: &impl StreamSocket, more: bool) -> io::Result<()> {
    let (fd, reg, deadline) = (
        stream.socket_fd(),
        stream.registration(),
        stream.write_deadline(),
    );
    let mut rest = head;
    while !rest.is_empty() {
        let n = if more {
            sockio::send_more_now(fd, reg, rest, deadline)?
        } else {
            sockio::send_now(fd, reg, rest, deadline)?
        };
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        rest = &rest[n..];
    }
    Ok(())
}

/// [`send_file`] with a chosen method (for measurements and special cases).
pub fn send_file_with(
    method: SendFileMethod,
    file: &File,
    offset: u64,
    len: usize,
    stream: &impl StreamSocket,
) -> io::Result<usize> {
    // Bytes written to the stream before (which may still be on their way behind the caller,
    // see `io/behind.rs`) go first.
    stream.settle_writes()?;
    let deadline = stream.write_deadline();
    let sock = stream.socket_fd();
    let reg = stream.registration();
    let uring = crate::io::backend() == Some(crate::io::IoBackend::Uring);
    match method.resolve(len, uring) {
        SendFileMethod::ReadSend => read_send(file, offset, len, sock, reg, deadline),
        SendFileMethod::Splice => splice(file.as_raw_fd(), offset, len, sock, reg, deadline),
        _ => sendfile(file.as_raw_fd(), offset, len, sock, reg, deadline),
    }
}

fn read_send(
    file: &File,
    offset: u64,
    len: usize,
    sock: i32,
    reg: &Registration,
    deadline: Option<Instant>,
) -> io::Result<usize> {
    let mut buf = vec![0u8; len.min(READ_CHUNK_BYTES)];
    let mut sent = 0;
    while sent < len {
        let want = (len - sent).min(buf.len());
        let n = file.read_at(&mut buf[..want], offset + sent as u64)?;
        if n == 0 {
            break;
        }
        let mut out = &buf[..n];
        while !out.is_empty() {
            match sockio::send_now(sock, reg, out, deadline)? {
                0 => return Err(io::ErrorKind::WriteZero.into()),
                k => out = &out[k..],
            }
        }
        sent += n;
    }
    Ok(sent)
}

fn sendfile(
    file: i32,
    offset: u64,
    len: usize,
    sock: i32,
    reg: &Registration,
    deadline: Option<Instant>,
) -> io::Result<usize> {
    let mut sent = 0;
    while sent < len {
        if crate::fiber::current::is_cancelled() {
            return Err(op::cancelled());
        }
        let mut off = (offset + sent as u64) as libc::off_t;
        let mut count = (len - sent).min(MAX_SENDFILE_BYTES);
        if crate::fiber::current::in_fiber() {
            // A processor must not wait for the disk: check the range is cached, and warm it
            // on the blocking pool when it is not.
            count = count.min(residency::CHECK_CHUNK_BYTES);
            if !residency::is_cached(file, off as u64, count) {
                residency::warm(file, off as u64, count);
            }
        }
        // SAFETY: plain descriptors and a local offset.
        let r = unsafe { libc::sendfile(sock, file, &mut off, count) };
        if r > 0 {
            sent += r as usize;
            continue;
        }
        if r == 0 {
            break; // end of file
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => {}
            Some(libc::EAGAIN) => op::wait_ready(sock, reg, Dir::Write, deadline)?,
            _ => return Err(e),
        }
    }
    Ok(sent)
}

/// A pipe from the pool; `size_bytes` is what the kernel granted.
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    size_bytes: usize,
}

static PIPES: Mutex<Vec<Pipe>> = Mutex::new(Vec::new());

impl Pipe {
    fn take() -> io::Result<Pipe> {
        if let Some(p) = PIPES.lock().recover().pop() {
            return Ok(p);
        }
        let mut fds = [0i32; 2];
        // SAFETY: `fds` has room for the two descriptors.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `pipe2` just gave us these.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: fcntl on our own descriptor; failure leaves the default size.
        let size = unsafe {
            libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_BYTES);
            libc::fcntl(write.as_raw_fd(), libc::F_GETPIPE_SZ)
        };
        Ok(Pipe {
            read,
            write,
            size_bytes: if size > 0 { size as usize } else { 65536 },
        })
    }

    /// Back to the pool; only call when the pipe is empty.
    fn give_back(self) {
        let mut pool = PIPES.lock().recover();
        if pool.len() < PIPE_POOL_MAX {
            pool.push(self);
        }
    }
}

fn splice(
    file: i32,
    offset: u64,
    len: usize,
    sock: i32,
    reg: &Registration,
    deadline: Option<Instant>,
) -> io::Result<usize> {
    let pipe = Pipe::take()?;
    let (pr, pw) = (pipe.read.as_raw_fd(), pipe.write.as_raw_fd());
    let mut sent = 0;
    while sent < len {
        let chunk = (len - sent).min(pipe.size_bytes) as u32;
        let first =
            opcode::Splice::new(Fd(file), (offset + sent as u64) as i64, Fd(pw), -1, chunk).build();
        let second = opcode::Splice::new(Fd(pr), -1, Fd(sock), -1, chunk).build();
        // SAFETY: no pointers in splice SQEs; the descriptors are borrowed for the call.
        let (r1, r2) = unsafe { op::linked_pair_on_uring(sock, deadline, first, second) }
            .expect("splice runs on uring processors only");
        let filled = match r1 {
            Ok(n) if n > 0 => n as usize,
            Ok(0) => {
                // End of file: the second half was cancelled and the pipe is empty.
                drop(r2);
                break;
            }
            // The first failed: nothing entered the pipe.
            Ok(n) => {
                pipe.give_back();
                return Err(io::Error::from_raw_os_error(-n));
            }
            // Cancelled or timed out: the pipe's contents are unknown; drop it.
            Err(e) => return Err(e),
        };
        let mut drained = match r2 {
            Ok(n) if n >= 0 => n as usize,
            // A short first half breaks the link (`ECANCELED`); the socket may also push
            // back (`EAGAIN`). Either way the rest is drained below.
            Ok(n) if n == -libc::EAGAIN || n == -libc::ECANCELED => 0,
            Ok(n) => return Err(io::Error::from_raw_os_error(-n)),
            Err(e) => return Err(e),
        };
        // The socket took less than the pipe held: drain the rest.
        while drained < filled {
            let left = (filled - drained) as u32;
            // SAFETY: no pointers.
            let r = unsafe {
                op::on_uring(sock, deadline, || {
                    opcode::Splice::new(Fd(pr), -1, Fd(sock), -1, left).build()
                })
            }
            .expect("on a uring processor")?;
            match r {
                n if n > 0 => drained += n as usize,
                n if n == -libc::EAGAIN => op::wait_ready(sock, reg, Dir::Write, deadline)?,
                0 => return Err(io::ErrorKind::WriteZero.into()),
                n => return Err(io::Error::from_raw_os_error(-n)),
            }
        }
        sent += filled;
    }
    pipe.give_back();
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::SendFileMethod::{self, *};

    #[test]
    fn auto_sends_up_to_128_kib_with_sendfile_and_splices_above_on_uring() {
        // The thesis's file set: most requests are under 16 KiB (kept in memory by weft http),
        // a tenth 16–64 KiB, a few 64 KiB–1 MiB.
        for len in [1, 4096, 16 * 1024 + 1, 64 * 1024, 128 * 1024] {
            assert_eq!(Auto.resolve(len, true), Sendfile, "{len} bytes on uring");
        }
        for len in [128 * 1024 + 1, 256 * 1024, 1 << 20] {
            assert_eq!(Auto.resolve(len, true), Splice, "{len} bytes on uring");
        }
    }

    #[test]
    fn off_uring_every_size_and_splice_fall_back_to_sendfile() {
        for len in [1, 1 << 20] {
            assert_eq!(Auto.resolve(len, false), Sendfile);
            assert_eq!(Splice.resolve(len, false), Sendfile);
        }
    }

    #[test]
    fn a_chosen_method_is_kept() {
        let methods: [SendFileMethod; 3] = [Sendfile, Splice, ReadSend];
        for m in methods {
            assert_eq!(m.resolve(1 << 20, true), m);
        }
        assert_eq!(ReadSend.resolve(1, false), ReadSend);
    }
}
