//! `weft bench http`: weft http against nginx, side by side in one run, each server pinned to
//! CPU 0 (one processor / one worker, nginx from `weft_load::nginx`'s template: sendfile,
//! tcp_nopush, open_file_cache, no access log) and the
//! load on CPU 1:
//! (a) wrk, keep-alive, one 4 KiB file;
//! (b) wrk, one request per connection (`Connection: close`), names drawn from the thesis's
//!     Zipf file set (`weft fileset`), closed loop at each `--conns`;
//! (c) `weft load http`, open loop, one request per session, at each `--rates` (past
//!     saturation: how many replies and errors each server gives).
//!
//! With `--open-loop F1,F2,...` it runs the open-loop comparison of `open_loop.rs`
//! instead.
//!
//! Every process started here is killed by PID when the benchmark ends (`process::Running`), also on
//! SIGINT/SIGTERM: the flag they set kills the child running then and ends the benchmark.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::process;
use anyhow::{bail, Context};

mod open_loop;

/// weft http's I/O backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Io {
    Uring,
    Epoll,
}

#[derive(Debug, Clone)]
pub struct Options {
    /// Seconds each measurement runs.
    pub duration: u64,

    /// Repetitions of each measurement (alternating servers); the median is reported.
    pub repeat: u32,

    /// Connections for the keep-alive 4 KiB measurement (a) and the --open-loop mode (at most
    /// 15,360; the open-file limit is raised to its hard limit).
    pub keepalive_conns: u32,

    /// Open-loop mode, instead of (a)–(c): comma-separated fractions of nginx's closed-loop peak
    /// over --connections keep-alive connections (e.g. 0.25,0.5,0.75), one 4 KiB file. The
    /// peak is measured first (`weft load http --rate 0`, median of --runs), then both servers
    /// open loop over as many persistent connections (`weft load http --persistent --rate R`)
    /// at each fraction, alternating per run; the table gives offered and actual req/s and
    /// p50 / p99 / p999 in ms as min–median–max over the runs.
    pub open_loop: Vec<f64>,

    /// Connection counts for the short-lived closed-loop measurement (b), comma-separated.
    pub conns: Vec<u32>,

    /// Target request rates for the open-loop sweep (c), comma-separated; empty to skip.
    pub rates: Vec<u32>,

    /// File-set scale (`weft fileset --scale`; 1 = the thesis's 21,600 files, 2.3 GB).
    pub scale: f64,

    /// File-set seed.
    pub seed: u64,

    /// Where the file set is kept between runs [default: $TMPDIR/weft-bench-http-S-N].
    pub fileset_dir: Option<PathBuf>,

    /// I/O backend of weft http.
    pub io: Io,

    /// Give nginx `listen ... deferred` (TCP_DEFER_ACCEPT, which weft http uses by default);
    /// without it nginx runs with the listen options the issue names.
    pub nginx_deferred: bool,

    /// Cap both servers together at this % of their core (a cgroup CPU quota with a 10 ms
    /// period; needs root). With the whole core, one load core cannot open connections fast
    /// enough to saturate a server; capped, the servers saturate first, so their throughput
    /// shows their cost per request and the open-loop sweep goes past their saturation.
    pub server_cpu_pct: Option<u32>,

    /// Which measurements to run, comma-separated: keepalive, short, open.
    pub only: Vec<String>,
}

/// One server under test.
pub struct Server {
    pub name: &'static str,
    addr: SocketAddr,
    guard: process::Running,
}

impl Server {
    /// Server CPU time so far (user + system), from /proc.
    fn cpu(&self) -> Duration {
        crate::echo::cpu::process_cpu_seconds(self.guard.pid())
            .map(Duration::from_secs_f64)
            .unwrap_or_default()
    }
}

/// One measurement of one server.
#[derive(Debug, Clone, Default)]
struct Figure {
    per_sec: f64,
    errors: u64,
    server_cpu_pct: f64,
    p99_us: Option<f64>,
}

pub fn run(args: &Options) -> anyhow::Result<()> {
    // SIGINT/SIGTERM set it; the child running then is killed and the error returned drops
    // (kills) the servers, as in the other benchmarks.
    let interrupted = crate::process::interrupt_flag()?;
    let interrupted: &AtomicBool = &interrupted;
    let limit = crate::generators::raise_nofile_limit();
    if limit < 2 * u64::from(args.keepalive_conns) + 256 {
        eprintln!(
            "note: the open-file limit is {limit} (hard limit); {} connections need about {}",
            args.keepalive_conns,
            2 * u64::from(args.keepalive_conns) + 256
        );
    }
    let exe = std::env::current_exe().context("cannot find the weft binary")?;
    let nginx = process::find_program("nginx")
        .context("nginx is not installed (Debian: apt-get install nginx-light)")?;
    let wrk = process::find_program("wrk");
    let taskset = process::find_program("taskset");
    if taskset.is_none() {
        eprintln!("note: taskset is missing; servers and load are not pinned");
    }
    let (server_cpu, load_cpu) = process::server_and_load_cpus();
    if load_cpu.is_none() {
        eprintln!("note: one CPU only; server and load share it");
    }
    let run_part = |p: &str| args.only.iter().any(|o| o == p);

    let fileset = args.fileset_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("weft-bench-http-{}-{}", args.scale, args.seed))
    });
    let mut fileset_cmd = Command::new(&exe);
    fileset_cmd.args(["fileset", "--out"]).arg(&fileset).args([
        "--scale",
        &args.scale.to_string(),
        "--seed",
        &args.seed.to_string(),
    ]);
    process::command_to_end(
        &mut fileset_cmd,
        "weft fileset",
        interrupted,
        Duration::from_secs(3600),
    )?;
    let manifest: Vec<(String, f64)> = weft_load::fileset::read_manifest(&fileset)?
        .into_iter()
        .map(|e| (e.path, e.weight))
        .collect();
    std::fs::write(fileset.join("bench-4k.bin"), vec![b'x'; 4096])?;
    let work = tempdir()?;

    let pin = |cpu: Option<usize>, cmd: &Path| -> Command {
        match (&taskset, cpu) {
            (Some(t), Some(cpu)) => {
                let mut c = Command::new(t);
                c.arg("-c").arg(cpu.to_string()).arg(cmd);
                c
            }
            _ => Command::new(cmd),
        }
    };
    // Declared before the servers so that it is dropped (removed) after they were killed.
    let cpu_limit = args
        .server_cpu_pct
        .map(|pct| crate::cgroup::CpuLimit::new("weft-bench-http", pct))
        .transpose()?;
    let nginx_server = start_nginx(
        &pin(server_cpu, &nginx),
        &fileset,
        &work,
        args.nginx_deferred,
    )?;
    let weft_server = start_weft(&pin(server_cpu, &exe), &fileset, args.io)?;
    if let Some(limit) = &cpu_limit {
        limit.add(nginx_server.guard.pid())?;
        limit.add(weft_server.guard.pid())?;
    }
    let servers = [&nginx_server, &weft_server];

    let mut report = String::new();
    writeln!(
        report,
        "weft bench http: servers {} (weft http --processors 1 --io {:?}; nginx 1 worker, \
         sendfile, tcp_nopush, open_file_cache, access_log off{}), {} s per measurement, median of {}",
        process::placement(),
        args.io,
        if args.nginx_deferred {
            ", listen deferred"
        } else {
            ""
        },
        args.duration,
        args.repeat
    )?;
    if let Some(pct) = args.server_cpu_pct {
        writeln!(
            report,
            "servers capped together at {pct} % of CPU 0 (cgroup CPU quota, 10 ms period)"
        )?;
    }
    writeln!(report, "{}", crate::host_probe::Host::probe().line())?;
    writeln!(
        report,
        "file set: {} ({} files, scale {}, seed {})\n",
        fileset.display(),
        manifest.len(),
        args.scale,
        args.seed
    )?;

    if !args.open_loop.is_empty() {
        open_loop::run(
            args,
            &servers,
            &pin(load_cpu, &exe),
            &work,
            &mut report,
            interrupted,
        )?;
        print!("{report}");
        return Ok(());
    }
    if run_part("keepalive") || run_part("short") {
        let Some(wrk) = &wrk else {
            bail!("wrk is not installed (Debian: apt-get install wrk)");
        };
        if run_part("keepalive") {
            let figures = measure(&servers, args.repeat, interrupted, |s| {
                run_wrk(
                    &pin(load_cpu, wrk),
                    s,
                    args.keepalive_conns,
                    args.duration,
                    None,
                    "/bench-4k.bin",
                    interrupted,
                )
            })?;
            writeln!(
                report,
                "(a) keep-alive, one 4 KiB file: wrk -t1 -c{} -d{}s",
                args.keepalive_conns, args.duration
            )?;
            table(
                &mut report,
                &[(format!("{}", args.keepalive_conns), figures)],
                "conns",
            )?;
        }
        if run_part("short") {
            let script = work.join("zipf-close.lua");
            std::fs::write(&script, zipf_script(&manifest, args.seed))?;
            let mut rows = Vec::new();
            for &conns in &args.conns {
                let figures = measure(&servers, args.repeat, interrupted, |s| {
                    run_wrk(
                        &pin(load_cpu, wrk),
                        s,
                        conns,
                        args.duration,
                        Some(&script),
                        "/",
                        interrupted,
                    )
                })?;
                rows.push((conns.to_string(), figures));
            }
            writeln!(
                report,
                "(b) short-lived connections (one request each, Connection: close), Zipf names \
                 over the file set: wrk -t1 -cN -d{}s with a Lua picker",
                args.duration
            )?;
            table(&mut report, &rows, "conns")?;
        }
    }
    if run_part("open") && !args.rates.is_empty() {
        let mut rows = Vec::new();
        for &rate in &args.rates {
            let figures = measure(&servers, args.repeat, interrupted, |s| {
                run_load(
                    &pin(load_cpu, &exe),
                    s,
                    &fileset,
                    rate,
                    args.duration,
                    interrupted,
                )
            })?;
            rows.push((rate.to_string(), figures));
        }
        writeln!(
            report,
            "(c) open loop, one request per connection (weft load http --rate R --duration {}), \
             replies/s, errors (timeouts, resets, refusals, bad statuses) and p99 latency",
            args.duration
        )?;
        table(&mut report, &rows, "target/s")?;
    }
    print!("{report}");
    Ok(())
}

/// Runs `weft load http --server ADDR <args> --duration D --json` and parses its report.
pub fn load_http_json(
    cmd: &Command,
    server: &Server,
    args: &[String],
    duration: u64,
    interrupted: &AtomicBool,
) -> anyhow::Result<serde_json::Value> {
    let mut c = clone_command(cmd);
    c.args(["load", "http", "--server", &server.addr.to_string()])
        .args(args)
        .args(["--duration", &duration.to_string(), "--json"]);
    // The run, its client timeout (10 s) for the last requests, and slack.
    let limit = Duration::from_secs(duration + 70);
    let text = process::command_to_end(&mut c, "weft load http", interrupted, limit)?;
    serde_json::from_str(text.trim())
        .with_context(|| format!("weft load http printed no JSON: {text}"))
}

/// Runs `f` on each server `repeat` times, side by side, who goes first rotating by run
/// ([`crate::experiment::server_order`]), and keeps the median by rate.
fn measure(
    servers: &[&Server],
    repeat: u32,
    interrupted: &AtomicBool,
    mut f: impl FnMut(&Server) -> anyhow::Result<Figure>,
) -> anyhow::Result<Vec<(&'static str, Figure)>> {
    let mut all: Vec<Vec<Figure>> = vec![Vec::new(); servers.len()];
    for run in 0..repeat as usize {
        for i in crate::experiment::server_order(servers.len(), run) {
            let s = servers[i];
            drain_time_wait(interrupted);
            let before = s.cpu();
            let started = Instant::now();
            let mut fig = f(s).with_context(|| format!("measuring {}", s.name))?;
            let cpu = s.cpu().saturating_sub(before);
            fig.server_cpu_pct = 100.0 * cpu.as_secs_f64() / started.elapsed().as_secs_f64();
            all[i].push(fig);
        }
    }
    Ok(servers
        .iter()
        .zip(all)
        .map(|(s, mut figs)| {
            figs.sort_by(|a, b| a.per_sec.total_cmp(&b.per_sec));
            (s.name, figs[figs.len() / 2].clone())
        })
        .collect())
}

fn table(
    out: &mut String,
    rows: &[(String, Vec<(&'static str, Figure)>)],
    key: &str,
) -> anyhow::Result<()> {
    writeln!(
        out,
        "| {key} | nginx req/s | nginx errors | nginx CPU % | nginx CPU µs/req | nginx p99 ms | \
         weft req/s | weft errors | weft CPU % | weft CPU µs/req | weft p99 ms | weft / nginx \
         req/s | nginx / weft CPU per req |"
    )?;
    writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")?;
    for (label, figs) in rows {
        let get = |name: &str| {
            figs.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, f)| f.clone())
        };
        let (Some(n), Some(w)) = (get("nginx"), get("weft")) else {
            continue;
        };
        let p99 = |f: &Figure| {
            f.p99_us
                .map_or("-".to_owned(), |p| format!("{:.2}", p / 1000.0))
        };
        let ratio = if n.per_sec > 0.0 {
            format!("{:.2}×", w.per_sec / n.per_sec)
        } else {
            "-".to_owned()
        };
        let cpu_us = |f: &Figure| {
            if f.per_sec > 0.0 {
                f.server_cpu_pct * 1e4 / f.per_sec
            } else {
                0.0
            }
        };
        let cpu_ratio = if cpu_us(&w) > 0.0 {
            format!("{:.2}×", cpu_us(&n) / cpu_us(&w))
        } else {
            "-".to_owned()
        };
        writeln!(
            out,
            "| {label} | {:.0} | {} | {:.0} | {:.1} | {} | {:.0} | {} | {:.0} | {:.1} | {} | {ratio} \
             | {cpu_ratio} |",
            n.per_sec,
            n.errors,
            n.server_cpu_pct,
            cpu_us(&n),
            p99(&n),
            w.per_sec,
            w.errors,
            w.server_cpu_pct,
            cpu_us(&w),
            p99(&w),
        )?;
    }
    writeln!(out)?;
    Ok(())
}

fn run_wrk(
    cmd: &Command,
    server: &Server,
    conns: u32,
    duration: u64,
    script: Option<&Path>,
    path: &str,
    interrupted: &AtomicBool,
) -> anyhow::Result<Figure> {
    let mut c = clone_command(cmd);
    c.args([
        "-t1",
        &format!("-c{conns}"),
        &format!("-d{duration}s"),
        "--latency",
    ]);
    if let Some(s) = script {
        c.arg("-s").arg(s);
    }
    c.arg(format!("http://{}{path}", server.addr));
    let limit = Duration::from_secs(duration + 60);
    let text = process::command_to_end(&mut c, "wrk", interrupted, limit)?;
    let per_sec = field_after(&text, "Requests/sec:")
        .with_context(|| format!("no Requests/sec in wrk's output:\n{text}"))?;
    let mut errors = field_after(&text, "Non-2xx or 3xx responses:").unwrap_or(0.0) as u64;
    if let Some(line) = text.lines().find(|l| l.contains("Socket errors:")) {
        errors += line
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|d| d.parse::<u64>().ok())
            .sum::<u64>();
    }
    let p99_us = text
        .lines()
        .find(|l| l.trim_start().starts_with("99%"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(parse_wrk_latency_us);
    Ok(Figure {
        per_sec,
        errors,
        p99_us,
        ..Figure::default()
    })
}

fn run_load(
    cmd: &Command,
    server: &Server,
    fileset: &Path,
    rate: u32,
    duration: u64,
    interrupted: &AtomicBool,
) -> anyhow::Result<Figure> {
    let args = [
        "--fileset".to_owned(),
        fileset.display().to_string(),
        "--rate".to_owned(),
        rate.to_string(),
    ];
    let v = load_http_json(cmd, server, &args, duration, interrupted)?;
    if v["generator_saturated"].as_bool() == Some(true) {
        eprintln!(
            "note: the load generator saturated at target {rate}/s against {}",
            server.name
        );
    }
    Ok(Figure {
        per_sec: v["replies_per_sec"].as_f64().unwrap_or(0.0),
        errors: v["errors_total"].as_u64().unwrap_or(0),
        p99_us: v["latency_us"]["p99"].as_f64(),
        ..Figure::default()
    })
}

/// Sockets in TIME-WAIT above which a measurement waits: the servers close first, so each
/// short-lived connection leaves one behind on the server's side for 60 s, and a client port
/// reused while its old connection is still there costs a SYN retransmission (1 s) — which
/// would be charged to whichever server runs next.
const TIME_WAIT_MAX: u64 = 15_000;

/// Waits (at most 65 s) until the system holds fewer than [`TIME_WAIT_MAX`] TIME-WAIT
/// sockets, as the thesis lets TIME-WAIT drain between rates (or until `interrupted`).
fn drain_time_wait(interrupted: &AtomicBool) {
    let deadline = Instant::now() + Duration::from_secs(65);
    let mut told = false;
    while let Some(tw) = time_wait_sockets() {
        if tw < TIME_WAIT_MAX || Instant::now() > deadline || interrupted.load(Ordering::Relaxed) {
            break;
        }
        if !told {
            eprintln!("note: waiting for {tw} TIME-WAIT sockets to drain");
            told = true;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The `tw` count of /proc/net/sockstat.
fn time_wait_sockets() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/net/sockstat").ok()?;
    let line = text.lines().find(|l| l.starts_with("TCP:"))?;
    let mut words = line.split_whitespace();
    while let Some(w) = words.next() {
        if w == "tw" {
            return words.next()?.parse().ok();
        }
    }
    None
}

/// "1.23ms" / "456.00us" / "2.00s" → microseconds.
fn parse_wrk_latency_us(s: &str) -> Option<f64> {
    let (num, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic())?);
    let v: f64 = num.parse().ok()?;
    Some(match unit {
        "us" => v,
        "ms" => v * 1e3,
        "s" => v * 1e6,
        _ => return None,
    })
}

fn field_after(text: &str, label: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.contains(label))?;
    line[line.find(label)? + label.len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `Command` is not `Clone`; rebuild it from its program and arguments.
fn clone_command(cmd: &Command) -> Command {
    let mut c = Command::new(cmd.get_program());
    c.args(cmd.get_args());
    c.stdin(Stdio::null());
    c
}

/// A wrk Lua script drawing each request's name by the manifest's weights (cumulative table,
/// binary search), sending `Connection: close`.
fn zipf_script(entries: &[(String, f64)], seed: u64) -> String {
    let mut s = String::from("local paths = {\n");
    for (p, _) in entries {
        let _ = writeln!(s, "  \"/{p}\",");
    }
    s.push_str("}\nlocal cum = {\n");
    let mut total = 0.0;
    for (_, w) in entries {
        total += w;
        let _ = writeln!(s, "  {total:e},");
    }
    let _ = write!(
        s,
        "}}\nlocal n = #cum\nmath.randomseed({seed})\n\
         request = function()\n\
           local r = math.random() * cum[n]\n\
           local lo, hi = 1, n\n\
           while lo < hi do\n\
             local mid = math.floor((lo + hi) / 2)\n\
             if cum[mid] < r then lo = mid + 1 else hi = mid end\n\
           end\n\
           return wrk.format(\"GET\", paths[lo], {{[\"Connection\"] = \"close\"}})\n\
         end\n"
    );
    s
}

fn free_port() -> anyhow::Result<u16> {
    Ok(process::free_port()?)
}

fn start_nginx(cmd: &Command, root: &Path, work: &Path, deferred: bool) -> anyhow::Result<Server> {
    let port = free_port()?;
    let conf = weft_load::nginx::config(work, port, root, if deferred { " deferred" } else { "" });
    std::fs::write(work.join("nginx.conf"), conf)?;
    let mut c = clone_command(cmd);
    c.arg("-e")
        .arg(work.join("error.log"))
        .arg("-p")
        .arg(work)
        .arg("-c")
        .arg(work.join("nginx.conf"));
    let mut guard = process::Running::adopt("nginx", c.spawn().context("starting nginx")?);
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    guard.wait_for_port(addr, Duration::from_secs(10))?;
    Ok(Server {
        name: "nginx",
        addr,
        guard,
    })
}

fn start_weft(cmd: &Command, root: &Path, io: Io) -> anyhow::Result<Server> {
    let port = free_port()?;
    let mut c = clone_command(cmd);
    c.args(["http", "--root"])
        .arg(root)
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--processors",
            "1",
            "--io",
        ])
        .arg(match io {
            Io::Uring => "uring",
            Io::Epoll => "epoll",
        })
        .stderr(Stdio::piped());
    let mut child = c.spawn().context("starting weft http")?;
    let stderr = child.stderr.take().context("weft http's stderr")?;
    let guard = process::Running::adopt("weft http", child);
    let mut line = String::new();
    BufReader::new(stderr).read_line(&mut line)?;
    let addr: SocketAddr = line
        .trim()
        .strip_prefix("listening on ")
        .with_context(|| format!("weft http did not start: {line}"))?
        .parse()?;
    Ok(Server {
        name: "weft",
        addr,
        guard,
    })
}

/// A fresh private directory for nginx's files.
fn tempdir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("weft-bench-http-work-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrk_latency_units() {
        assert_eq!(parse_wrk_latency_us("456.00us"), Some(456.0));
        assert_eq!(parse_wrk_latency_us("1.50ms"), Some(1500.0));
        assert_eq!(parse_wrk_latency_us("2.00s"), Some(2_000_000.0));
    }

    #[test]
    fn wrk_fields() {
        let text = "  Requests/sec:  49298.43\n  Socket errors: connect 0, read 12, write 0, \
                    timeout 3\nNon-2xx or 3xx responses: 7\n";
        assert_eq!(field_after(text, "Requests/sec:"), Some(49298.43));
        assert_eq!(field_after(text, "Non-2xx or 3xx responses:"), Some(7.0));
    }

    #[test]
    fn zipf_script_lists_every_name_with_a_cumulative_weight() {
        let s = zipf_script(&[("a".into(), 0.5), ("b".into(), 0.25)], 7);
        assert!(s.contains("\"/a\",") && s.contains("\"/b\","));
        assert!(s.contains("7.5e-1"));
        assert!(s.contains("math.randomseed(7)"));
    }
}
