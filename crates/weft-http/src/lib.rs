//! weft-http: a static-file HTTP/1.1 server, one fiber per connection on a weft cluster.
//!
//! ```no_run
//! let mut config = weft_http::Config::new("/srv/www");
//! config.listen = "127.0.0.1:8080".parse().unwrap();
//! let server = weft_http::Server::bind(config)?;
//! weft_http::shutdown_on_signals(server.shutdown_handle())?;
//! server.run()?;
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! GET and HEAD (others: 405 with `Allow`), HTTP/1.0 and 1.1 (higher 1.x minors served as 1.1)
//! keep-alive and pipelining, `Content-Type` by extension, `Last-Modified`, nginx-style `ETag`,
//! the conditional requests of RFC 9110 §13 in §13.2.2's order (`If-Match` /
//! `If-Unmodified-Since` → 412, `If-None-Match` / `If-Modified-Since` → 304, `If-Range`),
//! `Range` → 206 (several ranges: `multipart/byteranges`, overlapping ones coalesced, capped) or
//! 416, `index.html` for directories and a 301 to add the slash (its `Location` built from a
//! validated authority), `Host` and framing validated (400, 501), configurable limits with their
//! statuses (400, 413, 414, 431, 408, 503), graceful shutdown.
//!
//! Modules, from the wire inwards: `server` (listener, accept loop, connection limit,
//! shutdown) → `conn` (one connection: buffer, pipelining, timeouts, answers) → the pure
//! parts `request` (httparse), `target` (decoding, normalising, authorities), `range`
//! (`Range`), `conditional` (RFC 9110 §13), `response` (heads), `date` (the cached `Date`) →
//! `cache` (open files) → `root` (opening below the root).
//!
//! Architecture invariant: the pure modules do no I/O and know nothing of weft; only
//! `server`, `conn` and `cache` touch the runtime.

mod access_log;
mod admission;
#[cfg(test)]
mod alloc_count;
mod buffers;
mod cache;
mod conditional;
mod config;
mod conn;
mod date;
mod fatal;
mod range;
mod request;
mod response;
mod root;
mod server;
mod target;

pub use config::{
    Config, DEFAULT_MAX_HEADER_LINES, DEFAULT_MAX_HEAD_BYTES, DEFAULT_MAX_RANGES,
    DEFAULT_MAX_REQUEST_LINE_BYTES, DEFAULT_MAX_UNANSWERED, DEFAULT_MEMORY_MAX_BYTES,
    DEFAULT_SCHEDULER,
};
pub use server::{shutdown_on_signals, Server, ShutdownHandle, CONNECTION_THREAD_NAME};
