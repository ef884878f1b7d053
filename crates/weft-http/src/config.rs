//! The server's settings, with the defaults an operator would expect.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Everything [`crate::Server::bind`] needs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The directory served.
    pub root: PathBuf,
    /// Where to listen.
    pub listen: SocketAddr,
    /// Processors (OS threads) of the server's cluster.
    pub processors: usize,
    /// Scheduling policy (`None`: the runtime's default, `WEFT_SCHEDULER`; [`Config::new`]
    /// sets [`DEFAULT_SCHEDULER`]).
    pub scheduler: Option<String>,
    /// I/O backend (`None`: io_uring, epoll if refused).
    pub io: Option<weft::IoBackend>,
    /// How long an idle processor polls for the next request before it sleeps, in
    /// microseconds (0: sleep at once; see `weft::ClusterBuilder::idle_poll`); default
    /// `weft::DEFAULT_IDLE_POLL`.
    pub idle_poll_us: u64,
    /// The period of each processor's tick keeper, in microseconds (0: none; see
    /// `weft::ClusterBuilder::keep_tick`); default `weft::DEFAULT_KEEP_TICK`.
    pub keep_tick_us: u64,
    /// Most connections open at once; more are answered 503 and closed.
    pub max_connections: usize,
    /// Most accepted connections at once whose request waits for the server (the CPU, the
    /// disk) rather than for the client; past it the accept fiber waits and new connections
    /// stay in the kernel's listen queue, where they cost no memory (see `admission.rs`).
    pub max_unanswered: usize,
    /// Where to append an access log line per response.
    pub access_log: Option<PathBuf>,
    /// Longest request line; longer → 414.
    pub max_request_line_bytes: usize,
    /// Largest request head (request line and header fields); larger → 431.
    pub max_head_bytes: usize,
    /// Most header field lines in one request; more → 431.
    pub max_header_lines: usize,
    /// Most ranges in one `Range` header; more and the header is ignored (200 with the whole
    /// file), as nginx's `max_ranges` does.
    pub max_ranges: usize,
    /// Largest request body read and discarded (GET/HEAD carry none); larger → 413.
    pub max_body_bytes: u64,
    /// Time allowed for a whole request head once its first byte arrived; then 408 and close.
    pub header_timeout: Duration,
    /// Time a kept-alive connection may sit idle between requests; then it is closed.
    pub keepalive_timeout: Duration,
    /// Time a response may wait for the client to read; then the connection is closed.
    pub send_timeout: Duration,
    /// Most files kept open in the open-file cache.
    pub open_file_cache_entries: usize,
    /// How long an open-file cache entry is served without looking at the file after it was
    /// last checked (nginx's `open_file_cache_valid`; zero: every request is answered on a
    /// check of the open descriptor that began after it arrived, so a file changed, replaced
    /// or deleted before it was sent is never answered from the old entry). Within the window
    /// a changed file can be served as it was, or, if it shrank in place and is sent from
    /// the descriptor, its response ends early with the connection.
    pub open_file_cache_valid: Duration,
    /// Files up to this size are also kept in memory and sent with the head in one write
    /// (`0`: every body goes through `send_file`).
    pub memory_max_bytes: u64,
    /// Whether symlinks may point outside the root.
    pub symlinks_may_leave_root: bool,
    /// Longest wait for responses in flight after a shutdown request.
    pub shutdown_grace: Duration,
    /// `TCP_DEFER_ACCEPT` on the listener, in seconds (0: off): the kernel hands over a
    /// connection only once its first bytes arrived, so the first read never waits.
    pub defer_accept_secs: u32,
    /// Serve each connection on an OS thread of its own (with the same code, which then does
    /// its socket and file I/O with blocking calls) instead of a fiber: the comparison mode
    /// of `weft experiment threads`. The accept loop stays a fiber on the cluster.
    pub threads_per_connection: bool,
}

impl Config {
    /// The defaults, serving `root`.
    pub fn new(root: impl Into<PathBuf>) -> Config {
        Config {
            root: root.into(),
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            processors: 1,
            scheduler: Some(DEFAULT_SCHEDULER.to_owned()),
            io: None,
            idle_poll_us: weft::DEFAULT_IDLE_POLL.as_micros() as u64,
            keep_tick_us: weft::DEFAULT_KEEP_TICK.as_micros() as u64,
            max_connections: 16_384,
            max_unanswered: DEFAULT_MAX_UNANSWERED,
            access_log: None,
            max_request_line_bytes: DEFAULT_MAX_REQUEST_LINE_BYTES,
            max_head_bytes: DEFAULT_MAX_HEAD_BYTES,
            max_header_lines: DEFAULT_MAX_HEADER_LINES,
            max_ranges: DEFAULT_MAX_RANGES,
            max_body_bytes: 1024 * 1024,
            header_timeout: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(75),
            send_timeout: Duration::from_secs(60),
            open_file_cache_entries: 8192,
            open_file_cache_valid: Duration::ZERO,
            memory_max_bytes: DEFAULT_MEMORY_MAX_BYTES,
            symlinks_may_leave_root: false,
            shutdown_grace: Duration::from_secs(30),
            defer_accept_secs: 1,
            threads_per_connection: false,
        }
    }
}

/// Default for [`Config::max_unanswered`]: enough requests in flight to keep a disk and the
/// blocking pool busy (Little's law at 7,500 req/s and 30 ms is 225), few enough that a
/// backlog held as fibers stays small (each about 17 KiB resident: 4.3 MiB).
pub const DEFAULT_MAX_UNANSWERED: usize = 256;

/// Default for [`Config::max_request_line_bytes`]: nginx's `large_client_header_buffers`
/// buffer size, the longest request line nginx accepts.
pub const DEFAULT_MAX_REQUEST_LINE_BYTES: usize = 8 * 1024;

/// Default for [`Config::max_head_bytes`]: nginx holds a head in its 1 KiB header buffer plus
/// four 8 KiB large buffers (about 33 KiB at most); 64 KiB is above that.
pub const DEFAULT_MAX_HEAD_BYTES: usize = 64 * 1024;

/// Default for [`Config::max_header_lines`]: nginx counts no lines, only bytes, so the default
/// never binds before [`DEFAULT_MAX_HEAD_BYTES`] does (a field line is at least 4 bytes,
/// `a:\r\n`).
pub const DEFAULT_MAX_HEADER_LINES: usize = DEFAULT_MAX_HEAD_BYTES / 4;

/// Default for [`Config::max_ranges`] (nginx's `max_ranges` is unlimited by default; a cap
/// bounds what one small request can make the server send, RFC 9110 §14.2).
pub const DEFAULT_MAX_RANGES: usize = 100;

/// The scheduling policy the server uses unless told otherwise: `ws-grow` (work-stealing with
/// local queues that grow instead of overflowing). Chosen by measurement, docs/SCHEDULERS.md
/// "Server defaults": throughput equal to `work-stealing` or better, and a lower tail, both in
/// the server benchmarks and in the study (where a bounded ring's overflow reorders tasks).
pub const DEFAULT_SCHEDULER: &str = "ws-grow";

/// Default for [`Config::memory_max_bytes`] (docs/BENCHMARKS.md, "HTTP server", has the
/// measurement: small files served from memory with their head in one write).
pub const DEFAULT_MEMORY_MAX_BYTES: u64 = 16 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_scheduler_is_a_registered_policy() {
        assert_eq!(
            Config::new(".").scheduler.as_deref(),
            Some(DEFAULT_SCHEDULER)
        );
        assert!(weft::sched::POLICIES
            .iter()
            .any(|p| p.name == DEFAULT_SCHEDULER));
    }
}
