//! The thesis experiments end to end (`weft experiment`): start each server (weft's and the
//! real memcached / nginx when installed), pin it to one CPU and the load generator to
//! another, sweep target rates, repeat runs, and write raw results (JSON, CSV), SVG plots and
//! a summary table.
//!
//! One module per job: [`sweeps`] (the rate sweeps of `memcached`, `updates`, `static` and
//! `quick`), [`disk`], [`threads`], [`study`]; what they share: [`output`] and [`plot`]
//! (results, figures, the report), and [`schedule`], the order in which every experiment
//! measures its points (the servers compared one right after another at each rate, round by
//! round). [`run`] takes the command line's [`Options`] and dispatches.
//!
//! Every child is a [`crate::process::Running`] guard, so an error or Ctrl-C (checked between and
//! during points) kills every process the run started, by PID. Load generators run as
//! separate processes (`weft load ... --json`) so their CPU use never mixes with the
//! runner's.

pub mod disk;
pub mod output;
pub mod plot;
pub mod study;
pub mod sweeps;
pub mod threads;

use std::path::PathBuf;

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// Which experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// memcached load at 3% updates: throughput and p99 vs offered load.
    Memcached,
    /// memcached load at 3, 5, 10 and 50% updates, one panel each.
    Updates,
    /// Static files: replies/s and error rate vs request rate.
    Static,
    /// A small memcached + static run (≤ 3 minutes).
    Quick,
    /// The scheduler study ([`study`]).
    Study,
    /// Fibers vs OS threads ([`threads`]).
    Threads,
    /// Static files from disk ([`disk`]).
    Disk,
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
    /// Static load: requests in each httperf-style session, one after another on its own
    /// short-lived connection.
    pub session_requests: usize,
    /// Static load: a request not answered within this many seconds is an error.
    pub client_timeout_s: f64,
}

impl Settings {
    /// One line for the report: what the defaults filled in.
    pub fn describe(&self) -> String {
        format!(
            "{} run(s) a point, {} s measured after {} s of warm-up; memcached: {} \
             connections, depth 1, `{}`; static: file set scale {}, {} request(s) per \
             session on a new connection, {} s client timeout",
            self.runs,
            self.duration,
            self.warmup,
            self.connections,
            sweeps::thesis_memcached_flags().join(" "),
            self.fileset_scale,
            self.session_requests,
            self.client_timeout_s
        )
    }
}

/// One point of a run's order: the round, the index of the rate (or setting) and the index of
/// the server (or mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Turn {
    pub round: usize,
    pub rate: usize,
    pub server: usize,
}

/// The order in which an experiment measures `rounds` × `rates` × `servers` points, so that
/// servers compared are measured side by side: round after round, every rate once a round,
/// and at each rate every server one right after the other, in [`server_order`]. Drift on the
/// machine (a noisy neighbour, a warm-up of the host) then lands on all servers alike, and
/// the rounds give each point's min, median and max.
pub fn schedule(rounds: usize, rates: usize, servers: usize) -> Vec<Turn> {
    let mut turns = Vec::with_capacity(rounds * rates * servers);
    for round in 0..rounds {
        for rate in 0..rates {
            turns.extend(server_order(servers, round).into_iter().map(|server| Turn {
                round,
                rate,
                server,
            }));
        }
    }
    turns
}

/// The order of `servers` servers in round `round` (from 0): rotated by the round, so each
/// goes first in turn (with two: A B, then B A, then A B …).
pub fn server_order(servers: usize, round: usize) -> Vec<usize> {
    (0..servers).map(|i| (i + round) % servers).collect()
}

/// Requests per session of the static experiments: the thesis's httperf sessions read some
/// names across one persistent connection, then close it.
pub const SESSION_REQUESTS: usize = 3;
/// The thesis's client timeout (httperf `--timeout 10`).
pub const CLIENT_TIMEOUT_S: f64 = 10.0;

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

/// What `weft experiment` was asked to run: its command line as plain fields (the CLI fills
/// them from its flags). `None` means the experiment's default.
#[derive(Debug, Clone)]
pub struct Options {
    pub kind: Kind,
    /// Output directory (made if missing).
    pub out: PathBuf,
    pub runs: Option<usize>,
    pub rates: Option<Rates>,
    pub duration: Option<f64>,
    pub warmup: Option<f64>,
    /// memcached load connections.
    pub connections: usize,
    pub schedulers: Vec<String>,
    pub fileset: Option<PathBuf>,
    pub fileset_scale: Option<f64>,
    /// Run the real memcached / nginx when installed.
    pub peers: bool,
    /// `threads`: the concurrent connection counts.
    pub thread_connections: Vec<usize>,
    /// `disk`: the memory limit (MiB) of the server's cgroup.
    pub memory_limit_mib: u64,
}

/// Runs the experiment `options` name, printing what `weft experiment` prints.
/// `weft http`'s arguments in every experiment: one processor, room for 20,000 connections.
pub(crate) fn weft_http_args(root: &str, listen: &str) -> Vec<String> {
    [
        "http",
        "--root",
        root,
        "--listen",
        listen,
        "--processors",
        "1",
        "--max-connections",
        "20000",
    ]
    .map(String::from)
    .to_vec()
}

pub fn run(options: Options) -> anyhow::Result<()> {
    if options.kind == Kind::Study {
        return study::run(&options.out, options.runs.unwrap_or(3), &options.schedulers);
    }
    if options.kind == Kind::Threads {
        return threads::run(
            &options.out,
            options.runs.unwrap_or(3),
            options.thread_connections,
            options.duration.unwrap_or(4.0),
            options.warmup.unwrap_or(1.0),
        );
    }
    let quick = options.kind == Kind::Quick;
    let kind = match options.kind {
        Kind::Disk => Kind::Static,
        k => k,
    };
    let runs = options.runs.unwrap_or(if quick { 1 } else { 3 });
    if runs == 0 {
        anyhow::bail!("--runs must be at least 1");
    }
    let duration = options.duration.unwrap_or(if quick { 3.0 } else { 10.0 });
    let warmup = options.warmup.unwrap_or(if quick { 0.5 } else { 1.0 });
    if !(duration > 0.0 && warmup >= 0.0) {
        anyhow::bail!("--duration must be > 0 and --warmup >= 0");
    }
    std::fs::create_dir_all(&options.out)
        .with_context(|| format!("creating {}", options.out.display()))?;
    // Absolute paths from here on: the servers get them in flags and config files, and nginx
    // reads relative ones against its own prefix (/usr/share/nginx), not our directory.
    let absolute = |p: &std::path::Path| {
        std::path::absolute(p).with_context(|| format!("resolving {}", p.display()))
    };
    let out = absolute(&options.out)?;
    let fileset = match &options.fileset {
        Some(f) => absolute(f)?,
        None if options.kind == Kind::Disk => out.join("disk-fileset"),
        None => out.join("fileset"),
    };
    let settings = Settings {
        fileset,
        fileset_scale: options.fileset_scale.unwrap_or(match options.kind {
            Kind::Quick => 0.01,
            Kind::Disk => 1.0,
            _ => 0.1,
        }),
        out,
        runs,
        rates: options.rates,
        duration,
        warmup,
        connections: options.connections,
        schedulers: options.schedulers,
        weft_exe: std::env::current_exe().context("finding the weft executable")?,
        peers: options.peers,
        // The disk experiment keeps its one-request sessions and 2 s timeout (its points
        // start from a cold cache and must stay short); quick bounds its drain to 2 s.
        session_requests: if options.kind == Kind::Disk {
            1
        } else {
            SESSION_REQUESTS
        },
        client_timeout_s: if matches!(options.kind, Kind::Quick | Kind::Disk) {
            2.0
        } else {
            CLIENT_TIMEOUT_S
        },
    };
    if options.kind == Kind::Disk {
        let rates = options
            .rates
            .unwrap_or(Rates {
                from: 250.0,
                to: 1_500.0,
                step: 250.0,
            })
            .values();
        return disk::run(settings, options.memory_limit_mib, rates);
    }
    sweeps::run(kind, &settings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_alternates_servers_at_every_rate_and_rotates_who_goes_first() {
        let order: Vec<(usize, usize, usize)> = schedule(3, 2, 2)
            .into_iter()
            .map(|t| (t.round, t.rate, t.server))
            .collect();
        assert_eq!(
            order,
            [
                (0, 0, 0),
                (0, 0, 1),
                (0, 1, 0),
                (0, 1, 1),
                (1, 0, 1),
                (1, 0, 0),
                (1, 1, 1),
                (1, 1, 0),
                (2, 0, 0),
                (2, 0, 1),
                (2, 1, 0),
                (2, 1, 1),
            ]
        );
        assert_eq!(server_order(3, 0), [0, 1, 2]);
        assert_eq!(server_order(3, 1), [1, 2, 0]);
        assert_eq!(server_order(3, 2), [2, 0, 1]);
        assert_eq!(server_order(1, 5), [0]);
        // Every (round, rate, server) exactly once.
        let mut all = schedule(4, 5, 3);
        assert_eq!(all.len(), 60);
        all.sort_by_key(|t| (t.round, t.rate, t.server));
        all.dedup();
        assert_eq!(all.len(), 60);
        assert!(schedule(0, 5, 3).is_empty() && schedule(2, 5, 0).is_empty());
    }
}
