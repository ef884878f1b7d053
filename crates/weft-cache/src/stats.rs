//! Server-wide counters, named as memcached names them in `stats`. Relaxed atomics: each is
//! an independent tally, read only to report it.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($($name:ident),* $(,)?) => {
        /// The counters `stats` reports (and `stats reset` clears).
        #[derive(Debug, Default)]
        pub struct Stats {
            $(pub $name: AtomicU64,)*
        }

        impl Stats {
            /// Name/value pairs in memcached's order.
            pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name.load(Ordering::Relaxed)),)*]
            }

            /// `stats reset`.
            pub fn reset(&self) {
                $(self.$name.store(0, Ordering::Relaxed);)*
            }
        }
    };
}

counters!(
    cmd_get,
    cmd_set,
    cmd_flush,
    cmd_touch,
    cmd_meta,
    get_hits,
    get_misses,
    get_expired,
    get_flushed,
    delete_misses,
    delete_hits,
    incr_misses,
    incr_hits,
    decr_misses,
    decr_hits,
    cas_misses,
    cas_hits,
    cas_badval,
    touch_hits,
    touch_misses,
    store_too_large,
    store_no_memory,
    auth_cmds,
    auth_errors,
    bytes_read,
    bytes_written,
    total_items,
    expired_unfetched,
    evicted_unfetched,
    evicted_active,
    evictions,
    reclaimed,
    total_connections,
    rejected_connections,
    conn_yields,
    crawler_reclaimed,
    crawler_items_checked,
    slabs_moved,
);

/// Adds one to a counter.
#[inline]
pub fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Adds `n` to a counter.
#[inline]
pub fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}
