//! Server settings, with memcached's defaults.

use std::path::PathBuf;

/// The scheduling policy the server uses unless told otherwise: `ws-grow` (work-stealing with
/// local queues that grow instead of overflowing). Chosen by measurement, docs/SCHEDULERS.md
/// "Server defaults": throughput equal to `work-stealing` or better, and a lower tail, both in
/// the server benchmarks and in the study (where a bounded ring's overflow reorders tasks).
pub const DEFAULT_SCHEDULER: &str = "ws-grow";

/// How the server is run (what `weft memcached`'s flags set).
#[derive(Clone, Debug)]
pub struct Settings {
    /// `-p`; 0 picks a free port (tests).
    pub port: u16,
    /// `-l`: addresses to listen on (memcached's default is all interfaces).
    pub listen: Vec<String>,
    /// `-m` in megabytes.
    pub memory_limit_mb: usize,
    /// `-c`.
    pub max_connections: usize,
    /// `-t`: processors in the cluster.
    pub processors: usize,
    /// `-I` in bytes.
    pub item_size_max: usize,
    /// `-M` clears this.
    pub evictions: bool,
    /// `-v` count.
    pub verbosity: u32,
    /// `-s`: a Unix socket path (memcached then listens on no TCP port).
    pub unix_socket: Option<PathBuf>,
    /// `-a`: the Unix socket's permission bits.
    pub unix_mask: u32,
    /// Scheduling policy name.
    pub scheduler: String,
    /// `uring` or `epoll`; `None` = weft's default.
    pub io: Option<weft::IoBackend>,
    /// How long an idle processor polls for the next request before it sleeps, in
    /// microseconds (0: sleep at once; see `weft::ClusterBuilder::idle_poll`); default
    /// the runtime's, `weft::DEFAULT_IDLE_POLL`.
    pub idle_poll_us: u64,
    /// The period of each processor's tick keeper, in microseconds (0: none; see
    /// `weft::ClusterBuilder::keep_tick`); default `weft::DEFAULT_KEEP_TICK`.
    pub keep_tick_us: u64,
    /// A client that does not read its responses for this long is disconnected.
    pub write_stall_timeout_ms: u64,
    /// Serve each connection on an OS thread of its own instead of a fiber (the same session
    /// code, whose socket calls then block the thread): the comparison mode of `weft
    /// experiment threads`. The accept loop, sweeper and trim fibers stay on the cluster.
    pub threads_per_connection: bool,
    /// How often the sweeper reclaims expired items.
    pub sweep_interval_ms: u64,
    /// `-b`: the listen backlog.
    pub backlog: u32,
    /// `-A`: the `shutdown` command stops the server (else memcached's refusal).
    pub shutdown_command: bool,
    /// `-F` clears this: `flush_all` is refused.
    pub flush_enabled: bool,
    /// `-X` clears this: `stats cachedump` is refused.
    pub dump_enabled: bool,
    /// `-C` clears this: every item's CAS value is 0.
    pub use_cas: bool,
    /// `-Y`: `user:password` lines; a connection must authenticate (ASCII auth) first.
    pub auth: Option<Vec<(Vec<u8>, Vec<u8>)>>,
    /// `-D`: the key prefix delimiter for `stats detail`.
    pub prefix_delimiter: u8,
    /// `-D` given: per-prefix stats are collected from the start.
    pub detail_enabled: bool,
    /// `-R`: requests one connection runs before letting others run.
    pub reqs_per_event: usize,
    /// `-o idle_timeout`: close a connection that sends nothing for this many seconds (0 =
    /// never).
    pub idle_timeout_secs: u64,
    /// `-o hashpower`: the hash tables are sized for 2^n items at start.
    pub hashpower: Option<u8>,
    /// `-o lru_crawler` / `no_lru_crawler`: the background sweeper of expired items.
    pub sweeper: bool,
    /// `-o lru_crawler_tocrawl`: slots the sweeper looks at per shard and pass (0 = all).
    pub sweep_budget: usize,
    /// `-B`: `auto-negotiate` or `ascii` (both serve the text protocol).
    pub binding_protocol: &'static str,
    /// memcached's slab tuning (`-f`, `-n`, `-o slab_chunk_max`): weft allocates each item
    /// exactly, so these only name the size classes `stats items`/`stats slabs`/`me` report.
    pub slab_growth_factor: f64,
    pub slab_chunk_min: usize,
    pub slab_chunk_max: usize,
    /// `-L`: the item pages are advised into transparent huge pages, as memcached's on
    /// Linux.
    pub large_pages: bool,
    /// Settings that only `stats settings` reports (memcached's name and value), set by
    /// flags and `-o` options weft accepts without a behaviour of its own.
    pub reported: Vec<(String, String)>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            port: 11211,
            listen: Vec::new(),
            memory_limit_mb: 64,
            max_connections: 1024,
            processors: 4,
            item_size_max: 1024 * 1024,
            evictions: true,
            verbosity: 0,
            unix_socket: None,
            unix_mask: 0o700,
            scheduler: DEFAULT_SCHEDULER.to_owned(),
            io: None,
            idle_poll_us: weft::DEFAULT_IDLE_POLL.as_micros() as u64,
            keep_tick_us: weft::DEFAULT_KEEP_TICK.as_micros() as u64,
            write_stall_timeout_ms: 30_000,
            threads_per_connection: false,
            sweep_interval_ms: 1000,
            backlog: 1024,
            shutdown_command: false,
            flush_enabled: true,
            dump_enabled: true,
            use_cas: true,
            auth: None,
            prefix_delimiter: b':',
            detail_enabled: false,
            reqs_per_event: 20,
            idle_timeout_secs: 0,
            hashpower: None,
            sweeper: true,
            sweep_budget: 1024,
            binding_protocol: "auto-negotiate",
            slab_growth_factor: 1.25,
            slab_chunk_min: 48,
            slab_chunk_max: 512 * 1024,
            large_pages: false,
            reported: Vec::new(),
        }
    }
}

impl Settings {
    pub fn memory_limit_bytes(&self) -> usize {
        self.memory_limit_mb * 1024 * 1024
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_scheduler_is_a_registered_policy() {
        assert_eq!(Settings::default().scheduler, DEFAULT_SCHEDULER);
        assert!(weft::sched::POLICIES
            .iter()
            .any(|p| p.name == DEFAULT_SCHEDULER));
    }
}
