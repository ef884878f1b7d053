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
    /// A client that does not read its responses for this long is disconnected.
    pub write_stall_timeout_ms: u64,
    /// How often the sweeper reclaims expired items.
    pub sweep_interval_ms: u64,
    /// Hold `-m` against the allocator's heap too (see `store::heap`). It samples the whole
    /// process, so turn it off when several servers share one process (tests).
    pub watch_heap: bool,
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
            write_stall_timeout_ms: 30_000,
            sweep_interval_ms: 1000,
            watch_heap: true,
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
