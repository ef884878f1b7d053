//! How far apart the host put two CPUs: the round trip of one cache line bounced between two
//! threads pinned to them.
//!
//! On this 2-vCPU VM the number is bimodal and changes while the machine runs: about 60 ns
//! when the host runs both vCPUs in one core complex, about 330 ns when it puts them in two
//! (the line then crosses the I/O die). Benchmarks that pass data between processors (`cycle`,
//! `churn`) are bound by it for every runtime, so each multi-processor record carries the
//! probe taken just before it, and comparisons are made between runs of the same placement.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long one probe bounces the line.
const PROBE_TIME: Duration = Duration::from_millis(50);
/// Round trips between looks at the clock.
const BATCH: u64 = 1024;

/// A line alone in its cache line, so nothing else shares the traffic.
#[repr(align(128))]
struct Line(AtomicU64);

/// The mean round trip in nanoseconds of a cache line between CPUs `a` and `b`, or `None`
/// when the threads cannot be pinned there (fewer CPUs, a restricted affinity mask).
pub fn round_trip_ns(a: usize, b: usize) -> Option<f64> {
    let line = Arc::new(Line(AtomicU64::new(0)));
    let stop = u64::MAX;
    let echo = {
        let line = line.clone();
        std::thread::Builder::new()
            .name("core-probe".to_owned())
            .spawn(move || {
                let pinned = pin_to(b);
                // Answer every odd value with the next even one until told to stop; an
                // unpinned echo still answers (0 tells the prober to give up).
                let mut expect = 1u64;
                loop {
                    let v = line.0.load(Ordering::Acquire);
                    if v == stop {
                        return pinned;
                    }
                    if v == expect {
                        line.0.store(v + 1, Ordering::Release);
                        expect += 2;
                    } else {
                        std::hint::spin_loop();
                    }
                }
            })
            .ok()?
    };
    let restore = current_affinity();
    let pinned = pin_to(a);
    let mut value = 0u64;
    let mut trips = 0u64;
    let start = Instant::now();
    let elapsed = loop {
        for _ in 0..BATCH {
            value += 1;
            line.0.store(value, Ordering::Release);
            value += 1;
            while line.0.load(Ordering::Acquire) != value {
                std::hint::spin_loop();
            }
        }
        trips += BATCH;
        let elapsed = start.elapsed();
        if elapsed >= PROBE_TIME {
            break elapsed;
        }
    };
    line.0.store(stop, Ordering::Release);
    let echo_pinned = echo.join().unwrap_or(false);
    if let Some(mask) = restore {
        // SAFETY: a mask read from this thread a moment ago.
        unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&mask), &mask) };
    }
    (pinned && echo_pinned).then(|| elapsed.as_secs_f64() * 1e9 / trips as f64)
}

/// A round trip above this is the "far" placement (between the two modes seen on this VM;
/// `benches/targets_summary.py` uses the same threshold).
pub const FAR_NS: f64 = 150.0;

/// The placement probes taken around one measurement say it saw: `"near"` or `"far"` when
/// they agree, `"mixed"` when the host moved the vCPUs in between, `"unknown"` without probes.
pub fn placement(probes: &[Option<f64>]) -> &'static str {
    let mut kinds = probes.iter().map(|p| p.map(|ns| ns > FAR_NS));
    match kinds.next() {
        Some(Some(first)) if kinds.all(|k| k == Some(first)) => {
            if first {
                "far"
            } else {
                "near"
            }
        }
        Some(Some(_)) => "mixed",
        _ => "unknown",
    }
}

/// Pins the calling thread to `cpu`; `false` when the kernel refuses.
pub(crate) fn pin_to(cpu: usize) -> bool {
    // Beyond the set's size `CPU_SET` has no bit to set.
    cpu < libc::CPU_SETSIZE as usize && crate::echo::cpu::pin_current_thread(cpu).is_ok()
}

/// The calling thread's affinity mask, to put back after the probe.
fn current_affinity() -> Option<libc::cpu_set_t> {
    // SAFETY: the kernel fills a zeroed set of the size given.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        (libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) == 0).then_some(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_measures_two_cpus_and_refuses_a_missing_one() {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cpus >= 2 {
            let ns = round_trip_ns(0, 1).expect("two CPUs can be probed");
            assert!(ns > 1.0 && ns < 1e5, "{ns} ns");
        }
        assert_eq!(round_trip_ns(0, libc::CPU_SETSIZE as usize), None);
    }

    #[test]
    fn placement_needs_every_probe_to_agree() {
        assert_eq!(placement(&[Some(66.0), Some(71.0)]), "near");
        assert_eq!(placement(&[Some(330.0), Some(341.0)]), "far");
        assert_eq!(placement(&[Some(66.0), Some(341.0)]), "mixed");
        assert_eq!(placement(&[Some(66.0), None]), "mixed");
        assert_eq!(placement(&[None, Some(66.0)]), "unknown");
        assert_eq!(placement(&[]), "unknown");
    }
}
