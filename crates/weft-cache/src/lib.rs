//! weft-cache: a memcached-compatible cache server, one fiber per connection.
//!
//! - [`protocol`]: the text protocol parser (classic and meta commands), byte-exact with
//!   memcached 1.6.18 including its error strings and number quirks.
//! - [`store`]: the sharded item store with LRU eviction, memcached's expiry and flush rules
//!   and 64-bit CAS.
//! - [`exec`]: runs a parsed command against the store and writes the reply.
//! - [`session`]: one connection (read, run every complete request, one write).
//! - [`lookahead`]: a read's pipelined gets looked up ahead, so their cache misses overlap.
//! - [`server`]: listeners, the connection limit, the sweeper, graceful shutdown.
//! - [`fatal`]: invariant violations stop the server.
//!
//! **A poisoned lock is fatal.** A panic while a store shard (or any other lock of this
//! crate) is held may leave it half-updated, so the next thread to take that lock writes one
//! line to stderr and aborts the process instead of serving from it ([`fatal`]). This is
//! done in the library rather than with `panic = "abort"` so it holds in every binary that
//! embeds the server, while the runtime keeps delivering other fibers' panics to their join
//! handles.
//!
//! ```no_run
//! let mut settings = weft_cache::Settings::default();
//! settings.port = 0;
//! settings.listen = vec!["127.0.0.1".into()];
//! let server = weft_cache::Server::start(settings)?;
//! println!("listening on {}", server.local_addrs()[0]);
//! server.shutdown(std::time::Duration::from_secs(1));
//! # Ok::<(), std::io::Error>(())
//! ```

pub mod config;
pub mod exec;
pub mod fatal;
pub mod lookahead;
pub mod output;
pub mod protocol;
pub mod server;
pub mod session;
pub mod stats;
pub mod store;

pub use config::Settings;
pub use server::Server;
