//! Write-behind sends: a short write from a fiber on io_uring goes to the kernel without the
//! fiber waiting for the send's completion.
//!
//! Why: a request/response server's fiber otherwise parks twice per request, once for its
//! reply's `SEND` and once for the next request's `RECV`; at thousands of connections those
//! extra resumes (each a cold stack and a run-queue pass) are what sets the CPU per request
//! (`docs/notes/scale.md`).
//!
//! How: the writes of a connection go through its [`Slot`], shared by every handle of it
//! (`try_clone`). A write of at most [`MAX_BYTES`] from a fiber on a uring processor is copied
//! into the slot's buffer and handed to the ring as a `SEND` with `MSG_DONTWAIT` (the kernel
//! tries once when the batch is submitted and never waits for room, so the sleeping enter that
//! submits it can count on its completion), and the call returns the whole length at once.
//! When the socket took only part of it (or none: `EAGAIN`), the driver hands the rest back
//! to the ring at once as a `SEND` that waits for room (with a linked timeout of the stream's
//! write timeout, if it has one), and so on until all of it went or a send failed: the rest
//! goes out while the writer does something else, as after a blocking `write`. (It used to
//! wait for the writer's next write; a server that then waited for the client's next request,
//! while the client waited for the rest of the reply, stalled until a timeout.) Anything that
//! writes next through the connection (`write`, `flush`, `shutdown`, `send_file`, dropping the
//! stream) first *settles* the slot ([`Claim::settle`]): it waits for that completion
//! (usually reaped long since), sends by the ordinary path whatever is still unsent (only
//! when the ring went away before it could hand the rest back), and reports the error if a
//! send failed. So bytes go out in the order they were written, an error surfaces on the next
//! call that writes, and nothing a caller was told was written is dropped while its stream
//! lives.
//!
//! Invariants:
//! - One writer at a time holds the slot's claim ([`Slot::claim`]); only the claim holder
//!   touches the buffer, the `in_flight` flag and the kept descriptor, and it does not touch the
//!   buffer while a send is in flight.
//! - While a send is in flight the kernel side holds a strong count of the slot (the SQE's
//!   `user_data` is `Arc::into_raw | TAG`, or `| RESEND_TAG` for the rest of one), which
//!   [`complete`] gives back, or passes on to the send of the rest: the buffer outlives the
//!   send even when every handle is gone, or when the ring is torn down without reaping it
//!   (then the slot leaks, which is safe).
//! - The rest of a send goes to the ring that reaped the first part (the driver's own thread
//!   pushes it, as `SINGLE_ISSUER` requires), and the send counts as in flight, for the writer,
//!   until its last part completes.
//! - A descriptor a send in flight may name is not closed: a fiber dropping its stream settles
//!   first; any other context (a plain thread, a cancelled fiber) hands the descriptor to the
//!   slot ([`Claim::keep`]), which closes it only when the last count goes, so its number
//!   cannot be reused under a send that has not been submitted yet.
//!
//! The completion handshake itself (who wakes whom) is [`super::behind_state`], which loom
//! checks.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use io_uring::{opcode, squeue, types};

use super::behind_state::{Signal, Wake};
use super::driver::uring::Uring;
use crate::ctx;
use crate::fiber::current::{self as fiber, sleep, yield_now};
use crate::fiber::park::{self, Unparker};
use crate::loom::{AtomicBool, Ordering, UnsafeCell};

/// The largest write sent behind; longer ones take the ordinary path (their copy would cost
/// more than the resume it saves, and the kernel rarely takes them whole at once).
pub(crate) const MAX_BYTES: usize = 16 * 1024;
/// Buffers of sends that went out whole are kept for reuse per thread, at most this many
/// (the context's send-buffer pool, `ctx::with_send_buffers`): a connection holds a buffer
/// only while its send is in flight, so idle connections hold none, and a busy processor does
/// not allocate per reply.
const POOL_BUFFERS: usize = 64;
/// The tag in an SQE's `user_data` that marks a write-behind send (bit 1; bit 0 marks
/// cancels, and both together the eventfd's cancel, see `driver/uring.rs`).
pub(crate) const TAG: u64 = 2;
/// The tag of the send of a write-behind send's rest: `TAG` and bit 2 (a slot is 8-aligned).
/// `user_data & 3 == TAG` holds for both; only the first send is sure to complete while the
/// enter that submits it runs (`MSG_DONTWAIT`), which is what the driver counts `TAG` for.
pub(crate) const RESEND_TAG: u64 = TAG | 4;
/// The bits of a write-behind `user_data` that are not the slot's address.
const TAG_BITS: u64 = 7;
/// The `user_data` of the timeout linked to the send of a rest: its completion only says
/// whether it fired (the send's own completion says it too, as `ECANCELED`).
pub(crate) const RESEND_TIMEOUT: u64 = 7;
/// A contended claim is retried this many times (yielding) before the waiter sleeps between
/// tries.
const CLAIM_SPINS: u32 = 64;
/// The sleep between tries of a long-contended claim.
const CLAIM_SLEEP: Duration = Duration::from_millis(1);

impl Wake for Unparker {
    fn wake(self) {
        self.unpark_owned();
    }
}

/// An empty buffer from this thread's pool, or a new one.
fn pooled_buffer() -> Vec<u8> {
    ctx::with_send_buffers(|p| p.pop()).unwrap_or_default()
}

/// Gives `buf` back to this thread's pool (or frees it when the pool is full).
fn recycle(mut buf: Vec<u8>) {
    if buf.capacity() == 0 || buf.capacity() > MAX_BYTES {
        return;
    }
    buf.clear();
    ctx::with_send_buffers(|p| {
        if p.len() < POOL_BUFFERS {
            p.push(buf);
        }
    });
}

/// What only the claim holder touches.
struct Writer {
    /// A send was handed to the ring and not settled yet.
    in_flight: bool,
    /// Descriptors of dropped handles, kept open until the slot goes.
    kept: Vec<OwnedFd>,
}

/// A send in flight: its bytes and how far it got.
struct Sending {
    buf: Vec<u8>,
    /// Bytes of `buf` the socket took so far.
    sent: usize,
    /// The socket.
    fd: i32,
    /// The stream's write timeout when the send was queued, in nanoseconds; 0 for none.
    timeout_ns: u64,
    /// Where the linked timeout of the send of the rest points (the kernel copies it when the
    /// SQE is submitted).
    timeout: types::Timespec,
}

/// One connection's write-behind state; see the module docs.
pub(crate) struct Slot {
    claim: AtomicBool,
    writer: UnsafeCell<Writer>,
    /// The send in flight. Touched by the claim holder while nothing is in flight or once it
    /// has seen `DONE`; in between by the kernel and by [`complete`] (which hands the rest to
    /// the ring, or, before it publishes `DONE`, takes the buffer back to its thread's pool
    /// when the send went out whole).
    sending: UnsafeCell<Sending>,
    signal: Signal<Unparker>,
}

// SAFETY: `writer` is touched only by the holder of `claim` (acquired with `Acquire`, released
// with `Release`, so each holder sees the last one's writes). `sending` is handed over with the
// send: the holder writes it before pushing the SQE and reads it again only after the
// `Acquire` load that saw `DONE`; the kernel and then `complete` use it in between, `complete`
// before its `AcqRel` publication of `DONE`. `signal` is atomics and a mutex.
unsafe impl Sync for Slot {}
// SAFETY: as above; `OwnedFd` and `Vec<u8>` may move between threads.
unsafe impl Send for Slot {}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot").finish_non_exhaustive()
    }
}

impl Slot {
    pub(crate) fn new() -> Arc<Slot> {
        Arc::new(Slot {
            claim: AtomicBool::new(false),
            writer: UnsafeCell::new(Writer {
                in_flight: false,
                kept: Vec::new(),
            }),
            sending: UnsafeCell::new(Sending {
                buf: Vec::new(),
                sent: 0,
                fd: -1,
                timeout_ns: 0,
                timeout: types::Timespec::new(),
            }),
            signal: Signal::new(),
        })
    }

    /// Starts fetching the slot's lines (its claim flag and the writer state beside it), for a
    /// caller that has just received a request and will likely answer it. At thousands of
    /// connections the slot is cold when a reply claims it, and the claim's compare-and-swap
    /// was one dependent miss per reply; fetched at the receive, the line arrives while the
    /// request is parsed and served. A hint only: nothing is read.
    #[inline]
    pub(crate) fn prefetch(&self) {
        crate::fiber::park::prefetch((self as *const Slot).cast());
        crate::fiber::park::prefetch((&self.claim as *const AtomicBool).cast());
    }

    /// Becomes the connection's one writer, waiting while another write is under way (only
    /// writers racing on one connection ever wait here).
    pub(crate) fn claim(self: &Arc<Slot>) -> Claim<'_> {
        let mut tries = 0u32;
        while self
            .claim
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            tries += 1;
            match (fiber::in_fiber(), tries < CLAIM_SPINS) {
                (true, true) => yield_now(),
                (true, false) => {
                    let _ = sleep(CLAIM_SLEEP);
                }
                (false, true) => std::thread::yield_now(),
                (false, false) => std::thread::sleep(CLAIM_SLEEP),
            }
        }
        Claim { slot: self }
    }
}

/// The claim on a [`Slot`]; released on drop.
pub(crate) struct Claim<'a> {
    slot: &'a Arc<Slot>,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.slot.claim.store(false, Ordering::Release);
    }
}

impl Claim<'_> {
    fn writer(&mut self) -> &mut Writer {
        // SAFETY: we hold the claim, so nobody else touches `writer` (see `Slot`'s `Sync`); the
        // borrow is tied to `&mut self`, so no two exist at once.
        self.slot.writer.with_mut(|w| unsafe { &mut *w })
    }

    /// Whether a send is in flight (not settled).
    pub(crate) fn in_flight(&mut self) -> bool {
        self.writer().in_flight
    }

    /// Settles the send in flight, if any: waits for its completion, then hands whatever the
    /// socket did not take to `send` (the ordinary blocking send, called until all of it went
    /// or it fails). Returns the send's error, or `send`'s.
    ///
    /// Waits for the completion: it comes with the next submission of the ring that has it
    /// when the socket had room, and otherwise once the socket took the rest, or the stream's
    /// write timeout (as it was when the write was queued) ran out, or the send failed: as
    /// long as a blocking `write` of the rest would have waited. A cancelled fiber stops
    /// waiting if `cancellable` (the error of a cancelled operation; the send stays in flight
    /// and the next settle waits for it again). Call it from a fiber or a plain thread, not
    /// from a processor's own loop (which would wait for its own ring).
    pub(crate) fn settle(
        &mut self,
        cancellable: bool,
        mut send: impl FnMut(&[u8]) -> io::Result<usize>,
    ) -> io::Result<()> {
        if !self.writer().in_flight {
            return Ok(());
        }
        let result = match self.slot.signal.poll() {
            Some(r) => r,
            None => {
                let in_fiber = fiber::in_fiber();
                let waited = self.slot.signal.wait_until(
                    park::current_unparker,
                    || {
                        if in_fiber {
                            park::park_current(None);
                        } else {
                            std::thread::park();
                        }
                    },
                    || cancellable && in_fiber && fiber::is_cancelled(),
                );
                match waited {
                    Some(r) => r,
                    None => return Err(crate::io::op::cancelled()),
                }
            }
        };
        self.writer().in_flight = false;
        // SAFETY: `DONE` was seen (acquire): the kernel and `complete` are done with the buffer,
        // and only the claim holder, us, touches it until the next send.
        let sending = self.slot.sending.with_mut(|b| unsafe { &mut *b });
        let buf = std::mem::take(&mut sending.buf);
        let sent = match result {
            r if r >= 0 => r as usize,
            r if r == -libc::EAGAIN || r == -libc::EINTR => 0,
            r if r == -libc::ETIME => {
                recycle(buf);
                return Err(crate::io::op::timed_out());
            }
            r => {
                recycle(buf);
                return Err(io::Error::from_raw_os_error(-r));
            }
        };
        // Empty when the send went out whole (`complete` took the buffer).
        let mut rest = buf.get(sent..).unwrap_or_default();
        let mut outcome = Ok(());
        while !rest.is_empty() {
            match send(rest) {
                Ok(0) => {
                    outcome = Err(io::ErrorKind::WriteZero.into());
                    break;
                }
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            }
        }
        recycle(buf);
        outcome
    }

    /// Copies `bufs` (at most [`MAX_BYTES`] in all, and nothing in flight: settle first) and
    /// hands them to `ring` as one `SEND` on `fd`; returns how many bytes that is. The rest of
    /// a send the socket takes only in part waits for room for at most `timeout_ns` (0: no
    /// limit), the stream's write timeout.
    pub(crate) fn queue(
        &mut self,
        ring: &Uring,
        fd: i32,
        timeout_ns: u64,
        bufs: &[io::IoSlice<'_>],
    ) -> usize {
        let slot = Arc::clone(self.slot);
        let w = self.writer();
        assert!(
            !w.in_flight,
            "weft: write-behind queued over a send in flight"
        );
        w.in_flight = true;
        let mut buf = pooled_buffer();
        for b in bufs {
            buf.extend_from_slice(b);
        }
        let len = buf.len();
        debug_assert!(len <= MAX_BYTES);
        // SAFETY: nothing was in flight (checked above), so only we, the claim holder, touch
        // the buffer until the SQE is pushed.
        let sending = slot.sending.with_mut(|b| unsafe { &mut *b });
        sending.buf = buf;
        sending.sent = 0;
        sending.fd = fd;
        sending.timeout_ns = timeout_ns;
        let ptr = sending.buf.as_ptr();
        slot.signal.arm();
        let data = Arc::into_raw(slot) as u64 | TAG;
        let entry = opcode::Send::new(types::Fd(fd), ptr, len as u32)
            .flags(libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT)
            .build()
            .user_data(data);
        // SAFETY: the entry names the slot's buffer and the slot itself, whose strong count
        // it carries; the buffer is not touched until the send is settled (`in_flight`), and
        // the count is given back only by `complete`, when the kernel is done with both.
        unsafe { ring.push(&entry) };
        len
    }

    /// Keeps `fd` open until the slot goes (the last handle and the kernel's count): for a
    /// handle dropped while a send that may name its descriptor is in flight.
    pub(crate) fn keep(&mut self, fd: OwnedFd) {
        self.writer().kept.push(fd);
    }
}

/// The driver's side: a write-behind send's completion was reaped by `ring` (`None` when the
/// ring is being torn down). When the socket took only part of the bytes, or none for want of
/// room, the rest goes back to `ring` as a send that waits for room, and the writer hears
/// nothing yet; otherwise the writer learns the outcome: the bytes taken in all, or the error
/// (`ETIME` when the rest's timeout fired).
///
/// # Safety
/// `data` is the `user_data` of a send queued by [`Claim::queue`] or by this function, whose
/// completion has not been reported yet (the strong count it carries is taken back here).
/// `ring` is the ring that reaped it, on its own thread.
pub(crate) unsafe fn complete(ring: Option<&Uring>, data: u64, result: i32) {
    // SAFETY: per the contract, `data & !TAG_BITS` came from `Arc::into_raw` and its count is
    // ours.
    let slot = unsafe { Arc::from_raw((data & !TAG_BITS) as *const Slot) };
    // SAFETY: the send is over and `DONE` not published yet: the buffer is ours (see `Slot`).
    let sending = slot.sending.with_mut(|b| unsafe { &mut *b });
    let progressed = match result {
        n if n > 0 => {
            sending.sent += n as usize;
            true
        }
        n => n == -libc::EAGAIN || n == -libc::EINTR,
    };
    if progressed && sending.sent < sending.buf.len() {
        if let Some(ring) = ring {
            resend(ring, slot, sending);
            return;
        }
    }
    let outcome = match result {
        n if n >= 0 || n == -libc::EAGAIN || n == -libc::EINTR => sending.sent as i32,
        n if n == -libc::ECANCELED && data & TAG_BITS == RESEND_TAG => -libc::ETIME,
        n => n,
    };
    if sending.sent == sending.buf.len() {
        recycle(std::mem::take(&mut sending.buf));
    }
    slot.signal.complete(outcome);
}

/// Hands the rest of `sending` (the slot's send in flight) to `ring` as a `SEND` that waits
/// for room, linked to a timeout when the stream has a write timeout; the SQE carries the
/// slot's strong count on.
fn resend(ring: &Uring, slot: Arc<Slot>, sending: &mut Sending) {
    let rest = &sending.buf[sending.sent..];
    let (ptr, len) = (rest.as_ptr(), rest.len() as u32);
    let fd = sending.fd;
    let timeout_ns = sending.timeout_ns;
    sending.timeout = types::Timespec::from(Duration::from_nanos(timeout_ns));
    let ts: *const types::Timespec = &sending.timeout;
    let data = Arc::into_raw(slot) as u64 | RESEND_TAG;
    let send = opcode::Send::new(types::Fd(fd), ptr, len)
        .flags(libc::MSG_NOSIGNAL)
        .build()
        .user_data(data);
    if timeout_ns == 0 {
        // SAFETY: the entry names the slot's buffer and the slot itself, whose strong count it
        // carries; the buffer is not touched until the send completes (the writer sees the
        // send in flight until `complete` publishes `DONE`).
        unsafe { ring.push(&send) };
    } else {
        let timeout = opcode::LinkTimeout::new(ts)
            .build()
            .user_data(RESEND_TIMEOUT);
        // SAFETY: as above for the send; the timeout points into the slot, which the send's
        // count keeps alive until the send completes, after the kernel copied the timeout at
        // submission.
        unsafe { ring.push_linked(&[send.flags(squeue::Flags::IO_LINK), timeout]) };
    }
}
