//! # weft-bench: benchmarks that compare weft with tokio
//!
//! Each benchmark is written twice, once on weft fibers and once, idiomatically, on tokio's
//! multi-thread runtime, and both report the same [`Record`]. The `weft` binary
//! (`weft bench ...`, crate `weft-cli`) is the front end; this crate has no command line of its
//! own.
//!
//! - [`sched`]: the Cforall thesis's scheduler micro-benchmarks (cycle, yield, churn, locality,
//!   transfer) plus fiber switch, spawn+join and idle-fiber memory measurements.
//!
//! Architecture Invariant: this crate knows weft only through its public API (`weft::Cluster`,
//! `weft::spawn`, `weft::sync`, `weft::sched::names`); it never reaches into the runtime, so what
//! it measures is what users get.

mod record;
pub mod report;
pub mod sched;

pub use record::Record;
