//! The process's descriptor table, sized for a server's connections before they arrive.
//!
//! Linux keeps a process's open descriptors in one table and doubles it when a descriptor past
//! its end is allocated. In a process with more than one thread, the doubling waits for an RCU
//! grace period before freeing the old table (`expand_fdtable` calls `synchronize_rcu`), so
//! the thread whose `accept` crossed the end sleeps: 8–23 ms at 256, 512, … 8,192 descriptors
//! on the 2-vCPU VM of `docs/notes/scale.md`. On a weft processor that thread runs every fiber
//! of the processor, so each doubling stalls every connection it serves. A server that grows
//! the table once at start-up, before it accepts anything, takes those waits out of serving.
//!
//! Invariant: [`reserve_descriptors`] leaves the process's open descriptors as it found them
//! (it closes the two it opens); only the table's capacity and the soft limit change.

use std::io;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns the soft limit now in force.
pub fn raise_descriptor_limit() -> io::Result<u64> {
    // SAFETY: getrlimit/setrlimit read and write a local struct.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return Err(io::Error::last_os_error());
        }
        if r.rlim_cur < r.rlim_max {
            let want = libc::rlimit {
                rlim_cur: r.rlim_max,
                rlim_max: r.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                r.rlim_cur = r.rlim_max;
            }
        }
        Ok(r.rlim_cur)
    }
}

/// Raises the soft descriptor limit to the hard one ([`raise_descriptor_limit`]), then grows
/// the descriptor table so that descriptors numbered below `count` (at most the limit) never
/// make it grow again, which in a threaded process stalls the thread that grows it (module
/// docs). Call it at start-up with the most descriptors the server will hold (its connection
/// limit plus its own files). Costs 8 bytes of kernel memory per table slot, about 256 KiB for
/// 32,768. Returns how many descriptors the table now holds without growing.
pub fn reserve_descriptors(count: usize) -> io::Result<usize> {
    let limit = usize::try_from(raise_descriptor_limit()?).unwrap_or(usize::MAX);
    let target = count.min(limit);
    if target > 1 {
        // SAFETY: eventfd returns a new descriptor this function owns, or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let top = i32::try_from(target - 1).unwrap_or(i32::MAX);
        // SAFETY: duplicates our own descriptor to the lowest free number >= top; the kernel
        // grows the table to hold it. Both descriptors are ours and closed right after.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, top) };
        let err = io::Error::last_os_error();
        // SAFETY: closing the descriptors opened above, once each.
        unsafe {
            if dup >= 0 {
                libc::close(dup);
            }
            libc::close(fd);
        }
        if dup < 0 {
            return Err(err);
        }
    }
    Ok(table_size().unwrap_or(target))
}

/// The descriptor table's current capacity (`FDSize` in `/proc/self/status`), if readable.
pub(crate) fn table_size() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("FDSize:"))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserving_grows_the_table_at_once_and_opens_nothing() {
        let limit = raise_descriptor_limit().unwrap() as usize;
        let want = limit.min(6000);
        let before = table_size().unwrap();
        let size = reserve_descriptors(want).unwrap();
        assert!(
            size >= want,
            "table holds {size} after reserving {want} (was {before})"
        );
        assert!(table_size().unwrap() >= size);
        // The descriptor it made to grow the table (the lowest free one from want - 1) is
        // closed again.
        let top = i32::try_from(want - 1).unwrap();
        // SAFETY: F_GETFD only reads the descriptor's flags, or fails with EBADF.
        let flags = unsafe { libc::fcntl(top, libc::F_GETFD) };
        assert_eq!(flags, -1, "fd {top} left open");
    }

    #[test]
    fn a_reservation_past_the_limit_stops_at_the_limit() {
        let limit = raise_descriptor_limit().unwrap() as usize;
        let size = reserve_descriptors(usize::MAX).unwrap();
        assert!(size >= limit.min(1 << 20), "table {size}, limit {limit}");
    }
}
