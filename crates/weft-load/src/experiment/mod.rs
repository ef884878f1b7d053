//! The thesis experiments end to end (`weft experiment`): start each server (weft's and the
//! real memcached / nginx when installed), pin it to one CPU and the load generator to
//! another, sweep target rates, repeat runs, and write raw results (JSON, CSV), SVG plots and
//! a summary table.
//!
//! Every child is a [`process::Running`] guard, so an error or Ctrl-C (checked between and
//! during points) kills every process the run started, by PID. Load generators run as
//! separate processes (`weft load ... --json`) so their CPU use never mixes with the
//! runner's.

pub mod cgroup;
pub mod disk;
pub mod output;
pub mod plot;
pub mod process;
pub mod threads;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

use process::Running;

/// Which experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// memcached load at 3% updates: throughput and p99 vs target QPS.
    Memcached,
    /// memcached load at 3, 5, 10 and 50% updates, one panel each.
    Updates,
    /// Static files: replies/s and error rate vs request rate.
    Static,
    /// A small memcached + static run (≤ 3 minutes).
    Quick,
}

/// A rate sweep `from..=to` by `step`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    pub from: f64,
    pub to: f64,
    pub step: f64,
}

impl std::str::FromStr for Rates {
    type Err = String;
    fn from_str(s: &str) -> Result<Rates, String> {
        let parts: Vec<f64> = s
            .split(':')
            .map(|p| {
                p.parse::<f64>()
                    .map_err(|_| format!("`{p}` is not a number"))
            })
            .collect::<Result<_, _>>()?;
        let [from, to, step] = parts[..] else {
            return Err(format!(
                "`{s}`: expected FROM:TO:STEP, e.g. 20000:200000:20000"
            ));
        };
        if !(from > 0.0 && to >= from && step > 0.0) {
            return Err(format!("`{s}`: need 0 < FROM <= TO and STEP > 0"));
        }
        if (to - from) / step > 1000.0 {
            return Err(format!("`{s}`: more than 1000 rates"));
        }
        Ok(Rates { from, to, step })
    }
}

impl Rates {
    /// The rates of the sweep.
    pub fn values(&self) -> Vec<f64> {
        let mut v = Vec::new();
        let mut r = self.from;
        while r <= self.to + self.step * 1e-9 {
            v.push(r);
            r += self.step;
        }
        v
    }
}

/// How to run an experiment.
#[derive(Debug, Clone)]
pub struct Settings {
    pub out: PathBuf,
    pub runs: usize,
    /// Overrides the experiment's default sweep.
    pub rates: Option<Rates>,
    /// Seconds measured per point (after `warmup`).
    pub duration: f64,
    pub warmup: f64,
    /// memcached load connections.
    pub connections: usize,
    /// weft scheduler policies to run the weft servers with (empty: the server default).
    pub schedulers: Vec<String>,
    /// The `weft` executable (load generators and weft's servers).
    pub weft_exe: PathBuf,
    /// Directory of the static file set (generated if missing).
    pub fileset: PathBuf,
    pub fileset_scale: f64,
    /// Run the real memcached / nginx when installed.
    pub peers: bool,
}

/// One measured point.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Point {
    pub experiment: String,
    /// Setting within the experiment (e.g. "3% updates").
    pub panel: String,
    pub server: String,
    pub target: f64,
    pub run: usize,
    pub actual: f64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    pub errors: u64,
    pub timeouts: u64,
    pub error_rate_pct: f64,
    pub generator_saturated: bool,
}

/// A server under test: how to start it on a port.
#[derive(Debug, Clone)]
pub struct Server {
    pub name: String,
    pub program: PathBuf,
    /// Arguments; `{port}` and `{root}` are replaced.
    pub args: Vec<String>,
    /// A file the server needs (config); written before start with `{port}`, `{root}`,
    /// `{dir}` replaced.
    pub config: Option<(PathBuf, String)>,
}

/// The memcached servers to compare, with notes on any skipped.
pub fn memcached_servers(settings: &Settings, notes: &mut Vec<String>) -> Vec<Server> {
    let mut servers = Vec::new();
    {
        let mut args = vec!["memcached".to_string()];
        args.extend(process::memcached_flags("{port}", 1024, 20000));
        servers.extend(weft_variants(settings, &args, notes));
    }
    if settings.peers {
        match process::find_program("memcached") {
            Some(program) => servers.push(Server {
                name: "memcached".into(),
                program,
                args: process::memcached_flags("{port}", 1024, 20000),
                config: None,
            }),
            None => notes
                .push("skipped memcached: not installed (apt-get install memcached)".to_string()),
        }
    }
    servers
}

/// The static-file servers to compare, with notes on any skipped.
pub fn http_servers(settings: &Settings, notes: &mut Vec<String>) -> Vec<Server> {
    let mut servers = Vec::new();
    {
        let args = [
            "http",
            "--root",
            "{root}",
            "--listen",
            "127.0.0.1:{port}",
            "--processors",
            "1",
            "--max-connections",
            "20000",
        ]
        .map(String::from);
        servers.extend(weft_variants(settings, &args, notes));
    }
    if settings.peers {
        match process::find_program("nginx") {
            Some(program) => {
                let conf = settings.out.join("logs").join("nginx.conf");
                servers.push(Server {
                    name: "nginx".into(),
                    program,
                    args: vec![
                        "-c".into(),
                        conf.display().to_string(),
                        "-e".into(),
                        "{dir}/nginx-error.log".into(),
                    ],
                    config: Some((conf, crate::nginx::TEMPLATE.replace("{listen}", ""))),
                });
            }
            None => notes.push("skipped nginx: not installed (apt-get install nginx)".to_string()),
        }
    }
    servers
}

/// weft's server started with `args` (the subcommand first), once per `--schedulers` policy
/// (or once with the server's default policy); none, with a note, when this build lacks it.
fn weft_variants(settings: &Settings, args: &[String], notes: &mut Vec<String>) -> Vec<Server> {
    if !supports(&settings.weft_exe, &args[0]) {
        notes.push(format!(
            "skipped weft {0}: `{1} {0}` is not available in this build",
            args[0],
            settings.weft_exe.display()
        ));
        return Vec::new();
    }
    let server = |name: String, extra: Vec<String>| Server {
        name,
        program: settings.weft_exe.clone(),
        args: args.iter().cloned().chain(extra).collect(),
        config: None,
    };
    if settings.schedulers.is_empty() {
        return vec![server("weft".into(), vec![])];
    }
    settings
        .schedulers
        .iter()
        .map(|p| server(format!("weft ({p})"), vec!["--scheduler".into(), p.clone()]))
        .collect()
}

/// Whether `exe` has the subcommand `name` (`exe name --help` succeeds).
fn supports(exe: &Path, name: &str) -> bool {
    std::process::Command::new(exe)
        .args([name, "--help"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// What one sweep measures.
#[derive(Debug, Clone)]
pub struct Sweep {
    pub experiment: String,
    pub panel: String,
    pub servers: Vec<Server>,
    pub rates: Vec<f64>,
    pub load: Load,
}

/// Which generator a sweep runs.
#[derive(Debug, Clone)]
pub enum Load {
    Memcached { update_ratio: f64 },
    Static,
}

/// Ctrl-C / SIGTERM flag, registered once.
pub fn interrupt_flag() -> anyhow::Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, flag.clone()).context("installing the Ctrl-C handler")?;
    }
    Ok(flag)
}

/// Runs every sweep (servers × rates × runs), returning the points measured so far even when
/// interrupted (the error says so).
pub fn run_sweeps(
    settings: &Settings,
    sweeps: &[Sweep],
    interrupted: &AtomicBool,
    points: &mut Vec<Point>,
) -> anyhow::Result<()> {
    let logs = settings.out.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let total: usize = sweeps
        .iter()
        .map(|s| s.servers.len() * s.rates.len() * settings.runs)
        .sum();
    let bar = ProgressBar::new(total as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .expect("constant template")
            .progress_chars("=> "),
    );
    let (server_cpu, load_cpu) = process::server_and_load_cpus();
    if server_cpu.is_none() {
        bar.println("note: fewer than 2 CPUs available; server and load are not pinned apart");
    }
    for sweep in sweeps {
        for server in &sweep.servers {
            if interrupted.load(Ordering::Relaxed) {
                bail!("interrupted");
            }
            let port = process::free_port()?;
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            let subst = |s: &str| {
                s.replace("{port}", &port.to_string())
                    .replace("{root}", &settings.fileset.display().to_string())
                    .replace("{dir}", &logs.display().to_string())
            };
            if let Some((path, text)) = &server.config {
                std::fs::write(path, subst(text))
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            let args: Vec<String> = server.args.iter().map(|a| subst(a)).collect();
            let log = logs.join(format!(
                "{}-{}.log",
                file_name(&sweep.panel),
                file_name(&server.name)
            ));
            let mut running =
                Running::start(&server.name, &server.program, &args, server_cpu, log)?;
            running.wait_for_port(addr, Duration::from_secs(10))?;
            for &rate in &sweep.rates {
                for run in 0..settings.runs {
                    bar.set_message(format!(
                        "{} {} {} @ {}",
                        sweep.experiment,
                        sweep.panel,
                        server.name,
                        plot::human(rate)
                    ));
                    let point = measure(
                        settings,
                        sweep,
                        &server.name,
                        addr,
                        rate,
                        run,
                        load_cpu,
                        interrupted,
                    )?;
                    if point.generator_saturated {
                        bar.println(format!(
                            "warning: generator saturated at {} {} {} (results understate the server)",
                            sweep.panel, server.name, plot::human(rate)
                        ));
                    }
                    points.push(point);
                    bar.inc(1);
                    // Let TIME-WAIT sockets and queues drain between points.
                    std::thread::sleep(Duration::from_millis(300));
                }
            }
            running.stop();
            let _ = running.pid();
        }
    }
    bar.finish_and_clear();
    Ok(())
}

fn file_name(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn measure(
    settings: &Settings,
    sweep: &Sweep,
    server: &str,
    addr: SocketAddr,
    rate: f64,
    run: usize,
    cpu: Option<usize>,
    interrupted: &AtomicBool,
) -> anyhow::Result<Point> {
    let common = |args: &mut Vec<String>| {
        args.extend([
            "--server".into(),
            addr.to_string(),
            "--duration".into(),
            settings.duration.to_string(),
            "--warmup".into(),
            settings.warmup.to_string(),
            "--seed".into(),
            (run + 1).to_string(),
            "--json".into(),
        ]);
    };
    let limit = Duration::from_secs_f64(settings.duration + settings.warmup + 60.0);
    let mut args: Vec<String> = vec!["load".into()];
    match sweep.load {
        Load::Memcached { update_ratio } => {
            args.extend([
                "memcached".into(),
                "--connections".into(),
                settings.connections.to_string(),
                "--qps".into(),
                rate.to_string(),
                "--update-ratio".into(),
                update_ratio.to_string(),
            ]);
            common(&mut args);
            let out = process::run_to_end(&settings.weft_exe, &args, cpu, interrupted, limit)?;
            let r: crate::memcached::Report = serde_json::from_str(out.trim())
                .with_context(|| format!("parsing the load generator's output `{}`", out.trim()))?;
            let attempted = (r.requests).max(1) as f64;
            Ok(Point {
                experiment: sweep.experiment.clone(),
                panel: sweep.panel.clone(),
                server: server.to_string(),
                target: rate,
                run,
                actual: r.actual_qps,
                p50_us: r.latency_us.p50,
                p90_us: r.latency_us.p90,
                p99_us: r.latency_us.p99,
                p999_us: r.latency_us.p999,
                max_us: r.latency_us.max,
                errors: r.errors,
                timeouts: r.timeouts,
                error_rate_pct: (r.errors + r.timeouts) as f64 * 100.0 / attempted,
                generator_saturated: r.generator_saturated,
            })
        }
        Load::Static => {
            args.extend([
                "http".into(),
                "--fileset".into(),
                settings.fileset.display().to_string(),
                "--rate".into(),
                rate.to_string(),
                "--timeout".into(),
                "2".into(),
            ]);
            common(&mut args);
            let out = process::run_to_end(&settings.weft_exe, &args, cpu, interrupted, limit)?;
            let r: crate::http::Report = serde_json::from_str(out.trim())
                .with_context(|| format!("parsing the load generator's output `{}`", out.trim()))?;
            Ok(Point {
                experiment: sweep.experiment.clone(),
                panel: sweep.panel.clone(),
                server: server.to_string(),
                target: rate,
                run,
                actual: r.replies_per_sec,
                p50_us: r.latency_us.p50,
                p90_us: r.latency_us.p90,
                p99_us: r.latency_us.p99,
                p999_us: r.latency_us.p999,
                max_us: r.latency_us.max,
                errors: r.errors_total,
                timeouts: r.errors.timeout,
                error_rate_pct: r.error_rate_pct,
                generator_saturated: r.generator_saturated,
            })
        }
    }
}

/// The sweeps of an experiment.
pub fn plan(kind: Kind, settings: &Settings, notes: &mut Vec<String>) -> Vec<Sweep> {
    let mc_rates = |default: Rates| settings.rates.unwrap_or(default).values();
    let mut sweeps = Vec::new();
    let memcached =
        |ratio: f64, rates: Vec<f64>, experiment: &str, notes: &mut Vec<String>| Sweep {
            experiment: experiment.into(),
            panel: format!("{}% updates", (ratio * 100.0).round()),
            servers: memcached_servers(settings, notes),
            rates,
            load: Load::Memcached {
                update_ratio: ratio,
            },
        };
    let stat = |rates: Vec<f64>, notes: &mut Vec<String>| Sweep {
        experiment: "static".into(),
        panel: "static files".into(),
        servers: http_servers(settings, notes),
        rates,
        load: Load::Static,
    };
    match kind {
        Kind::Memcached => sweeps.push(memcached(
            0.03,
            mc_rates(Rates {
                from: 10_000.0,
                to: 130_000.0,
                step: 10_000.0,
            }),
            "memcached",
            notes,
        )),
        Kind::Updates => {
            let rates = mc_rates(Rates {
                from: 20_000.0,
                to: 140_000.0,
                step: 20_000.0,
            });
            for (i, ratio) in [0.03, 0.05, 0.10, 0.50].into_iter().enumerate() {
                // Notes about skipped servers once, not per panel.
                let mut scratch = Vec::new();
                let n = if i == 0 { &mut *notes } else { &mut scratch };
                sweeps.push(memcached(ratio, rates.clone(), "updates", n));
            }
        }
        Kind::Static => sweeps.push(stat(
            settings
                .rates
                .unwrap_or(Rates {
                    from: 1_000.0,
                    to: 10_000.0,
                    step: 1_000.0,
                })
                .values(),
            notes,
        )),
        Kind::Quick => {
            sweeps.push(memcached(
                0.03,
                // The last point is past memcached -t 1's peak at 15,360 connections.
                mc_rates(Rates {
                    from: 20_000.0,
                    to: 140_000.0,
                    step: 40_000.0,
                }),
                "memcached",
                notes,
            ));
            sweeps.push(stat(vec![1_000.0, 3_000.0, 6_000.0, 9_000.0], notes));
        }
    }
    sweeps.retain(|s| !s.servers.is_empty());
    sweeps
}
