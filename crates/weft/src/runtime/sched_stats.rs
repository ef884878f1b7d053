//! Scheduling statistics: how long runnable fibers wait, how long fibers run, how often the
//! I/O driver is looked at. Off unless asked for ([`ClusterBuilder::sched_stats`] or
//! `WEFT_SCHED_STATS=1`), so the scheduling loop pays one predictable branch per task.
//!
//! What is measured, per processor (merged by [`Cluster::sched_stats`]):
//! - **wait in rounds**: from the moment a task is queued on a processor to the moment the
//!   *same* processor runs it, in that processor's scheduling rounds (one round runs at most
//!   one task). This is the unit of the bounded-unfairness invariant (`sched/mod.rs`). Tasks
//!   queued from elsewhere, or stolen, are not counted here: their rounds are another
//!   processor's.
//! - **wait in nanoseconds**: queued to running, for every task (monotonic clock).
//! - **reap gap**: the time between two consecutive looks at the I/O driver while operations
//!   were in flight, an upper bound on how long a completion the kernel has posted waits to be
//!   reaped.
//! - **run length**: how long one resumption of a fiber kept the processor.
//!
//! Invariant: only the owning processor writes its [`ProcessorStats`] (plain relaxed loads and
//! stores, no read-modify-write); readers may see a histogram a few counts behind.
//!
//! [`ClusterBuilder::sched_stats`]: super::ClusterBuilder::sched_stats
//! [`Cluster::sched_stats`]: super::Cluster::sched_stats

use crate::loom::{AtomicU64, Ordering};
use crate::poison::Recover;
use std::sync::OnceLock;
use std::time::Instant;

/// Buckets of a [`Log2Histogram`]: bucket `i` holds values in `[2^(i-1), 2^i)`, bucket 0 the
/// zeros.
const BUCKETS: usize = 48;

/// Whether `WEFT_SCHED_STATS` asks every cluster for statistics (read once).
pub(crate) fn env_enabled() -> bool {
    static ENV: OnceLock<bool> = OnceLock::new();
    *ENV.get_or_init(|| std::env::var("WEFT_SCHED_STATS").is_ok_and(|v| !v.is_empty() && v != "0"))
}

/// `WEFT_SCHED_STATS_AFTER_S`: statistics ignore the first this many seconds of the process
/// (a benchmark's connection set-up and warm-up), read once.
fn record_from_ns() -> u64 {
    static FROM: OnceLock<u64> = OnceLock::new();
    *FROM.get_or_init(|| {
        std::env::var("WEFT_SCHED_STATS_AFTER_S")
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .map_or(0, |s| (s.max(0.0) * 1e9) as u64)
    })
}

/// Whether records count yet (see [`record_from_ns`]).
#[inline]
fn recording() -> bool {
    let from = record_from_ns();
    from == 0 || now_ns() >= from
}

/// Nanoseconds since a process-wide origin.
pub(crate) fn now_ns() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    origin.elapsed().as_nanos() as u64
}

/// A histogram of non-negative values in power-of-two buckets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Log2Histogram {
    counts: Vec<u64>,
    max: u64,
}

impl Log2Histogram {
    fn bucket(value: u64) -> usize {
        (64 - value.leading_zeros() as usize).min(BUCKETS - 1)
    }

    /// How many values were recorded.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The largest value recorded (exact), 0 when empty.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// An upper bound of the `q` quantile (`0.0..=1.0`): the top of the bucket it falls in,
    /// never above [`Log2Histogram::max`]. 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        let total = self.count();
        if total == 0 {
            return 0;
        }
        let want = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                let top = if i == 0 { 0 } else { (1u64 << i) - 1 };
                return top.min(self.max);
            }
        }
        self.max
    }

    fn merge(&mut self, other: &Log2Histogram) {
        if self.counts.len() < other.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.max = self.max.max(other.max);
    }
}

/// One histogram that a single thread writes and any thread may read.
struct SharedHistogram {
    counts: [AtomicU64; BUCKETS],
    max: AtomicU64,
}

impl SharedHistogram {
    fn new() -> SharedHistogram {
        SharedHistogram {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            max: AtomicU64::new(0),
        }
    }

    /// Only the owning processor calls this (see the module invariant).
    fn record(&self, value: u64) {
        if !recording() {
            return;
        }
        let c = &self.counts[Log2Histogram::bucket(value)];
        c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        if value > self.max.load(Ordering::Relaxed) {
            self.max.store(value, Ordering::Relaxed);
        }
    }

    fn snapshot(&self) -> Log2Histogram {
        Log2Histogram {
            counts: self
                .counts
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect(),
            max: self.max.load(Ordering::Relaxed),
        }
    }
}

/// One processor's counters; written only by that processor.
pub(crate) struct ProcessorStats {
    wait_rounds: SharedHistogram,
    wait_ns: SharedHistogram,
    reap_gap_ns: SharedHistogram,
    run_ns: SharedHistogram,
    /// The fiber of the longest run so far (name or id): who held the processor.
    longest_run: std::sync::Mutex<String>,
}

impl ProcessorStats {
    pub(crate) fn new() -> ProcessorStats {
        ProcessorStats {
            wait_rounds: SharedHistogram::new(),
            wait_ns: SharedHistogram::new(),
            reap_gap_ns: SharedHistogram::new(),
            run_ns: SharedHistogram::new(),
            longest_run: std::sync::Mutex::new(String::new()),
        }
    }

    pub(crate) fn record_wait(&self, rounds: Option<u64>, ns: u64) {
        if let Some(r) = rounds {
            self.wait_rounds.record(r);
        }
        self.wait_ns.record(ns);
    }

    pub(crate) fn record_reap_gap(&self, ns: u64) {
        self.reap_gap_ns.record(ns);
    }

    /// Records one run of `ns`; `who` names the fiber, asked for only when the run is the
    /// longest so far.
    pub(crate) fn record_run(&self, ns: u64, who: impl FnOnce() -> String) {
        if ns > self.run_ns.max.load(Ordering::Relaxed) && recording() {
            // Named before locking: no closure runs under the lock (see `crate::poison`).
            let name = who();
            *self.longest_run.lock().recover() = name;
        }
        self.run_ns.record(ns);
    }

    pub(crate) fn snapshot(&self) -> SchedStats {
        SchedStats {
            wait_rounds: self.wait_rounds.snapshot(),
            wait_ns: self.wait_ns.snapshot(),
            reap_gap_ns: self.reap_gap_ns.snapshot(),
            run_ns: self.run_ns.snapshot(),
            longest_run: self.longest_run.lock().recover().clone(),
        }
    }
}

/// Scheduling statistics of a cluster (or one processor): see the module docs of
/// `weft::runtime::sched_stats` for what each histogram measures.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SchedStats {
    /// Queued to run on the same processor, in that processor's scheduling rounds.
    pub wait_rounds: Log2Histogram,
    /// Queued to run, in nanoseconds.
    pub wait_ns: Log2Histogram,
    /// Between consecutive looks at the I/O driver while operations were in flight, in
    /// nanoseconds: a bound on how long a posted completion waits to be reaped.
    pub reap_gap_ns: Log2Histogram,
    /// One resumption of a fiber, in nanoseconds.
    pub run_ns: Log2Histogram,
    /// The fiber (name, else id) whose run was the longest ([`Log2Histogram::max`] of
    /// `run_ns`); of the first processor that had it, after a merge.
    pub longest_run: String,
}

impl SchedStats {
    /// Adds `other`'s counts to these.
    pub fn merge(&mut self, other: &SchedStats) {
        self.wait_rounds.merge(&other.wait_rounds);
        self.wait_ns.merge(&other.wait_ns);
        self.reap_gap_ns.merge(&other.reap_gap_ns);
        if other.run_ns.max() > self.run_ns.max() {
            self.longest_run.clone_from(&other.longest_run);
        }
        self.run_ns.merge(&other.run_ns);
    }

    /// Tasks that ran here but were queued by another thread or stolen from another processor
    /// (counted in [`SchedStats::wait_ns`] but not in [`SchedStats::wait_rounds`]): under the
    /// default binding, mostly wake-ups sent home from another processor.
    pub fn queued_elsewhere(&self) -> u64 {
        self.wait_ns
            .count()
            .saturating_sub(self.wait_rounds.count())
    }

    /// One line: counts, percentiles (upper bounds) and maxima.
    pub fn summary(&self) -> String {
        let us = |h: &Log2Histogram, q: f64| h.quantile(q) as f64 / 1000.0;
        format!(
            "tasks {} ({} queued by another thread or stolen); wait rounds p50 {} p99 {} p999 {} \
             max {}; wait us p50 {:.1} p99 {:.1} p999 {:.1} max {:.1}; reap gap us p99 {:.1} \
             max {:.1}; run us p99 {:.1} max {:.1} (fiber {})",
            self.wait_ns.count(),
            self.queued_elsewhere(),
            self.wait_rounds.quantile(0.5),
            self.wait_rounds.quantile(0.99),
            self.wait_rounds.quantile(0.999),
            self.wait_rounds.max(),
            us(&self.wait_ns, 0.5),
            us(&self.wait_ns, 0.99),
            us(&self.wait_ns, 0.999),
            self.wait_ns.max() as f64 / 1000.0,
            us(&self.reap_gap_ns, 0.99),
            self.reap_gap_ns.max() as f64 / 1000.0,
            us(&self.run_ns, 0.99),
            self.run_ns.max() as f64 / 1000.0,
            self.longest_run,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_bucket_tops_capped_by_the_max() {
        let s = SharedHistogram::new();
        for v in [0, 1, 2, 3, 100, 1000] {
            s.record(v);
        }
        let h = s.snapshot();
        assert_eq!(h.count(), 6);
        assert_eq!(h.max(), 1000);
        assert_eq!(h.quantile(0.0), 0);
        assert_eq!(h.quantile(0.5), 3); // 0, 1, 2 | 3 -> bucket of 2..4
        assert_eq!(h.quantile(1.0), 1000);
        let mut m = h.clone();
        m.merge(&h);
        assert_eq!(m.count(), 12);
        assert_eq!(Log2Histogram::default().quantile(0.99), 0);
    }

    #[test]
    fn tasks_without_a_round_count_were_queued_elsewhere() {
        let p = ProcessorStats::new();
        p.record_wait(Some(3), 10);
        p.record_wait(None, 20);
        p.record_wait(None, 30);
        let s = p.snapshot();
        assert_eq!(s.queued_elsewhere(), 2);
        assert!(s
            .summary()
            .starts_with("tasks 3 (2 queued by another thread or stolen);"));
    }
}
