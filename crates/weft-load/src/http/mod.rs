//! The HTTP load generator (`weft load http`), in the style of httperf: sessions start on a
//! Poisson schedule at the target session rate; each opens a new connection, sends its
//! requests (names drawn from a file set or URL list) one at a time, and closes. A request
//! not answered within the client timeout (10 s by default) is an error, as in httperf.
//!
//! Every session is its own fiber, so a slow server costs the generator parked fibers, not
//! missed send times: the schedule never waits for replies (open loop). Concurrent sessions
//! are capped by the descriptor limit; a session that would exceed it counts as
//! `fd_unavailable` (httperf's "fd-unavail").

pub mod names;
pub mod reply;
pub mod session;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};

use crate::cpu;
use crate::latency::{LatencySummary, Recorder};
use crate::schedule::Poisson;
use names::Names;
use session::{ErrorCounters, Errors, SessionPlan};

/// Where request names come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A directory made by `weft fileset` (its manifest gives the weights).
    Fileset(PathBuf),
    /// A file of URL paths, most popular first.
    Urls(PathBuf),
}

/// What `weft load http` was asked to do.
#[derive(Debug, Clone)]
pub struct Config {
    pub server: String,
    pub source: Source,
    /// Sessions started per second; 0 = closed loop: `connections` keep-alive connections
    /// each sending its next request as soon as the last reply arrives (like wrk).
    pub session_rate: f64,
    /// Connections of the closed loop, or of the persistent open loop.
    pub connections: usize,
    /// Open loop over `connections` persistent keep-alive connections (like the C
    /// generator's http mode and wrk2) instead of httperf's sessions: `session_rate` ×
    /// `requests_per_session` requests/s, Poisson, each sent on a random connection, depth 1.
    pub persistent: bool,
    pub requests_per_session: usize,
    /// httperf's ending: the last request of a session does not ask the server to close
    /// (no `Connection: close`); the client closes once its reply is in, and the server
    /// learns of it from the end of stream. Otherwise the last request carries
    /// `Connection: close` and the server closes first.
    pub client_closes: bool,
    pub think: Duration,
    pub duration: Duration,
    pub warmup: Duration,
    pub timeout: Duration,
    pub threads: usize,
    /// Most sessions open at once (0: as many as descriptors allow).
    pub max_sessions: usize,
    pub seed: u64,
}

impl Config {
    /// Rejects settings that cannot run.
    pub fn validate(&self) -> anyhow::Result<()> {
        if !(self.session_rate >= 0.0 && self.session_rate.is_finite()) {
            bail!("the rate must be a number >= 0 (0 = closed loop over --connections)");
        }
        if (self.session_rate == 0.0 || self.persistent) && self.connections == 0 {
            bail!("a closed loop (rate 0) needs --connections >= 1");
        }
        if self.requests_per_session == 0 {
            bail!("--requests-per-session must be at least 1");
        }
        if self.duration.is_zero() {
            bail!("--duration must be > 0");
        }
        if self.timeout.is_zero() {
            bail!("--timeout must be > 0");
        }
        if self.threads == 0 {
            bail!("--threads must be at least 1");
        }
        Ok(())
    }
}

/// What a run measured; `--json` prints this.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub server: String,
    /// Target requests per second (session rate × requests per session).
    pub target_rate: f64,
    pub session_rate: f64,
    pub requests_per_session: usize,
    /// Whether sessions ended as httperf's do (the client closes; `Config::client_closes`).
    #[serde(default)]
    pub client_closes: bool,
    /// Successful (2xx/3xx) replies received inside the window, per second of it: what the
    /// server delivered there (wrk2's and mutilate's rate), whichever request they answer.
    pub replies_per_sec: f64,
    /// Successful replies to requests intended inside the window (the latency sample).
    pub replies: u64,
    /// Requests of sessions started in the window that were not sent because the window had
    /// ended (a session's later requests).
    #[serde(default)]
    pub unsent: u64,
    pub errors: Errors,
    pub errors_total: u64,
    /// Errors per request attempted, in percent.
    pub error_rate_pct: f64,
    pub latency_us: LatencySummary,
    pub body_mb_per_sec: f64,
    pub duration_s: f64,
    pub generator_threads: usize,
    pub generator_cpu_us_per_request: f64,
    pub generator_utilisation: f64,
    pub generator_saturated: bool,
}

impl Report {
    /// A short human-readable summary.
    pub fn human(&self) -> String {
        let e = &self.errors;
        format!(
            "target {:.0} req/s  replies {:.0}/s  ({} replies, {} unsent, {:.1} MB/s)\n\
             errors {} ({:.2}%): timeout {} refused {} reset {} bad-status {} fd-unavail {} other {}\n{}\n{}",
            self.target_rate,
            self.replies_per_sec,
            self.replies,
            self.unsent,
            self.body_mb_per_sec,
            self.errors_total,
            self.error_rate_pct,
            e.timeout,
            e.refused,
            e.reset,
            e.bad_status,
            e.fd_unavailable,
            e.other,
            self.latency_us.human(),
            cpu::human_generator_line(
                self.generator_threads,
                self.generator_cpu_us_per_request,
                self.generator_utilisation
            )
        )
    }
}

/// Runs the sessions described by `config`.
pub fn run(config: &Config) -> anyhow::Result<Report> {
    config.validate()?;
    let addr = crate::memcached::resolve(&config.server)?;
    let names = match &config.source {
        Source::Fileset(dir) => Names::from_fileset(dir)?,
        Source::Urls(file) => Names::from_url_file(file)?,
    };
    let fd_limit = weft::net::raise_descriptor_limit()
        .map_or(1024, |l| usize::try_from(l).unwrap_or(usize::MAX));
    let max_sessions = match config.max_sessions {
        0 => fd_limit.saturating_sub(64).max(1),
        n => n,
    };
    crate::limits::reserve_descriptors(max_sessions.min(fd_limit) as u64)?;
    let config = config.clone();
    cpu::run_on_own_cluster(
        "weft-load-http",
        config.threads,
        Duration::ZERO,
        move || drive(&config, addr, names, max_sessions),
    )
}

fn drive(
    config: &Config,
    addr: SocketAddr,
    names: Names,
    max_sessions: usize,
) -> anyhow::Result<Report> {
    if config.persistent && config.session_rate > 0.0 {
        return persistent_open_loop(config, addr, names);
    }
    let start = Instant::now() + Duration::from_millis(20);
    let plan = Arc::new(SessionPlan {
        addr,
        host: config.server.clone(),
        names,
        requests_per_session: config.requests_per_session,
        client_closes: config.client_closes,
        think: config.think,
        timeout: config.timeout,
        count_from: start + config.warmup,
        end: start + config.warmup + config.duration,
        recorder: Recorder::new(),
        errors: ErrorCounters::default(),
        bytes: AtomicU64::new(0),
    });
    let open = Arc::new(AtomicUsize::new(0));
    let sessions = Arc::new(weft::sync::WaitGroup::new());
    let mut rng = SmallRng::seed_from_u64(config.seed);
    if config.session_rate == 0.0 {
        return closed_loop(config, plan, start);
    }

    let mut schedule = Poisson::new(config.session_rate, start, &mut rng);
    let mut measured_cpu = None;
    let mut index = 0u64;
    loop {
        let at = schedule.next(&mut rng);
        if at >= plan.end {
            break;
        }
        if measured_cpu.is_none() && at >= plan.count_from {
            measured_cpu = Some((cpu::process_cpu_time(), Instant::now()));
        }
        if at > Instant::now() {
            let _ = weft::sleep_until(at);
        }
        if open.load(Ordering::Relaxed) >= max_sessions {
            if at >= plan.count_from {
                plan.errors.fd_unavailable.fetch_add(1, Ordering::Relaxed);
            }
            continue;
        }
        index += 1;
        open.fetch_add(1, Ordering::Relaxed);
        sessions.add(1);
        let (plan2, open2, sessions2) = (plan.clone(), open.clone(), sessions.clone());
        let seed = config.seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let spawned = weft::Builder::new()
            .stack_size(crate::memcached::connection::FIBER_STACK_BYTES)
            .spawn(move || {
                let mut rng = SmallRng::seed_from_u64(seed);
                session::run(&plan2, at, &mut rng);
                open2.fetch_sub(1, Ordering::Relaxed);
                sessions2.done();
            });
        if spawned.is_err() {
            open.fetch_sub(1, Ordering::Relaxed);
            sessions.done();
            plan.errors.other.fetch_add(1, Ordering::Relaxed);
        }
    }
    let (cpu_before, wall_before) =
        measured_cpu.unwrap_or((cpu::process_cpu_time(), Instant::now()));
    let cpu_used = cpu::process_cpu_time() - cpu_before;
    let wall = wall_before.elapsed();
    // A bounded drain: sessions already sent wait at most the client timeout.
    let _ = sessions.wait_timeout(config.timeout + Duration::from_millis(100));
    Ok(report(config, &plan, cpu_used, wall))
}

/// `connections` fibers, each a keep-alive connection sending back to back until the end.
fn closed_loop(config: &Config, plan: Arc<SessionPlan>, start: Instant) -> anyhow::Result<Report> {
    let mut fibers = Vec::with_capacity(config.connections);
    for i in 0..config.connections {
        let plan = plan.clone();
        let seed = config.seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        fibers.push(
            weft::Builder::new()
                .stack_size(crate::memcached::connection::FIBER_STACK_BYTES)
                .spawn(move || {
                    let _ = weft::sleep_until(start);
                    session::run_closed(&plan, &mut SmallRng::seed_from_u64(seed));
                })
                .context("spawning a connection fiber")?,
        );
    }
    let _ = weft::sleep_until(plan.count_from);
    let (cpu_before, wall_before) = (cpu::process_cpu_time(), Instant::now());
    let _ = weft::sleep_until(plan.end);
    let cpu_used = cpu::process_cpu_time() - cpu_before;
    let wall = wall_before.elapsed();
    for f in fibers {
        let _ = f.join();
    }
    Ok(report(config, &plan, cpu_used, wall))
}

/// Open loop over `connections` keep-alive connections opened before the schedule starts:
/// one Poisson process of the whole rate, each arrival handed to a random connection's fiber
/// (superposition: the same load as a process of rate/N per connection). The dispatcher polls
/// (yields) when the next arrival is within 100 µs, as the memcached generator does.
fn persistent_open_loop(config: &Config, addr: SocketAddr, names: Names) -> anyhow::Result<Report> {
    use weft::sync::channel;
    const SPIN: Duration = Duration::from_micros(100);
    // Connect every connection first, a bounded number at a time.
    let connected = crate::connect::connect_many(
        addr,
        config.connections,
        Duration::from_secs(5),
        crate::connect::IN_FLIGHT,
    )
    .context("spawning connect fibers")?;
    let errors = ErrorCounters::default();
    for e in &connected.failures {
        errors.count(e);
    }
    let streams = connected.streams;
    if streams.is_empty() {
        bail!("no connection to {} could be opened", config.server);
    }
    let start = Instant::now() + Duration::from_millis(20);
    let plan = Arc::new(SessionPlan {
        addr,
        host: config.server.clone(),
        names,
        requests_per_session: 1,
        client_closes: false,
        think: Duration::ZERO,
        timeout: config.timeout,
        count_from: start + config.warmup,
        end: start + config.warmup + config.duration,
        recorder: Recorder::new(),
        errors,
        bytes: AtomicU64::new(0),
    });
    let mut feeds = Vec::with_capacity(streams.len());
    let mut fibers = Vec::with_capacity(streams.len());
    for (i, stream) in streams.into_iter().enumerate() {
        let (tx, rx) = channel::bounded::<Instant>(64);
        feeds.push(tx);
        let plan = plan.clone();
        let seed = config.seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        fibers.push(
            weft::Builder::new()
                .stack_size(crate::memcached::connection::FIBER_STACK_BYTES)
                .spawn(move || {
                    session::run_fed(&plan, stream, rx, &mut SmallRng::seed_from_u64(seed))
                })
                .context("spawning a connection fiber")?,
        );
    }
    let mut rng = SmallRng::seed_from_u64(config.seed ^ 0xd15_9a7c);
    let rate = config.session_rate * config.requests_per_session as f64;
    let mut schedule = Poisson::new(rate, start, &mut rng);
    let mut measured_cpu = None;
    let mut unsent = 0u64;
    let mut next = schedule.next(&mut rng);
    while next < plan.end {
        let now = Instant::now();
        if measured_cpu.is_none() && now >= plan.count_from {
            measured_cpu = Some((cpu::process_cpu_time(), now));
        }
        if next > now {
            if next - now <= SPIN {
                weft::yield_now();
            } else if weft::sleep_until(next - SPIN / 2).is_err() {
                break;
            }
            continue;
        }
        let feed = &feeds[rand::Rng::random_range(&mut rng, 0..feeds.len())];
        if !hand_over(feed, next) {
            unsent += u64::from(plan.counts(next));
        }
        next = schedule.next(&mut rng);
    }
    let (cpu_before, wall_before) =
        measured_cpu.unwrap_or((cpu::process_cpu_time(), Instant::now()));
    let cpu_used = cpu::process_cpu_time() - cpu_before;
    let wall = wall_before.elapsed();
    plan.recorder.with(|t| t.unsent += unsent);
    drop(feeds);
    for f in fibers {
        let _ = f.join();
    }
    Ok(report(config, &plan, cpu_used, wall))
}

fn report(config: &Config, plan: &SessionPlan, cpu_used: Duration, wall: Duration) -> Report {
    let total = plan.recorder.total();
    let errors = plan.errors.snapshot();
    let attempted = total.replies + errors.total();
    let utilisation = cpu::utilisation(cpu_used, wall, config.threads);
    let secs = config.duration.as_secs_f64();
    Report {
        server: config.server.clone(),
        target_rate: config.session_rate * config.requests_per_session as f64,
        session_rate: config.session_rate,
        requests_per_session: config.requests_per_session,
        client_closes: config.client_closes,
        replies_per_sec: total.in_window as f64 / secs,
        replies: total.replies,
        unsent: total.unsent,
        errors_total: errors.total(),
        error_rate_pct: errors.total() as f64 * 100.0 / attempted.max(1) as f64,
        errors,
        latency_us: LatencySummary::of(&total.latency_us),
        body_mb_per_sec: plan.bytes.load(Ordering::Relaxed) as f64 / 1e6 / secs,
        duration_s: secs,
        generator_threads: config.threads,
        generator_cpu_us_per_request: cpu_used.as_secs_f64() * 1e6 / attempted.max(1) as f64,
        generator_utilisation: utilisation,
        generator_saturated: utilisation > cpu::SATURATED,
    }
}

/// Hands the arrival intended at `at` to a fed session ([`session::run_fed`]); false when it
/// was never sent: the session's queue is full, or the session has left, which a fed session
/// does only once the window is over (a dispatcher behind schedule still draws arrivals
/// intended inside it). A failed exchange does not end a fed session: it reconnects.
fn hand_over(feed: &weft::sync::channel::Sender<Instant>, at: Instant) -> bool {
    feed.try_send(at).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft::sync::channel;

    #[test]
    fn an_arrival_for_a_session_that_left_or_is_full_is_unsent() {
        let (tx, rx) = channel::bounded::<Instant>(1);
        let now = Instant::now();
        assert!(hand_over(&tx, now), "a session with room takes it");
        assert!(!hand_over(&tx, now), "a full queue: never sent");
        drop(rx);
        // The session saw the window end and left: never sent, not an error.
        assert!(!hand_over(&tx, now));
    }
}
