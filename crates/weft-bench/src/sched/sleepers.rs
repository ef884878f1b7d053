//! `sleepers`: spawn N fibers that each sleep for a long time and report how much resident
//! memory they added, per fiber. Then cancel them all and shut down.
//!
//! One operation is one spawned fiber; `seconds` is the time to spawn them all and see every
//! one asleep. The memory is `VmRSS` from `/proc/self/status` after minus before, divided by N:
//! stack pages touched, the fiber record, its join packet and its timer entry (on tokio: the
//! task and its timer entry).
//!
//! weft maps every stack with a guard page, two kernel memory mappings per fiber, so N
//! sleepers need `vm.max_map_count` above 2N plus what the process already has. This module
//! raises it to `4 * N + 65536` for the run when it is lower and the process may write
//! `/proc/sys/vm/max_map_count` (root), puts the old value back when the run is over, and says
//! so on stderr either way.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::harness;
use super::{Measured, Setup};

/// How long each sleeper sleeps: far longer than any run, so none wakes on its own.
const SLEEP: Duration = Duration::from_secs(3600);
const MAX_MAP_COUNT: &str = "/proc/sys/vm/max_map_count";

/// The resident set size of this process, in bytes.
pub(crate) fn rss_bytes() -> io::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    parse_vm_rss(&status).ok_or_else(|| io::Error::other("no VmRSS line in /proc/self/status"))
}

/// `VmRSS:   1234 kB` → bytes.
fn parse_vm_rss(status: &str) -> Option<u64> {
    crate::process::status_field(status, "VmRSS").map(|kib| kib * 1024)
}

/// `vm.max_map_count` raised for one run: the old value goes back when this is dropped.
struct RaisedMapCount {
    previous: u64,
}

impl Drop for RaisedMapCount {
    fn drop(&mut self) {
        match std::fs::write(MAX_MAP_COUNT, self.previous.to_string()) {
            Ok(()) => eprintln!("note: vm.max_map_count back to {}", self.previous),
            Err(e) => eprintln!(
                "note: could not put vm.max_map_count back to {} ({e})",
                self.previous
            ),
        }
    }
}

/// The `vm.max_map_count` that `fibers` stacks need (two mappings each, doubled for headroom,
/// plus the default limit for everything else).
fn map_count_for(fibers: usize) -> u64 {
    4 * fibers as u64 + 65_536
}

/// Makes sure `vm.max_map_count` allows `fibers` stacks for as long as the returned guard
/// lives; the note says why it could not.
fn ensure_map_count(fibers: usize) -> (Option<RaisedMapCount>, Option<String>) {
    let wanted = map_count_for(fibers);
    let Some(current) = std::fs::read_to_string(MAX_MAP_COUNT)
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
    else {
        return (None, None);
    };
    if current >= wanted {
        return (None, None);
    }
    match std::fs::write(MAX_MAP_COUNT, wanted.to_string()) {
        Ok(()) => {
            eprintln!(
                "note: raised vm.max_map_count from {current} to {wanted} for {fibers} fiber \
                 stacks, for this run"
            );
            (Some(RaisedMapCount { previous: current }), None)
        }
        Err(e) => {
            let note = format!(
                "vm.max_map_count is {current}, below the {wanted} that {fibers} fiber stacks \
                 need, and it cannot be raised here ({e}); run as root or \
                 `sysctl -w vm.max_map_count={wanted}`, or use fewer --fibers"
            );
            eprintln!("note: {note}");
            (None, Some(note))
        }
    }
}

/// Waits until all `n` sleepers have counted themselves, then a little longer.
fn wait_for(asleep: &AtomicUsize, n: usize) -> io::Result<()> {
    harness::wait_for_count(asleep, n)?;
    // The last ones counted themselves just before parking: let them get there.
    std::thread::sleep(Duration::from_millis(50));
    Ok(())
}

fn per_fiber(before: u64, after: u64, n: usize) -> f64 {
    after.saturating_sub(before) as f64 / n as f64
}

pub(super) fn weft(setup: &Setup) -> io::Result<Measured> {
    let n = setup.fibers;
    // Declared before the cluster, so dropped after it: the limit goes back only once every
    // stack of this run is unmapped or pooled.
    let (_raised, note) = ensure_map_count(n);
    let cluster = harness::weft_cluster(setup)?;
    let asleep = Arc::new(AtomicUsize::new(0));
    let before = rss_bytes()?;
    let start = Instant::now();
    let mut handles = Vec::with_capacity(n);
    for _ in 0..n {
        let asleep = asleep.clone();
        let spawned = weft::Builder::new().cluster(&cluster).spawn(move || {
            asleep.fetch_add(1, Ordering::Release);
            // Cancellation ends the sleep early; that is how the benchmark ends.
            let _ = weft::sleep(SLEEP);
        });
        match spawned {
            Ok(h) => handles.push(h),
            Err(e) => {
                for h in &handles {
                    h.cancel();
                }
                return Err(io::Error::new(
                    e.kind(),
                    format!("spawning sleeper {} of {n}: {e}", handles.len() + 1),
                ));
            }
        }
    }
    wait_for(&asleep, n)?;
    let seconds = start.elapsed().as_secs_f64();
    let after = rss_bytes()?;
    for h in &handles {
        h.cancel();
    }
    for h in handles {
        harness::join_weft(h)?;
    }
    cluster.shutdown();
    Ok(Measured {
        ops: n as u64,
        seconds,
        rss_bytes_per_fiber: Some(per_fiber(before, after, n)),
        note,
        ..Measured::default()
    })
}

pub(super) fn tokio(setup: &Setup) -> io::Result<Measured> {
    let n = setup.fibers;
    let rt = harness::tokio_runtime(setup)?;
    let asleep = Arc::new(AtomicUsize::new(0));
    let before = rss_bytes()?;
    let start = Instant::now();
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let asleep = asleep.clone();
            rt.spawn(async move {
                asleep.fetch_add(1, Ordering::Release);
                tokio::time::sleep(SLEEP).await;
            })
        })
        .collect();
    wait_for(&asleep, n)?;
    let seconds = start.elapsed().as_secs_f64();
    let after = rss_bytes()?;
    for h in &handles {
        h.abort();
    }
    rt.block_on(async move {
        for h in handles {
            // Aborted tasks end with a cancellation error: that is the expected outcome.
            let _ = h.await;
        }
    });
    Ok(Measured {
        ops: n as u64,
        seconds,
        rss_bytes_per_fiber: Some(per_fiber(before, after, n)),
        ..Measured::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_vm_rss() {
        let status = "Name:\tx\nVmPeak:\t  9 kB\nVmRSS:\t    1234 kB\nThreads: 3\n";
        assert_eq!(parse_vm_rss(status), Some(1234 * 1024));
        assert_eq!(parse_vm_rss("Name: x\n"), None);
    }

    #[test]
    fn map_count_leaves_room_for_two_mappings_per_stack_and_the_default() {
        assert_eq!(map_count_for(0), 65_536);
        assert_eq!(map_count_for(100_000), 465_536);
    }

    #[test]
    fn rss_is_readable() {
        assert!(rss_bytes().unwrap() > 0);
    }
}
