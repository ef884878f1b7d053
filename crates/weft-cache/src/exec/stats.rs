//! `stats` and its subcommands, in memcached's format (`STAT <name> <value>\r\n` ... `END`).
//! Names follow memcached 1.6; values that describe memcached internals weft does not have
//! (slab pages, LRU segments) are reported from weft's equivalent or as zero.

use std::sync::atomic::Ordering;

use super::{Context, Flow};
use crate::output::Output;
use crate::protocol::number::strtoul32;
use crate::protocol::{Tokens, VERSION};
use crate::store::classes::{CLASSES, SLAB_PAGE_BYTES};

/// memcached caps one `stats cachedump` reply at 2 MB.
const CACHEDUMP_MAX_BYTES: usize = 2 * 1024 * 1024;

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

/// `stats`: memcached 1.6.18's 95 keys in its order. Where weft has the concept the value is
/// weft's (connections, commands, bytes, items, evictions, reclaims, the sweeper as the LRU
/// crawler, `conn_yields`, the hash tables' size); the others name memcached mechanisms weft
/// does not have (response objects, slab rebalancing, LRU segments, log watchers) and are 0.
/// docs/notes/memcached-dropin.md lists which is which.
fn general(ctx: &Context, out: &mut Output, now: u32) {
    let store = &ctx.store;
    let clock = &store.clock;
    let (user, system) = rusage();
    let snapshot = store.stats.snapshot();
    let get = |name: &str| {
        snapshot
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, v)| *v)
    };
    let curr = ctx.curr_connections.load(Ordering::Relaxed);
    let listeners = {
        let conns = crate::fatal::lock(&ctx.conns, "connection registry");
        conns.values().filter(|c| c.listen_addr.is_empty()).count() as u64
    };
    let (table_slots, table_bytes) = store.table_size();
    stat(out, "pid", std::process::id());
    stat(out, "uptime", now - 62);
    stat(out, "time", clock.unix_now());
    stat(out, "version", VERSION);
    stat(out, "libevent", "weft");
    stat(out, "pointer_size", usize::BITS);
    stat(out, "rusage_user", format!("{user:.6}"));
    stat(out, "rusage_system", format!("{system:.6}"));
    stat(out, "max_connections", ctx.settings.max_connections);
    stat(out, "curr_connections", curr);
    stat(out, "total_connections", get("total_connections"));
    stat(out, "rejected_connections", get("rejected_connections"));
    stat(out, "connection_structures", curr + listeners);
    for name in [
        "response_obj_oom",
        "response_obj_count",
        "response_obj_bytes",
        "read_buf_count",
        "read_buf_bytes",
        "read_buf_bytes_free",
        "read_buf_oom",
        "reserved_fds",
    ] {
        stat(out, name, 0);
    }
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
    stat(out, "listen_disabled_num", 0);
    stat(out, "time_in_listen_disabled_us", 0);
    stat(out, "threads", ctx.settings.processors);
    stat(out, "conn_yields", get("conn_yields"));
    // memcached's table has 2^hash_power_level buckets of 8 bytes.
    stat(
        out,
        "hash_power_level",
        table_slots.max(1).next_power_of_two().trailing_zeros(),
    );
    stat(out, "hash_bytes", table_bytes);
    stat(out, "hash_is_expanding", 0);
    for name in [
        "slab_reassign_rescues",
        "slab_reassign_chunk_rescues",
        "slab_reassign_evictions_nomem",
        "slab_reassign_inline_reclaim",
        "slab_reassign_busy_items",
        "slab_reassign_busy_deletes",
        "slab_reassign_running",
    ] {
        stat(out, name, 0);
    }
    stat(out, "slabs_moved", get("slabs_moved"));
    stat(out, "lru_crawler_running", 0);
    stat(out, "lru_crawler_starts", u64::from(ctx.settings.sweeper));
    for name in [
        "lru_maintainer_juggles",
        "malloc_fails",
        "log_worker_dropped",
        "log_worker_written",
        "log_watcher_skipped",
        "log_watcher_sent",
        "log_watchers",
        "unexpected_napi_ids",
        "round_robin_fallback",
    ] {
        stat(out, name, 0);
    }
    // memcached's meaning: the items' own sizes (ITEM_ntotal), not what they are charged.
    stat(out, "bytes", store.item_bytes());
    stat(out, "curr_items", store.item_count());
    stat(out, "total_items", get("total_items"));
    stat(out, "slab_global_page_pool", 0);
    for name in [
        "expired_unfetched",
        "evicted_unfetched",
        "evicted_active",
        "evictions",
        "reclaimed",
        "crawler_reclaimed",
        "crawler_items_checked",
    ] {
        stat(out, name, get(name));
    }
    for name in [
        "lrutail_reflocked",
        "moves_to_cold",
        "moves_to_warm",
        "moves_within_lru",
        "direct_reclaims",
        "lru_bumps_dropped",
    ] {
        stat(out, name, 0);
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
/// its class's COLD LRU, which new items reach after a while; weft has one LRU per shard and
/// class (no segments) and lists every item of the class.
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
    if class as usize >= CLASSES {
        out.line("CLIENT_ERROR Illegal slab id");
        return;
    }
    let mut lines = Vec::new();
    let mut bytes = 0;
    let clock = &ctx.store.clock;
    ctx.store.for_each_recent_first(class as u8, |e| {
        let expiry = if e.exptime == 0 {
            0
        } else {
            clock.unix_of(e.exptime)
        };
        let mut line = b"ITEM ".to_vec();
        line.extend_from_slice(e.key());
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
    let conns = crate::fatal::lock(&ctx.conns, "connection registry");
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

/// `stats items`: memcached's 28 keys per size class that holds items, from each shard's
/// per-class tallies. weft's LRUs have no HOT/WARM segments, so every item counts as COLD
/// (`number_cold` = `number`, hot/warm 0); `age` is the oldest access among each shard's
/// least recently used items of the class; the LRU-segment counters are 0.
fn items(ctx: &Context, out: &mut Output, now: u32) {
    let (classes, age) = ctx.store.class_counts(now);
    for (id, c) in classes.iter().enumerate().filter(|(_, c)| c.items > 0) {
        let mut s = |name: &str, v: u64| stat(out, &format!("items:{id}:{name}"), v);
        s("number", c.items);
        s("number_hot", 0);
        s("number_warm", 0);
        s("number_cold", c.items);
        s("age_hot", 0);
        s("age_warm", 0);
        s("age", u64::from(age[id]));
        s("mem_requested", c.bytes);
        s("evicted", c.evicted);
        s("evicted_nonzero", c.evicted_nonzero);
        s("evicted_time", u64::from(c.evicted_time));
        s("outofmemory", 0);
        s("tailrepairs", 0);
        s("reclaimed", c.reclaimed);
        s("expired_unfetched", c.expired_unfetched);
        s("evicted_unfetched", c.evicted_unfetched);
        s("evicted_active", 0);
        s("crawler_reclaimed", c.crawler_reclaimed);
        s("crawler_items_checked", 0);
        s("lrutail_reflocked", 0);
        s("moves_to_cold", 0);
        s("moves_to_warm", 0);
        s("moves_within_lru", 0);
        s("direct_reclaims", 0);
        s("hits_to_hot", 0);
        s("hits_to_warm", 0);
        s("hits_to_cold", 0);
        s("hits_to_temp", 0);
    }
}

/// `stats slabs`: memcached's 15 keys per class that has pages, then `active_slabs` and
/// `total_malloced`, from the store's own pages ([`crate::store::slab`]): real pages and
/// chunks per class; `total_malloced` is the pages' bytes (what memcached means by it), which
/// with the items' index bytes stays within `limit_maxbytes`. The per-class command
/// counters are not kept (0); `stats` has the server-wide ones.
fn slabs(ctx: &Context, out: &mut Output) {
    let slabs = ctx.store.slabs();
    let sizes = slabs.classes();
    let mut active = 0;
    for id in 1..=sizes.len() {
        let u = slabs.usage(id as u8);
        if u.pages == 0 {
            continue;
        }
        let chunk = sizes.chunk_size(id) as u64;
        let per_page = (SLAB_PAGE_BYTES as u64 / chunk).max(1);
        let mut s = |name: &str, v: u64| stat(out, &format!("{id}:{name}"), v);
        s("chunk_size", chunk);
        s("chunks_per_page", per_page);
        s("total_pages", u.pages as u64);
        s("total_chunks", (u.used_chunks + u.free_chunks) as u64);
        s("used_chunks", u.used_chunks as u64);
        s("free_chunks", u.free_chunks as u64);
        s("free_chunks_end", u.free_chunks_end as u64);
        for name in [
            "get_hits",
            "cmd_set",
            "delete_hits",
            "incr_hits",
            "decr_hits",
            "cas_hits",
            "cas_badval",
            "touch_hits",
        ] {
            s(name, 0);
        }
        active += 1;
    }
    stat(out, "active_slabs", active);
    stat(out, "total_malloced", slabs.page_bytes());
}
