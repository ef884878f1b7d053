//! `stats` and its subcommands, in memcached's format (`STAT <name> <value>\r\n` ... `END`).
//! Names follow memcached 1.6; values that describe memcached internals weft does not have
//! (slab pages, LRU segments) are reported from weft's equivalent or as zero.

use std::sync::atomic::Ordering;

use super::{Context, Flow};
use crate::output::Output;
use crate::protocol::{Tokens, VERSION};

/// memcached's slab classes with default `-n 48 -f 1.25` and a 512 KiB chunk maximum: the
/// class id an item of `size` bytes would live in (used by `me` and `stats items`).
pub fn slab_class(size: usize) -> u32 {
    const ITEM_HEADER: f64 = 48.0;
    const CHUNK_MAX: usize = 512 * 1024;
    let mut chunk = ITEM_HEADER + 48.0;
    let mut class = 1;
    loop {
        let mut aligned = chunk as usize;
        if aligned % 8 != 0 {
            aligned += 8 - aligned % 8;
        }
        if chunk >= CHUNK_MAX as f64 / 1.25 || class >= 63 {
            return class;
        }
        if size <= aligned {
            return class;
        }
        chunk = aligned as f64 * 1.25;
        class += 1;
    }
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
            b"on" | b"off" if t.ntokens() >= 4 => out.line("OK"),
            b"dump" if t.ntokens() >= 4 => out.line("END"),
            _ => out.line("CLIENT_ERROR usage: stats detail on|off|dump"),
        }
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

fn settings(ctx: &Context, out: &mut Output) {
    let s = &ctx.settings;
    stat(out, "maxbytes", ctx.store.limit_bytes());
    stat(out, "maxconns", s.max_connections);
    stat(
        out,
        "tcpport",
        if s.unix_socket.is_some() { 0 } else { s.port },
    );
    stat(out, "udpport", 0);
    stat(
        out,
        "inter",
        if s.listen.is_empty() {
            "NULL".to_owned()
        } else {
            s.listen.join(",")
        },
    );
    stat(out, "verbosity", ctx.verbose());
    stat(out, "oldest", ctx.store.oldest_live());
    stat(out, "evictions", if s.evictions { "on" } else { "off" });
    stat(
        out,
        "domain_socket",
        s.unix_socket
            .as_ref()
            .map_or("NULL".to_owned(), |p| p.display().to_string()),
    );
    stat(out, "umask", format!("{:o}", s.unix_mask));
    stat(out, "shutdown_command", "no");
    stat(out, "num_threads", s.processors);
    stat(out, "cas_enabled", "yes");
    stat(out, "binding_protocol", "ascii");
    stat(out, "item_size_max", s.item_size_max);
    stat(out, "flush_enabled", "yes");
    stat(out, "hash_algorithm", "foldhash");
    stat(out, "scheduler", &s.scheduler);
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
