//! # weft-bench: benchmarks that compare weft with tokio
//!
//! Each benchmark is written twice, once on weft fibers and once, idiomatically, on tokio's
//! multi-thread runtime, and both report the same [`Record`]. The `weft` binary
//! (`weft bench ...`, crate `weft-cli`) is the front end; this crate has no command line of its
//! own.
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
//! Architecture Invariant: this crate knows weft only through its public API (`weft::Cluster`,
//! `weft::spawn`, `weft::sync`, `weft::sched::names`, `weft::net`, `weft::fs`); it never reaches into the runtime, so what
//! it measures is what users get.

pub mod echo;
pub mod files;
mod record;
pub mod report;
pub mod sched;
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
