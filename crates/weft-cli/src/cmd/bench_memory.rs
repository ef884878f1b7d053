//! `weft bench memory`'s command line; the benchmark is `weft_bench::memory`.

use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Args)]
pub struct MemoryBenchArgs {
    /// `-m` for both servers, in megabytes.
    #[arg(long, default_value_t = 64)]
    memory_mb: u32,
    /// Seconds of measured load (after preloading every key and a 1 s warm-up).
    #[arg(long, default_value_t = 20.0)]
    duration: f64,
    /// Distinct keys.
    #[arg(long, default_value_t = 200_000)]
    keys: u64,
    /// Value sizes of the sets (as `weft load memcached --value-size`).
    #[arg(long, default_value = "uniform:100:50000")]
    value_size: String,
    /// Share of sets.
    #[arg(long, default_value_t = 0.9)]
    update_ratio: f64,
    /// Client connections.
    #[arg(long, default_value_t = 8)]
    connections: usize,
    /// How often VmRSS is sampled, in milliseconds.
    #[arg(long, default_value_t = 200)]
    interval_ms: u64,
    /// The peer [default: memcached on PATH; skipped with a note when there is none].
    #[arg(long)]
    memcached: Option<PathBuf>,
    /// `-t` for both servers; a comma-separated list measures each.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    threads: Vec<u32>,
    /// Runs of each server per `-t` (alternating between the servers).
    #[arg(long, default_value_t = 1)]
    rounds: usize,
}

impl MemoryBenchArgs {
    /// The benchmark's options, as the library takes them.
    pub fn options(&self) -> weft_bench::memory::Options {
        weft_bench::memory::Options {
            memory_mb: self.memory_mb,
            duration: self.duration,
            keys: self.keys,
            value_size: self.value_size.clone(),
            update_ratio: self.update_ratio,
            connections: self.connections,
            interval_ms: self.interval_ms,
            memcached: self.memcached.clone(),
            threads: self.threads.clone(),
            rounds: self.rounds,
        }
    }
}

pub fn run(args: &MemoryBenchArgs) -> anyhow::Result<()> {
    weft_bench::memory::run(&args.options())
}
