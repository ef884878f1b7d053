//! Process limits a generator needs: enough file descriptors for its connections.

use anyhow::bail;

/// Raises RLIMIT_NOFILE's soft limit to at least `wanted` (up to the hard limit); fails with
/// the fix when the hard limit is too low.
pub fn raise_nofile(wanted: u64) -> anyhow::Result<()> {
    // SAFETY: getrlimit/setrlimit read and write the struct we own.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return Ok(());
        }
        if lim.rlim_cur >= wanted {
            return Ok(());
        }
        if lim.rlim_max < wanted {
            bail!(
                "need {wanted} file descriptors but the hard limit is {}; raise it (ulimit -Hn {wanted}) or use fewer connections",
                lim.rlim_max
            );
        }
        lim.rlim_cur = wanted;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
            bail!(
                "raising the descriptor limit to {wanted}: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    Ok(())
}
