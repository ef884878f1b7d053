//! # weft: Go-style user-level threads for Rust servers
//!
//! weft runs **fibers**, user-level threads with their own stacks, M:N over OS threads. Code on
//! a fiber is written like blocking `std` code (one fiber per connection, plain loops, plain
//! `&mut [u8]` buffers); where it would block, the fiber parks and its processor runs another.
//!
//! - A **fiber** is spawned with [`spawn`] (or [`Builder`]) and joined through its
//!   [`JoinHandle`], which returns its value or its panic.
//! - A **processor** is an OS thread running fibers; a **cluster** ([`Cluster`]) is a set of
//!   processors with one scheduling policy ([`sched`]). Several clusters may run at once and a
//!   fiber may [`migrate`] between them (`unsafe`); the policies compose that way.
//! - Idle processors search briefly, then sleep; waking one costs a fence and two loads when
//!   none sleeps, and a wake-up is never lost.
//! - [`sync`] has fiber-aware locks, semaphores, channels, promises and wait groups: they park
//!   the fiber, not the OS thread, and also work from plain threads.
//! - [`fs`] has files (positioned reads and writes, `statx` metadata) and [`fs::send_file`].
//! - [`blocking()`] runs a closure on a bounded helper pool while the fiber parks.
//! - [`net`] has TCP sockets in the shape of `std::net`, blocking from the fiber's point of
//!   view; underneath, each processor drives one io_uring (or an epoll instance as the
//!   fallback), see [`io`]. They also work, as plain blocking sockets, from plain threads.
//!
//! ```
//! # fn main() -> std::io::Result<()> {
//! let cluster = weft::Cluster::builder().processors(2).scheduler("work-stealing").build()?;
//! let handle = cluster.spawn(|| {
//!     let (tx, rx) = weft::sync::channel::bounded(16);
//!     weft::spawn(move || {
//!         for i in 0..100 {
//!             tx.send(i).unwrap();
//!         }
//!     });
//!     let mut sum = 0;
//!     while let Ok(i) = rx.recv() {
//!         sum += i;
//!     }
//!     sum
//! });
//! assert_eq!(handle.join().unwrap(), 4950);
//! # Ok(())
//! # }
//! ```
//!
//! ## The fiber contract
//!
//! Stackful fibers that move between OS threads are outside what the Rust compiler reasons
//! about, so by default they do not move: a fiber starts on any processor of its cluster and
//! then stays on that OS thread for good (idle processors steal only fibers that have not
//! started; a wake-up goes to the fiber's home processor). `thread_local!`, `!Send` values and
//! panics are therefore sound on fibers, and safe code cannot cause undefined behaviour through
//! the runtime. Moving a started fiber is an `unsafe` opt-in ([`spawn_migratable`],
//! [`Builder::migratable`], [`migrate`]) whose caller promises to hold nothing thread-bound
//! across blocking calls. Read the contract on [`spawn`]: in short, use [`FiberLocal`] for
//! per-fiber state, and never park while holding an OS lock.
//!
//! ## Cancellation
//!
//! [`JoinHandle::cancel`] marks a fiber cancelled and wakes it; every blocking point (sync
//! waits, `sleep`, `join`) then returns [`Cancelled`] (or [`WaitError::Cancelled`]), which
//! the fiber propagates with `?`. Cancellation is sticky.

mod blocking;
pub mod coarse_clock;
mod ctx;
mod error;
pub mod fiber;
pub mod fs;
pub mod hint;
pub mod io;
mod loom;
pub mod net;
mod poison;
mod runtime;
pub mod sched;
pub mod sync;

pub use blocking::blocking;
pub use error::{Cancelled, WaitError};
pub use fiber::{
    is_cancelled, migrate, sleep, sleep_until, spawn, spawn_migratable, yield_now, Builder,
    FiberLocal, JoinError, JoinHandle,
};
pub use io::driver::keep_tick::{DEFAULT_PERIOD as DEFAULT_KEEP_TICK, MAX_PERIOD as MAX_KEEP_TICK};
pub use io::IoBackend;
pub use runtime::idle_poll::{DEFAULT_MAX as DEFAULT_IDLE_POLL, MAX_MAX as MAX_IDLE_POLL};
pub use runtime::sched_stats::{Log2Histogram, SchedStats};
pub use runtime::{default_cluster, Cluster, ClusterBuilder};
