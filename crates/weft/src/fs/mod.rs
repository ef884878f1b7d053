//! Files in the shape of `std::fs`, blocking from the fiber's point of view, and sending a file
//! over a socket ([`send_file`]).
//!
//! ## How each backend does file I/O
//! Regular files have no readiness (epoll refuses them), so file calls do not go through the
//! socket path (`op::run`):
//! - **uring processor**: reads, writes and `statx` are ring operations, like socket calls.
//!   The kernel serves page-cache hits inline and hands reads that must wait for the disk to
//!   its own worker threads (io-wq), so the processor never stalls either way; no detection is
//!   needed, and submitting directly costs one SQE instead of a trip to the blocking pool.
//! - **epoll processor**: `preadv2`/`pwritev2` with `RWF_NOWAIT` first (page-cache hits cost
//!   one syscall); when the kernel answers `EAGAIN` (the data is not cached, or the filesystem
//!   cannot promise not to block: `EOPNOTSUPP`), the call is handed to [`crate::blocking()`] so
//!   the processor keeps running other fibers. `statx(2)` runs inline (metadata of an open file
//!   is in memory).
//! - **plain thread**: ordinary blocking syscalls.
//!
//! Opening goes to the blocking pool on every backend (path lookup may read directories from
//! disk) and runs inline on plain threads. Closing is `close(2)` on drop.
//!
//! Invariant: as for sockets, no call returns while the kernel, or a blocking-pool helper,
//! can still touch the caller's buffer.

mod file;
mod metadata;
mod residency;
mod send;

pub use file::{File, OpenOptions};
pub use metadata::Metadata;
pub use send::{
    send_file, send_file_after, send_file_with, SendFileMethod, AUTO_SENDFILE_MAX_BYTES,
};

/// How many cold file ranges `send_file` read on the blocking pool (warming the page cache)
/// before sending them, rather than let `sendfile(2)` wait for the disk on a processor. For
/// tests and diagnostics.
#[doc(hidden)]
pub fn cold_ranges_warmed() -> u64 {
    residency::warmed()
}
