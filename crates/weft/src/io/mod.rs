//! I/O: one driver per processor (io_uring, or epoll as the fallback) and the operation
//! protocol fibers use on it.
//!
//! - `driver`: the per-processor driver and its waker; the processor sleeps in it.
//! - `op`: how a fiber runs one operation (completion record on its stack, park, cancel
//!   safely) and how plain threads run the same call (non-blocking syscall, `poll(2)`).
//! - [`arrival`]: tickets that order received bytes against checks of outside state (one
//!   `fstat` standing for every request that was in before it began).
//! - `lend`: the receive buffers a processor lends to its connections ([`Lent`]): the ring's
//!   provided buffers on io_uring, a free list on epoll.
//! - The socket types built on it are in [`crate::net`].
//!
//! ## Choosing the backend
//! Per cluster: [`crate::ClusterBuilder::io`], else the `WEFT_IO` environment variable
//! (`uring` or `epoll`), else io_uring. When io_uring cannot be set up (`io_uring_setup`
//! fails with `EPERM` under a seccomp filter or `kernel.io_uring_disabled`, `ENOSYS` on old or
//! stripped kernels, ...), weft falls back to epoll and says so once per process on stderr.
//!
//! Architecture Invariant: code above this module (sockets) never asks which backend runs; it
//! hands `op::run` both an SQE and a non-blocking syscall.
//!
//! ## Design notes
//! - **Ring flags**: `SINGLE_ISSUER | DEFER_TASKRUN | TASKRUN_FLAG | SUBMIT_ALL`, falling back
//!   to `COOP_TASKRUN | TASKRUN_FLAG | SUBMIT_ALL`, then none; the reasons are in
//!   `driver/uring.rs`. Not used: `SQPOLL` (a kernel thread spinning per ring would burn the
//!   cores an idle server must leave alone) and `IOPOLL` (block devices only).
//! - **Idle sleep** is the driver's blocking wait; the cluster's idle protocol is unchanged and
//!   wakes a sleeper through its eventfd (see `runtime/idle.rs`).
//! - **Deadlines** use the processor's timer heap, then the same `ASYNC_CANCEL` path as fiber
//!   cancellation: one code path on both backends. `IORING_OP_LINK_TIMEOUT` would save the
//!   cancel round trip for operations that do time out; worth measuring later.
//! - **Completion records live on the fiber's stack**, so an operation allocates nothing (two
//!   reference-count increments: the fiber and the driver). A fiber does not return from an
//!   operation before the kernel is done with it, cancelled or not.
//! - **Sockets are always `O_NONBLOCK`**: the epoll backend and plain threads need it, and
//!   io_uring still arms its internal poll for them (no `EAGAIN` reaches us in practice; if it
//!   does, the call falls back to a `POLL_ADD` on the ring and the syscall).
//! - **Co-operative budget**: an operation that completes without parking (epoll, when the
//!   socket is ready) counts against the running fiber's budget of
//!   `ctx::OP_BUDGET_PER_RUN` operations per run (spent by `op::spend_op_budget`); when it is
//!   spent the fiber yields. Without it a connection whose socket never runs dry would starve
//!   every other fiber of its processor (memcached bounds the same thing with `-R`). io_uring
//!   operations always park, so they never spend it.
//! - **Migration**: a completion arrives on the ring of the processor that submitted it, which
//!   wakes the fiber through the ordinary unpark path, so a fiber that moved (or belongs to
//!   another cluster) is queued where it belongs; a cancel from a fiber that moved is forwarded
//!   to the owning processor (single-issuer rings), which the test suite checks.

pub mod arrival;
pub(crate) mod behind;
pub(crate) mod behind_state;
pub(crate) mod driver;
pub(crate) mod lend;
pub(crate) mod op;
pub(crate) mod op_state;

pub use lend::{Lent, LENT_BUFFER_BYTES};

use crate::loom::{Ordering, StaticAtomicBool};
use std::io;
use std::sync::OnceLock;

/// Which kernel interface a cluster's processors use for I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IoBackend {
    /// One io_uring per processor (the default).
    Uring,
    /// One epoll instance per processor, non-blocking syscalls (the fallback).
    Epoll,
}

impl IoBackend {
    /// `"uring"` or `"epoll"`.
    pub fn name(self) -> &'static str {
        match self {
            IoBackend::Uring => "uring",
            IoBackend::Epoll => "epoll",
        }
    }
}

impl std::str::FromStr for IoBackend {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "uring" | "io_uring" | "io-uring" => Ok(IoBackend::Uring),
            "epoll" => Ok(IoBackend::Epoll),
            other => Err(format!(
                "unknown I/O backend {other:?} (expected uring or epoll)"
            )),
        }
    }
}

impl std::fmt::Display for IoBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The backend the calling fiber's processor uses, or `None` on a plain thread (where weft's
/// sockets make ordinary blocking syscalls).
pub fn backend() -> Option<IoBackend> {
    op::current_driver().map(|d| d.backend())
}

/// The io_uring setup flags the calling fiber's processor got from the kernel (see
/// `io/driver/uring.rs` for the order they are tried in and why), or `None` when it is not on
/// a uring processor. For logs and benchmark reports.
pub fn uring_flags() -> Option<&'static str> {
    match op::current_driver() {
        Some(driver::Driver::Uring(u)) => Some(u.flags),
        _ => None,
    }
}

/// How many cancellations (deadlines or fiber cancels) were forwarded to the processor owning
/// the operation because the fiber had moved to another processor. For tests and diagnostics.
#[doc(hidden)]
pub fn forwarded_cancels() -> u64 {
    driver::FORWARDED_CANCELS.load(Ordering::Relaxed)
}

/// Resolves a cluster's backend: the builder's choice, else `WEFT_IO`, else io_uring; io_uring
/// only if this process can set up a ring.
pub(crate) fn resolve(requested: Option<IoBackend>) -> io::Result<IoBackend> {
    let wanted = match requested {
        Some(b) => b,
        None => match std::env::var("WEFT_IO") {
            Ok(v) => v.parse().map_err(|e: String| {
                io::Error::new(io::ErrorKind::InvalidInput, format!("WEFT_IO: {e}"))
            })?,
            Err(_) => IoBackend::Uring,
        },
    };
    if wanted == IoBackend::Epoll {
        return Ok(IoBackend::Epoll);
    }
    match uring_probe() {
        Ok(()) => Ok(IoBackend::Uring),
        Err(e) => {
            log_fallback(e);
            Ok(IoBackend::Epoll)
        }
    }
}

/// Whether a ring can be built here; tried once per process.
fn uring_probe() -> Result<(), &'static io::Error> {
    static PROBE: OnceLock<Result<(), io::Error>> = OnceLock::new();
    PROBE
        .get_or_init(|| driver::uring::build_ring().map(drop))
        .as_ref()
        .map(|_| ())
}

/// Says once per process that io_uring is unavailable, why, and how to enable it.
pub(crate) fn log_fallback(e: &io::Error) {
    static LOGGED: StaticAtomicBool = StaticAtomicBool::new(false);
    if LOGGED.swap(true, Ordering::Relaxed) {
        return;
    }
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            "io_uring is disabled for this process: check `sysctl kernel.io_uring_disabled` \
             (set it to 0) and the container's seccomp profile (allow io_uring_setup, \
             io_uring_enter, io_uring_register)"
        }
        Some(libc::ENOSYS) => {
            "this kernel has no io_uring (Linux 5.11+ built with CONFIG_IO_URING is needed), \
             or a seccomp filter hides it"
        }
        Some(libc::ENOMEM) => "raise RLIMIT_MEMLOCK (ulimit -l) for io_uring's rings",
        _ => "set WEFT_IO=epoll to silence this message",
    };
    eprintln!("weft: io_uring unavailable ({e}); using the epoll backend. {hint}");
}
