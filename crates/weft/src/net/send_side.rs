//! The sending half every stream socket handle owns: its descriptor, its write timeout, and the
//! connection's write-behind slot (`io/behind.rs`), which it shares with the handle's clones.
//!
//! Every write-direction call of a stream goes through here, so none overtakes a send still in
//! flight behind the caller: `write`/`write_vectored` ([`SendSide::send_vectored`]), `flush`,
//! `shutdown` and `send_file` ([`SendSide::settle`]), and dropping the handle (see [`Drop`]).
//!
//! Invariant: the descriptor is `Some` for the handle's whole life; it is taken only by
//! [`SendSide::into_socket`] and by `Drop`.

use crate::loom::AtomicU64;
use std::cell::OnceCell;
use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Instant;

use socket2::Socket;

use super::sockio;
use crate::io::behind::{self, Slot};
use crate::io::driver::Driver;
use crate::io::op::{self, Registration};

/// See the module docs.
#[derive(Debug)]
pub(crate) struct SendSide {
    sock: Option<Socket>,
    /// Write timeout in nanoseconds; 0 for none.
    timeout_ns: AtomicU64,
    /// The connection's write-behind slot, shared by the handles of one connection.
    slot: Arc<Slot>,
}

impl SendSide {
    /// The sending half of a new connection.
    pub(crate) fn new(sock: Socket) -> SendSide {
        SendSide {
            sock: Some(sock),
            timeout_ns: AtomicU64::new(0),
            slot: Slot::new(),
        }
    }

    /// A second handle's sending half (`try_clone`): the same slot, so the two handles' writes
    /// stay in order; no timeout.
    pub(crate) fn sharing(&self, sock: Socket) -> SendSide {
        SendSide {
            sock: Some(sock),
            timeout_ns: AtomicU64::new(0),
            slot: self.slot.clone(),
        }
    }

    /// The socket.
    pub(crate) fn sock(&self) -> &Socket {
        self.sock
            .as_ref()
            .expect("a stream's socket is present while it lives")
    }

    /// Starts fetching what the next write touches first ([`Slot::prefetch`]): called after a
    /// receive that returned data, since a request is usually answered.
    #[inline]
    pub(crate) fn prefetch_for_reply(&self) {
        self.slot.prefetch();
    }

    pub(crate) fn timeout_ns(&self) -> &AtomicU64 {
        &self.timeout_ns
    }

    /// When a write starting now gives up.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        sockio::deadline(&self.timeout_ns)
    }

    /// `write`/`write_vectored`: behind the caller's back when it is a fiber on io_uring and the
    /// bytes are few (`io/behind.rs`), otherwise by the ordinary blocking send, once any
    /// earlier write-behind send is settled.
    pub(crate) fn send_vectored(
        &self,
        reg: &Registration,
        bufs: &[IoSlice<'_>],
    ) -> io::Result<usize> {
        let fd = self.sock().as_raw_fd();
        // Read the clock only if a send may block: a write sent behind never does.
        let deadline = OnceCell::new();
        let deadline = || *deadline.get_or_init(|| self.deadline());
        let mut claim = self.slot.claim();
        claim.settle(true, |rest| sockio::send_now(fd, reg, rest, deadline()))?;
        let total = bufs.iter().try_fold(0usize, |n, b| n.checked_add(b.len()));
        if let Some(total @ 1..=behind::MAX_BYTES) = total {
            if !crate::fiber::current::is_cancelled() {
                if let Some(Driver::Uring(ring)) = op::current_driver() {
                    let timeout_ns = self.timeout_ns.load(crate::loom::Ordering::Relaxed);
                    let n = claim.queue(ring, fd, timeout_ns, bufs);
                    drop(claim);
                    debug_assert_eq!(n, total);
                    // It completed without parking, like a ready socket on epoll.
                    op::spend_op_budget();
                    return Ok(n);
                }
            }
        }
        drop(claim);
        match bufs {
            [one] => sockio::send_now(fd, reg, one, deadline()),
            _ => sockio::send_vectored_now(fd, reg, bufs, deadline()),
        }
    }

    /// `write_vectored` with `MSG_MORE` ([`sockio::send_vectored_more_now`]), never behind the
    /// caller: the bytes go to the socket now, in order after every earlier write (settled
    /// first), and the kernel keeps a short tail back for what follows, a later write, a
    /// shutdown or the close, whose FIN then travels with it.
    pub(crate) fn send_vectored_more(
        &self,
        reg: &Registration,
        bufs: &[IoSlice<'_>],
    ) -> io::Result<usize> {
        // As the ordinary path of `send_vectored`: the claim is not held across the send.
        self.settle(reg)?;
        sockio::send_vectored_more_now(self.sock().as_raw_fd(), reg, bufs, self.deadline())
    }

    /// Settles the write-behind send in flight, if any (see `io/behind.rs`): afterwards every
    /// byte written before is with the kernel, or the error that stopped it is returned (a
    /// cancelled fiber's among them: the send then stays in flight).
    pub(crate) fn settle(&self, reg: &Registration) -> io::Result<()> {
        self.settle_with(reg, true)
    }

    fn settle_with(&self, reg: &Registration, cancellable: bool) -> io::Result<()> {
        let fd = self.sock().as_raw_fd();
        let deadline = OnceCell::new();
        self.slot.claim().settle(cancellable, |rest| {
            let deadline = *deadline.get_or_init(|| self.deadline());
            sockio::send_now(fd, reg, rest, deadline)
        })
    }

    /// The socket, once every write is settled (`into_raw_fd`, `OwnedFd::from`). Waits even in
    /// a cancelled fiber: the caller may close the descriptor, which no send in flight may name.
    pub(crate) fn into_socket(mut self, reg: &Registration) -> Socket {
        // Errors have nowhere to go here, as when std's sockets are closed with data unsent.
        let _ = self.settle_with(reg, false);
        self.sock.take().expect("present until taken")
    }
}

impl Drop for SendSide {
    /// Settles the connection's write-behind send before the descriptor closes, as `close(2)`
    /// lets buffered bytes go out: a fiber waits for it (the ring sends what the socket could
    /// not take at once, within the write timeout); a plain thread or a cancelled fiber (also
    /// one cancelled while it waits) does not wait but leaves the descriptor open with the slot
    /// until the send, rest included, completes (as long as the write timeout allows; without
    /// one, until the peer reads or goes).
    fn drop(&mut self) {
        let Some(sock) = self.sock.take() else {
            return;
        };
        let mut claim = self.slot.claim();
        if !claim.in_flight() {
            return;
        }
        if crate::fiber::current::in_fiber() && !crate::fiber::current::is_cancelled() {
            let fd = sock.as_raw_fd();
            let deadline = self.deadline();
            // A registration of our own: this handle's is gone (only epoll uses it, for a
            // socket it may then add again, which it tolerates).
            let reg = Registration::new();
            let _ = claim.settle(true, |rest| sockio::send_now(fd, &reg, rest, deadline));
            if claim.in_flight() {
                // Cancelled while it waited: the send still names the descriptor.
                claim.keep(sock.into());
            }
        } else {
            claim.keep(sock.into());
        }
    }
}
