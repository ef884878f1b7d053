//! The rate sweeps of `weft experiment memcached | updates | static | quick`: the servers
//! compared, the sweeps each experiment plans ([`plan`]), one load-generator process per
//! point (`measure`), and [`run`], which measures them all and writes the results, the
//! plots, `report.html` and the summary table.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use weft_load::fileset;

use super::{output, plot, Kind, Point, Rates, Settings};
use crate::process::{self, Running};

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
        args.extend(thesis_memcached_flags());
        servers.extend(weft_variants(settings, &args, notes));
    }
    if settings.peers {
        match process::find_program("memcached") {
            Some(program) => servers.push(Server {
                name: "memcached".into(),
                program,
                args: thesis_memcached_flags(),
                config: None,
            }),
            None => notes
                .push("skipped memcached: not installed (apt-get install memcached)".to_string()),
        }
    }
    servers
}

/// The thesis's memcached command line, `-b 32768 -c 32768 -m 10240 -o hashpower=24`, with
/// one server thread (`-t 1`, the thesis's peer as this project runs it), no UDP and the
/// port left as `{port}`; `weft memcached` takes the same flags. `-c` is capped by the
/// descriptor limit ([`thesis_max_connections`]).
pub fn thesis_memcached_flags() -> Vec<String> {
    let mut flags = process::memcached_flags("{port}", 10_240, thesis_max_connections());
    if let Some(i) = flags.iter().position(|f| f == "-b") {
        flags[i + 1] = "32768".into();
    }
    flags.extend(["-o".into(), "hashpower=24".into()]);
    flags
}

/// memcached's `-c` for the experiments: the thesis's 32,768, or 64 below this process's
/// hard descriptor limit when that is lower, because memcached refuses to start with a `-c`
/// it cannot raise its own limit to ("failed to set rlimit for open files").
pub fn thesis_max_connections() -> u32 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct it is given, which lives on this stack.
    let hard = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        limit.rlim_max
    } else {
        libc::RLIM_INFINITY
    };
    hard.saturating_sub(64).min(32_768) as u32
}

/// The static-file servers to compare, with notes on any skipped.
pub fn http_servers(settings: &Settings, notes: &mut Vec<String>) -> Vec<Server> {
    let mut servers = Vec::new();
    {
        let args = super::weft_http_args("{root}", "127.0.0.1:{port}");
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
                    config: Some((conf, weft_load::nginx::TEMPLATE.replace("{listen}", ""))),
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

/// Runs every sweep (rounds × rates × servers, in the order of [`super::schedule`]),
/// returning the points measured so far even when interrupted (the error says so).
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
        // Every server of the sweep runs side by side, each on its own port (the idle ones
        // sleep in epoll), so the schedule can take them in turn at each rate.
        let mut running = Vec::new();
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
            let mut child = Running::start(&server.name, &server.program, &args, server_cpu, log)?;
            child.wait_for_port(addr, Duration::from_secs(10))?;
            running.push((child, addr));
        }
        for turn in super::schedule(settings.runs, sweep.rates.len(), sweep.servers.len()) {
            if interrupted.load(Ordering::Relaxed) {
                bail!("interrupted");
            }
            let server = &sweep.servers[turn.server];
            let addr = running[turn.server].1;
            let rate = sweep.rates[turn.rate];
            bar.set_message(format!(
                "{} {} round {} {} @ {}",
                sweep.experiment,
                sweep.panel,
                turn.round + 1,
                server.name,
                plot::human(rate)
            ));
            let point = measure(
                settings,
                sweep,
                &server.name,
                addr,
                rate,
                turn.round,
                load_cpu,
                interrupted,
            )?;
            if point.generator_saturated {
                bar.println(format!(
                    "warning: generator saturated at {} {} {} (results understate the server)",
                    sweep.panel,
                    server.name,
                    plot::human(rate)
                ));
            }
            points.push(point);
            bar.inc(1);
            // Let TIME-WAIT sockets and queues drain between points.
            std::thread::sleep(Duration::from_millis(300));
        }
        for (mut child, _) in running {
            child.stop();
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
            let r: weft_load::memcached::Report = serde_json::from_str(out.trim())
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
                "--requests-per-session".into(),
                settings.session_requests.to_string(),
                "--timeout".into(),
                settings.client_timeout_s.to_string(),
            ]);
            common(&mut args);
            let out = process::run_to_end(&settings.weft_exe, &args, cpu, interrupted, limit)?;
            let r: weft_load::http::Report = serde_json::from_str(out.trim())
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
        Kind::Study | Kind::Threads | Kind::Disk => {}
    }
    sweeps.retain(|s| !s.servers.is_empty());
    sweeps
}

/// Plans `kind`'s sweeps, prepares the file set if one is needed, measures every point and
/// writes OUT/results.json, results.csv, the plots and report.html; prints the summary.
pub fn run(kind: Kind, settings: &Settings) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut notes = Vec::new();
    let sweeps = plan(kind, settings, &mut notes);
    for note in &notes {
        eprintln!("note: {note}");
    }
    if sweeps.is_empty() {
        anyhow::bail!("no server to measure (see the notes above)");
    }
    if sweeps.iter().any(|s| matches!(s.load, Load::Static)) {
        eprintln!(
            "preparing the file set (scale {}) in {}",
            settings.fileset_scale,
            settings.fileset.display()
        );
        fileset::generate(&settings.fileset, settings.fileset_scale, 1)?;
    }
    let interrupted = crate::process::interrupt_flag()?;
    let mut points = Vec::new();
    let outcome = run_sweeps(settings, &sweeps, &interrupted, &mut points);
    let mut files = output::write_raw(&settings.out, &points)?;
    if !points.is_empty() {
        let plots = output::write_plots(&settings.out, &points)?;
        let info = output::RunInfo {
            command: std::env::args().collect::<Vec<_>>().join(" "),
            seconds: started.elapsed().as_secs_f64(),
            notes: notes.clone(),
            settings: settings.describe(),
            design: output::SWEEP_DESIGN.into(),
            raw: output::sweep_raw(),
        };
        files.push(output::write_report(&settings.out, &points, &plots, &info)?);
        files.extend(plots);
        println!("{}", output::summary(&points));
    }
    for note in &notes {
        println!("note: {note}");
    }
    output::print_written(points.len(), started, &files);
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caches_start_with_the_thesis_flags() {
        let flags = thesis_memcached_flags();
        let after = |f: &str| flags[flags.iter().position(|x| x == f).unwrap() + 1].clone();
        assert_eq!(after("-b"), "32768");
        assert_eq!(after("-m"), "10240");
        assert_eq!(after("-o"), "hashpower=24");
        assert_eq!(after("-t"), "1");
        let c: u32 = after("-c").parse().unwrap();
        assert!(c == thesis_max_connections() && c <= 32_768, "{flags:?}");
        assert_eq!(flags.iter().filter(|f| *f == "-b").count(), 1);
    }
}
