//! Whether a file range is in the page cache, so `sendfile(2)` can run on a processor without
//! waiting for the disk; a cold range is read once on the blocking pool (which warms the page
//! cache) before it is sent.
//!
//! The question is asked with `cachestat(2)` (Linux 6.5+): one syscall that counts the cached
//! pages of a range without touching them. On kernels without it (or where a seccomp filter
//! refuses it) the check is switched off for the process and ranges count as cached: the old
//! behaviour, where a cold file makes `sendfile` wait for the disk on the processor.
//!
//! Invariant: a range is reported cold only when the kernel said some page of it is missing;
//! a wrong "cold" costs one extra read on the blocking pool, never a wrong result.

use crate::loom::{Ordering, StaticAtomicBool, StaticAtomicU64};
use std::io;

/// `cachestat(2)`'s number (the same on every architecture: it came after the tables were
/// unified at 424).
const SYS_CACHESTAT: libc::c_long = 451;
/// Ranges longer than this are checked (and warmed) in pieces of this size.
pub(crate) const CHECK_CHUNK_BYTES: usize = 1 << 20;
const PAGE_BYTES: u64 = 4096;

/// `struct cachestat_range`.
#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

/// `struct cachestat`.
#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// Set once the kernel said it has no usable `cachestat`.
static UNAVAILABLE: StaticAtomicBool = StaticAtomicBool::new(false);
/// Cold ranges read on the blocking pool before sending, for tests and diagnostics.
static WARMED: StaticAtomicU64 = StaticAtomicU64::new(0);

/// How many cold ranges were warmed on the blocking pool before being sent.
pub(crate) fn warmed() -> u64 {
    WARMED.load(Ordering::Relaxed)
}

/// Whether every page of `offset..offset + len` of `fd` is cached (`true` when the kernel
/// cannot tell). `len` should not reach past the end of the file: pages past it are never
/// cached.
pub(crate) fn is_cached(fd: i32, offset: u64, len: usize) -> bool {
    if len == 0 || UNAVAILABLE.load(Ordering::Relaxed) {
        return true;
    }
    let range = CachestatRange {
        off: offset,
        len: len as u64,
    };
    let mut stat = Cachestat::default();
    // SAFETY: both structs are live, `repr(C)` and laid out as the kernel's.
    let r = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd,
            &range as *const CachestatRange,
            &mut stat as *mut Cachestat,
            0u32,
        )
    };
    if r < 0 {
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::ENOSYS) | Some(libc::EPERM) | Some(libc::EOPNOTSUPP) => {
                UNAVAILABLE.store(true, Ordering::Relaxed);
            }
            _ => {}
        }
        return true;
    }
    let first = offset / PAGE_BYTES;
    let last = (offset + len as u64 - 1) / PAGE_BYTES;
    stat.nr_cache > last - first
}

/// Reads `offset..offset + len` of `fd` on the blocking pool, discarding the bytes: afterwards
/// the range is in the page cache. Errors are left for the send that follows to report.
pub(crate) fn warm(fd: i32, offset: u64, len: usize) {
    WARMED.fetch_add(1, Ordering::Relaxed);
    crate::blocking(move || {
        let mut buf = vec![0u8; len.min(CHECK_CHUNK_BYTES)];
        let mut done = 0;
        while done < len {
            let want = (len - done).min(buf.len());
            // SAFETY: `buf` has room for `want` bytes; `fd` stays open because the caller's
            // `File` is borrowed for the whole send, which waits for this closure.
            let r = unsafe {
                libc::pread(
                    fd,
                    buf.as_mut_ptr().cast(),
                    want,
                    (offset + done as u64) as libc::off_t,
                )
            };
            if r <= 0 {
                return;
            }
            done += r as usize;
        }
    });
}
