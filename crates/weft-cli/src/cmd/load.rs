//! `weft load ...`: load generators that measure a server from outside (memcached, HTTP).

use std::time::Duration;

use clap::{Args, Subcommand};
use weft_load::dist::{KeyDist, ValueSize};
use weft_load::memcached;

#[derive(Debug, Args)]
pub struct LoadArgs {
    #[command(subcommand)]
    command: LoadCommand,
}

#[derive(Debug, Subcommand)]
enum LoadCommand {
    /// Open-loop memcached load (like mutilate): Poisson arrivals per connection, get/set mix,
    /// latency from the intended send time. Works against weft's cache and real memcached.
    Memcached(MemcachedArgs),
}

#[derive(Debug, Args)]
struct MemcachedArgs {
    /// Server address, HOST:PORT.
    #[arg(long, default_value = "127.0.0.1:11211")]
    server: String,
    /// Client connections; each follows its own Poisson schedule of rate qps/connections.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Target requests per second over all connections; 0 = closed loop, as fast as replies
    /// come back (each connection keeps --depth requests outstanding).
    #[arg(long, default_value_t = 0.0)]
    qps: f64,
    /// Seconds measured (after the warm-up).
    #[arg(long, default_value_t = 10.0, value_parser = parse_seconds)]
    duration: f64,
    /// Seconds of load before measuring starts.
    #[arg(long, default_value_t = 1.0, value_parser = parse_seconds)]
    warmup: f64,
    /// Share of requests that are sets (the rest are gets), between 0 and 1.
    #[arg(long, default_value_t = 0.03)]
    update_ratio: f64,
    /// Distinct keys (`key:000000000000` ...); all are stored once before the run unless
    /// --no-preload.
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    /// Key popularity: uniform or zipf:S.
    #[arg(long, default_value = "uniform")]
    key_dist: KeyDist,
    /// Value sizes of sets: fixed:N, uniform:A:B, gpareto:LOC:SCALE:SHAPE or etc (Facebook
    /// ETC, as mutilate's fb_value).
    #[arg(long, default_value = "fixed:200")]
    value_size: ValueSize,
    /// Most requests outstanding on one connection (pipelining depth).
    #[arg(long, default_value_t = 1)]
    depth: usize,
    /// Generator threads (processors of its weft cluster).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// A reply slower than this many seconds counts as a timeout.
    #[arg(long, default_value_t = 1.0, value_parser = parse_seconds)]
    timeout: f64,
    /// Do not store every key before the run (gets of unstored keys miss).
    #[arg(long)]
    no_preload: bool,
    /// Seed of the key, size and schedule draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object (target_qps, actual_qps, requests, misses, errors, timeouts,
    /// latency_us {mean p50 p90 p99 p999 max}, generator_*) instead of text.
    #[arg(long)]
    json: bool,
    /// Say why connections closed.
    #[arg(short, long)]
    verbose: bool,
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("`{s}` is not a number of seconds >= 0")),
    }
}

/// Runs a parsed `weft load` command.
pub fn run(args: LoadArgs) -> anyhow::Result<()> {
    match args.command {
        LoadCommand::Memcached(a) => {
            let config = memcached::Config {
                server: a.server,
                connections: a.connections,
                qps: a.qps,
                duration: Duration::from_secs_f64(a.duration),
                warmup: Duration::from_secs_f64(a.warmup),
                update_ratio: a.update_ratio,
                keys: a.keys,
                key_dist: a.key_dist,
                value_size: a.value_size,
                depth: a.depth,
                threads: a.threads,
                timeout: Duration::from_secs_f64(a.timeout),
                preload: !a.no_preload,
                seed: a.seed,
                connect_timeout: Duration::from_secs(5),
                verbose: a.verbose,
            };
            let report = memcached::run(&config)?;
            if a.json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                println!("{}", report.human());
            }
            if report.generator_saturated && a.json {
                eprintln!("weft load: warning: the generator's own cores were saturated; the server may be faster than measured");
            }
            Ok(())
        }
    }
}
