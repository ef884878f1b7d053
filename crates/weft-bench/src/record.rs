//! One measured point, the unit of every benchmark's output.

use serde::{Deserialize, Serialize};

/// One benchmark run on one runtime configuration.
///
/// Serialised as one JSON object per line (`weft bench ... --json`); the field names are a
/// stable interface for scripts (`benches/sched.sh`) and for `weft bench render`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Benchmark name, as given on the command line (`cycle`, `yield`, ...); a benchmark may
    /// report extra rows under a derived name (`switch-raw`).
    pub benchmark: String,
    /// `weft` or `tokio`.
    pub runtime: String,
    /// The weft scheduling policy, or `"tokio"` for tokio.
    pub scheduler: String,
    /// Processors (weft) or worker threads (tokio).
    pub processors: usize,
    /// Fibers (or tokio tasks) taking part.
    pub fibers: usize,
    /// `many`, `few` or `custom`: which fiber-count preset was used.
    pub variant: String,
    /// Operations completed; what one operation is depends on the benchmark (see `sched`).
    pub ops: u64,
    /// Wall-clock time over which `ops` were counted.
    pub seconds: f64,
    /// `ops / seconds`.
    pub ops_per_sec: f64,
    /// `seconds / ops` in nanoseconds: wall time per operation across all processors.
    pub ns_per_op: f64,
    /// Resident memory added per fiber (only `sleepers`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_bytes_per_fiber: Option<f64>,
    /// Fibers per ring (only `cycle` and `locality-*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring_size: Option<usize>,
    /// Round trip of a cache line between CPUs 0 and 1 just before the run, in nanoseconds
    /// (multi-processor scheduler benchmarks; see `sched::core_probe`): tells which placement
    /// the host gave the vCPUs, which bounds every runtime's hand-offs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_round_trip_ns: Option<f64>,
    /// The same probe taken just after the run: when the two disagree, the host moved the
    /// vCPUs during it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_round_trip_after_ns: Option<f64>,
    /// Anything the reader must know to interpret the numbers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Record {
    /// A record for `ops` operations over `seconds`, with the derived rates filled in.
    pub fn new(benchmark: &str, ops: u64, seconds: f64) -> Record {
        let ops_per_sec = if seconds > 0.0 {
            ops as f64 / seconds
        } else {
            0.0
        };
        let ns_per_op = if ops > 0 {
            seconds * 1e9 / ops as f64
        } else {
            0.0
        };
        Record {
            benchmark: benchmark.to_owned(),
            runtime: String::new(),
            scheduler: String::new(),
            processors: 0,
            fibers: 0,
            variant: String::new(),
            ops,
            seconds,
            ops_per_sec,
            ns_per_op,
            rss_bytes_per_fiber: None,
            ring_size: None,
            core_round_trip_ns: None,
            core_round_trip_after_ns: None,
            note: None,
        }
    }

    /// One line of JSON (no trailing newline).
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).expect("a Record always serialises")
    }
}
