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
//! tries once when the batch is submitted and never waits for room), and the call returns the
//! whole length at once. Anything that writes next through the connection (`write`, `flush`,
//! `shutdown`, `send_file`, dropping the stream) first *settles* the slot
//! ([`Claim::settle`]): it waits for that completion (usually reaped long since), sends by the
//! ordinary path whatever the socket could not take at once, and reports the error if the send
//! failed. So bytes go out in the order they were written, an error surfaces on the next call
//! that writes, and nothing a caller was told was written is dropped while its stream lives.
//!
//! Invariants:
//! - One writer at a time holds the slot's claim ([`Slot::claim`]); only the claim holder
//!   touches the buffer, the `in_flight` flag and the kept descriptor, and it does not touch the
//!   buffer while a send is in flight.
//! - While a send is in flight the kernel side holds a strong count of the slot (the SQE's
//!   `user_data` is `Arc::into_raw | TAG`), which [`complete`] gives back: the buffer outlives
//!   the send even when every handle is gone, or when the ring is torn down without reaping it
//!   (then the slot leaks, which is safe).
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

use io_uring::{opcode, types::Fd};

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

/// One connection's write-behind state; see the module docs.
pub(crate) struct Slot {
    claim: AtomicBool,
    writer: UnsafeCell<Writer>,
    /// The bytes of the send in flight. Touched by the claim holder while nothing is in flight
    /// or once it has seen `DONE`; in between by the kernel and then by [`complete`] (before it
    /// publishes `DONE`), which takes the buffer back to its thread's pool when the send went
    /// out whole.
    sending: UnsafeCell<Vec<u8>>,
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
            sending: UnsafeCell::new(Vec::new()),
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
    /// Waits uncancellably for the completion, which comes with the next submission of the
    /// ring that has it (`MSG_DONTWAIT`: the kernel never holds the send back waiting for room).
    /// Call it from a fiber or a plain thread, not from a processor's own loop (which would wait
    /// for its own ring).
    pub(crate) fn settle(
        &mut self,
        mut send: impl FnMut(&[u8]) -> io::Result<usize>,
    ) -> io::Result<()> {
        if !self.writer().in_flight {
            return Ok(());
        }
        let result = match self.slot.signal.poll() {
            Some(r) => r,
            None => {
                let in_fiber = fiber::in_fiber();
                self.slot.signal.wait(park::current_unparker, || {
                    if in_fiber {
                        park::park_current(None);
                    } else {
                        std::thread::park();
                    }
                })
            }
        };
        self.writer().in_flight = false;
        // SAFETY: `DONE` was seen (acquire): the kernel and `complete` are done with the buffer,
        // and only the claim holder, us, touches it until the next send.
        let buf = std::mem::take(self.slot.sending.with_mut(|b| unsafe { &mut *b }));
        let sent = match result {
            r if r >= 0 => r as usize,
            r if r == -libc::EAGAIN || r == -libc::EINTR => 0,
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
    /// hands them to `ring` as one `SEND` on `fd`; returns how many bytes that is.
    pub(crate) fn queue(&mut self, ring: &Uring, fd: i32, bufs: &[io::IoSlice<'_>]) -> usize {
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
        *sending = buf;
        let ptr = sending.as_ptr();
        slot.signal.arm();
        let data = Arc::into_raw(slot) as u64 | TAG;
        let entry = opcode::Send::new(Fd(fd), ptr, len as u32)
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

/// The driver's side: a write-behind send's completion was reaped.
///
/// # Safety
/// `data` is the `user_data` of a send queued by [`Claim::queue`] whose completion has not been
/// reported yet (the strong count it carries is taken back here).
pub(crate) unsafe fn complete(data: u64, result: i32) {
    // SAFETY: per the contract, `data & !TAG` came from `Arc::into_raw` and its count is ours.
    let slot = unsafe { Arc::from_raw((data & !TAG) as *const Slot) };
    // SAFETY: the send is over and `DONE` not published yet: the buffer is ours (see `Slot`).
    let sending = slot.sending.with_mut(|b| unsafe { &mut *b });
    if usize::try_from(result).is_ok_and(|n| n == sending.len()) {
        recycle(std::mem::take(sending));
    }
    slot.signal.complete(result);
}
