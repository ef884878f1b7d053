//! `weft bench memory`: does `-m` hold? `weft memcached -m M -t T` and the real
//! `memcached -m M -t T` (each `T` of `--threads`), alternating (`--rounds` times, the order
//! swapped every round), each pinned to CPU 0 and driven from CPU 1 by
//! a write-heavy `weft load memcached` of random value sizes (by default 90% sets of
//! 100–50,000 bytes over 200,000 keys, closed loop: far more data than fits). The server's
//! VmRSS is sampled from /proc/PID/status every `--interval-ms`; printed per server: RSS
//! idle (the fixed overhead: binary, stacks, rings, empty tables), peak and final RSS, the
//! peak's growth over idle as a multiple of `-m`, items held at the end and throughput, each
//! as min–median–max over the rounds.
//!
//! The target: weft's peak RSS ≤ 1.15 × m + its idle RSS.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::process::{self, Running};
use anyhow::{bail, Context};

use crate::generators::{memcached_report, MemcachedLoad};
use weft_load::memcached::request::Protocol;

/// The bound on RSS growth per byte of `-m`.
const TARGET_RATIO: f64 = 1.15;
const MIB: f64 = 1024.0 * 1024.0;

#[derive(Debug, Clone)]
pub struct Options {
    /// `-m` for both servers, in megabytes.
    pub memory_mb: u32,
    /// Seconds of measured load (after preloading every key and a 1 s warm-up).
    pub duration: f64,
    /// Distinct keys.
    pub keys: u64,
    /// Value sizes of the sets (as `weft load memcached --value-size`).
    pub value_size: String,
    /// Share of sets.
    pub update_ratio: f64,
    /// Client connections.
    pub connections: usize,
    /// How often VmRSS is sampled, in milliseconds.
    pub interval_ms: u64,
    /// The peer [default: memcached on PATH; skipped with a note when there is none].
    pub memcached: Option<PathBuf>,
    /// `-t` for both servers; a comma-separated list measures each.
    pub threads: Vec<u32>,
    /// Runs of each server per `-t` (alternating between the servers).
    pub rounds: usize,
}

/// What one server's run showed.
#[derive(Debug)]
struct Figures {
    idle_kib: u64,
    peak_kib: u64,
    final_kib: u64,
    items: u64,
    evictions: u64,
    qps: f64,
}

impl Figures {
    /// Peak growth over idle, per byte of `-m`.
    fn ratio(&self, memory_mb: u32) -> f64 {
        (self.peak_kib.saturating_sub(self.idle_kib)) as f64 * 1024.0 / (f64::from(memory_mb) * MIB)
    }
}

pub fn run(args: &Options) -> anyhow::Result<()> {
    if args.duration <= 0.0 || args.connections == 0 || args.interval_ms == 0 {
        bail!("--duration, --connections and --interval-ms must be > 0");
    }
    if args.memory_mb == 0 {
        bail!("--memory-mb must be at least 1");
    }
    let exe = std::env::current_exe().context("finding the weft executable")?;
    let memcached = args
        .memcached
        .clone()
        .or_else(|| process::find_program("memcached"));
    let work = std::env::temp_dir().join(format!("weft-bench-memory-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let interrupted = crate::process::interrupt_flag()?;
    let result = compare(args, &exe, memcached.as_deref(), &work, &interrupted);
    let _ = std::fs::remove_dir_all(&work);
    result
}

fn compare(
    args: &Options,
    exe: &Path,
    memcached: Option<&Path>,
    work: &Path,
    interrupted: &AtomicBool,
) -> anyhow::Result<()> {
    if args.rounds == 0 || args.threads.contains(&0) {
        bail!("--rounds and --threads must be > 0");
    }
    println!(
        "RSS under a write-heavy load: -m {}, {}: {} \
         connections, {:.0}% sets of {}, {} keys, {} s closed loop, VmRSS every {} ms, \
         {} round(s) alternating",
        args.memory_mb,
        process::placement(),
        args.connections,
        args.update_ratio * 100.0,
        args.value_size,
        args.keys,
        args.duration,
        args.interval_ms,
        args.rounds
    );
    if memcached.is_none() {
        println!("note: memcached is not installed (apt-get install memcached): weft only");
    }
    let weft_prefix = ["memcached".to_owned()];
    for &threads in &args.threads {
        let mut weft = Vec::new();
        let mut peer = Vec::new();
        for round in 0..args.rounds {
            let weft_first = round % 2 == 0;
            for turn in 0..2 {
                if (turn == 0) == weft_first {
                    weft.push(measure(
                        args,
                        exe,
                        "weft",
                        exe,
                        &weft_prefix,
                        threads,
                        work,
                        interrupted,
                    )?);
                } else if let Some(mc) = memcached {
                    peer.push(measure(
                        args,
                        exe,
                        "memcached",
                        mc,
                        &[],
                        threads,
                        work,
                        interrupted,
                    )?);
                }
            }
        }
        print_table(args, threads, &weft, &peer);
    }
    Ok(())
}

/// `min–median–max` of `values`, formatted by `f`.
fn spread(values: &[f64], f: impl Fn(f64) -> String) -> String {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => "-".into(),
        1 => f(v[0]),
        n => format!("{}–{}–{}", f(v[0]), f(v[n / 2]), f(v[n - 1])),
    }
}

fn print_table(args: &Options, threads: u32, weft: &[Figures], peer: &[Figures]) {
    println!(
        "-t {threads}, min–median–max over {} run(s) each:",
        weft.len()
    );
    println!(
        "{:<10} {:>14} {:>20} {:>20} {:>20} {:>20} {:>24}",
        "server", "idle MiB", "peak MiB", "final MiB", "(peak-idle)/m", "items", "req/s"
    );
    let mib = |k: u64| k as f64 / 1024.0;
    for (name, runs) in [("weft", weft), ("memcached", peer)] {
        if runs.is_empty() {
            continue;
        }
        let col = |g: &dyn Fn(&Figures) -> f64, f: &dyn Fn(f64) -> String| {
            spread(&runs.iter().map(g).collect::<Vec<_>>(), f)
        };
        println!(
            "{name:<10} {:>14} {:>20} {:>20} {:>20} {:>20} {:>24}",
            col(&|r| mib(r.idle_kib), &|x| format!("{x:.1}")),
            col(&|r| mib(r.peak_kib), &|x| format!("{x:.1}")),
            col(&|r| mib(r.final_kib), &|x| format!("{x:.1}")),
            col(&|r| r.ratio(args.memory_mb), &|x| format!("{x:.3}")),
            col(&|r| r.items as f64, &|x| format!("{x:.0}")),
            col(&|r| r.qps, &|x| format!("{x:.0}")),
        );
        for r in runs {
            println!(
                "  run: idle {:.1} peak {:.1} final {:.1} MiB, items {}, evictions {}, {:.0} req/s",
                mib(r.idle_kib),
                mib(r.peak_kib),
                mib(r.final_kib),
                r.items,
                r.evictions,
                r.qps
            );
        }
    }
    let worst = weft
        .iter()
        .map(|r| r.ratio(args.memory_mb))
        .fold(0.0, f64::max);
    println!(
        "target: weft (peak - idle) <= {TARGET_RATIO} x m: {} (worst run {worst:.3})",
        if worst <= TARGET_RATIO {
            "met"
        } else {
            "NOT met"
        }
    );
}

/// Starts one server, samples its RSS through a full load run (`exe load memcached`), and
/// stops it.
#[allow(clippy::too_many_arguments)] // one run's settings, each used once
fn measure(
    args: &Options,
    exe: &Path,
    name: &str,
    program: &Path,
    prefix: &[String],
    threads: u32,
    work: &Path,
    interrupted: &AtomicBool,
) -> anyhow::Result<Figures> {
    let port = process::free_port()?;
    let mut server_args = prefix.to_vec();
    server_args.extend(process::memcached_flags(
        &port.to_string(),
        args.memory_mb,
        1024,
    ));
    // memcached_flags gives `-t 1`: this benchmark compares at each `--threads`.
    if let Some(t) = server_args.iter().position(|a| a == "-t") {
        server_args[t + 1] = threads.to_string();
    }
    let (server_cpu, load_cpu) = process::server_and_load_cpus();
    let mut server = Running::start(
        name,
        program,
        &server_args,
        server_cpu,
        work.join(format!("{name}.log")),
    )?;
    server.wait_for_port(([127, 0, 0, 1], port).into(), Duration::from_secs(10))?;
    let pid = server.pid();
    std::thread::sleep(Duration::from_millis(300));
    let idle_kib = rss_kib(pid)?;
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        let interval = Duration::from_millis(args.interval_ms);
        std::thread::spawn(move || {
            let mut peak = 0;
            while !stop.load(Ordering::Relaxed) {
                match rss_kib(pid) {
                    Ok(kib) => peak = peak.max(kib),
                    Err(_) => break,
                }
                std::thread::sleep(interval);
            }
            peak
        })
    };
    let load = MemcachedLoad {
        port,
        connections: args.connections,
        qps: 0.0,
        depth: 1,
        protocol: Protocol::Classic,
        write_per_request: false,
        update_ratio: args.update_ratio,
        value_size: &args.value_size,
        keys: args.keys,
        duration_s: args.duration,
        warmup_s: 1.0,
    };
    let report = memcached_report(exe, &load, load_cpu, interrupted);
    stop.store(true, Ordering::Relaxed);
    let sampled_peak = sampler.join().unwrap_or(0);
    let report = report?;
    let final_kib = rss_kib(pid)?;
    let stats = server_stats(port)?;
    let stat = |k: &str| stats.iter().find(|(n, _)| n == k).map_or(0, |(_, v)| *v);
    // VmHWM is the kernel's own high-water mark: it catches a peak between two samples.
    let peak_kib = sampled_peak.max(final_kib).max(hwm_kib(pid).unwrap_or(0));
    server.stop();
    Ok(Figures {
        idle_kib,
        peak_kib,
        final_kib,
        items: stat("curr_items"),
        evictions: stat("evictions"),
        qps: report.actual_qps,
    })
}

fn status_field_kib(pid: u32, field: &str) -> anyhow::Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    crate::process::status_field(&text, field)
        .with_context(|| format!("no {field} in /proc/{pid}/status"))
}

fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    status_field_kib(pid, "VmRSS")
}

fn hwm_kib(pid: u32) -> anyhow::Result<u64> {
    status_field_kib(pid, "VmHWM")
}

/// The numeric lines of `stats`.
fn server_stats(port: u16) -> anyhow::Result<Vec<(String, u64)>> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).context("connecting for stats")?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"stats\r\n")?;
    let mut out = Vec::new();
    for line in BufReader::new(s).lines() {
        let line = line?;
        if line == "END" {
            break;
        }
        let mut parts = line.split(' ');
        if let (Some("STAT"), Some(name), Some(value)) = (parts.next(), parts.next(), parts.next())
        {
            if let Ok(v) = value.parse() {
                out.push((name.to_owned(), v));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields() {
        let text = "Name:\tweft\nVmHWM:\t   82720 kB\nVmRSS:\t    5104 kB\n";
        assert_eq!(crate::process::status_field(text, "VmRSS"), Some(5104));
        assert_eq!(crate::process::status_field(text, "VmHWM"), Some(82720));
        assert_eq!(crate::process::status_field(text, "VmSwap"), None);
    }

    #[test]
    fn ratio_is_growth_over_idle_per_megabyte_of_m() {
        let f = Figures {
            idle_kib: 5 * 1024,
            peak_kib: 5 * 1024 + 64 * 1024,
            final_kib: 0,
            items: 0,
            evictions: 0,
            qps: 0.0,
        };
        assert!((f.ratio(64) - 1.0).abs() < 1e-9);
    }
}
