//! The scheduler study's application benchmarks (issue 7; docs/SCHEDULERS.md): workloads
//! shaped like real servers, run on weft under any scheduling policy and, where the shape
//! allows, on tokio for reference.
//!
//! - [`packet`]: one spawner (or several) copies pre-made 2–3 KiB packets and spawns a handler
//!   per packet that scans it for newlines; throughput and spawn → completion latency;
//! - [`packet_cache`]: the same, but the handler walks a 16 KiB buffer in a stride the
//!   prefetcher cannot follow, so whether the buffer is still in cache decides the cost (the
//!   study's §7.1.2, where LIFO wins);
//! - [`packet_staged`]: parse → process → sink as three clusters joined by bounded channels
//!   (backpressure), against the same pipeline on one cluster;
//! - [`audio`]: conferences of participants sending paced frames through per-leg decode and
//!   encode fibers and one mixer per conference; deadline misses and latency;
//! - [`options`]: binomial-tree option pricing whose backward induction forks and joins
//!   sub-tasks; throughput.
//!
//! Every run returns [`Outcome`]s, printed as one JSON object per line by `weft bench study
//! --json` and collected by `weft experiment study`.
//!
//! Architecture Invariant: like the rest of this crate, only weft's public API.

pub mod audio;
mod latency;
pub mod options;
pub mod packet;
pub mod packet_cache;
pub mod packet_staged;

use std::fmt;
use std::io;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub use crate::sched::Runtime;
pub use latency::Percentiles;

/// One of the study's benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Study {
    Packet,
    PacketCache,
    PacketStaged,
    Audio,
    Options,
}

impl Study {
    /// Every benchmark, in the order `all` runs them.
    pub const ALL: &'static [Study] = &[
        Study::Packet,
        Study::PacketCache,
        Study::PacketStaged,
        Study::Audio,
        Study::Options,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Study::Packet => "packet",
            Study::PacketCache => "packet-cache",
            Study::PacketStaged => "packet-staged",
            Study::Audio => "audio",
            Study::Options => "options",
        }
    }

    /// One line for `--help`.
    pub fn summary(self) -> &'static str {
        match self {
            Study::Packet => "spawn a newline-scanning handler per 2-3 KiB packet copy",
            Study::PacketCache => "packet with a prefetcher-hostile walk over a 16 KiB buffer",
            Study::PacketStaged => "parse -> process -> sink: a cluster per stage vs one cluster",
            Study::Audio => "conference mixing: paced frames, decode/mix/encode fibers",
            Study::Options => "binomial-tree option pricing with fork-join sub-tasks",
        }
    }

    /// Whether a tokio version exists (the shapes tokio has no equivalent for are weft-only:
    /// clusters per stage, and fiber-blocking channels and timers in the audio mixer).
    pub fn has_tokio(self) -> bool {
        matches!(self, Study::Packet | Study::PacketCache | Study::Options)
    }

    /// The task count when `--tasks` is not given (what "a task" is depends on the benchmark:
    /// packets, conferences, options).
    pub fn default_tasks(self) -> u64 {
        match self {
            Study::Packet | Study::PacketCache | Study::PacketStaged => 50_000,
            Study::Audio => 20,
            Study::Options => 64,
        }
    }
}

impl fmt::Display for Study {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Study {
    type Err = String;

    fn from_str(s: &str) -> Result<Study, String> {
        crate::find_by_name(Study::ALL, Study::name, s, "study benchmark")
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Params {
    pub runtime: Runtime,
    /// The weft policy (ignored by tokio).
    pub scheduler: String,
    /// weft processors or tokio worker threads.
    pub processors: usize,
    /// Packets, conferences or options; `None`: [`Study::default_tasks`].
    pub tasks: Option<u64>,
    /// Extra busy work per packet handler, in nanoseconds.
    pub work_ns: u64,
    /// Spawner fibers in the packet benchmarks.
    pub spawners: usize,
    /// Outstanding packet handlers allowed before spawners back off (yield and retry).
    pub max_in_flight: usize,
    /// How long the audio benchmark streams, in milliseconds.
    pub audio_ms: u64,
}

impl Params {
    pub fn new(runtime: Runtime, processors: usize) -> Params {
        Params {
            runtime,
            scheduler: weft::sched::DEFAULT_POLICY.to_owned(),
            processors,
            tasks: None,
            work_ns: 0,
            spawners: 1,
            max_in_flight: packet::MAX_IN_FLIGHT,
            audio_ms: 1000,
        }
    }

    fn tasks_for(&self, study: Study) -> u64 {
        self.tasks.unwrap_or_else(|| study.default_tasks())
    }

    /// The scheduler name reported: the weft policy, or "tokio".
    fn scheduler_label(&self) -> String {
        match self.runtime {
            Runtime::Weft => self.scheduler.clone(),
            Runtime::Tokio => "tokio".to_owned(),
        }
    }

    fn cluster(&self, name: &str) -> io::Result<weft::Cluster> {
        weft::Cluster::builder()
            .name(name)
            .processors(self.processors)
            .scheduler(self.scheduler.as_str())
            .stack_size(64 * 1024)
            .build()
    }

    fn tokio(&self) -> io::Result<tokio::runtime::Runtime> {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(self.processors)
            .thread_name("study-tokio")
            .enable_time()
            .build()
    }
}

/// One result: the fields every benchmark reports, plus its own in `extra`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Outcome {
    pub benchmark: String,
    pub runtime: String,
    pub scheduler: String,
    pub processors: usize,
    pub tasks: u64,
    pub seconds: f64,
    pub tasks_per_sec: f64,
    pub latency_ns: Percentiles,
    /// Benchmark-specific fields (retries, deadline misses, variant, ...).
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Outcome {
    fn new(study: Study, params: &Params, tasks: u64, seconds: f64, lat: Percentiles) -> Self {
        Outcome {
            benchmark: study.name().to_owned(),
            runtime: params.runtime.name().to_owned(),
            scheduler: params.scheduler_label(),
            processors: params.processors,
            tasks,
            seconds,
            tasks_per_sec: tasks as f64 / seconds.max(1e-9),
            latency_ns: lat,
            extra: serde_json::Map::new(),
        }
    }

    fn with(mut self, key: &str, value: impl Into<serde_json::Value>) -> Self {
        self.extra.insert(key.to_owned(), value.into());
        self
    }

    /// One line of JSON.
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).expect("an outcome is plain data")
    }

    /// A benchmark-specific number, if present.
    pub fn extra_f64(&self, key: &str) -> Option<f64> {
        self.extra.get(key).and_then(serde_json::Value::as_f64)
    }

    /// A benchmark-specific string (the `variant` of packet-staged).
    pub fn extra_str(&self, key: &str) -> Option<&str> {
        self.extra.get(key).and_then(serde_json::Value::as_str)
    }
}

/// Runs `study` with `params`.
pub fn run(study: Study, params: &Params) -> io::Result<Vec<Outcome>> {
    if params.processors == 0 || params.spawners == 0 || params.max_in_flight == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "at least one processor, one spawner and one packet in flight are needed",
        ));
    }
    if params.runtime == Runtime::Tokio && !study.has_tokio() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{study} has no tokio version (only packet, packet-cache and options do)"),
        ));
    }
    if params.runtime == Runtime::Weft {
        weft::sched::by_name(&params.scheduler, 1)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    }
    match study {
        Study::Packet => packet::run(params, packet::Handler::Scan).map(|o| vec![o]),
        Study::PacketCache => packet_cache::run(params).map(|o| vec![o]),
        Study::PacketStaged => packet_staged::run(params),
        Study::Audio => audio::run(params).map(|o| vec![o]),
        Study::Options => options::run(params).map(|o| vec![o]),
    }
}

/// Burns about `ns` nanoseconds of CPU (a data-dependent loop the optimiser cannot drop).
pub(crate) fn busy_work(ns: u64, seed: u64) -> u64 {
    if ns == 0 {
        return seed;
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_nanos(ns);
    let mut x = seed | 1;
    while std::time::Instant::now() < deadline {
        for _ in 0..16 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
    }
    std::hint::black_box(x)
}
