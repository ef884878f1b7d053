//! # weft-bench: benchmarks and experiments
//!
//! Two kinds of job, one module each. In-process benchmarks that compare weft with tokio,
//! each written twice, once on weft fibers and once, idiomatically, on tokio's multi-thread
//! runtime, both reporting the same [`Record`]; and the orchestration of the benchmarks that
//! put weft's servers beside their peers, which start servers and generators as pinned child
//! processes and read what they did. The `weft` binary (`weft bench ...`, crate `weft-cli`)
//! parses the command line and calls in here; this crate has no command line of its own.
//!
//! - [`echo`]: echo-server requests/s and server CPU per request: weft (io_uring, epoll) vs
//!   tokio, server and client pinned to different cores.
//! - [`files`]: the ways of sending a file over TCP (`weft::fs::send_file_with`).
//! - [`study`]: the scheduler study's application benchmarks (packet processing, staged
//!   pipeline, audio mixing, option pricing) under any weft policy or tokio.
//! - [`sched`]: the Cforall thesis's scheduler micro-benchmarks (cycle, yield, churn, locality,
//!   transfer) plus fiber switch, spawn+join and idle-fiber memory measurements.
//! - [`wake_cost`]: the CPU one wake-up costs on this machine (by timer, by another CPU), the
//!   floor under an open-loop load generator's CPU per request.
//!
//! Orchestration (each job's `Options` and `run`; children pinned and killed by PID through
//! [`process`], medians with min and max from [`stats`]):
//! - [`experiment`]: `weft experiment`, the thesis experiments (rate sweeps with plots and a
//!   report, the disk-bound static case, fibers vs OS threads, the scheduler study).
//! - [`memcached`]: `weft bench memcached`, weft memcached against memcached `-t 1`.
//! - [`memory`]: `weft bench memory`, whether `-m` holds (RSS of both under a write-heavy load).
//! - [`http`]: `weft bench http`, weft http against nginx (wrk, the file set, `weft load http`).
//! - [`generators`]: `weft bench load`, the load generators against wrk, memcaslap and
//!   `benches/openloop`; and the memcached-like server starts and `weft load memcached` runs
//!   the other jobs share.
//! - [`host_probe`]: the host phase a comparison ran in (the CPUs' cache-line round trip, a
//!   system call's price), printed at its head.
//! - [`cgroup`]: the CPU quota (`--server-cpu-pct`) or the memory limit (`weft experiment
//!   disk`) the servers of a job run under.
//!
//! Architecture Invariant: this crate knows weft only through its public API (`weft::Cluster`,
//! `weft::spawn`, `weft::sync`, `weft::sched::names`, `weft::net`, `weft::fs`); it never reaches into the runtime, so what
//! it measures is what users get.

pub mod cgroup;
pub mod echo;
pub mod experiment;
pub mod files;
pub mod generators;
pub mod host_probe;
pub mod http;
pub mod memcached;
pub mod memory;
pub mod process;
mod record;
pub mod report;
pub mod sched;
pub mod stats;
pub mod study;
pub mod wake_cost;

pub use record::Record;

/// The member of `all` whose `name` is `s`, or an error naming `what` and the known names:
/// the `FromStr` of the benchmark enums.
pub(crate) fn find_by_name<T: Copy>(
    all: &[T],
    name: impl Fn(T) -> &'static str,
    s: &str,
    what: &str,
) -> Result<T, String> {
    all.iter().copied().find(|&b| name(b) == s).ok_or_else(|| {
        let known: Vec<_> = all.iter().map(|&b| name(b)).collect();
        format!("unknown {what} '{s}' (known: {})", known.join(", "))
    })
}
