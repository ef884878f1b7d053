//! Process limits a generator needs: enough file descriptors for its connections, and a
//! descriptor table already that large before it connects.
//!
//! A generator's process is threaded (one OS thread per processor), and Linux grows a threaded
//! process's descriptor table by doubling it and waiting for an RCU grace period; the thread
//! whose `socket` crossed the end sleeps (8–23 ms per doubling on the VM of
//! `docs/notes/scale.md`), and on a weft processor that stalls every connection it drives.
//! [`reserve_descriptors`] grows the table once, up front ([`weft::net::reserve_descriptors`]).

use anyhow::{bail, Context};

/// The largest table reserved up front (8 bytes a slot: 512 KiB). Beyond it the table grows
/// on demand, so a huge hard limit does not cost the kernel memory for descriptors never
/// opened.
pub const RESERVE_MAX: usize = 1 << 16;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and grows the descriptor table to hold
/// `wanted` descriptors (at most [`RESERVE_MAX`]); fails with the fix when the hard limit is
/// below `wanted`.
pub fn reserve_descriptors(wanted: u64) -> anyhow::Result<()> {
    let limit = weft::net::raise_descriptor_limit().context("reading the descriptor limit")?;
    if limit < wanted {
        bail!(
            "need {wanted} file descriptors but the hard limit is {limit}; raise it (ulimit -Hn {wanted}) or use fewer connections"
        );
    }
    let count = usize::try_from(wanted)
        .unwrap_or(usize::MAX)
        .min(RESERVE_MAX);
    weft::net::reserve_descriptors(count).context("growing the descriptor table")?;
    Ok(())
}
