//! weft-load: the measuring apparatus.
//!
//! - [`memcached`]: an open-loop memcached load generator in the style of mutilate — every
//!   connection follows its own Poisson schedule, latency is measured from the *intended* send
//!   time (so a slow server cannot hide its queueing: no coordinated omission), percentiles from
//!   an HdrHistogram.
//! - [`latency`]: the sharded histogram every generator records into, and its summary.
//! - [`dist`]: key-popularity and value-size distributions named on the command line.
//! - [`connect`]: opening a generator's persistent connections, a bounded number at a time.
//! - [`cpu`]: the generator's own CPU time, so a run can say when the generator, not the
//!   server, was the bottleneck.
//!
//! Architecture Invariant: this crate knows nothing about weft's servers; it speaks the
//! wire protocols only, so it measures weft, memcached and nginx the same way.

pub mod connect;
pub mod cpu;
pub mod dist;
pub mod fileset;
pub mod http;
pub mod latency;
pub mod limits;
pub mod memcached;
pub mod nginx;
pub mod schedule;
