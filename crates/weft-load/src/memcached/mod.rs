//! The memcached load generator (`weft load memcached`): open-loop Poisson load, get/set mix,
//! HdrHistogram latency from the intended send time.
//!
//! A run has four phases: connect every connection (in parallel fibers), preload every key
//! once (so gets hit), run the schedule — `warmup` seconds not counted, then `duration`
//! seconds counted — and drain the last replies (bounded by `timeout`). The generator runs on
//! its own weft cluster of `threads` processors. In open loop at depth 1 (the thesis's load)
//! a dispatcher per processor writes the requests and each connection's fiber reads the
//! replies ([`fed`]); otherwise each connection is two fibers ([`connection`]).

pub mod connection;
pub mod fed;
pub mod request;
pub mod response;

use std::io::{Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use weft::net::TcpStream;

use crate::cpu;
use crate::dist::{KeyDist, ValueSize};
use crate::latency::{LatencySummary, Recorder};

/// What `weft load memcached` was asked to do.
#[derive(Debug, Clone)]
pub struct Config {
    pub server: String,
    pub connections: usize,
    /// Target requests per second over all connections; 0 = closed loop.
    pub qps: f64,
    pub duration: Duration,
    pub warmup: Duration,
    /// Share of requests that are sets.
    pub update_ratio: f64,
    pub keys: u64,
    pub key_dist: KeyDist,
    pub value_size: ValueSize,
    /// Most requests outstanding per connection.
    pub depth: usize,
    /// Classic (`get`/`set`) or meta (`mg`/`ms`) requests.
    pub protocol: request::Protocol,
    /// One write per request, even when several are due at once. Off (the default), a
    /// connection writes every request that is due and has room in one write, as pipelining
    /// clients do.
    pub write_per_request: bool,
    /// Processors (OS threads) of the generator's cluster.
    pub threads: usize,
    /// A reply slower than this counts as a timeout; a connection silent this long is given up.
    pub timeout: Duration,
    pub preload: bool,
    pub seed: u64,
    pub connect_timeout: Duration,
    pub verbose: bool,
    /// Open loop: the dispatcher polls (yields) instead of sleeping when the next arrival is
    /// this close; zero always sleeps.
    pub spin: Duration,
    /// The generator's idle processors poll their completion queues for up to this long
    /// before they sleep (`weft::ClusterBuilder::idle_poll`); zero sleeps at once.
    pub idle_poll: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            server: "127.0.0.1:11211".into(),
            connections: 32,
            qps: 0.0,
            duration: Duration::from_secs(10),
            warmup: Duration::from_secs(1),
            update_ratio: 0.03,
            keys: 10_000,
            key_dist: KeyDist::Uniform,
            value_size: ValueSize::Fixed(200),
            depth: 1,
            protocol: request::Protocol::Classic,
            write_per_request: false,
            threads: 1,
            timeout: Duration::from_secs(1),
            preload: true,
            seed: 1,
            connect_timeout: Duration::from_secs(5),
            verbose: false,
            spin: Duration::from_micros(100),
            idle_poll: Duration::ZERO,
        }
    }
}

impl Config {
    /// Rejects settings that cannot run, with the reason.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.connections == 0 {
            bail!("--connections must be at least 1");
        }
        if !(self.qps >= 0.0 && self.qps.is_finite()) {
            bail!("--qps must be a number >= 0 (0 = closed loop)");
        }
        if self.duration.is_zero() {
            bail!("--duration must be > 0");
        }
        if !(0.0..=1.0).contains(&self.update_ratio) {
            bail!("--update-ratio must be between 0 and 1 (e.g. 0.03)");
        }
        if self.keys == 0 {
            bail!("--keys must be at least 1");
        }
        if self.depth == 0 {
            bail!("--depth must be at least 1");
        }
        if self.threads == 0 {
            bail!("--threads must be at least 1");
        }
        if self.idle_poll > weft::MAX_IDLE_POLL {
            bail!(
                "--idle-poll-us must be at most {} (the runtime's longest poll window)",
                weft::MAX_IDLE_POLL.as_micros()
            );
        }
        if self.timeout.is_zero() {
            bail!("--timeout must be > 0");
        }
        Ok(())
    }
}

/// The immutable plan every connection fiber reads.
#[derive(Debug)]
pub struct Plan {
    pub start: Instant,
    /// Requests intended from here on are counted.
    pub count_from: Instant,
    pub end: Instant,
    pub qps: f64,
    pub connections: usize,
    pub depth: usize,
    pub protocol: request::Protocol,
    /// Requests due together go out in one write ([`Config::write_per_request`] off).
    pub coalesce: bool,
    pub update_ratio: f64,
    pub keys: u64,
    pub key_dist: KeyDist,
    pub value_size: ValueSize,
    pub timeout: Duration,
    pub seed: u64,
    pub verbose: bool,
    /// Value bytes: every set sends a prefix of this.
    pub filler: Vec<u8>,
}

impl Plan {
    /// Each connection's share of the rate, or `None` for closed loop.
    pub fn per_connection_qps(&self) -> Option<f64> {
        (self.qps > 0.0).then(|| self.qps / self.connections as f64)
    }

    /// Whether a request intended at `t` is inside the measurement window.
    #[inline]
    pub fn counts(&self, t: Instant) -> bool {
        t >= self.count_from && t < self.end
    }
}

/// What a run measured; `--json` prints this.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub server: String,
    pub connections: usize,
    pub depth: usize,
    pub update_ratio: f64,
    pub target_qps: f64,
    pub actual_qps: f64,
    /// Requests intended inside the measurement window and sent.
    pub requests: u64,
    /// Requests intended inside the window that could not be sent before it ended (the
    /// server, or the depth, held the sender back): what an overloaded server never saw.
    #[serde(default)]
    pub unsent: u64,
    pub misses: u64,
    pub errors: u64,
    pub timeouts: u64,
    pub latency_us: LatencySummary,
    pub duration_s: f64,
    pub generator_threads: usize,
    pub generator_cpu_seconds: f64,
    pub generator_cpu_us_per_request: f64,
    /// Times the generator's threads went to sleep in the counted window, per reply: on a VM
    /// each costs a wake-up that may be dearer than a request (`weft bench load` measures it).
    #[serde(default)]
    pub generator_sleeps_per_request: f64,
    /// Share of the generator's cores it kept busy during the counted window.
    pub generator_utilisation: f64,
    /// True when the generator itself was (nearly) saturated: the figures may understate the
    /// server. With a polling dispatcher (open loop, depth 1, `spin` > 0) or an idle poll
    /// (`idle_poll` > 0) and a send lag measured: its send lag p99
    /// exceeded [`SATURATED_LAG_US`]; otherwise its busy share exceeded [`cpu::SATURATED`].
    pub generator_saturated: bool,
    /// Open loop, depth 1: how late the generator sent requests that found their connection
    /// idle (send time − intended time, µs), counted in the window: its own lateness, which
    /// the latency figures include (the C generator's `send_lag`).
    #[serde(default)]
    pub generator_send_lag_us: Option<LatencySummary>,
    /// The generator's idle poll window (µs; 0: its processors slept at once).
    #[serde(default)]
    pub generator_idle_poll_us: u64,
}

/// A generator whose send lag p99 is above this (µs) may be what sets the latency tail. Not
/// lower: this VM stalls either CPU for 3–5 ms now and then (`docs/notes/scale.md`), which
/// put a healthy generator's lag p99 past 1 ms at 20k req/s in `weft experiment quick`.
pub const SATURATED_LAG_US: u64 = 5000;

impl Report {
    /// A short human-readable summary.
    pub fn human(&self) -> String {
        format!(
            "target {:.0} qps  actual {:.0} qps  requests {}  unsent {}  misses {}  errors {}  timeouts {}\n{}\n{}",
            self.target_qps,
            self.actual_qps,
            self.requests,
            self.unsent,
            self.misses,
            self.errors,
            self.timeouts,
            self.latency_us.human(),
            if self.generator_send_lag_us.is_some() {
                // A polling dispatcher is busy whatever the load: its lag says whether it kept up.
                format!(
                    "generator: {} thread(s), {:.2} us CPU per request, {:.0}% busy (polls between arrivals)",
                    self.generator_threads,
                    self.generator_cpu_us_per_request,
                    self.generator_utilisation * 100.0
                )
            } else {
                cpu::human_generator_line(
                    self.generator_threads,
                    self.generator_cpu_us_per_request,
                    self.generator_utilisation,
                )
            }
        ) + &match self.generator_idle_poll_us {
            0 => String::new(),
            us => format!("\ngenerator idle poll: up to {us} us before a processor sleeps"),
        } + &match &self.generator_send_lag_us {
            Some(l) => format!(
                "\ngenerator send lag: p50 {} us  p99 {} us  max {} us{}",
                l.p50,
                l.p99,
                l.max,
                if self.generator_saturated {
                    "  (late: the generator may set the tail; add --threads)"
                } else {
                    ""
                }
            ),
            None => String::new(),
        }
    }
}

/// Resolves `server` to one address, with an error that names it.
pub fn resolve(server: &str) -> anyhow::Result<SocketAddr> {
    server
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve server address `{server}` (expected HOST:PORT)"))?
        .next()
        .with_context(|| format!("server address `{server}` resolves to nothing"))
}

/// Runs the load described by `config` and reports what it measured.
pub fn run(config: &Config) -> anyhow::Result<Report> {
    config.validate()?;
    let addr = resolve(&config.server)?;
    crate::limits::reserve_descriptors(config.connections as u64 + 64)?;
    let config = config.clone();
    cpu::run_on_own_cluster("weft-load", config.threads, config.idle_poll, move || {
        run_on_cluster(&config, addr)
    })
}

fn run_on_cluster(config: &Config, addr: SocketAddr) -> anyhow::Result<Report> {
    let streams = connect_all(config, addr)?;
    let connected = streams.len();
    if config.preload {
        preload(config, &streams)?;
    }
    // Open loop at depth 1: one reader fiber per connection and one dispatcher per processor
    // that writes the requests of its group ([`fed`]); the readers exist before the schedule
    // starts.
    let fed = config.qps > 0.0 && config.depth == 1;
    let cell = Arc::new(OnceLock::new());
    let recorder = Arc::new(Recorder::new());
    let lag = Arc::new(Recorder::new());
    recorder.with(|t| t.errors += (config.connections - connected) as u64);
    let mut fibers = Vec::with_capacity(connected);
    let mut groups: Vec<Arc<fed::Group>> = Vec::new();
    let mut streams = streams;
    if fed {
        let count = config.threads.min(connected).max(1);
        let mut split: Vec<Vec<TcpStream>> = (0..count).map(|_| Vec::new()).collect();
        for (i, stream) in streams.drain(..).enumerate() {
            split[i % count].push(stream);
        }
        groups = split
            .into_iter()
            .filter(|s| !s.is_empty())
            .map(|s| Arc::new(fed::Group::new(s)))
            .collect();
        for (g, group) in groups.iter().enumerate() {
            for i in 0..group.len() {
                let (group, cell, recorder) = (group.clone(), cell.clone(), recorder.clone());
                let spawned = weft::Builder::new()
                    .name(format!("load-conn-{g}-{i}"))
                    .stack_size(connection::FIBER_STACK_BYTES)
                    .spawn(move || fed::read_replies(group, i, cell, recorder));
                match spawned {
                    Ok(f) => fibers.push(f),
                    Err(e) => {
                        // The readers spawned so far wake with end of stream and leave.
                        groups.iter().for_each(|g| g.abandon());
                        return Err(anyhow::Error::new(e)
                            .context("spawning a connection fiber (raise vm.max_map_count?)"));
                    }
                }
            }
        }
    }
    let start = Instant::now() + Duration::from_millis(20);
    let plan = Arc::new(Plan {
        start,
        count_from: start + config.warmup,
        end: start + config.warmup + config.duration,
        qps: config.qps,
        connections: connected,
        depth: config.depth,
        protocol: config.protocol,
        coalesce: !config.write_per_request,
        update_ratio: config.update_ratio,
        keys: config.keys,
        key_dist: config.key_dist,
        value_size: config.value_size,
        timeout: config.timeout,
        seed: config.seed,
        verbose: config.verbose,
        filler: vec![b'x'; config.value_size.max()],
    });
    let _ = cell.set(plan.clone());
    let mut dispatchers = Vec::new();
    for (g, group) in groups.iter().enumerate() {
        let (plan, recorder, lag, group) =
            (plan.clone(), recorder.clone(), lag.clone(), group.clone());
        let rate = plan.qps * group.len() as f64 / connected as f64;
        let spin = config.spin;
        let seed = plan.seed ^ 0xd15_9a7c ^ (g as u64).wrapping_mul(0x9E37_79B9);
        let spawned = weft::Builder::new()
            .name(format!("load-dispatch-{g}"))
            .spawn(move || fed::dispatch(&plan, &recorder, &lag, rate, &group, seed, spin));
        match spawned {
            Ok(d) => dispatchers.push(d),
            Err(e) => {
                groups.iter().for_each(|g| g.abandon());
                return Err(anyhow::Error::new(e).context("spawning a dispatcher fiber"));
            }
        }
    }
    for (i, stream) in streams.into_iter().enumerate() {
        let (plan, recorder) = (plan.clone(), recorder.clone());
        fibers.push(
            weft::Builder::new()
                .name(format!("load-tx-{i}"))
                .stack_size(connection::FIBER_STACK_BYTES)
                .spawn(move || connection::drive(stream, i, plan, recorder))
                .context("spawning a connection fiber (raise vm.max_map_count?)")?,
        );
    }
    // Measure the generator's CPU over the counted window only.
    let _ = weft::sleep_until(plan.count_from);
    let cpu_before = cpu::process_cpu_time();
    let sleeps_before = cpu::process_sleeps();
    let wall_before = Instant::now();
    let _ = weft::sleep_until(plan.end);
    let cpu_used = cpu::process_cpu_time() - cpu_before;
    let sleeps = cpu::process_sleeps() - sleeps_before;
    let wall = wall_before.elapsed();
    for d in dispatchers {
        let _ = d.join();
    }
    for f in fibers {
        let _ = f.join();
    }
    let total = recorder.total();
    let requests = total.replies + total.errors + total.timeouts;
    let utilisation = cpu::utilisation(cpu_used, wall, config.threads);
    let lag = lag.total();
    let send_lag = fed.then(|| LatencySummary::of(&lag.latency_us));
    // A polling dispatcher or processor keeps its core busy whatever the load: then the
    // generator is saturated when it sends late, not when it is busy.
    let polls = !config.spin.is_zero() || !config.idle_poll.is_zero();
    let saturated = match &send_lag {
        Some(l) if polls => l.p99 > SATURATED_LAG_US,
        _ => utilisation > cpu::SATURATED,
    };
    Ok(Report {
        server: config.server.clone(),
        connections: config.connections,
        depth: config.depth,
        update_ratio: config.update_ratio,
        target_qps: config.qps,
        // Replies received inside the window, whatever their intended time: the rate the
        // server delivered there (mutilate's and wrk2's `actual`).
        actual_qps: total.in_window as f64 / config.duration.as_secs_f64(),
        requests,
        unsent: total.unsent,
        misses: total.misses,
        errors: total.errors,
        timeouts: total.timeouts,
        latency_us: LatencySummary::of(&total.latency_us),
        duration_s: config.duration.as_secs_f64(),
        generator_threads: config.threads,
        generator_cpu_seconds: cpu_used.as_secs_f64(),
        generator_cpu_us_per_request: cpu_used.as_secs_f64() * 1e6 / total.replies.max(1) as f64,
        generator_sleeps_per_request: sleeps as f64 / total.replies.max(1) as f64,
        generator_utilisation: utilisation,
        generator_saturated: saturated,
        generator_send_lag_us: send_lag,
        generator_idle_poll_us: config.idle_poll.as_micros() as u64,
    })
}

/// Opens every connection, [`crate::connect::IN_FLIGHT`] at a time; fails only when none
/// could be opened.
fn connect_all(config: &Config, addr: SocketAddr) -> anyhow::Result<Vec<TcpStream>> {
    let connected = crate::connect::connect_many(
        addr,
        config.connections,
        config.connect_timeout,
        crate::connect::IN_FLIGHT,
    )
    .context("spawning connect fibers")?;
    if let Some(e) = connected.failures.first() {
        if connected.streams.is_empty() {
            bail!("cannot connect to {addr}: {e} (is the server running?)");
        }
        eprintln!(
            "weft load: warning: {} of {} connections failed: {e}",
            connected.failures.len(),
            config.connections
        );
    }
    Ok(connected.streams)
}

/// Stores every key once (pipelined, spread over the connections) so gets can hit.
fn preload(config: &Config, streams: &[TcpStream]) -> anyhow::Result<()> {
    const BATCH: u64 = 64;
    let workers = streams.len().min(64);
    let mut handles = Vec::with_capacity(workers);
    for (w, stream) in streams.iter().take(workers).enumerate() {
        let stream = stream
            .try_clone()
            .context("cloning a connection for preload")?;
        let (keys, value_size, seed) = (config.keys, config.value_size, config.seed);
        handles.push(
            weft::Builder::new()
                .stack_size(connection::FIBER_STACK_BYTES)
                .spawn(move || -> std::io::Result<()> {
                    let mut rng = SmallRng::seed_from_u64(seed ^ 0x5eed ^ w as u64);
                    let filler = vec![b'x'; value_size.max()];
                    let mine: Vec<u64> = (w as u64..keys).step_by(workers).collect();
                    let mut out = Vec::new();
                    let mut buf = vec![0u8; 64 * 1024];
                    for chunk in mine.chunks(BATCH as usize) {
                        out.clear();
                        for &k in chunk {
                            let len = value_size.sample(&mut rng);
                            request::push_set(&mut out, k, &filler[..len]);
                        }
                        (&stream).write_all(&out)?;
                        let (mut got, mut have) = (0, 0usize);
                        while got < chunk.len() {
                            match response::parse(&buf[..have]) {
                                Ok(Some((_, used))) => {
                                    buf.copy_within(used..have, 0);
                                    have -= used;
                                    got += 1;
                                }
                                Ok(None) => {
                                    if have == buf.len() {
                                        buf.resize(buf.len() * 2, 0);
                                    }
                                    let n = (&stream).read(&mut buf[have..])?;
                                    if n == 0 {
                                        return Err(std::io::Error::other(
                                            "server closed the connection during preload",
                                        ));
                                    }
                                    have += n;
                                }
                                Err(e) => return Err(std::io::Error::other(e.to_string())),
                            }
                        }
                    }
                    Ok(())
                })
                .context("spawning preload fibers")?,
        );
    }
    for h in handles {
        h.join()
            .map_err(|e| anyhow::anyhow!("preload fiber failed: {e}"))?
            .context("preloading keys")?;
    }
    Ok(())
}
