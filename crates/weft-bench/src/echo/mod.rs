//! The echo benchmark: an echo server (weft on io_uring or epoll, or the same echo written
//! idiomatically on tokio) pinned to CPU 0 in its own process, driven from CPU 1 by a
//! closed-loop client with N connections.
//!
//! - [`server`]: the three echo servers (run in the child process).
//! - [`client`]: the load generator, one thread on raw io_uring (one `io_uring_enter` per batch
//!   of completions, so a single core can out-run the server being measured).
//! - [`cpu`]: pinning, and the server's CPU time from `/proc/<pid>/stat`.
//!
//! Invariant: the figures cover only the measuring window (after a warm-up); the server's CPU
//! time is sampled at both ends of that same window.

pub mod client;
pub mod cpu;
pub mod server;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::Serialize;

/// Which echo server to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// weft, one processor, io_uring.
    Uring,
    /// weft, one processor, epoll.
    Epoll,
    /// tokio's current-thread runtime.
    Tokio,
}

impl Backend {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Uring => "uring",
            Backend::Epoll => "epoll",
            Backend::Tokio => "tokio",
        }
    }
}

impl std::str::FromStr for Backend {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "uring" => Ok(Backend::Uring),
            "epoll" => Ok(Backend::Epoll),
            "tokio" => Ok(Backend::Tokio),
            other => Err(format!(
                "unknown backend {other:?} (expected uring, epoll or tokio)"
            )),
        }
    }
}

/// One measurement.
#[derive(Debug, Clone, Serialize)]
pub struct EchoReport {
    pub backend: &'static str,
    pub connections: usize,
    pub message_size: usize,
    pub requests: u64,
    pub seconds: f64,
    pub requests_per_sec: f64,
    pub server_cpu_seconds: f64,
    pub server_cpu_us_per_request: f64,
    /// The cap on the server's CPU, in % of its core, when the caller applied one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_cpu_pct: Option<u32>,
    /// Cache-line round trip between CPUs 0 and 1 (server and client) just before the run, in
    /// nanoseconds: the host's vCPU placement, which the loopback path pays on every message
    /// (see `crate::sched::core_probe`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub core_round_trip_ns: Option<f64>,
    /// The same probe just after the run (the host can move the vCPUs during one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub core_round_trip_after_ns: Option<f64>,
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct EchoParams {
    pub backend: Backend,
    pub connections: usize,
    pub message_size: usize,
    pub duration: Duration,
    /// Not measured, before the window opens.
    pub warmup: Duration,
    /// The cap the caller puts on the server's CPU (through `on_spawn`), for the report.
    pub server_cpu_pct: Option<u32>,
}

/// Kills the server child when the measurement ends, however it ends.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `server` (a command that runs [`server::serve`] and prints its port on the first line
/// of its standard output), hands its PID to `on_spawn` (to cap its CPU, say), drives it from
/// CPU 1 and reports. The server is stopped before this returns, however it returns.
pub fn run(
    params: &EchoParams,
    mut server: Command,
    on_spawn: impl FnOnce(u32) -> std::io::Result<()>,
) -> std::io::Result<EchoReport> {
    let mut child = Child(
        server
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?,
    );
    let (server_cpu, load_cpu) = crate::process::server_and_load_cpus();
    let core_round_trip_ns = match (server_cpu, load_cpu) {
        (Some(s), Some(l)) => crate::sched::core_probe::round_trip_ns(s, l),
        _ => None,
    };
    on_spawn(child.0.id())?;
    let stdout = child.0.stdout.take().expect("piped");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    let port: u16 = line.trim().parse().map_err(|_| {
        std::io::Error::other(format!("echo server did not print its port: {line:?}"))
    })?;
    if let Some(c) = load_cpu {
        cpu::pin_current_thread(c)?;
    }
    let pid = child.0.id();
    let result = client::drive(([127, 0, 0, 1], port).into(), params, || {
        cpu::process_cpu_seconds(pid)
    })?;
    let (requests, seconds, cpu_seconds) = result;
    let core_round_trip_after_ns = crate::sched::core_probe::round_trip_ns(0, 1);
    Ok(EchoReport {
        backend: params.backend.name(),
        connections: params.connections,
        message_size: params.message_size,
        requests,
        seconds,
        requests_per_sec: requests as f64 / seconds,
        server_cpu_seconds: cpu_seconds,
        server_cpu_us_per_request: cpu_seconds * 1e6 / requests.max(1) as f64,
        server_cpu_pct: params.server_cpu_pct,
        core_round_trip_ns,
        core_round_trip_after_ns,
    })
}
