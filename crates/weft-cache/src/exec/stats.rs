//! `stats` and its subcommands, in memcached's format (`STAT <name> <value>\r\n` ... `END`).
//! Names follow memcached 1.6; values that describe memcached internals weft does not have
//! (slab pages, LRU segments) are reported from weft's equivalent or as zero.

use std::sync::atomic::Ordering;

use super::{Context, Flow};
use crate::config::Settings;
use crate::output::Output;
use crate::protocol::number::strtoul32;
use crate::protocol::{item_total_bytes, Tokens, VERSION};
use crate::store::Entry;

/// memcached's `MAX_NUMBER_OF_SLAB_CLASSES` (64): class ids `stats cachedump` accepts.
const MAX_SLAB_CLASSES: u32 = 64;
/// memcached caps one `stats cachedump` reply at 2 MB.
const CACHEDUMP_MAX_BYTES: usize = 2 * 1024 * 1024;

/// The size memcached would give this item in its slabs (header, key, data, flags, CAS).
pub fn item_size(e: &Entry) -> usize {
    item_total_bytes(e.key.len(), e.flags, e.data.len())
}

/// The chunk sizes of the server's slab classes (`-f`, `-n`, `-o slab_chunk_max`).
pub fn chunk_sizes_of(s: &Settings) -> Vec<usize> {
    slab_chunk_sizes(s.slab_growth_factor, s.slab_chunk_min, s.slab_chunk_max)
}

/// The class id (1-based) of an item of `size` bytes among `sizes`.
pub fn class_in(sizes: &[usize], size: usize) -> u32 {
    let i = sizes
        .iter()
        .position(|&c| size <= c)
        .unwrap_or(sizes.len() - 1);
    i as u32 + 1
}

/// memcached's slab classes with default `-n 48 -f 1.25` and a 512 KiB chunk maximum: the
/// class id an item of `size` bytes would live in (used by `me` and `stats items`).
#[cfg(test)]
pub fn slab_class(size: usize) -> u32 {
    slab_class_for(size, 1.25, 48, 512 * 1024)
}

/// The chunk sizes of memcached's slab classes for growth factor `factor`, minimum item
/// space `chunk_min` (`-n`) and largest chunk `chunk_max`: memcached's `slabs_init`.
pub fn slab_chunk_sizes(factor: f64, chunk_min: usize, chunk_max: usize) -> Vec<usize> {
    const ITEM_HEADER: usize = 48;
    let mut sizes = Vec::new();
    let mut size = ITEM_HEADER + chunk_min;
    while sizes.len() < 62 && (size as f64) < chunk_max as f64 / factor {
        if size % 8 != 0 {
            size += 8 - size % 8;
        }
        sizes.push(size);
        size = (size as f64 * factor) as usize;
    }
    sizes.push(chunk_max);
    sizes
}

/// The class id (1-based) an item of `size` bytes lives in; items above the largest chunk
/// are chained from the largest class, so they report it.
#[cfg(test)]
pub fn slab_class_for(size: usize, factor: f64, chunk_min: usize, chunk_max: usize) -> u32 {
    class_in(&slab_chunk_sizes(factor, chunk_min, chunk_max), size)
}

fn stat(out: &mut Output, name: &str, value: impl std::fmt::Display) {
    out.push(format!("STAT {name} {value}\r\n").as_bytes());
}

fn rusage() -> (f64, f64) {
    // SAFETY: getrusage fills the struct we pass; zeroed is a valid initial value.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (secs(ru.ru_utime), secs(ru.ru_stime))
}

/// `process_stat`.
pub(super) fn stats(ctx: &Context, out: &mut Output, now: u32, t: &Tokens<'_>) -> Flow {
    let sub = t.get(1);
    if t.ntokens() == 2 {
        general(ctx, out, now);
    } else if sub == b"reset" {
        ctx.store.stats.reset();
        out.line("RESET");
        return Flow::Continue;
    } else if sub == b"detail" {
        match t.get(2) {
            b"on" if t.ntokens() >= 4 => {
                ctx.detail.set_enabled(true);
                out.line("OK");
            }
            b"off" if t.ntokens() >= 4 => {
                ctx.detail.set_enabled(false);
                out.line("OK");
            }
            b"dump" if t.ntokens() >= 4 => ctx.detail.dump(out),
            _ => out.line("CLIENT_ERROR usage: stats detail on|off|dump"),
        }
        return Flow::Continue;
    } else if sub == b"cachedump" {
        cachedump(ctx, out, t);
        return Flow::Continue;
    } else if sub == b"settings" {
        settings(ctx, out);
    } else if sub == b"conns" {
        conns(ctx, out);
    } else if sub == b"items" {
        items(ctx, out, now);
    } else if sub == b"slabs" {
        slabs(ctx, out);
    } else if sub == b"sizes" {
        stat(out, "sizes_status", "disabled");
    } else {
        out.line("ERROR");
        return Flow::Continue;
    }
    out.line("END");
    Flow::Continue
}

fn general(ctx: &Context, out: &mut Output, now: u32) {
    let store = &ctx.store;
    let clock = &store.clock;
    let (user, system) = rusage();
    stat(out, "pid", std::process::id());
    stat(out, "uptime", now - 62);
    stat(out, "time", clock.unix_now());
    stat(out, "version", VERSION);
    stat(out, "libevent", "weft");
    stat(out, "pointer_size", usize::BITS);
    stat(out, "rusage_user", format!("{user:.6}"));
    stat(out, "rusage_system", format!("{system:.6}"));
    stat(out, "max_connections", ctx.settings.max_connections);
    stat(
        out,
        "curr_connections",
        ctx.curr_connections.load(Ordering::Relaxed),
    );
    let snapshot = store.stats.snapshot();
    let get = |name: &str| {
        snapshot
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, v)| *v)
    };
    stat(out, "total_connections", get("total_connections"));
    stat(out, "rejected_connections", get("rejected_connections"));
    for name in [
        "cmd_get",
        "cmd_set",
        "cmd_flush",
        "cmd_touch",
        "cmd_meta",
        "get_hits",
        "get_misses",
        "get_expired",
        "get_flushed",
        "delete_misses",
        "delete_hits",
        "incr_misses",
        "incr_hits",
        "decr_misses",
        "decr_hits",
        "cas_misses",
        "cas_hits",
        "cas_badval",
        "touch_hits",
        "touch_misses",
        "store_too_large",
        "store_no_memory",
        "auth_cmds",
        "auth_errors",
        "bytes_read",
        "bytes_written",
    ] {
        stat(out, name, get(name));
    }
    stat(out, "limit_maxbytes", store.limit_bytes());
    stat(out, "accepting_conns", 1);
    stat(out, "threads", ctx.settings.processors);
    stat(out, "bytes", store.used_bytes());
    stat(out, "curr_items", store.item_count());
    for name in [
        "total_items",
        "expired_unfetched",
        "evicted_unfetched",
        "evicted_active",
        "evictions",
        "reclaimed",
    ] {
        stat(out, name, get(name));
    }
}

/// `stats settings`: memcached 1.6.18's keys in its order. Values are weft's where it has
/// the setting; memcached's default (or what the flag or `-o` option given set, see
/// `Settings::reported`) where the setting names a mechanism weft does not have (slab
/// rebalancing, LRU segments, extstore, TLS). Then weft's own: `scheduler`.
fn settings(ctx: &Context, out: &mut Output) {
    let s = &ctx.settings;
    let yes_no = |b: bool| if b { "yes" } else { "no" };
    let mut v: Vec<(&str, String)> = vec![
        ("maxbytes", ctx.store.limit_bytes().to_string()),
        ("maxconns", s.max_connections.to_string()),
        (
            "tcpport",
            if s.unix_socket.is_some() { 0 } else { s.port }.to_string(),
        ),
        ("udpport", "0".into()),
        (
            "inter",
            if s.listen.is_empty() {
                "NULL".to_owned()
            } else {
                s.listen.join(",")
            },
        ),
        ("verbosity", ctx.verbose().to_string()),
        ("oldest", ctx.store.oldest_live().to_string()),
        ("evictions", if s.evictions { "on" } else { "off" }.into()),
        (
            "domain_socket",
            s.unix_socket
                .as_ref()
                .map_or("NULL".to_owned(), |p| p.display().to_string()),
        ),
        ("umask", format!("{:o}", s.unix_mask)),
        ("shutdown_command", yes_no(s.shutdown_command).into()),
        ("growth_factor", format!("{:.2}", s.slab_growth_factor)),
        ("chunk_size", s.slab_chunk_min.to_string()),
        ("num_threads", s.processors.to_string()),
        ("num_threads_per_udp", s.processors.to_string()),
        (
            "stat_key_prefix",
            char::from(s.prefix_delimiter).to_string(),
        ),
        ("detail_enabled", yes_no(ctx.detail.enabled()).into()),
        ("reqs_per_event", s.reqs_per_event.to_string()),
        ("cas_enabled", yes_no(s.use_cas).into()),
        ("tcp_backlog", s.backlog.to_string()),
        ("binding_protocol", s.binding_protocol.into()),
        ("auth_enabled_sasl", "no".into()),
        ("auth_enabled_ascii", yes_no(s.auth.is_some()).into()),
        ("item_size_max", s.item_size_max.to_string()),
        ("maxconns_fast", "yes".into()),
        (
            "hashpower_init",
            s.hashpower.map_or(0, u32::from).to_string(),
        ),
        ("slab_reassign", "yes".into()),
        ("slab_automove", "1".into()),
        ("slab_automove_ratio", "0.80".into()),
        ("slab_automove_window", "30".into()),
        ("slab_chunk_max", s.slab_chunk_max.to_string()),
        ("lru_crawler", yes_no(s.sweeper).into()),
        ("lru_crawler_sleep", "100".into()),
        ("lru_crawler_tocrawl", "0".into()),
        ("tail_repair_time", "0".into()),
        ("flush_enabled", yes_no(s.flush_enabled).into()),
        ("dump_enabled", yes_no(s.dump_enabled).into()),
        ("hash_algorithm", "murmur3".into()),
        ("lru_maintainer_thread", "yes".into()),
        ("lru_segmented", "yes".into()),
        ("hot_lru_pct", "20".into()),
        ("warm_lru_pct", "40".into()),
        ("hot_max_factor", "0.20".into()),
        ("warm_max_factor", "2.00".into()),
        ("temp_lru", "no".into()),
        ("temporary_ttl", "61".into()),
        ("idle_timeout", s.idle_timeout_secs.to_string()),
        ("watcher_logbuf_size", "262144".into()),
        ("worker_logbuf_size", "65536".into()),
        ("read_buf_mem_limit", "0".into()),
        ("track_sizes", "no".into()),
        ("inline_ascii_response", "no".into()),
        ("ext_item_size", "512".into()),
        ("ext_item_age", "4294967295".into()),
        ("ext_low_ttl", "0".into()),
        ("ext_recache_rate", "2000".into()),
        ("ext_wbuf_size", "4194304".into()),
        ("ext_compact_under", "0".into()),
        ("ext_drop_under", "0".into()),
        ("ext_max_sleep", "1000000".into()),
        ("ext_max_frag", "0.80".into()),
        ("slab_automove_freeratio", "0.010".into()),
        ("ext_drop_unread", "no".into()),
        ("ssl_enabled", "no".into()),
        ("ssl_chain_cert", "(null)".into()),
        ("ssl_key", "(null)".into()),
        ("ssl_verify_mode", "0".into()),
        ("ssl_keyformat", "1".into()),
        ("ssl_ciphers", "NULL".into()),
        ("ssl_ca_cert", "NULL".into()),
        ("ssl_wbuf_size", "16384".into()),
        ("ssl_session_cache", "no".into()),
        ("ssl_kernel_tls", "no".into()),
        ("ssl_min_version", "tlsv1.2".into()),
        ("num_napi_ids", "(null)".into()),
        ("memory_file", "(null)".into()),
    ];
    for (name, value) in &s.reported {
        if let Some(slot) = v.iter_mut().find(|(n, _)| n == name) {
            slot.1.clone_from(value);
        }
    }
    for (name, value) in v {
        stat(out, name, value);
    }
    stat(out, "scheduler", &s.scheduler);
}

/// `stats cachedump <class> <limit>`: the items of one size class, most recently used first,
/// as `ITEM <key> [<bytes> b; <expiry as a Unix time, 0 for none> s]`, at most `limit` (0 =
/// all) and at most [`CACHEDUMP_MAX_BYTES`] of lines, like memcached. memcached lists only
/// its class's COLD LRU, which new items reach after a while; weft has one LRU per shard
/// and lists every item of the class.
fn cachedump(ctx: &Context, out: &mut Output, t: &Tokens<'_>) {
    if !ctx.settings.dump_enabled {
        out.line("CLIENT_ERROR stats cachedump not allowed");
        return;
    }
    if t.ntokens() < 5 {
        out.line("CLIENT_ERROR bad command line");
        return;
    }
    let (Some(class), Some(limit)) = (strtoul32(t.get(2)), strtoul32(t.get(3))) else {
        out.line("CLIENT_ERROR bad command line format");
        return;
    };
    if class >= MAX_SLAB_CLASSES {
        out.line("CLIENT_ERROR Illegal slab id");
        return;
    }
    let mut lines = Vec::new();
    let mut bytes = 0;
    let clock = &ctx.store.clock;
    ctx.store.for_each_recent_first(|e| {
        if class_in(&ctx.chunk_sizes, item_size(e)) != class {
            return true;
        }
        let expiry = if e.exptime == 0 {
            0
        } else {
            clock.unix_of(e.exptime)
        };
        let mut line = b"ITEM ".to_vec();
        line.extend_from_slice(&e.key);
        line.extend_from_slice(format!(" [{} b; {expiry} s]\r\n", e.value_len()).as_bytes());
        if bytes + line.len() + 6 > CACHEDUMP_MAX_BYTES {
            return false;
        }
        bytes += line.len();
        lines.push(line);
        limit == 0 || lines.len() < limit as usize
    });
    for line in lines {
        out.push(&line);
    }
    out.line("END");
}

fn conns(ctx: &Context, out: &mut Output) {
    let conns = ctx.conns.lock().unwrap_or_else(|p| p.into_inner());
    for (fd, info) in conns.iter() {
        stat(out, &format!("{fd}:addr"), &info.addr);
        if info.listen_addr.is_empty() {
            stat(out, &format!("{fd}:state"), "conn_listening");
        } else {
            stat(out, &format!("{fd}:listen_addr"), &info.listen_addr);
            stat(out, &format!("{fd}:state"), "conn_parse_cmd");
        }
    }
}

fn items(ctx: &Context, out: &mut Output, _now: u32) {
    let n = ctx.store.item_count();
    if n == 0 {
        return;
    }
    stat(out, "items:1:number", n);
    stat(
        out,
        "items:1:evicted",
        ctx.store.stats.evictions.load(Ordering::Relaxed),
    );
    stat(
        out,
        "items:1:reclaimed",
        ctx.store.stats.reclaimed.load(Ordering::Relaxed),
    );
}

fn slabs(ctx: &Context, out: &mut Output) {
    stat(out, "active_slabs", usize::from(ctx.store.item_count() > 0));
    stat(out, "total_malloced", ctx.store.used_bytes());
}

#[cfg(test)]
mod tests {
    use super::slab_class;

    #[test]
    fn slab_classes_match_memcached_defaults() {
        assert_eq!(slab_class(63), 1);
        assert_eq!(slab_class(96), 1);
        assert_eq!(slab_class(97), 2);
        assert_eq!(slab_class(120), 2);
        assert_eq!(slab_class(1184), 12);
        assert_eq!(slab_class(1_048_000), 39);
    }
}
