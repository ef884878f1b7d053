//! `weft bench memcached`: `weft memcached -t 1` and the real `memcached -t 1` side by side,
//! each pinned to CPU 0, loaded from CPU 1 by `weft load memcached` (a separate process).
//! Prints for each: peak throughput (closed loop), p99 latency at 80% of memcached's peak (open
//! loop, the same offered load for both), and server CPU time per request (from
//! /proc/PID/stat), with weft/memcached ratios; the targets are ≥ 1.1×, ≤ 1× and ≤ 1×.
//!
//! Every measurement is repeated `--runs` times alternating the servers, and the median is
//! reported, so that a burst of noise on the machine hits both alike.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use anyhow::{bail, Context};
use clap::Args;
use weft_load::experiment::process::{self, Running};
use weft_load::memcached::Report;

use super::load_bench::{memcached_report, start_memcached_like, MemcachedLoad};

#[derive(Debug, Args)]
pub struct MemcachedBenchArgs {
    /// Client connections.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Requests outstanding per connection in the closed-loop (peak) runs.
    #[arg(long, default_value_t = 1)]
    depth: usize,
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
    /// Print one JSON object per run as well.
    #[arg(long)]
    json: bool,
}

/// The medians of one server's runs at one load.
#[derive(Debug, Default, Clone, Copy)]
struct Figures {
    qps: f64,
    p99_us: f64,
    cpu_us_per_request: f64,
    saturated: bool,
}

fn median(mut v: Vec<f64>) -> f64 {
    weft_load::experiment::output::median_min_max(&mut v).0
}

pub fn run(args: &MemcachedBenchArgs) -> anyhow::Result<()> {
    if args.runs == 0 || args.duration <= 0.0 || args.connections == 0 || args.depth == 0 {
        bail!("--runs, --duration, --connections and --depth must be > 0");
    }
    let memcached = match &args.memcached {
        Some(p) => p.clone(),
        None => process::find_program("memcached").context(
            "memcached is not installed (apt-get install memcached); nothing to compare with",
        )?,
    };
    let exe = std::env::current_exe().context("finding the weft executable")?;
    let work = std::env::temp_dir().join(format!("weft-bench-memcached-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let interrupted = weft_load::experiment::interrupt_flag()?;
    let result = compare(args, &exe, &memcached, &work, &interrupted);
    let _ = std::fs::remove_dir_all(&work);
    result
}

fn compare(
    args: &MemcachedBenchArgs,
    exe: &Path,
    memcached: &Path,
    work: &Path,
    interrupted: &AtomicBool,
) -> anyhow::Result<()> {
    let mut weft_prefix: Vec<String> = vec!["memcached".into(), "--io".into(), args.io.clone()];
    if let Some(policy) = &args.scheduler {
        weft_prefix.extend(["--scheduler".into(), policy.clone()]);
    }
    // Declared before the servers so that it is removed after they were stopped.
    let cpu_limit = args
        .server_cpu_pct
        .map(|pct| super::cpu_limit::CpuLimit::new("weft-bench-memcached", pct))
        .transpose()?;
    let servers = [
        start_memcached_like("weft", exe, &weft_prefix, work)?,
        start_memcached_like("memcached", memcached, &[], work)?,
    ];
    if let Some(limit) = &cpu_limit {
        for (server, _) in &servers {
            limit.add(server.pid())?;
        }
        println!(
            "servers capped together at {} % of their core (cgroup CPU quota, 10 ms period)",
            args.server_cpu_pct.unwrap_or(100)
        );
    }
    println!(
        "weft memcached vs memcached, -t 1 each, pinned to CPU 0; load from CPU 1: {} connections, \
         {:.0}% sets of {}, {} keys, {} run(s) of {} s per point (medians)",
        args.connections,
        args.update_ratio * 100.0,
        args.value_size,
        args.keys,
        args.runs,
        args.duration
    );
    let peak = measure(args, exe, &servers, 0.0, args.depth, "peak", interrupted)?;
    let target = (0.8 * peak[1].qps).round();
    let at80 = measure(args, exe, &servers, target, 1, "p99_at_80pct", interrupted)?;
    println!(
        "{:<40} {:>12} {:>12} {:>8}",
        "", "weft", "memcached", "ratio"
    );
    let row = |label: &str, w: f64, m: f64| {
        println!("{label:<40} {w:>12.1} {m:>12.1} {:>7.2}x", w / m);
    };
    row(
        &format!("peak req/s (closed loop, depth {})", args.depth),
        peak[0].qps,
        peak[1].qps,
    );
    row(
        "server CPU µs/request at peak",
        peak[0].cpu_us_per_request,
        peak[1].cpu_us_per_request,
    );
    row(
        &format!("p99 µs at {target:.0} req/s (open loop)"),
        at80[0].p99_us,
        at80[1].p99_us,
    );
    row("req/s achieved there", at80[0].qps, at80[1].qps);
    row(
        "server CPU µs/request there",
        at80[0].cpu_us_per_request,
        at80[1].cpu_us_per_request,
    );
    if peak.iter().chain(&at80).any(|f| f.saturated) {
        println!(
            "note: the load generator's core was saturated in some run: peak figures may \
             understate the servers"
        );
    }
    Ok(())
}

/// Runs the load at `qps` (0 = closed loop) against each server `--runs` times, alternating.
fn measure(
    args: &MemcachedBenchArgs,
    exe: &Path,
    servers: &[(Running, u16); 2],
    qps: f64,
    depth: usize,
    phase: &str,
    interrupted: &AtomicBool,
) -> anyhow::Result<[Figures; 2]> {
    let mut runs: [Vec<(Report, f64)>; 2] = Default::default();
    for _ in 0..args.runs {
        for (i, (server, port)) in servers.iter().enumerate() {
            let (report, cpu_us) = one_run(args, exe, server, *port, qps, depth, interrupted)?;
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({
                        "server": if i == 0 { "weft" } else { "memcached" },
                        "phase": phase,
                        "server_cpu_us_per_request": cpu_us,
                        "report": report,
                    })
                );
            }
            runs[i].push((report, cpu_us));
        }
    }
    Ok(runs.map(|rs| Figures {
        qps: median(rs.iter().map(|(r, _)| r.actual_qps).collect()),
        p99_us: median(rs.iter().map(|(r, _)| r.latency_us.p99 as f64).collect()),
        cpu_us_per_request: median(rs.iter().map(|(_, c)| *c).collect()),
        saturated: rs.iter().any(|(r, _)| r.generator_saturated),
    }))
}

/// One load run; returns the generator's report and the server's CPU µs per reply it sent.
fn one_run(
    args: &MemcachedBenchArgs,
    exe: &Path,
    server: &Running,
    port: u16,
    qps: f64,
    depth: usize,
    interrupted: &AtomicBool,
) -> anyhow::Result<(Report, f64)> {
    let load = MemcachedLoad {
        port,
        connections: args.connections,
        qps,
        depth,
        update_ratio: args.update_ratio,
        value_size: &args.value_size,
        keys: args.keys,
        duration_s: args.duration,
        warmup_s: 1.0,
    };
    let pid = server.pid();
    let before = weft_bench::echo::cpu::process_cpu_seconds(pid)?;
    let load_cpu = process::server_and_load_cpus().1;
    let report = memcached_report(exe, &load, load_cpu, interrupted)?;
    let cpu_s = weft_bench::echo::cpu::process_cpu_seconds(pid)? - before;
    let served = load.served(&report);
    Ok((report, cpu_s * 1e6 / served.max(1.0)))
}
