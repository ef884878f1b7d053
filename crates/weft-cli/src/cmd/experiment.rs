//! `weft experiment ...`: the thesis experiments end to end (servers, load, sweeps, plots).
//! This file is the command line; the work is `weft_bench::experiment`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use weft_bench::experiment::{self, Kind, Options, Rates};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Which {
    /// memcached load at 3% updates: throughput and p99 latency vs offered load (req/s).
    Memcached,
    /// memcached load at 3, 5, 10 and 50% updates, one panel each.
    Updates,
    /// Static files (the thesis file set, httperf-style sessions of 3 requests on a new
    /// connection, 10 s client timeout): replies/s, error rate and p99 vs request rate.
    Static,
    /// A small memcached + static run that finishes in about 2 minutes.
    Quick,
    /// The scheduler study: `weft bench study` benchmarks × policies × 1, 2, 4 processors.
    Study,
    /// Fibers vs OS threads: `weft http` and `weft memcached` with a fiber per connection and
    /// with `--threads-per-connection`, closed loop at --thread-connections, alternating
    /// rounds (--runs); req/s, p99 and memory per connection in OUT/threads.svg and
    /// OUT/threads.jsonl. About 2.5 minutes with the defaults.
    Threads,
    /// Static files from disk: the file set (default scale 1, 2.3 GB) served with the
    /// server's page cache held to --memory-limit-mib by a memory cgroup, names drawn
    /// uniformly, caches dropped before every point (needs root); weft http against nginx
    /// and nginx with `aio threads`. Replies/s, errors and p99 vs rate.
    Disk,
}

#[derive(Debug, Args)]
#[command(after_long_help = "\
Servers: weft's own (`weft memcached`, `weft http`, 1 processor) and, when installed, \
memcached -t 1 (both caches started with the thesis's -b 32768 -c 32768 -m 10240 \
-o hashpower=24; -c capped below the descriptor limit) and nginx (1 worker, sendfile, tcp_nopush, open_file_cache, access_log off), \
each on a free port on \
127.0.0.1. With 2 or more CPUs the server runs on CPU 0 and the load generator on CPU 1. \
Ctrl-C stops the run, kills every process it started, and still writes what was measured.

Writes OUT/report.html (what ran, machine, kernel, commit, every plot), OUT/results.json, \
OUT/results.csv, OUT/<experiment>-*.svg and OUT/logs/ (server output).")]
pub struct ExperimentArgs {
    /// Which experiment.
    #[arg(value_enum)]
    which: Which,
    /// Output directory.
    #[arg(long, default_value = "weft-results")]
    out: PathBuf,
    /// Runs per point (median, min and max are plotted). Default: 3 (1 for quick).
    #[arg(long)]
    runs: Option<usize>,
    /// Offered rates FROM:TO:STEP, in requests/s.
    #[arg(long)]
    rates: Option<Rates>,
    /// Seconds measured per point. Default: 10 (3 for quick).
    #[arg(long)]
    duration: Option<f64>,
    /// Seconds of load before each measurement. Default: 1 (0.5 for quick).
    #[arg(long)]
    warmup: Option<f64>,
    /// memcached client connections, persistent, depth 1. Default: 15,360, the thesis's
    /// (whose memcached figures all use it); the sweeps' default rates go past memcached
    /// `-t 1`'s peak at that count (about 85k req/s on a 2-core VM) so throughput flattens.
    #[arg(long, default_value_t = 15_360)]
    connections: usize,
    /// Run weft's servers once per scheduler policy listed (comma-separated), e.g.
    /// work-stealing,global-fifo. Default: each server's default policy.
    #[arg(long, value_delimiter = ',')]
    schedulers: Vec<String>,
    /// Directory of the static file set (generated there if missing). Default: OUT/fileset.
    #[arg(long)]
    fileset: Option<PathBuf>,
    /// Scale of the generated file set (1 = 21,600 files, 2.3 GB). Default: 0.1 (0.01 for quick).
    #[arg(long)]
    fileset_scale: Option<f64>,
    /// Only weft's servers, even if memcached and nginx are installed.
    #[arg(long)]
    no_peers: bool,
    /// `threads`: the concurrent connection counts (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "100,1000")]
    thread_connections: Vec<usize>,
    /// `disk`: the memory limit (MiB) of the server's cgroup.
    #[arg(long, default_value_t = experiment::disk::DEFAULT_LIMIT_MIB)]
    memory_limit_mib: u64,
}

/// Runs a parsed `weft experiment` command.
pub fn run(args: ExperimentArgs) -> anyhow::Result<()> {
    experiment::run(Options {
        kind: match args.which {
            Which::Memcached => Kind::Memcached,
            Which::Updates => Kind::Updates,
            Which::Static => Kind::Static,
            Which::Quick => Kind::Quick,
            Which::Study => Kind::Study,
            Which::Threads => Kind::Threads,
            Which::Disk => Kind::Disk,
        },
        out: args.out,
        runs: args.runs,
        rates: args.rates,
        duration: args.duration,
        warmup: args.warmup,
        connections: args.connections,
        schedulers: args.schedulers,
        fileset: args.fileset,
        fileset_scale: args.fileset_scale,
        peers: !args.no_peers,
        thread_connections: args.thread_connections,
        memory_limit_mib: args.memory_limit_mib,
    })
}
