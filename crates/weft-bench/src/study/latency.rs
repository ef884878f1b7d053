//! Per-task latencies without contention: each task stores its own in a preallocated slot,
//! and the percentiles come from an HdrHistogram built once the run is over.
//!
//! Invariant: slot `i` is written once, by task `i`; a slot left at 0 was never written (a
//! completed task's latency is at least 1 ns, see [`Latencies::record`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Latency percentiles in nanoseconds.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Percentiles {
    pub p50: u64,
    pub p99: u64,
    pub p9999: u64,
}

/// One latency slot per task.
pub(crate) struct Latencies(Box<[AtomicU64]>);

impl Latencies {
    pub(crate) fn new(tasks: usize) -> Latencies {
        Latencies((0..tasks).map(|_| AtomicU64::new(0)).collect())
    }

    /// Task `i` finished; it started at `since`.
    pub(crate) fn record(&self, i: usize, since: Instant) {
        let ns = since.elapsed().as_nanos().clamp(1, u128::from(u64::MAX)) as u64;
        self.0[i].store(ns, Ordering::Relaxed);
    }

    /// Records a latency measured elsewhere (in ns) for task `i`.
    pub(crate) fn record_ns(&self, i: usize, ns: u64) {
        self.0[i].store(ns.max(1), Ordering::Relaxed);
    }

    /// How many tasks recorded a latency.
    pub(crate) fn recorded(&self) -> usize {
        self.0
            .iter()
            .filter(|s| s.load(Ordering::Relaxed) != 0)
            .count()
    }

    /// The percentiles of what was recorded (zeros when nothing was).
    pub(crate) fn percentiles(&self) -> Percentiles {
        let mut h = Histogram::<u64>::new(3).expect("3 significant figures is valid");
        for ns in self.0.iter().map(|s| s.load(Ordering::Relaxed)) {
            if ns != 0 {
                h.record(ns).expect("auto-resizing histogram");
            }
        }
        if h.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            p50: h.value_at_quantile(0.5),
            p99: h.value_at_quantile(0.99),
            p9999: h.value_at_quantile(0.9999),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_recorded_slots_only() {
        let l = Latencies::new(10_001);
        for i in 0..10_000 {
            l.record_ns(i, (i as u64 + 1) * 1000);
        }
        assert_eq!(l.recorded(), 10_000);
        let p = l.percentiles();
        assert!((4_990_000..=5_010_000).contains(&p.p50), "{p:?}");
        assert!((9_880_000..=9_920_000).contains(&p.p99), "{p:?}");
        assert!(p.p9999 >= 9_990_000, "{p:?}");
        assert_eq!(Latencies::new(3).percentiles(), Percentiles::default());
    }
}
