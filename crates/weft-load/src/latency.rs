//! Latency recording: one HdrHistogram per shard, a shard per OS thread.
//!
//! Fibers record from whichever processor thread they run on; each thread picks a shard once
//! (a thread-local index) so, with no more threads than shards, a shard's mutex is never
//! contended and a sample costs one uncontended lock plus a histogram increment (tens of ns;
//! `weft bench sample-cost` prints the figure). Invariant: a shard lock is never held across a
//! blocking call, so it can never be held by a parked fiber.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Highest latency the histograms hold exactly; larger samples are clamped to it.
pub const MAX_LATENCY_US: u64 = 100_000_000;

const SHARDS: usize = 16;

/// Counts and latencies of one shard.
#[derive(Debug, Clone)]
pub struct Tally {
    /// Latency of every counted reply, microseconds.
    pub latency_us: Histogram<u64>,
    /// Replies counted (inside the measurement window).
    pub replies: u64,
    /// Get requests answered without a value.
    pub misses: u64,
    /// Replies whose latency exceeded the timeout, plus requests never answered in time.
    pub timeouts: u64,
    /// Error replies and failed connections.
    pub errors: u64,
    /// Replies received inside the measurement window, whenever their request was intended:
    /// what the server delivered there (the open-loop `actual` rate).
    pub in_window: u64,
    /// Requests intended inside the window that the sender could not send before it ended
    /// (the server, or the connection's depth, held it back).
    pub unsent: u64,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            latency_us: Histogram::new_with_bounds(1, MAX_LATENCY_US, 3)
                .expect("constant histogram bounds are valid"),
            replies: 0,
            misses: 0,
            timeouts: 0,
            errors: 0,
            in_window: 0,
            unsent: 0,
        }
    }

    /// Records one reply's latency.
    #[inline]
    pub fn record(&mut self, latency: Duration) {
        let us = latency.as_micros().clamp(1, MAX_LATENCY_US as u128) as u64;
        self.latency_us.saturating_record(us);
        self.replies += 1;
    }

    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &Tally) {
        self.latency_us
            .add(&other.latency_us)
            .expect("histograms share bounds");
        self.replies += other.replies;
        self.misses += other.misses;
        self.timeouts += other.timeouts;
        self.errors += other.errors;
        self.in_window += other.in_window;
        self.unsent += other.unsent;
    }
}

/// Where every fiber of a run records; cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Recorder {
    shards: Vec<Mutex<Tally>>,
}

static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);

// Read on fibers, from an inlined function called between blocking calls: sound because a
// started weft fiber never changes OS thread (the fiber contract on `weft::spawn`; issue 23),
// so the thread-local's address cannot go stale across a park. A fiber spawned with the
// `unsafe` migratable opt-in must not call `Recorder::with`.
thread_local! {
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

impl Recorder {
    /// An empty recorder.
    pub fn new() -> Recorder {
        Recorder {
            shards: (0..SHARDS).map(|_| Mutex::new(Tally::new())).collect(),
        }
    }

    /// Runs `f` on this thread's shard. `f` must not block.
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(&mut Tally) -> R) -> R {
        let index = SHARD.with(|s| {
            if s.get() == usize::MAX {
                s.set(NEXT_THREAD.fetch_add(1, Ordering::Relaxed) % SHARDS);
            }
            s.get()
        });
        let mut tally = self.shards[index].lock().unwrap_or_else(|p| p.into_inner());
        f(&mut tally)
    }

    /// All shards merged.
    pub fn total(&self) -> Tally {
        let mut total = Tally::new();
        for shard in &self.shards {
            total.merge(&shard.lock().unwrap_or_else(|p| p.into_inner()));
        }
        total
    }
}

/// Latency percentiles in microseconds, as printed in `--json`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub mean: f64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

impl LatencySummary {
    /// `latency us: mean … max …`, as the generators print it.
    pub fn human(&self) -> String {
        format!(
            "latency us: mean {:.1}  p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
            self.mean, self.p50, self.p90, self.p99, self.p999, self.max
        )
    }

    /// The percentiles of `hist` (all zero when it is empty).
    pub fn of(hist: &Histogram<u64>) -> LatencySummary {
        if hist.is_empty() {
            return LatencySummary::default();
        }
        LatencySummary {
            mean: (hist.mean() * 10.0).round() / 10.0,
            p50: hist.value_at_quantile(0.50),
            p90: hist.value_at_quantile(0.90),
            p99: hist.value_at_quantile(0.99),
            p999: hist.value_at_quantile(0.999),
            max: hist.max(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_merge_into_percentiles() {
        let recorder = Recorder::new();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let recorder = &recorder;
                s.spawn(move || {
                    for i in 1..=250u64 {
                        recorder.with(|tally| tally.record(Duration::from_micros(t * 250 + i)));
                    }
                });
            }
        });
        let total = recorder.total();
        assert_eq!(total.replies, 1000);
        let summary = LatencySummary::of(&total.latency_us);
        assert!((495..=505).contains(&summary.p50), "{summary:?}");
        assert!((985..=995).contains(&summary.p99), "{summary:?}");
        assert_eq!(summary.max, 1000);
    }

    #[test]
    fn huge_and_zero_latencies_are_clamped() {
        let mut tally = Tally::new();
        tally.record(Duration::ZERO);
        tally.record(Duration::from_secs(1_000_000));
        assert_eq!(tally.replies, 2);
        assert_eq!(tally.latency_us.min(), 1);
        assert!(tally.latency_us.max() >= MAX_LATENCY_US);
    }

    #[test]
    fn empty_summary_is_zero() {
        assert_eq!(
            LatencySummary::of(&Tally::new().latency_us),
            LatencySummary::default()
        );
    }
}
