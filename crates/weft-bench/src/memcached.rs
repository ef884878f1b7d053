//! `weft bench memcached`: `weft memcached -t 1` and the real `memcached -t 1` side by side,
//! each pinned to CPU 0, loaded from CPU 1 by `weft load memcached` (a separate process).
//! Prints for each: peak throughput (closed loop), p99 latency at 80% of memcached's peak (open
//! loop at the same depth, the same offered load for both), and server CPU time per request (from
//! /proc/PID/stat) with its kernel (system) part under it, with weft/memcached ratios; the
//! issue's targets are ≥ 1.1×, ≤ 1× and ≤ 1×.
//!
//! Every measurement is repeated `--runs` times alternating the servers, who goes first
//! rotating by run from a server drawn at random (`--first` picks it), and the median is
//! reported, so that a burst of noise on the machine, and the place right after the other
//! server's run, hit both alike, also over invocations of an odd number of runs.
//!
//! With `--open-loop F1,F2,...` it measures instead memcached's closed-loop peak at
//! `--connections`, then both servers open loop at each fraction of that peak (the generator
//! polling, as for latency), and prints p50/p99/p999 and req/s side by side as min–median–max
//! over the runs.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use crate::process::{self, Running};
use anyhow::{bail, Context};
use weft_load::memcached::request::Protocol;
use weft_load::memcached::Report;

use crate::generators::{
    memcached_report, memcached_report_polling, raise_nofile_limit, start_memcached_like,
    MemcachedLoad,
};

/// The most client connections (the thesis's 15,360).
pub const MAX_CONNECTIONS: usize = 15_360;

#[derive(Debug, Clone)]
pub struct Options {
    /// Client connections (at most 15,360; the open-file limit is raised to its hard limit).
    pub connections: usize,
    /// Open-loop mode: comma-separated fractions of memcached's closed-loop peak at
    /// --connections (e.g. 0.25,0.5,0.75). The peak is measured first (median of --runs), then
    /// both servers are loaded open loop at each fraction, alternating per run, and a table
    /// gives for each fraction and server the offered and actual req/s and p50 / p99 / p999
    /// latency in ms as min–median–max over the runs. Without it: the peak / p99-at-80 %
    /// comparison.
    pub open_loop: Vec<f64>,
    /// Requests outstanding per connection in the peak runs and the open-loop run at 80 %.
    pub depth: usize,
    /// The generator's request protocol: classic (get/set) or meta (mg/ms).
    pub protocol: Protocol,
    /// The generator writes each request on its own, even when several are due together.
    pub write_per_request: bool,
    /// Seconds measured per run (after a 1 s warm-up).
    pub duration: f64,
    /// Runs per measurement (the median is reported).
    pub runs: usize,
    /// Share of sets.
    pub update_ratio: f64,
    /// Value size of sets (as `weft load memcached --value-size`).
    pub value_size: String,
    /// Distinct keys (preloaded before each run).
    pub keys: u64,
    /// weft's scheduling policy [default: weft memcached's default].
    pub scheduler: Option<String>,
    /// weft's I/O backend.
    pub io: String,
    /// Cap both servers together at this % of their core (a cgroup CPU quota with a 10 ms
    /// period; needs root), so that the one load core is no longer what saturates first: the
    /// peak and the p99 at 80 % are then the servers' own.
    pub server_cpu_pct: Option<u32>,
    /// The peer [default: memcached on PATH].
    pub memcached: Option<PathBuf>,
    /// More flags for the peer, before the benchmark's own (`-p`, `-t 1`, `-m`, `-c`, …),
    /// which win where both give one.
    pub memcached_args: Vec<String>,
    /// More flags for weft memcached, before the benchmark's own (weft refuses a repeated
    /// `-t`).
    pub weft_args: Vec<String>,
    /// Print one JSON object per run as well.
    pub json: bool,
    /// The server (0 weft, 1 memcached) that goes first in the first run; the runs after it
    /// alternate. `None`: drawn at random for the invocation (and printed), so that an odd
    /// `--runs` does not give the same server the first place in more runs every time.
    pub first: Option<usize>,
}

/// The medians of one server's runs at one load.
#[derive(Debug, Default, Clone, Copy)]
struct Figures {
    qps: f64,
    p99_us: f64,
    cpu_us_per_request: f64,
    /// The part of `cpu_us_per_request` spent in the kernel (system time).
    system_us_per_request: f64,
    saturated: bool,
}

/// The server's CPU a reply over one run, µs: all of it, and its kernel (system) part.
#[derive(Debug, Clone, Copy)]
struct ServerCpu {
    total_us: f64,
    system_us: f64,
}

/// One server's run at one open-loop rate, as the open-loop tables show it.
pub struct OpenLoopSample {
    /// Replies per second inside the window.
    pub actual: f64,
    pub latency: weft_load::latency::LatencySummary,
    /// The generator's send lag p99 (µs), where it reports one.
    pub lag_p99_us: Option<f64>,
    pub saturated: bool,
}

/// The header of the open-loop table (markdown), shared by `bench memcached` and `bench http`.
pub fn open_loop_header() -> String {
    "| fraction | offered req/s | server | actual req/s | p50 ms | p99 ms | p999 ms | generator \
     send lag p99 ms |\n|---|---|---|---|---|---|---|---|"
        .to_owned()
}

/// One row: `samples` are one server's runs at `fraction` of the peer's peak (`offered`/s).
pub fn open_loop_row(
    fraction: f64,
    offered: f64,
    server: &str,
    samples: &[OpenLoopSample],
) -> String {
    let col = |f: &dyn Fn(&OpenLoopSample) -> f64, scale: f64, decimals: usize| {
        spread(&samples.iter().map(f).collect::<Vec<_>>(), scale, decimals)
    };
    let lag = if samples.iter().all(|s| s.lag_p99_us.is_some()) {
        col(&|s| s.lag_p99_us.unwrap_or(0.0), 1e-3, 2)
    } else {
        "-".to_owned()
    };
    format!(
        "| {fraction} | {offered:.0} | {server} | {} | {} | {} | {} | {lag} |",
        col(&|s| s.actual, 1.0, 0),
        col(&|s| s.latency.p50 as f64, 1e-3, 3),
        col(&|s| s.latency.p99 as f64, 1e-3, 2),
        col(&|s| s.latency.p999 as f64, 1e-3, 2),
    )
}

/// The lines under the open-loop table.
pub fn open_loop_footer(saturated: bool) -> String {
    let mut s = "(min–median–max over the runs where they differ)".to_owned();
    if saturated {
        s.push_str(
            "\nnote: the load generator was saturated in some run: the latencies there may be \
             its own",
        );
    }
    s
}

/// `min–median–max` of `v` scaled by `scale`, with `decimals`; one value when all agree.
fn spread(v: &[f64], scale: f64, decimals: usize) -> String {
    let mut v: Vec<f64> = v.iter().map(|x| x * scale).collect();
    let (med, lo, hi) = crate::stats::median_min_max(&mut v);
    if lo == hi {
        format!("{med:.decimals$}")
    } else {
        format!("{lo:.decimals$}–{med:.decimals$}–{hi:.decimals$}")
    }
}

pub fn run(args: &Options) -> anyhow::Result<()> {
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
    let limit = raise_nofile_limit();
    if (limit as usize) < 2 * args.connections + 256 {
        eprintln!(
            "note: the open-file limit is {limit} (hard limit); {} connections need about {}",
            args.connections,
            2 * args.connections + 256
        );
    }
    let work = std::env::temp_dir().join(format!("weft-bench-memcached-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let interrupted = crate::process::interrupt_flag()?;
    let mut args = args.clone();
    let first = *args
        .first
        .get_or_insert_with(|| usize::from(rand::random::<bool>()));
    if first > 1 {
        bail!("the first server is 0 (weft) or 1 (memcached)");
    }
    let result = compare(&args, &exe, &memcached, &work, &interrupted);
    let _ = std::fs::remove_dir_all(&work);
    result
}

fn compare(
    args: &Options,
    exe: &Path,
    memcached: &Path,
    work: &Path,
    interrupted: &AtomicBool,
) -> anyhow::Result<()> {
    let mut weft_prefix: Vec<String> = vec!["memcached".into(), "--io".into(), args.io.clone()];
    if let Some(policy) = &args.scheduler {
        weft_prefix.extend(["--scheduler".into(), policy.clone()]);
    }
    weft_prefix.extend(args.weft_args.iter().cloned());
    // Declared before the servers so that it is removed after they were stopped.
    let cpu_limit = args
        .server_cpu_pct
        .map(|pct| crate::cgroup::CpuLimit::new("weft-bench-memcached", pct))
        .transpose()?;
    let servers = [
        start_memcached_like("weft", exe, &weft_prefix, work, args.connections)?,
        start_memcached_like(
            "memcached",
            memcached,
            &args.memcached_args,
            work,
            args.connections,
        )?,
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
    for (who, flags) in [
        ("weft", &args.weft_args),
        ("memcached", &args.memcached_args),
    ] {
        if !flags.is_empty() {
            println!("{who} started with {} as well", flags.join(" "));
        }
    }
    println!("{}", order_line(args.runs, args.first.unwrap_or(0)));
    // The host phase moves the ratios (the system call's price most of all); say which one
    // this run saw.
    println!("{}", crate::host_probe::Host::probe().line());
    if !args.open_loop.is_empty() {
        return open_loop(args, exe, &servers, interrupted);
    }
    println!(
        "weft memcached vs memcached, -t 1 each, {}: {} connections, \
         {:.0}% sets of {}, {} keys, {} run(s) of {} s per point (medians)",
        process::placement(),
        args.connections,
        args.update_ratio * 100.0,
        args.value_size,
        args.keys,
        args.runs,
        args.duration
    );
    let peak = measure(args, exe, &servers, 0.0, args.depth, "peak", interrupted)?;
    let target = (0.8 * peak[1].qps).round();
    let at80 = measure(
        args,
        exe,
        &servers,
        target,
        args.depth,
        "p99_at_80pct",
        interrupted,
    )?;
    println!(
        "{:<40} {:>12} {:>12} {:>8}",
        "", "weft", "memcached", "ratio"
    );
    let row = |label: &str, w: f64, m: f64| {
        println!("{label:<40} {w:>12.1} {m:>12.1} {:>7.2}x", w / m);
    };
    row(
        &format!(
            "peak req/s (closed loop, depth {}{})",
            args.depth,
            requests(args)
        ),
        peak[0].qps,
        peak[1].qps,
    );
    row(
        "server CPU µs/request at peak",
        peak[0].cpu_us_per_request,
        peak[1].cpu_us_per_request,
    );
    row(
        "  of which in the kernel",
        peak[0].system_us_per_request,
        peak[1].system_us_per_request,
    );
    row(
        &format!(
            "p99 µs at {target:.0} req/s (open loop, depth {})",
            args.depth
        ),
        at80[0].p99_us,
        at80[1].p99_us,
    );
    row("req/s achieved there", at80[0].qps, at80[1].qps);
    row(
        "server CPU µs/request there",
        at80[0].cpu_us_per_request,
        at80[1].cpu_us_per_request,
    );
    row(
        "  of which in the kernel",
        at80[0].system_us_per_request,
        at80[1].system_us_per_request,
    );
    if args.depth > 1 && args.protocol == Protocol::Classic {
        println!(
            "note: memcached 1.6 sends each pipelined classic get's reply in a segment of its \
             own; --protocol meta measures it with its meta gets, whose replies it batches"
        );
    }
    if peak.iter().chain(&at80).any(|f| f.saturated) {
        println!(
            "note: the load generator's core was saturated in some run: peak figures may \
             understate the servers"
        );
    }
    Ok(())
}

/// The servers (0 weft, 1 memcached) in the order `runs` runs of each measure them: side by
/// side, and who goes first rotating by run from `first` ([`crate::experiment::server_order`]:
/// weft memcached, memcached weft, …). Always weft first gave the server measured right after
/// the other one every run: a run's place after the other server's is worth a few per cent
/// here (`docs/notes/scale.md`, "Fewer instructions a hit"), so it is shared out; and with an
/// odd number of runs the server that starts goes first once more, so the start is drawn for
/// each invocation (until 2026-11-30 it was weft, first in two of item 4's three runs).
fn measure_order(runs: usize, first: usize) -> Vec<usize> {
    (0..runs)
        .flat_map(|run| crate::experiment::server_order(2, run + first))
        .collect()
}

/// Which server goes first in which runs (numbered from 1), for the header.
fn order_line(runs: usize, first: usize) -> String {
    let order = measure_order(runs, first);
    let firsts = |server: usize| -> String {
        let runs: Vec<String> = order
            .chunks(2)
            .enumerate()
            .filter(|(_, pair)| pair[0] == server)
            .map(|(run, _)| (run + 1).to_string())
            .collect();
        if runs.is_empty() {
            "no run".to_owned()
        } else {
            format!("run(s) {}", runs.join(", "))
        }
    };
    format!(
        "first in a run: weft in {}, memcached in {} (the start drawn at random; --first repeats \
         it)",
        firsts(0),
        firsts(1)
    )
}

/// Runs the load at `qps` (0 = closed loop) against each server `--runs` times, alternating.
fn measure(
    args: &Options,
    exe: &Path,
    servers: &[(Running, u16); 2],
    qps: f64,
    depth: usize,
    phase: &str,
    interrupted: &AtomicBool,
) -> anyhow::Result<[Figures; 2]> {
    let mut runs: [Vec<(Report, ServerCpu)>; 2] = Default::default();
    for i in measure_order(args.runs, args.first.unwrap_or(0)) {
        let (server, port) = &servers[i];
        let (report, cpu) = one_run(args, exe, server, *port, qps, depth, false, interrupted)?;
        if args.json {
            println!(
                "{}",
                serde_json::json!({
                    "server": if i == 0 { "weft" } else { "memcached" },
                    "phase": phase,
                    "server_cpu_us_per_request": cpu.total_us,
                    "server_system_us_per_request": cpu.system_us,
                    "report": report,
                })
            );
        }
        runs[i].push((report, cpu));
    }
    Ok(runs.map(|rs| Figures {
        qps: crate::stats::median(&rs.iter().map(|(r, _)| r.actual_qps).collect::<Vec<_>>()),
        p99_us: crate::stats::median(
            &rs.iter()
                .map(|(r, _)| r.latency_us.p99 as f64)
                .collect::<Vec<_>>(),
        ),
        cpu_us_per_request: crate::stats::median(
            &rs.iter().map(|(_, c)| c.total_us).collect::<Vec<_>>(),
        ),
        system_us_per_request: crate::stats::median(
            &rs.iter().map(|(_, c)| c.system_us).collect::<Vec<_>>(),
        ),
        saturated: rs.iter().any(|(r, _)| r.generator_saturated),
    }))
}

/// The open-loop mode: memcached's closed-loop peak at `--connections`, then both servers at
/// each `--open-loop` fraction of it, alternating per run; prints the side-by-side table.
fn open_loop(
    args: &Options,
    exe: &Path,
    servers: &[(Running, u16); 2],
    interrupted: &AtomicBool,
) -> anyhow::Result<()> {
    let names = ["weft", "memcached"];
    println!(
        "weft memcached vs memcached, -t 1 each, {} (weft load \
         memcached): {} connections, {:.0}% sets of {}, {} keys, {} run(s) of {} s per point",
        process::placement(),
        args.connections,
        args.update_ratio * 100.0,
        args.value_size,
        args.keys,
        args.runs,
        args.duration
    );
    let mut peaks = Vec::new();
    for _ in 0..args.runs {
        let (server, port) = &servers[1];
        let (report, _) = one_run(
            args,
            exe,
            server,
            *port,
            0.0,
            args.depth,
            false,
            interrupted,
        )?;
        if args.json {
            println!(
                "{}",
                serde_json::json!({"server": "memcached", "phase": "peak", "report": report})
            );
        }
        peaks.push(report.actual_qps);
    }
    let peak = crate::stats::median(&peaks);
    println!(
        "memcached peak (closed loop, depth {}{}, {} connections): {} req/s",
        args.depth,
        requests(args),
        args.connections,
        spread(&peaks, 1.0, 0)
    );
    println!();
    println!("{}", open_loop_header());
    let mut saturated = false;
    for &fraction in &args.open_loop {
        let offered = (fraction * peak).round().max(1.0);
        let mut runs: [Vec<Report>; 2] = Default::default();
        for i in measure_order(args.runs, args.first.unwrap_or(0)) {
            let (server, port) = &servers[i];
            let (report, _) = one_run(args, exe, server, *port, offered, 1, true, interrupted)?;
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({
                        "server": names[i],
                        "phase": "open_loop",
                        "fraction": fraction,
                        "report": report,
                    })
                );
            }
            runs[i].push(report);
        }
        for (i, rs) in runs.iter().enumerate() {
            let samples: Vec<OpenLoopSample> = rs
                .iter()
                .map(|r| OpenLoopSample {
                    actual: r.actual_qps,
                    latency: r.latency_us,
                    lag_p99_us: r.generator_send_lag_us.as_ref().map(|l| l.p99 as f64),
                    saturated: r.generator_saturated,
                })
                .collect();
            saturated |= samples.iter().any(|s| s.saturated);
            println!("{}", open_loop_row(fraction, offered, names[i], &samples));
        }
    }
    println!("{}", open_loop_footer(saturated));
    Ok(())
}

/// How the generator sends, for a table's label: nothing for the defaults (classic requests,
/// those due together in one write).
fn requests(args: &Options) -> String {
    let mut label = String::new();
    if args.protocol != Protocol::Classic {
        label += &format!(", {}", args.protocol.as_str());
    }
    if args.write_per_request && args.depth > 1 {
        label += ", a write each";
    }
    label
}

/// One load run; returns the generator's report and the server's CPU µs per reply it sent.
/// `poll`: the generator's dispatcher polls (latency) instead of sleeping (CPU per request).
#[allow(clippy::too_many_arguments)]
fn one_run(
    args: &Options,
    exe: &Path,
    server: &Running,
    port: u16,
    qps: f64,
    depth: usize,
    poll: bool,
    interrupted: &AtomicBool,
) -> anyhow::Result<(Report, ServerCpu)> {
    let load = MemcachedLoad {
        port,
        connections: args.connections,
        qps,
        depth,
        protocol: args.protocol,
        write_per_request: args.write_per_request,
        update_ratio: args.update_ratio,
        value_size: &args.value_size,
        keys: args.keys,
        duration_s: args.duration,
        warmup_s: 1.0,
    };
    let pid = server.pid();
    let before = crate::echo::cpu::process_cpu_times(pid)?;
    let load_cpu = process::server_and_load_cpus().1;
    let report = if poll {
        memcached_report_polling(exe, &load, load_cpu, interrupted)?
    } else {
        memcached_report(exe, &load, load_cpu, interrupted)?
    };
    let cpu = crate::echo::cpu::process_cpu_times(pid)?.since(&before);
    let per_reply_us = 1e6 / load.served(&report).max(1.0);
    Ok((
        report,
        ServerCpu {
            total_us: cpu.total_s() * per_reply_us,
            system_us: cpu.system_s * per_reply_us,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each server goes first in every other run: neither is always the one measured right
    /// after the other.
    #[test]
    fn who_goes_first_rotates_by_run() {
        assert_eq!(measure_order(4, 0), [0, 1, 1, 0, 0, 1, 1, 0]);
        let order = measure_order(6, 0);
        let firsts: Vec<usize> = order.chunks(2).map(|pair| pair[0]).collect();
        assert_eq!(firsts.iter().filter(|&&s| s == 0).count(), 3);
        assert!(order.chunks(2).all(|pair| pair[0] != pair[1]));
    }

    /// With an odd number of runs the starting server goes first once more: the start is the
    /// invocation's, either server, and the header says which runs each went first in.
    #[test]
    fn an_odd_number_of_runs_may_start_with_either_server() {
        assert_eq!(measure_order(3, 0), [0, 1, 1, 0, 0, 1]);
        assert_eq!(measure_order(3, 1), [1, 0, 0, 1, 1, 0]);
        assert_eq!(
            order_line(3, 1),
            "first in a run: weft in run(s) 2, memcached in run(s) 1, 3 (the start drawn at \
             random; --first repeats it)"
        );
        assert_eq!(
            order_line(1, 0),
            "first in a run: weft in run(s) 1, memcached in no run (the start drawn at random; \
             --first repeats it)"
        );
    }
}
