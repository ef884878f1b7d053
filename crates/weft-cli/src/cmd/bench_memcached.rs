//! `weft bench memcached`'s command line; the benchmark is `weft_bench::memcached`.

use std::path::PathBuf;

use clap::builder::TypedValueParser as _;
use clap::Args;
use weft_bench::memcached::MAX_CONNECTIONS;

/// A fraction of the peak, for `--open-loop` (here and in `weft bench http`).
pub(super) fn parse_fraction(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(f) if f > 0.0 && f <= 2.0 => Ok(f),
        _ => Err(format!("'{s}' is not a fraction of the peak in (0, 2]")),
    }
}

/// A `--memcached-args` / `--weft-args` string as the servers' arguments.
fn split_flags(flags: Option<&str>) -> Vec<String> {
    flags
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

#[derive(Debug, Args)]
pub struct MemcachedBenchArgs {
    /// Client connections (at most 15,360; the open-file limit is raised to its hard limit).
    #[arg(long, default_value_t = 32,
          value_parser = clap::value_parser!(u64).range(1..=MAX_CONNECTIONS as u64)
              .map(|n| n as usize))]
    connections: usize,
    /// Open-loop mode: comma-separated fractions of memcached's closed-loop peak at
    /// --connections (e.g. 0.25,0.5,0.75). The peak is measured first (median of --runs), then
    /// both servers are loaded open loop at each fraction, alternating per run, and a table
    /// gives for each fraction and server the offered and actual req/s and p50 / p99 / p999
    /// latency in ms as min–median–max over the runs. Without it: the peak / p99-at-80 %
    /// comparison.
    #[arg(long, value_name = "FRACTIONS", value_delimiter = ',', value_parser = parse_fraction)]
    open_loop: Vec<f64>,
    /// Requests outstanding per connection in the peak runs and the open-loop run at 80 %.
    #[arg(long, default_value_t = 1)]
    depth: usize,
    /// The generator's requests: classic (get/set) or meta (mg/ms). memcached 1.6 sends each
    /// pipelined classic get's reply in its own segment, a batch of meta gets' together.
    #[arg(long, default_value = "classic")]
    protocol: weft_load::memcached::request::Protocol,
    /// With --depth above 1: the generator writes each request on its own instead of every
    /// request due together in one write.
    #[arg(long)]
    write_per_request: bool,
    /// Seconds measured per run (after a 1 s warm-up).
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Runs per measurement (the median is reported).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Share of sets.
    #[arg(long, default_value_t = 0.03)]
    update_ratio: f64,
    /// Value size of sets (as `weft load memcached --value-size`).
    #[arg(long, default_value = "fixed:200")]
    value_size: String,
    /// Distinct keys (preloaded before each run).
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    /// weft's scheduling policy [default: weft memcached's default].
    #[arg(long)]
    scheduler: Option<String>,
    /// weft's I/O backend.
    #[arg(long, default_value = "uring", value_parser = ["uring", "epoll"])]
    io: String,
    /// Cap both servers together at this % of their core (a cgroup CPU quota with a 10 ms
    /// period; needs root), so that the one load core is no longer what saturates first: the
    /// peak and the p99 at 80 % are then the servers' own.
    #[arg(long, value_name = "PCT", value_parser = clap::value_parser!(u32).range(1..=100))]
    server_cpu_pct: Option<u32>,
    /// The peer [default: memcached on PATH].
    #[arg(long)]
    memcached: Option<PathBuf>,
    /// More flags for the peer, one string split at spaces, e.g. "-o
    /// no_lru_maintainer,no_lru_crawler" (memcached's background LRU threads off: its best
    /// for one worker thread on a capped core). The header line repeats them.
    #[arg(long, value_name = "FLAGS", allow_hyphen_values = true)]
    memcached_args: Option<String>,
    /// More flags for weft memcached, as --memcached-args.
    #[arg(long, value_name = "FLAGS", allow_hyphen_values = true)]
    weft_args: Option<String>,
    /// Print one JSON object per run as well.
    #[arg(long)]
    json: bool,
    /// The server that goes first in the first run (the runs after it alternate)
    /// [default: drawn at random, and printed: with an odd --runs it goes first once more].
    #[arg(long, value_parser = ["weft", "memcached"])]
    first: Option<String>,
}

impl MemcachedBenchArgs {
    /// The benchmark's options, as the library takes them.
    pub fn options(&self) -> weft_bench::memcached::Options {
        weft_bench::memcached::Options {
            connections: self.connections,
            open_loop: self.open_loop.clone(),
            depth: self.depth,
            protocol: self.protocol,
            write_per_request: self.write_per_request,
            duration: self.duration,
            runs: self.runs,
            update_ratio: self.update_ratio,
            value_size: self.value_size.clone(),
            keys: self.keys,
            scheduler: self.scheduler.clone(),
            io: self.io.clone(),
            server_cpu_pct: self.server_cpu_pct,
            memcached: self.memcached.clone(),
            memcached_args: split_flags(self.memcached_args.as_deref()),
            weft_args: split_flags(self.weft_args.as_deref()),
            json: self.json,
            first: self.first.as_deref().map(|f| usize::from(f == "memcached")),
        }
    }
}

pub fn run(args: &MemcachedBenchArgs) -> anyhow::Result<()> {
    weft_bench::memcached::run(&args.options())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: MemcachedBenchArgs,
    }

    #[test]
    fn more_flags_for_each_server_are_split_at_spaces() {
        let cli = Cli::parse_from([
            "bench",
            "--memcached-args",
            "-o no_lru_maintainer,no_lru_crawler",
            "--weft-args",
            " -L  -R 10 ",
        ]);
        let options = cli.args.options();
        assert_eq!(
            options.memcached_args,
            ["-o", "no_lru_maintainer,no_lru_crawler"]
        );
        assert_eq!(options.weft_args, ["-L", "-R", "10"]);
        let plain = Cli::parse_from(["bench"]).args.options();
        assert!(plain.memcached_args.is_empty() && plain.weft_args.is_empty());
    }
}
