//! `weft experiment threads`: fibers against OS threads, the Eta report's experiment. The
//! same server code — `weft http` and `weft memcached` — runs once with a fiber per
//! connection and once with `--threads-per-connection` (an OS thread per connection), under
//! a closed-loop load at each connection count (default 100 and 1,000, the Eta report's
//! `weighttp -c 1000`), in alternating rounds so drift on the machine hits both modes alike.
//!
//! Per point: requests/s and p99 from the project's generators (`weft load http --rate 0`,
//! keep-alive, one 4 KiB file; `weft load memcached --qps 0`, 3 % sets, 10,000 keys of 200
//! bytes), and memory per connection: the server's peak resident set during the measured
//! load minus its resident set after a one-connection priming run (which preloads the
//! cache's keys and the file), divided by the connections. Resident memory counts the
//! touched stack pages, buffers and heap of each connection; it does not count what the
//! kernel keeps per thread (task struct, kernel stack) or per socket, and the plot says so.
//!
//! Invariants: each server is a [`Running`] guard on the server CPU (its connection threads
//! inherit the pinning), each load run a child on the load CPU; every point records the
//! peak thread count of the server, so a threads-mode point with fewer threads than
//! connections shows the mode did not do what it says.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;

use super::plot::{self, Axes, Panel, Series, Unit};
use crate::process::{self, proc_status_field, Running};
use crate::stats::median_min_max;

/// The two modes compared.
pub const MODES: [&str; 2] = ["fibers", "threads"];
/// The two servers.
pub const SERVERS: [&str; 2] = ["http", "memcached"];
/// Size of the one file the HTTP load asks for.
const FILE_BYTES: usize = 4096;

/// What the memory panels measure, for the report.
const MEMORY_NOTE: &str = "memory per connection is the server's peak resident set during the \
    load minus its resident set after a one-connection priming run, divided by the \
    connections: user-space memory only, not what the kernel keeps per thread or per socket";

/// How to run it.
#[derive(Debug, Clone)]
pub struct Settings {
    pub out: PathBuf,
    pub weft_exe: PathBuf,
    /// Rounds; each round runs every (server, connections) in both modes, the mode order
    /// flipping every round.
    pub rounds: usize,
    pub connections: Vec<usize>,
    /// Seconds measured per point, after `warmup`.
    pub duration: f64,
    pub warmup: f64,
}

/// One measured point (a line of `threads.jsonl`).
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    pub experiment: &'static str,
    pub server: &'static str,
    pub mode: &'static str,
    pub connections: usize,
    pub round: usize,
    pub requests_per_sec: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub errors: u64,
    pub generator_saturated: bool,
    pub rss_primed_kib: u64,
    pub rss_peak_kib: u64,
    /// (peak − primed) / connections.
    pub memory_per_connection_kib: f64,
    /// The server's most threads at once during the load.
    pub peak_threads: u64,
}

/// Runs the rounds into `out` and writes threads.jsonl, threads.svg and threads-summary.md.
pub fn run(
    out: &Path,
    rounds: usize,
    connections: Vec<usize>,
    duration: f64,
    warmup: f64,
) -> anyhow::Result<()> {
    anyhow::ensure!(rounds >= 1, "--runs must be at least 1");
    anyhow::ensure!(
        !connections.is_empty() && connections.iter().all(|&c| c > 0),
        "--thread-connections needs at least one count above 0"
    );
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let settings = Settings {
        out: std::path::absolute(out)?,
        weft_exe: std::env::current_exe().context("finding the weft executable")?,
        rounds,
        connections,
        duration,
        warmup,
    };
    let started = Instant::now();
    let interrupted = crate::process::interrupt_flag()?;
    let mut records = Vec::new();
    let outcome = run_rounds(&settings, &interrupted, &mut records);
    if !records.is_empty() {
        let svg = plot(&settings.out, &records)?;
        let table = summary(&records);
        let md = settings.out.join("threads-summary.md");
        std::fs::write(&md, &table).with_context(|| format!("writing {}", md.display()))?;
        println!("{table}");
        let info = super::output::RunInfo {
            command: std::env::args().collect::<Vec<_>>().join(" "),
            seconds: started.elapsed().as_secs_f64(),
            notes: vec![MEMORY_NOTE.into()],
            settings: format!(
                "{} round(s), connections {:?}, {} s measured after {} s of warm-up; closed \
                 loop: `weft load http --rate 0` (keep-alive, one {FILE_BYTES}-byte file), \
                 `weft load memcached --qps 0` (3 % sets)",
                settings.rounds, settings.connections, settings.duration, settings.warmup
            ),
            design: "weft http and weft memcached run on CPU 0, once with a fiber per \
                     connection and once with an OS thread per connection \
                     (--threads-per-connection), a fresh server each point; the load \
                     generator runs on CPU 1. Each round measures every server and connection \
                     count in both modes one right after the other, the mode that goes first \
                     alternating from round to round. The runs of a point are these rounds."
                .into(),
            raw: vec!["threads.jsonl".into(), "threads-summary.md".into()],
        };
        let report = super::output::write_report_with(
            &settings.out,
            records.len(),
            &table,
            std::slice::from_ref(&svg),
            &info,
        )?;
        let files = [report, settings.out.join("threads.jsonl"), svg, md];
        super::output::print_written(records.len(), started, &files);
    }
    outcome
}

/// Runs every round; appends each record to OUT/threads.jsonl as it is measured and returns
/// them (also when interrupted: the error says so and the records so far are kept).
pub fn run_rounds(
    settings: &Settings,
    interrupted: &AtomicBool,
    records: &mut Vec<Record>,
) -> anyhow::Result<()> {
    let logs = settings.out.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let root = settings.out.join("threads-root");
    std::fs::create_dir_all(&root)?;
    std::fs::write(root.join("4k.html"), vec![b'x'; FILE_BYTES])?;
    let urls = settings.out.join("threads-urls.txt");
    std::fs::write(&urls, "/4k.html\n")?;
    let jsonl = settings.out.join("threads.jsonl");
    let mut sink =
        std::fs::File::create(&jsonl).with_context(|| format!("creating {}", jsonl.display()))?;
    let (server_cpu, load_cpu) = process::server_and_load_cpus();
    for round in 1..=settings.rounds {
        for server in SERVERS {
            for &connections in &settings.connections {
                // Both modes one after the other, who goes first alternating by round.
                for mode in super::server_order(MODES.len(), round - 1)
                    .into_iter()
                    .map(|i| MODES[i])
                {
                    if interrupted.load(Ordering::Relaxed) {
                        bail!("interrupted");
                    }
                    let point = Point {
                        settings,
                        server,
                        mode,
                        connections,
                        round,
                        root: &root,
                        urls: &urls,
                        logs: &logs,
                        cpus: (server_cpu, load_cpu),
                    };
                    let record = point.measure(interrupted)?;
                    eprintln!(
                        "round {round} {server} {mode} c={connections}: {:.0} req/s, p99 {} us, \
                         {:.1} KiB/conn, {} threads",
                        record.requests_per_sec,
                        record.p99_us,
                        record.memory_per_connection_kib,
                        record.peak_threads
                    );
                    writeln!(sink, "{}", serde_json::to_string(&record)?)?;
                    records.push(record);
                    // TIME-WAIT sockets and queues drain between points.
                    std::thread::sleep(Duration::from_millis(500));
                }
            }
        }
    }
    Ok(())
}

/// One (server, mode, connections, round).
struct Point<'a> {
    settings: &'a Settings,
    server: &'static str,
    mode: &'static str,
    connections: usize,
    round: usize,
    root: &'a Path,
    urls: &'a Path,
    logs: &'a Path,
    cpus: (Option<usize>, Option<usize>),
}

impl Point<'_> {
    fn measure(&self, interrupted: &AtomicBool) -> anyhow::Result<Record> {
        let port = process::free_port()?;
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let mut args: Vec<String> = match self.server {
            "http" => super::weft_http_args(&self.root.display().to_string(), &addr.to_string()),
            _ => {
                let mut a = vec!["memcached".to_string()];
                a.extend(process::memcached_flags(&port.to_string(), 1024, 20000));
                a
            }
        };
        if self.mode == "threads" {
            args.push("--threads-per-connection".into());
        }
        let log = self
            .logs
            .join(format!("threads-{}-{}.log", self.server, self.mode));
        let mut running = Running::start(
            &format!("weft {} ({})", self.server, self.mode),
            &self.settings.weft_exe,
            &args,
            self.cpus.0,
            log,
        )?;
        running.wait_for_port(addr, Duration::from_secs(10))?;
        // Priming: the cache's keys stored, the file opened and cached, one connection.
        self.load(addr, 1, 0.5, 0.0, true, interrupted)?;
        std::thread::sleep(Duration::from_millis(200));
        let pid = running.pid();
        let primed = proc_status_field(pid, "VmRSS").context("reading the server's VmRSS")?;
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let (mut rss, mut threads) = (0, 0);
                while !stop.load(Ordering::Relaxed) {
                    rss = rss.max(proc_status_field(pid, "VmRSS").unwrap_or(0));
                    threads = threads.max(proc_status_field(pid, "Threads").unwrap_or(0));
                    std::thread::sleep(Duration::from_millis(50));
                }
                (rss, threads)
            })
        };
        let s = self.settings;
        let measured = self.load(
            addr,
            self.connections,
            s.duration,
            s.warmup,
            false,
            interrupted,
        );
        stop.store(true, Ordering::Relaxed);
        let (peak, peak_threads) = sampler.join().expect("the sampler does not panic");
        running.stop();
        let m = measured?;
        Ok(Record {
            experiment: "threads",
            server: self.server,
            mode: self.mode,
            connections: self.connections,
            round: self.round,
            requests_per_sec: m.rate,
            p50_us: m.p50_us,
            p99_us: m.p99_us,
            errors: m.errors,
            generator_saturated: m.saturated,
            rss_primed_kib: primed,
            rss_peak_kib: peak,
            memory_per_connection_kib: peak.saturating_sub(primed) as f64 / self.connections as f64,
            peak_threads,
        })
    }

    /// One closed-loop run of the server's generator; `prime` also stores the cache's keys.
    fn load(
        &self,
        addr: SocketAddr,
        connections: usize,
        duration: f64,
        warmup: f64,
        prime: bool,
        interrupted: &AtomicBool,
    ) -> anyhow::Result<Measured> {
        let mut args: Vec<String> = vec!["load".into(), self.server.into()];
        args.extend([
            "--server".into(),
            addr.to_string(),
            "--connections".into(),
            connections.to_string(),
            "--duration".into(),
            duration.to_string(),
            "--warmup".into(),
            warmup.to_string(),
            "--seed".into(),
            self.round.to_string(),
            "--json".into(),
        ]);
        if self.server == "http" {
            args.extend(["--urls".into(), self.urls.display().to_string()]);
            args.extend(["--rate", "0", "--timeout", "5"].map(String::from));
        } else {
            args.extend(["--qps", "0", "--timeout", "5"].map(String::from));
            if !prime {
                args.push("--no-preload".into());
            }
        }
        let limit = Duration::from_secs_f64(duration + warmup + 60.0);
        let out = process::run_to_end(
            &self.settings.weft_exe,
            &args,
            self.cpus.1,
            interrupted,
            limit,
        )?;
        let text = out.trim();
        let context = || format!("parsing the load generator's output `{text}`");
        Ok(if self.server == "http" {
            let r: weft_load::http::Report = serde_json::from_str(text).with_context(context)?;
            Measured {
                rate: r.replies_per_sec,
                p50_us: r.latency_us.p50,
                p99_us: r.latency_us.p99,
                errors: r.errors_total,
                saturated: r.generator_saturated,
            }
        } else {
            let r: weft_load::memcached::Report =
                serde_json::from_str(text).with_context(context)?;
            Measured {
                rate: r.actual_qps,
                p50_us: r.latency_us.p50,
                p99_us: r.latency_us.p99,
                errors: r.errors + r.timeouts,
                saturated: r.generator_saturated,
            }
        })
    }
}

struct Measured {
    rate: f64,
    p50_us: u64,
    p99_us: u64,
    errors: u64,
    saturated: bool,
}

/// A plotted measure: panel name, y axis, its unit, log scale, the value.
type Measure = (&'static str, &'static str, Unit, bool, fn(&Record) -> f64);

/// Draws OUT/threads.svg: for each server, requests/s, p99 and memory per connection against
/// the connection count, one line per mode (median of the rounds in a min–max band).
pub fn plot(out: &Path, records: &[Record]) -> anyhow::Result<PathBuf> {
    let path = out.join("threads.svg");
    let measures: [Measure; 3] = [
        (
            "throughput",
            "throughput (req/s)",
            Unit::Count,
            false,
            |r| r.requests_per_sec,
        ),
        (
            "p99 latency",
            "p99 latency (log scale)",
            Unit::Micros,
            true,
            |r| r.p99_us as f64,
        ),
        (
            "memory per connection",
            "resident memory per connection (KiB, user space)",
            Unit::Count,
            false,
            |r| r.memory_per_connection_kib,
        ),
    ];
    let mut panels = Vec::new();
    for server in SERVERS {
        for (name, y, y_unit, log_y, f) in measures {
            let series = MODES
                .iter()
                .map(|&mode| Series {
                    name: mode.to_string(),
                    points: medians(records, server, mode, f),
                })
                .filter(|s| !s.points.is_empty())
                .collect();
            panels.push((
                Panel {
                    title: format!("weft {server}: {name}"),
                    series,
                },
                Axes {
                    x: "concurrent connections",
                    y,
                    y_unit,
                    log_y,
                },
            ));
        }
    }
    plot::draw_each(
        &path,
        "One fiber vs one OS thread per connection (same server code, closed loop)",
        &panels,
    )?;
    Ok(path)
}

/// (connections, median, min, max) of `f` over the rounds, in connection order.
fn medians(
    records: &[Record],
    server: &str,
    mode: &str,
    f: fn(&Record) -> f64,
) -> Vec<(f64, f64, f64, f64)> {
    let mut counts: Vec<usize> = records
        .iter()
        .filter(|r| r.server == server && r.mode == mode)
        .map(|r| r.connections)
        .collect();
    counts.sort_unstable();
    counts.dedup();
    counts
        .into_iter()
        .map(|c| {
            let mut v: Vec<f64> = records
                .iter()
                .filter(|r| r.server == server && r.mode == mode && r.connections == c)
                .map(f)
                .collect();
            let (med, lo, hi) = median_min_max(&mut v);
            (c as f64, med, lo, hi)
        })
        .collect()
}

/// A table of min–median–max per (server, connections, mode), for the terminal and notes.
pub fn summary(records: &[Record]) -> String {
    let mut s = String::from(
        "| server | connections | mode | req/s min–median–max | p99 ms min–median–max | KiB/conn min–median–max | peak threads |\n|---|---:|---|---|---|---|---:|\n",
    );
    let fmt = |(m, lo, hi): (f64, f64, f64), d: usize| format!("{lo:.d$}–{m:.d$}–{hi:.d$}");
    for server in SERVERS {
        let mut counts: Vec<usize> = records.iter().map(|r| r.connections).collect();
        counts.sort_unstable();
        counts.dedup();
        for c in counts {
            for mode in MODES {
                let these: Vec<&Record> = records
                    .iter()
                    .filter(|r| r.server == server && r.mode == mode && r.connections == c)
                    .collect();
                if these.is_empty() {
                    continue;
                }
                let stat = |f: fn(&Record) -> f64| {
                    let mut v: Vec<f64> = these.iter().map(|r| f(r)).collect();
                    median_min_max(&mut v)
                };
                let threads = these.iter().map(|r| r.peak_threads).max().unwrap_or(0);
                s.push_str(&format!(
                    "| {server} | {c} | {mode} | {} | {} | {} | {threads} |\n",
                    fmt(stat(|r| r.requests_per_sec), 0),
                    fmt(stat(|r| r.p99_us as f64 / 1e3), 1),
                    fmt(stat(|r| r.memory_per_connection_kib), 1),
                ));
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::status_field;

    fn record(mode: &'static str, connections: usize, round: usize, rps: f64) -> Record {
        Record {
            experiment: "threads",
            server: "http",
            mode,
            connections,
            round,
            requests_per_sec: rps,
            p50_us: 100,
            p99_us: 2000,
            errors: 0,
            generator_saturated: false,
            rss_primed_kib: 1000,
            rss_peak_kib: 3000,
            memory_per_connection_kib: 2000.0 / connections as f64,
            peak_threads: 3,
        }
    }

    #[test]
    fn status_fields_parse_and_medians_group_by_mode_and_connections() {
        let status = "Name:\tweft\nVmRSS:\t   12345 kB\nThreads:\t1003\n";
        assert_eq!(status_field(status, "VmRSS"), Some(12345));
        assert_eq!(status_field(status, "Threads"), Some(1003));
        assert_eq!(status_field(status, "VmSwap"), None);
        let records = vec![
            record("fibers", 1000, 1, 30.0),
            record("fibers", 1000, 2, 10.0),
            record("fibers", 1000, 3, 20.0),
            record("threads", 1000, 1, 5.0),
            record("fibers", 100, 1, 7.0),
        ];
        let m = medians(&records, "http", "fibers", |r| r.requests_per_sec);
        assert_eq!(m, vec![(100.0, 7.0, 7.0, 7.0), (1000.0, 20.0, 10.0, 30.0)]);
        let table = summary(&records);
        assert!(
            table.contains("| http | 1000 | fibers | 10–20–30 |"),
            "{table}"
        );
        assert!(
            table.contains("| http | 1000 | threads | 5–5–5 |"),
            "{table}"
        );
        let dir = std::env::temp_dir().join(format!("weft-threads-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let svg = std::fs::read_to_string(plot(&dir, &records).unwrap()).unwrap();
        assert!(svg.contains("weft http: throughput") && svg.contains("threads"));
        assert!(
            svg.contains("throughput (req/s)") && svg.contains("2 ms"),
            "{svg}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
