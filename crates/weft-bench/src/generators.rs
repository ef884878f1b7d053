//! `weft bench load`: the load generators measured — agreement with wrk and memcaslap in
//! closed loop (same server, same settings), generator CPU per request against memcached's
//! CPU per request at the same offered load, and the cost of recording a latency sample.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use crate::process::{self, Running};
use crate::sched::core_probe;
use anyhow::{bail, Context};
use weft_load::latency::Recorder;
use weft_load::memcached::request::Protocol;

#[derive(Debug, Clone)]
pub struct Options {
    /// Connections for the closed-loop comparisons.
    pub connections: usize,
    /// Seconds per measurement.
    pub duration: f64,
    /// Repetitions of each comparison (medians are reported; single runs on a shared VM move
    /// by ±15 %, so three were not enough to settle a 10 % agreement).
    pub runs: usize,
    /// Offered loads (QPS) at which generator and memcached CPU per request are compared (110k
    /// is near memcached -t 1's saturation on one core; 0 = closed loop, as fast as the
    /// generator's one core can drive memcached's one core).
    pub cpu_rates: Vec<f64>,
    /// Connections of the open-loop cross-check against benches/openloop/openloop.c (the
    /// thesis's 15,360; needs `ulimit -n` of at least that plus 64, and cc). 0 skips it.
    pub open_loop_connections: usize,
    /// Offered requests/s of the open-loop cross-check (a quarter to a half of memcached
    /// -t 1's peak at 15,360 connections on a 2-core VM).
    pub open_loop_qps: f64,
    /// Print one JSON object per comparison.
    pub json: bool,
}

/// Runs the comparisons and prints them.
pub fn run(args: &Options) -> anyhow::Result<()> {
    if args.runs == 0 || args.duration <= 0.0 || args.connections == 0 {
        bail!("--runs, --duration and --connections must be > 0");
    }
    let exe = std::env::current_exe().context("finding the weft executable")?;
    let work = std::env::temp_dir().join(format!("weft-bench-load-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let interrupted = AtomicBool::new(false);
    let result = (|| -> anyhow::Result<()> {
        sample_cost(args)?;
        match (process::find_program("nginx"), process::find_program("wrk")) {
            (Some(nginx), Some(wrk)) => http_vs_wrk(args, &exe, &nginx, &wrk, &work, &interrupted)?,
            _ => {
                println!("skipped: HTTP validation needs nginx and wrk (apt-get install nginx wrk)")
            }
        }
        match (process::find_program("memcached"), process::find_program("memcaslap")) {
            (Some(mc), Some(slap)) => {
                memcached_vs_memcaslap(args, &exe, &mc, &slap, &work, &interrupted)?;
                open_loop_vs_openloop_c(args, &exe, &mc, &work, &interrupted)?;
                generator_cpu(args, &exe, &mc, &work, &interrupted)?;
            }
            _ => println!(
                "skipped: memcached validation needs memcached and memcaslap (apt-get install memcached libmemcached-tools)"
            ),
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&work);
    result
}

/// Nanoseconds per latency sample recorded (a timestamp plus a histogram increment).
fn sample_cost(args: &Options) -> anyhow::Result<()> {
    let recorder = Recorder::new();
    const SAMPLES: u32 = 10_000_000;
    let start = Instant::now();
    for i in 0..SAMPLES {
        let intended = start + Duration::from_nanos(u64::from(i));
        let latency = Instant::now().saturating_duration_since(intended);
        recorder.with(|t| t.record(latency));
    }
    let ns = start.elapsed().as_nanos() as f64 / f64::from(SAMPLES);
    assert_eq!(recorder.total().replies, u64::from(SAMPLES));
    if args.json {
        println!("{{\"comparison\":\"sample_cost\",\"ns_per_sample\":{ns:.1}}}");
    } else {
        println!("latency sample (clock read + histogram record): {ns:.1} ns");
    }
    Ok(())
}

fn http_vs_wrk(
    args: &Options,
    exe: &Path,
    nginx: &Path,
    wrk: &Path,
    work: &Path,
    interrupted: &AtomicBool,
) -> anyhow::Result<()> {
    let root = work.join("www");
    std::fs::create_dir_all(&root)?;
    std::fs::write(root.join("f4k.bin"), vec![b'x'; 4096])?;
    let urls = work.join("urls.txt");
    std::fs::write(&urls, "/f4k.bin\n")?;
    let port = process::free_port()?;
    let conf = work.join("nginx.conf");
    std::fs::write(&conf, weft_load::nginx::config(work, port, &root, ""))?;
    let (server_cpu, load_cpu) = process::server_and_load_cpus();
    let conf_arg = conf.display().to_string();
    let err_log = work.join("nginx-error.log").display().to_string();
    let mut server = Running::start(
        "nginx",
        nginx,
        &["-c".into(), conf_arg, "-e".into(), err_log],
        server_cpu,
        work.join("nginx.log"),
    )?;
    let addr = ([127, 0, 0, 1], port).into();
    server.wait_for_port(addr, Duration::from_secs(10))?;
    let limit = Duration::from_secs_f64(args.duration + 60.0);
    let (mut wrk_rates, mut weft_rates) = (Vec::new(), Vec::new());
    for _ in 0..args.runs {
        let out = process::run_to_end(
            wrk,
            &[
                "-t1".into(),
                format!("-c{}", args.connections),
                format!("-d{}s", args.duration.ceil()),
                format!("http://127.0.0.1:{port}/f4k.bin"),
            ],
            load_cpu,
            interrupted,
            limit,
        )?;
        let rate = out
            .lines()
            .find_map(|l| l.strip_prefix("Requests/sec:"))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .with_context(|| format!("no Requests/sec in wrk's output: {out}"))?;
        wrk_rates.push(rate);
        let out = process::run_to_end(
            exe,
            &[
                "load".into(),
                "http".into(),
                "--server".into(),
                format!("127.0.0.1:{port}"),
                "--urls".into(),
                urls.display().to_string(),
                "--rate".into(),
                "0".into(),
                "--connections".into(),
                args.connections.to_string(),
                "--duration".into(),
                args.duration.ceil().to_string(),
                "--warmup".into(),
                "0.5".into(),
                "--json".into(),
            ],
            load_cpu,
            interrupted,
            limit,
        )?;
        let report: weft_load::http::Report = serde_json::from_str(out.trim())?;
        weft_rates.push(report.replies_per_sec);
    }
    server.stop();
    report_pair(
        args,
        "http_closed_loop",
        "wrk",
        &mut wrk_rates,
        "weft load http",
        &mut weft_rates,
    );
    Ok(())
}

/// Starts `program` (memcached, or weft with `prefix` = `["memcached"]`) as a one-thread
/// server pinned to the server CPU, logging to `work/<name>.log`, accepting at least
/// `connections` clients (`-c`, with room for the preloading and probing ones).
pub fn start_memcached_like(
    name: &str,
    program: &Path,
    prefix: &[String],
    work: &Path,
    connections: usize,
) -> anyhow::Result<(Running, u16)> {
    let port = process::free_port()?;
    let mut args = prefix.to_vec();
    let max_conns = u32::try_from(connections.saturating_add(64))
        .unwrap_or(u32::MAX)
        .max(4096);
    args.extend(process::memcached_flags(&port.to_string(), 1024, max_conns));
    let mut server = Running::start(
        name,
        program,
        &args,
        process::server_and_load_cpus().0,
        work.join(format!("{name}.log")),
    )?;
    server.wait_for_port(([127, 0, 0, 1], port).into(), Duration::from_secs(10))?;
    Ok((server, port))
}

/// memcached for memcaslap and the open-loop cross-check, with `-c` room for the thesis's
/// 15,360 connections whichever the run uses.
fn start_memcached(mc: &Path, work: &Path) -> anyhow::Result<(Running, u16)> {
    start_memcached_like("memcached", mc, &[], work, 15_360)
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit (the servers and generators
/// it starts inherit it) and returns the soft limit now in force.
pub fn raise_nofile_limit() -> u64 {
    weft::net::raise_descriptor_limit().unwrap_or(0)
}

fn memcached_vs_memcaslap(
    args: &Options,
    exe: &Path,
    mc: &Path,
    slap: &Path,
    work: &Path,
    interrupted: &AtomicBool,
) -> anyhow::Result<()> {
    let (mut server, port) = start_memcached(mc, work)?;
    let load_cpu = process::server_and_load_cpus().1;
    let limit = Duration::from_secs_f64(args.duration + 60.0);
    let (mut slap_rates, mut weft_rates) = (Vec::new(), Vec::new());
    // Each pair runs back to back between two probes of the host's vCPU placement, which on
    // this VM moves either generator's rate by far more than 10 % (see `core_probe`).
    let mut pairs: Vec<(&'static str, f64)> = Vec::new();
    for _ in 0..args.runs {
        let before = core_probe::round_trip_ns(0, 1);
        // memcaslap's default mix is 9 gets : 1 set; -X fixes the value size.
        let out = process::run_to_end(
            slap,
            &[
                "-s".into(),
                format!("127.0.0.1:{port}"),
                "-T".into(),
                "1".into(),
                "-c".into(),
                args.connections.to_string(),
                "-t".into(),
                format!("{}s", args.duration.ceil()),
                "-X".into(),
                "200".into(),
            ],
            load_cpu,
            interrupted,
            limit,
        )?;
        let tps = out
            .split_whitespace()
            .skip_while(|w| *w != "TPS:")
            .nth(1)
            .and_then(|v| v.parse::<f64>().ok())
            .with_context(|| format!("no TPS in memcaslap's output: {out}"))?;
        let report = weft_memcached(exe, port, args, 0.0, load_cpu, interrupted)?;
        let after = core_probe::round_trip_ns(0, 1);
        slap_rates.push(tps);
        weft_rates.push(report.actual_qps);
        pairs.push((
            core_probe::placement(&[before, after]),
            (report.actual_qps - tps) / tps * 100.0,
        ));
    }
    server.stop();
    report_pair(
        args,
        "memcached_closed_loop",
        "memcaslap",
        &mut slap_rates,
        "weft load memcached",
        &mut weft_rates,
    );
    report_pairs_by_placement(args, "memcached_closed_loop", &pairs);
    Ok(())
}

/// The median difference of the pairs run within one host placement ("near" or "far"): the
/// like-for-like figure when the host moved the vCPUs during the series.
fn report_pairs_by_placement(args: &Options, name: &str, pairs: &[(&'static str, f64)]) {
    for kind in ["near", "far"] {
        let mut diffs: Vec<f64> = pairs
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|&(_, d)| d)
            .collect();
        if diffs.is_empty() {
            continue;
        }
        let n = diffs.len();
        let (median_pct, min_pct, max_pct) = crate::stats::median_min_max(&mut diffs);
        if args.json {
            println!(
                "{{\"comparison\":\"{name}_pairs\",\"placement\":\"{kind}\",\"pairs\":{n},\"difference_pct\":{median_pct:.1},\"min_pct\":{min_pct:.1},\"max_pct\":{max_pct:.1}}}"
            );
        } else {
            println!(
                "{name}: {n} pair(s) run in the {kind} placement: difference {median_pct:+.1}% (median; {min_pct:+.1}% to {max_pct:+.1}%)"
            );
        }
    }
    let mixed = pairs
        .iter()
        .filter(|(k, _)| !matches!(*k, "near" | "far"))
        .count();
    if mixed > 0 && !args.json {
        println!("{name}: {mixed} pair(s) saw the host move the vCPUs (or could not probe): not in the per-placement figures");
    }
}

fn weft_memcached(
    exe: &Path,
    port: u16,
    args: &Options,
    qps: f64,
    cpu: Option<usize>,
    interrupted: &AtomicBool,
) -> anyhow::Result<weft_load::memcached::Report> {
    let load = MemcachedLoad {
        port,
        connections: args.connections,
        qps,
        depth: 1,
        protocol: Protocol::Classic,
        write_per_request: false,
        update_ratio: 0.1,
        value_size: "fixed:200",
        keys: 10_000,
        duration_s: args.duration.ceil(),
        warmup_s: 0.5,
    };
    memcached_report(exe, &load, cpu, interrupted)
}

/// One `weft load memcached` run against 127.0.0.1:`port`.
pub struct MemcachedLoad<'a> {
    pub port: u16,
    pub connections: usize,
    /// 0 = closed loop.
    pub qps: f64,
    pub depth: usize,
    /// Classic or meta requests (`weft load memcached --protocol`).
    pub protocol: Protocol,
    /// One write per request even when several are due (`--write-per-request`).
    pub write_per_request: bool,
    pub update_ratio: f64,
    pub value_size: &'a str,
    /// Distinct keys, all preloaded (the server answers them too).
    pub keys: u64,
    pub duration_s: f64,
    pub warmup_s: f64,
}

impl MemcachedLoad<'_> {
    /// Replies the server sent in the run: preload, warm-up and measured window.
    pub fn served(&self, report: &weft_load::memcached::Report) -> f64 {
        report.actual_qps * (report.duration_s + self.warmup_s) + self.keys as f64
    }
}

/// Runs `exe load memcached ... --json` pinned to `cpu` and parses its report. The open-loop
/// dispatcher sleeps between arrivals (`--spin-us 0`) so the generator's CPU per request
/// means what it did before it learnt to poll; [`memcached_report_polling`] lets it poll.
pub fn memcached_report(
    exe: &Path,
    load: &MemcachedLoad<'_>,
    cpu: Option<usize>,
    interrupted: &AtomicBool,
) -> anyhow::Result<weft_load::memcached::Report> {
    memcached_report_spin(exe, load, cpu, interrupted, 0)
}

/// [`memcached_report`] with the generator's default polling (for latency, not CPU).
pub fn memcached_report_polling(
    exe: &Path,
    load: &MemcachedLoad<'_>,
    cpu: Option<usize>,
    interrupted: &AtomicBool,
) -> anyhow::Result<weft_load::memcached::Report> {
    memcached_report_spin(exe, load, cpu, interrupted, 100)
}

fn memcached_report_spin(
    exe: &Path,
    load: &MemcachedLoad<'_>,
    cpu: Option<usize>,
    interrupted: &AtomicBool,
    spin_us: u64,
) -> anyhow::Result<weft_load::memcached::Report> {
    let mut args: Vec<String> = vec![
        "load".into(),
        "memcached".into(),
        "--spin-us".into(),
        spin_us.to_string(),
    ];
    for (flag, value) in [
        ("--server", format!("127.0.0.1:{}", load.port)),
        ("--connections", load.connections.to_string()),
        ("--qps", load.qps.to_string()),
        ("--depth", load.depth.to_string()),
        ("--protocol", load.protocol.as_str().to_string()),
        ("--update-ratio", load.update_ratio.to_string()),
        ("--value-size", load.value_size.to_string()),
        ("--keys", load.keys.to_string()),
        ("--duration", load.duration_s.to_string()),
        ("--warmup", load.warmup_s.to_string()),
    ] {
        args.extend([flag.to_string(), value]);
    }
    if load.write_per_request {
        args.push("--write-per-request".into());
    }
    args.push("--json".into());
    let limit = Duration::from_secs_f64(load.duration_s + load.warmup_s + 60.0);
    let out = process::run_to_end(exe, &args, cpu, interrupted, limit)?;
    serde_json::from_str(out.trim()).context("parsing the load generator's report")
}

/// Generator CPU per request vs memcached's CPU per request, same run, same load, after what a
/// wake-up costs on the load CPU (the floor under the generator's figure at low rates).
fn generator_cpu(
    args: &Options,
    exe: &Path,
    mc: &Path,
    work: &Path,
    interrupted: &AtomicBool,
) -> anyhow::Result<()> {
    let (server_core, load_cpu) = process::server_and_load_cpus();
    match crate::wake_cost::measure(load_cpu.unwrap_or(1), server_core.unwrap_or(0)) {
        Ok(cost) if args.json => {
            let mut line = serde_json::to_value(cost)?;
            line["comparison"] = "wake_cost".into();
            println!("{line}");
        }
        Ok(cost) => println!(
            "one wake-up on the load CPU costs {:.1} us of CPU by timer ({:.1} us late), {:.1} us when another CPU wakes it",
            cost.timer_wake_cpu_us, cost.timer_wake_late_us, cost.remote_wake_cpu_us
        ),
        Err(e) => println!("skipped: wake-up cost probe: {e}"),
    }
    for &qps in &args.cpu_rates {
        let (mut server, port) = start_memcached(mc, work)?;
        let pid = server.pid();
        let before = crate::echo::cpu::process_cpu_seconds(pid)?;
        let sleeps_before = crate::echo::cpu::process_sleeps(pid)?;
        let report = weft_memcached(exe, port, args, qps, load_cpu, interrupted)?;
        let server_cpu = crate::echo::cpu::process_cpu_seconds(pid)? - before;
        let server_sleeps = crate::echo::cpu::process_sleeps(pid)? - sleeps_before;
        server.stop();
        // The server served warm-up and preload too; count every reply it sent.
        let served = report.actual_qps * (report.duration_s + 0.5) + 10_000.0;
        let server_us = server_cpu * 1e6 / served.max(1.0);
        let server_sleeps = server_sleeps as f64 / served.max(1.0);
        let generator_sleeps = report.generator_sleeps_per_request;
        let ratio = report.generator_cpu_us_per_request / server_us.max(1e-9);
        // Share of its core memcached kept busy while the generator measured.
        let server_busy = server_us * report.actual_qps / 1e6;
        let load = if qps > 0.0 {
            format!("{qps:.0} QPS")
        } else {
            "closed loop".to_owned()
        };
        if args.json {
            println!(
                "{{\"comparison\":\"generator_cpu\",\"qps\":{qps},\"actual_qps\":{:.0},\"generator_cpu_us_per_request\":{:.2},\"memcached_cpu_us_per_request\":{server_us:.2},\"ratio\":{ratio:.2},\"generator_busy\":{:.2},\"memcached_busy\":{server_busy:.2},\"generator_sleeps_per_request\":{generator_sleeps:.2},\"memcached_sleeps_per_request\":{server_sleeps:.2}}}",
                report.actual_qps, report.generator_cpu_us_per_request, report.generator_utilisation
            );
        } else {
            println!(
                "CPU per request at {load} (actual {:.0}): generator {:.2} us, memcached {server_us:.2} us, ratio {ratio:.2}; busy: generator {:.2}, memcached {server_busy:.2}; sleeps per request: generator {generator_sleeps:.2}, memcached {server_sleeps:.2}",
                report.actual_qps, report.generator_cpu_us_per_request, report.generator_utilisation
            );
        }
    }
    Ok(())
}

fn report_pair(
    args: &Options,
    name: &str,
    reference: &str,
    reference_rates: &mut [f64],
    ours: &str,
    our_rates: &mut [f64],
) {
    let r = crate::stats::median(reference_rates);
    let o = crate::stats::median(our_rates);
    let diff_pct = (o - r) / r * 100.0;
    if args.json {
        println!(
            "{{\"comparison\":\"{name}\",\"reference\":\"{reference}\",\"reference_per_sec\":{r:.0},\"weft_per_sec\":{o:.0},\"difference_pct\":{diff_pct:.1},\"runs\":{}}}",
            reference_rates.len()
        );
    } else {
        println!(
            "{name}: {reference} {r:.0}/s, {ours} {o:.0}/s, difference {diff_pct:+.1}% (median of {})",
            reference_rates.len()
        );
    }
}

/// The open-loop cross-check (issue 21 item 2): `weft load memcached` and the independent C
/// generator (benches/openloop/openloop.c, built here with cc) against the same memcached
/// -t 1, at `--open-loop-connections` and `--open-loop-qps`, alternating, `--runs` each;
/// prints p50 / p99 / p999 min–median–max for both and the ratio of the median p99s.
fn open_loop_vs_openloop_c(
    args: &Options,
    exe: &Path,
    mc: &Path,
    work: &Path,
    interrupted: &AtomicBool,
) -> anyhow::Result<()> {
    if args.open_loop_connections == 0 {
        return Ok(());
    }
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../benches/openloop/openloop.c");
    let binary = work.join("openloop");
    let built = std::process::Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&binary)
        .arg(&source)
        .args(["-lpthread", "-lm"])
        .status();
    if !matches!(built, Ok(s) if s.success()) {
        println!(
            "skipped: the open-loop cross-check needs cc and {} (a source checkout)",
            source.display()
        );
        return Ok(());
    }
    weft_load::limits::reserve_descriptors(args.open_loop_connections as u64 + 64)?;
    let conns = args.open_loop_connections.to_string();
    // -c: room for every connection (memcached_flags' connection limit).
    let port2 = process::free_port()?;
    let mc_args = process::memcached_flags(&port2.to_string(), 1024, 20_000);
    let mut server = Running::start(
        "memcached-open-loop",
        mc,
        &mc_args,
        process::server_and_load_cpus().0,
        work.join("memcached-open-loop.log"),
    )?;
    server.wait_for_port(([127, 0, 0, 1], port2).into(), Duration::from_secs(10))?;
    let load_cpu = process::server_and_load_cpus().1;
    let limit = Duration::from_secs_f64(args.duration + 120.0);
    let (mut c_p, mut w_p) = ([vec![], vec![], vec![]], [vec![], vec![], vec![]]);
    for _ in 0..args.runs {
        let out = process::run_to_end(
            &binary,
            &[
                "--proto".into(),
                "mc".into(),
                "--server".into(),
                format!("127.0.0.1:{port2}"),
                "--connections".into(),
                conns.clone(),
                "--qps".into(),
                args.open_loop_qps.to_string(),
                "--duration".into(),
                args.duration.ceil().to_string(),
                "--warmup".into(),
                "2".into(),
                "--value-size".into(),
                "200".into(),
            ],
            load_cpu,
            interrupted,
            limit,
        )?;
        let v: serde_json::Value = serde_json::from_str(out.trim().lines().last().unwrap_or(""))
            .with_context(|| format!("parsing openloop's output: {out}"))?;
        for (i, key) in ["p50_us", "p99_us", "p999_us"].into_iter().enumerate() {
            c_p[i].push(v[key].as_f64().unwrap_or(f64::NAN));
        }
        let load = MemcachedLoad {
            port: port2,
            connections: args.open_loop_connections,
            qps: args.open_loop_qps,
            depth: 1,
            protocol: Protocol::Classic,
            write_per_request: false,
            update_ratio: 0.03,
            value_size: "fixed:200",
            keys: 10_000,
            duration_s: args.duration.ceil(),
            warmup_s: 2.0,
        };
        let r = memcached_report_polling(exe, &load, load_cpu, interrupted)?;
        for (i, x) in [r.latency_us.p50, r.latency_us.p99, r.latency_us.p999]
            .into_iter()
            .enumerate()
        {
            w_p[i].push(x as f64);
        }
    }
    server.stop();
    let mmm = |v: &mut Vec<f64>| crate::stats::median_min_max(v);
    let fmt = |(med, lo, hi): (f64, f64, f64)| {
        format!("{:.2}–{:.2}–{:.2}", lo / 1000.0, med / 1000.0, hi / 1000.0)
    };
    let (c99, w99) = (mmm(&mut c_p[1]), mmm(&mut w_p[1]));
    let ratio = w99.0 / c99.0;
    if args.json {
        println!(
            "{{\"comparison\":\"memcached_open_loop\",\"connections\":{},\"qps\":{},\"openloop_p99_us\":{:.0},\"weft_p99_us\":{:.0},\"p99_ratio\":{ratio:.2},\"runs\":{}}}",
            args.open_loop_connections, args.open_loop_qps, c99.0, w99.0, args.runs
        );
    } else {
        println!(
            "memcached_open_loop ({} connections, {:.0} req/s, ms min–median–max of {}):",
            args.open_loop_connections, args.open_loop_qps, args.runs
        );
        for (name, p) in [("openloop.c", &mut c_p), ("weft load memcached", &mut w_p)] {
            println!(
                "  {name:<20} p50 {}  p99 {}  p999 {}",
                fmt(mmm(&mut p[0])),
                fmt(mmm(&mut p[1])),
                fmt(mmm(&mut p[2]))
            );
        }
        println!(
            "  weft's median p99 / openloop.c's: {ratio:.2} (within 2x: {})",
            ratio <= 2.0
        );
    }
    Ok(())
}
