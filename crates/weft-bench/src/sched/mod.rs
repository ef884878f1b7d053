//! The Cforall thesis's scheduler micro-benchmarks, on weft and on tokio.
//!
//! Every benchmark runs the same algorithm on both runtimes: weft fibers with `weft::sync`
//! primitives and `weft::yield_now`, or tokio tasks on `new_multi_thread().worker_threads(n)`
//! with `tokio::sync` primitives and `tokio::task::yield_now`. Each fiber counts its own
//! operations in a local variable and returns the count when it ends; the sum is divided by the
//! wall time between the start signal and the stop flag, which every fiber checks once per
//! operation.
//!
//! | benchmark          | one operation                                  | many (default)              | few                  |
//! |--------------------|------------------------------------------------|-----------------------------|----------------------|
//! | `cycle`            | a hand-off to the next fiber in a ring         | 100 rings of `ring_size`    | 1 ring               |
//! | `yield`            | one `yield_now`                                | 1000 per processor          | 1 per processor      |
//! | `churn`            | a release + acquire pair on a random semaphore | 1000 per processor          | max(2, processors)   |
//! | `locality-shared`  | a hand-off carrying a 4 KiB block the receiver writes | 100 rings            | 1 ring               |
//! | `locality-noshare` | a hand-off; the receiver writes its own 4 KiB block   | 100 rings            | 1 ring               |
//! | `transfer`         | an epoch: every fiber saw the leader's new epoch | 100 per processor         | max(2, processors)   |
//! | `switch`           | a fiber-to-fiber switch (two fibers, one processor, `yield_now`) | 2          | 2                    |
//! | `spawn-join`       | spawn + join of an empty fiber, from a fiber   | 1 spawning fiber            | 1                    |
//! | `sleepers`         | one idle fiber (reports resident bytes per fiber) | 100,000                  | 1,000                |
//!
//! The *few* presets leave processors without work most of the time, so they measure the
//! idle-sleep and wake-up path rather than queue throughput.

mod churn;
pub mod core_probe;
mod harness;
mod ring;
mod sleepers;
mod spawn_join;
mod switch;
mod transfer;
mod yielding;

use std::fmt;
use std::io;
use std::str::FromStr;
use std::time::Duration;

use self::ring::Payload;
use crate::Record;

/// Fibers per ring in `cycle` and `locality-*` unless told otherwise (the thesis's value).
pub const DEFAULT_RING_SIZE: usize = 5;
/// How long each throughput benchmark runs unless told otherwise.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(5);
/// Size of the data block a `locality` hand-off writes.
pub const LOCALITY_BLOCK_BYTES: usize = 4096;

/// One scheduler micro-benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bench {
    Cycle,
    Yield,
    Churn,
    LocalityShared,
    LocalityNoshare,
    Transfer,
    Switch,
    SpawnJoin,
    Sleepers,
}

impl Bench {
    /// Every benchmark, in the order `all` runs them (`sleepers` last: it measures memory).
    pub const ALL: &'static [Bench] = &[
        Bench::Cycle,
        Bench::Yield,
        Bench::Churn,
        Bench::LocalityShared,
        Bench::LocalityNoshare,
        Bench::Transfer,
        Bench::Switch,
        Bench::SpawnJoin,
        Bench::Sleepers,
    ];

    /// The name used on the command line and in records.
    pub fn name(self) -> &'static str {
        match self {
            Bench::Cycle => "cycle",
            Bench::Yield => "yield",
            Bench::Churn => "churn",
            Bench::LocalityShared => "locality-shared",
            Bench::LocalityNoshare => "locality-noshare",
            Bench::Transfer => "transfer",
            Bench::Switch => "switch",
            Bench::SpawnJoin => "spawn-join",
            Bench::Sleepers => "sleepers",
        }
    }

    /// One line for `--help`: what it does and what one operation is.
    pub fn summary(self) -> &'static str {
        match self {
            Bench::Cycle => "rings of fibers passing one token; op = hand-off",
            Bench::Yield => "every fiber loops on yield_now; op = yield",
            Bench::Churn => "fibers release and acquire random semaphores; op = release+acquire",
            Bench::LocalityShared => {
                "ring hand-offs carrying a 4 KiB block the receiver writes; op = hand-off"
            }
            Bench::LocalityNoshare => {
                "ring hand-offs, receiver writes its own 4 KiB block; op = hand-off"
            }
            Bench::Transfer => "a leader bumps an epoch and waits for everyone; op = epoch",
            Bench::Switch => "two fibers alternate on one processor; op = switch",
            Bench::SpawnJoin => "a fiber spawns and joins empty fibers; op = spawn+join",
            Bench::Sleepers => "N fibers sleep; reports resident bytes per fiber",
        }
    }

    /// How many fibers a preset means on `processors` processors.
    pub fn fibers(self, fibers: Fibers, processors: usize, ring_size: usize) -> usize {
        let processors = processors.max(1);
        let ring_size = ring_size.max(1);
        match (self, fibers) {
            (Bench::Cycle | Bench::LocalityShared | Bench::LocalityNoshare, Fibers::Count(n)) => {
                if n <= ring_size {
                    n.max(1)
                } else {
                    n / ring_size * ring_size
                }
            }
            (_, Fibers::Count(n)) => n.max(1),
            (Bench::Cycle | Bench::LocalityShared | Bench::LocalityNoshare, Fibers::Many) => {
                100 * ring_size
            }
            (Bench::Cycle | Bench::LocalityShared | Bench::LocalityNoshare, Fibers::Few) => {
                ring_size
            }
            (Bench::Yield | Bench::Churn, Fibers::Many) => 1000 * processors,
            (Bench::Yield, Fibers::Few) => processors,
            (Bench::Transfer, Fibers::Many) => 100 * processors,
            (Bench::Churn | Bench::Transfer, Fibers::Few) => processors.max(2),
            (Bench::Switch, _) => 2,
            (Bench::SpawnJoin, _) => 1,
            (Bench::Sleepers, Fibers::Many) => 100_000,
            (Bench::Sleepers, Fibers::Few) => 1_000,
        }
    }
}

impl fmt::Display for Bench {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Bench {
    type Err = String;

    fn from_str(s: &str) -> Result<Bench, String> {
        crate::find_by_name(Bench::ALL, Bench::name, s, "benchmark")
    }
}

/// Which runtime runs the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Runtime {
    Weft,
    Tokio,
}

impl Runtime {
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Weft => "weft",
            Runtime::Tokio => "tokio",
        }
    }
}

/// How many fibers: a preset that scales with the benchmark and the processors, or a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fibers {
    /// Many fibers per processor: queue throughput (see the module table).
    Many,
    /// Very few fibers: processors go idle, so this measures idle sleep and wake-up.
    Few,
    /// Exactly this many (rounded down to whole rings for `cycle` and `locality-*`).
    Count(usize),
}

impl Fibers {
    pub fn variant(self) -> &'static str {
        match self {
            Fibers::Many => "many",
            Fibers::Few => "few",
            Fibers::Count(_) => "custom",
        }
    }
}

impl FromStr for Fibers {
    type Err = String;

    fn from_str(s: &str) -> Result<Fibers, String> {
        match s {
            "many" => Ok(Fibers::Many),
            "few" => Ok(Fibers::Few),
            _ => match s.parse::<usize>() {
                Ok(0) => Err("the fiber count must be at least 1".to_owned()),
                Ok(n) => Ok(Fibers::Count(n)),
                Err(_) => Err(format!(
                    "'{s}' is neither 'many', 'few' nor a positive number of fibers"
                )),
            },
        }
    }
}

/// Everything a benchmark run needs.
#[derive(Debug, Clone)]
pub struct Params {
    pub runtime: Runtime,
    /// The weft scheduling policy (ignored by tokio).
    pub scheduler: String,
    /// weft processors or tokio worker threads.
    pub processors: usize,
    pub fibers: Fibers,
    /// How long timed benchmarks run.
    pub duration: Duration,
    /// Fibers per ring in `cycle` and `locality-*`.
    pub ring_size: usize,
    /// weft fiber stack size in bytes; `None` for the cluster default.
    pub stack_size: Option<usize>,
    /// Spawn weft's fibers migratable (`unsafe` `Builder::migratable`: resumed on any
    /// processor after they started) instead of bound to their first processor: what the
    /// sound default costs.
    pub migratable: bool,
    /// `cycle` and `locality-*` on weft: each ring's fibers placed on one processor
    /// (`Builder::processor`; rings in contiguous blocks, the first `rings / processors` on
    /// processor 0 and so on) instead of wherever they first run: the sound way to keep a
    /// ring's hand-offs local. (Dealing rings out alternately measured 10–20 % slower at 500
    /// fibers, cause not found: docs/notes/schedulers.md.)
    pub place_rings: bool,
}

impl Params {
    /// Defaults for `runtime` on `processors` processors.
    pub fn new(runtime: Runtime, processors: usize) -> Params {
        Params {
            runtime,
            scheduler: weft::sched::DEFAULT_POLICY.to_owned(),
            processors,
            fibers: Fibers::Many,
            duration: DEFAULT_DURATION,
            ring_size: DEFAULT_RING_SIZE,
            stack_size: None,
            migratable: false,
            place_rings: false,
        }
    }
}

/// What a benchmark body measured, before it is labelled as a [`Record`].
#[derive(Debug, Default)]
struct Measured {
    ops: u64,
    seconds: f64,
    rss_bytes_per_fiber: Option<f64>,
    note: Option<String>,
    /// Further rows this benchmark reports (for example `switch-raw`).
    extra: Vec<Record>,
}

impl Measured {
    /// A plain throughput result: `ops` operations in `seconds`.
    fn throughput(ops: u64, seconds: f64) -> Measured {
        Measured {
            ops,
            seconds,
            ..Measured::default()
        }
    }
}

/// The resolved setup a benchmark body runs with.
#[derive(Debug, Clone)]
struct Setup {
    params: Params,
    /// Fibers after resolving the preset.
    fibers: usize,
    /// Processors actually used (`switch` always uses one).
    processors: usize,
}

/// Runs `bench` and returns its records (one, or more for benchmarks with extra rows).
pub fn run(bench: Bench, params: &Params) -> io::Result<Vec<Record>> {
    if params.processors == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "at least one processor is needed",
        ));
    }
    if params.ring_size == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the ring size must be at least 1",
        ));
    }
    let processors = if bench == Bench::Switch {
        1
    } else {
        params.processors
    };
    let setup = Setup {
        params: params.clone(),
        fibers: bench.fibers(params.fibers, processors, params.ring_size),
        processors,
    };
    // Which placement the host gave the vCPUs right now: it bounds every runtime's
    // cross-processor hand-offs (see `core_probe`).
    let probe = processors >= 2 && bench != Bench::Sleepers;
    let core_round_trip_ns = probe.then(|| core_probe::round_trip_ns(0, 1)).flatten();
    let measured = match (bench, params.runtime) {
        (Bench::Cycle, Runtime::Weft) => ring::weft(&setup, Payload::None),
        (Bench::Cycle, Runtime::Tokio) => ring::tokio(&setup, Payload::None),
        (Bench::Yield, Runtime::Weft) => yielding::weft(&setup),
        (Bench::Yield, Runtime::Tokio) => yielding::tokio(&setup),
        (Bench::Churn, Runtime::Weft) => churn::weft(&setup),
        (Bench::Churn, Runtime::Tokio) => churn::tokio(&setup),
        (Bench::LocalityShared, Runtime::Weft) => ring::weft(&setup, Payload::Shared),
        (Bench::LocalityShared, Runtime::Tokio) => ring::tokio(&setup, Payload::Shared),
        (Bench::LocalityNoshare, Runtime::Weft) => ring::weft(&setup, Payload::Private),
        (Bench::LocalityNoshare, Runtime::Tokio) => ring::tokio(&setup, Payload::Private),
        (Bench::Transfer, Runtime::Weft) => transfer::weft(&setup),
        (Bench::Transfer, Runtime::Tokio) => transfer::tokio(&setup),
        (Bench::Switch, Runtime::Weft) => switch::weft(&setup),
        (Bench::Switch, Runtime::Tokio) => switch::tokio(&setup),
        (Bench::SpawnJoin, Runtime::Weft) => spawn_join::weft(&setup),
        (Bench::SpawnJoin, Runtime::Tokio) => spawn_join::tokio(&setup),
        (Bench::Sleepers, Runtime::Weft) => sleepers::weft(&setup),
        (Bench::Sleepers, Runtime::Tokio) => sleepers::tokio(&setup),
    }?;
    // And after: the host can move the vCPUs during a run.
    let core_round_trip_after_ns = probe.then(|| core_probe::round_trip_ns(0, 1)).flatten();
    let label = |mut r: Record| {
        r.runtime = params.runtime.name().to_owned();
        r.scheduler = match params.runtime {
            Runtime::Weft => params.scheduler.clone(),
            Runtime::Tokio => "tokio".to_owned(),
        };
        r.processors = setup.processors;
        if r.fibers == 0 {
            r.fibers = setup.fibers;
        }
        r.variant = params.fibers.variant().to_owned();
        if params.migratable && params.runtime == Runtime::Weft {
            r.variant.push_str("-migratable");
        }
        if params.place_rings && params.runtime == Runtime::Weft {
            r.variant.push_str("-placed");
        }
        r.core_round_trip_ns = core_round_trip_ns;
        r.core_round_trip_after_ns = core_round_trip_after_ns;
        if matches!(
            bench,
            Bench::Cycle | Bench::LocalityShared | Bench::LocalityNoshare
        ) {
            r.ring_size = Some(params.ring_size.min(setup.fibers));
        }
        r
    };
    let mut main = Record::new(bench.name(), measured.ops, measured.seconds);
    main.rss_bytes_per_fiber = measured.rss_bytes_per_fiber;
    main.note = measured.note;
    let mut records = vec![label(main)];
    records.extend(measured.extra.into_iter().map(label));
    Ok(records)
}
