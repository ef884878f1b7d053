//! memcached's `-o` extended options for `weft memcached`: every name memcached 1.6.18 knows
//! is accepted; those weft has a behaviour for set it in [`Settings`], the others are
//! [`Extended::Inert`] with the one-line reason `-v` prints, and an unknown name is refused
//! with memcached's own message.

use weft_cache::Settings;

/// What a memcached `-o` option does in weft.
pub(crate) enum Extended {
    /// weft has the behaviour; the option sets it.
    Honoured,
    /// Accepted; the reason it has no effect (one `-v` line).
    Inert(&'static str),
}

const REBALANCER: &str = "weft's rebalancer always runs: it moves a page from the class with \
                          the most pages to a class that found none";
const NO_SEGMENTED_LRU: &str =
    "weft keeps one LRU per shard, not memcached's HOT/WARM/COLD segments";
const NO_EXTSTORE: &str = "weft keeps every item in memory (no external storage)";
const NO_TLS: &str = "weft serves no TLS (-Z is refused)";
pub(crate) const NO_WATCH: &str = "weft has no log watchers (watch answers memcached's refusal)";

/// memcached 1.6.18's `-o` options that take a value.
const WITH_VALUE: &[&str] = &[
    "hashpower",
    "slab_automove_ratio",
    "slab_automove_window",
    "tail_repair_time",
    "hash_algorithm",
    "lru_crawler_sleep",
    "lru_crawler_tocrawl",
    "hot_lru_pct",
    "warm_lru_pct",
    "hot_max_factor",
    "warm_max_factor",
    "temporary_ttl",
    "idle_timeout",
    "watcher_logbuf_size",
    "worker_logbuf_size",
    "slab_sizes",
    "slab_chunk_max",
    "resp_obj_mem_limit",
    "read_buf_mem_limit",
    "sock_cookie_id",
    "ssl_chain_cert",
    "ssl_key",
    "ssl_verify_mode",
    "ssl_keyformat",
    "ssl_ciphers",
    "ssl_ca_cert",
    "ssl_wbuf_size",
    "ssl_min_version",
    "ext_path",
    "ext_page_size",
    "ext_wbuf_size",
    "ext_threads",
    "ext_io_depth",
    "ext_item_size",
    "ext_item_age",
    "ext_low_ttl",
    "ext_recache_rate",
    "ext_compact_under",
    "ext_drop_under",
    "ext_max_sleep",
    "ext_max_frag",
    "slab_automove_freeratio",
];

fn number<T: std::str::FromStr>(name: &str, value: &str) -> Result<T, String> {
    value
        .trim()
        .parse()
        .map_err(|_| format!("could not parse argument to {name}: '{value}'"))
}

/// Applies one `-o name[=value]` to `s` (memcached 1.6.18's list; an unknown name is refused
/// with memcached's words).
pub(crate) fn extended_option(s: &mut Settings, item: &str) -> Result<Extended, String> {
    let (name, value) = match item.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (item, None),
    };
    let value = match value {
        None if WITH_VALUE.contains(&name) => return Err(format!("Missing {name} argument")),
        v => v.unwrap_or(""),
    };
    if !value.is_empty() {
        // `stats settings` shows what was asked for, under memcached's name for it.
        s.reported.push((name.to_owned(), value.to_owned()));
    }
    let mut report = |key: &str, v: &str| s.reported.push((key.to_owned(), v.to_owned()));
    use Extended::{Honoured, Inert};
    Ok(match name {
        "maxconns_fast" => {
            report("maxconns_fast", "yes");
            Honoured
        }
        "no_maxconns_fast" => {
            report("maxconns_fast", "no");
            Inert("weft always answers a client over -c with an error and closes it")
        }
        "hashpower" => {
            let p: u8 = number(name, value)?;
            if p < 12 {
                return Err(format!("Initial hashtable multiplier of {p} is too low"));
            }
            if p > 64 {
                return Err(format!("Initial hashtable multiplier of {p} is too high"));
            }
            s.hashpower = Some(p.min(HASHPOWER_PRESIZE_MAX));
            report("hashpower_init", value);
            Honoured
        }
        "no_hashexpand" => Inert("weft's hash tables always grow with the items"),
        "slab_reassign" | "no_slab_reassign" | "no_slab_automove" => Inert(REBALANCER),
        "slab_automove" | "slab_automove_ratio" | "slab_automove_window" => Inert(REBALANCER),
        "no_chunked_items" => Inert("weft always chains items larger than slab_chunk_max"),
        "slab_sizes" => Inert("weft's classes come from -f, -n and slab_chunk_max"),
        "tail_repair_time" => {
            if number::<u32>(name, value)? < 10 {
                return Err("Cannot set tail_repair_time to less than 10 seconds".into());
            }
            Inert("weft holds no item references that could leak")
        }
        "hash_algorithm" => {
            if !matches!(value, "jenkins" | "murmur3" | "xxh3") {
                return Err("Unknown hash_algorithm option (jenkins, murmur3, xxh3)".into());
            }
            Inert("weft's shard tables use their own hash function")
        }
        "lru_crawler" => {
            s.sweeper = true;
            report("lru_crawler", "yes");
            Honoured
        }
        "no_lru_crawler" => {
            s.sweeper = false;
            report("lru_crawler", "no");
            Honoured
        }
        "lru_crawler_sleep" => {
            let us: u32 = number(name, value)?;
            if us > 1_000_000 {
                return Err("lru_crawler_sleep must be one second or less".into());
            }
            Inert("weft's sweeper looks at a batch of slots per shard once a second")
        }
        "lru_crawler_tocrawl" => {
            s.sweep_budget = number(name, value)?;
            report("lru_crawler_tocrawl", value);
            Honoured
        }
        "lru_maintainer" | "no_lru_maintainer" => Inert(NO_SEGMENTED_LRU),
        "hot_lru_pct" | "warm_lru_pct" | "temporary_ttl" => {
            number::<u32>(name, value)?;
            Inert(NO_SEGMENTED_LRU)
        }
        "hot_max_factor" | "warm_max_factor" => {
            if number::<f64>(name, value)? <= 0.0 {
                return Err(format!("{name} must be > 0"));
            }
            Inert(NO_SEGMENTED_LRU)
        }
        "idle_timeout" => {
            s.idle_timeout_secs = number(name, value)?;
            Honoured
        }
        "watcher_logbuf_size" | "worker_logbuf_size" => {
            number::<u32>(name, value)?;
            Inert(NO_WATCH)
        }
        "slab_chunk_max" => {
            let kib: usize = number(name, value)?;
            if kib == 0 || kib * 1024 > s.item_size_max.max(1024 * 1024) {
                return Err("slab_chunk_max cannot be larger than slab_page_size".into());
            }
            s.slab_chunk_max = kib * 1024;
            Honoured
        }
        "track_sizes" => Inert("`stats sizes` reports sizes_status disabled"),
        "no_inline_ascii_resp" | "inline_ascii_resp" => {
            Inert("how replies are laid out in memory is weft's own")
        }
        "modern" => Honoured, // memcached 1.6.18: "currently: nothing"
        "no_modern" => Inert("its 1.4 defaults are about slabs, LRU segments and the hash"),
        "no_drop_privileges" | "drop_privileges" => {
            Inert("weft does not restrict its threads' system calls")
        }
        "resp_obj_mem_limit" | "read_buf_mem_limit" => {
            number::<u32>(name, value)?;
            Inert("weft bounds each connection instead: 64 KiB of input, 256 KiB of output")
        }
        "sock_cookie_id" => Inert("weft sets no socket mark"),
        "ssl_chain_cert" | "ssl_key" | "ssl_verify_mode" | "ssl_keyformat" | "ssl_ciphers"
        | "ssl_ca_cert" | "ssl_wbuf_size" | "ssl_session_cache" | "ssl_kernel_tls"
        | "ssl_min_version" => Inert(NO_TLS),
        "ext_path"
        | "ext_page_size"
        | "ext_wbuf_size"
        | "ext_threads"
        | "ext_io_depth"
        | "ext_item_size"
        | "ext_item_age"
        | "ext_low_ttl"
        | "ext_recache_rate"
        | "ext_compact_under"
        | "ext_drop_under"
        | "ext_max_sleep"
        | "ext_max_frag"
        | "ext_drop_unread"
        | "slab_automove_freeratio" => Inert(NO_EXTSTORE),
        _ => return Err(format!("Illegal suboption \"{name}\"")),
    })
}

/// `-o hashpower` pre-sizes the tables for at most 2^this items (2^26: 128 MiB of control
/// bytes touched at start); a larger value still starts, with tables that grow.
pub(crate) const HASHPOWER_PRESIZE_MAX: u8 = 26;

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::super::memcached::MemcachedArgs;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: MemcachedArgs,
    }

    fn parse(argv: &[&str]) -> Result<weft_cache::Settings, String> {
        // `-u root`: the tests may run as root, which memcached refuses without it.
        let argv = ["weft", "-u", "root"]
            .into_iter()
            .chain(argv.iter().copied());
        let cli = Cli::try_parse_from(argv).map_err(|e| e.to_string())?;
        cli.args
            .settings()
            .map(|(s, _)| s)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_repeated_flag_takes_its_last_value_as_memcached_does() {
        let s = parse(&["-t", "2", "-t", "1", "-m", "8", "-m", "16", "-M", "-M"])
            .expect("repeated flags are accepted");
        assert_eq!(s.processors, 1);
        assert_eq!(s.memory_limit_mb, 16);
        assert!(!s.evictions);
    }

    #[test]
    fn repeated_listen_and_extended_options_add_up_as_in_memcached() {
        let s = parse(&[
            "-l",
            "127.0.0.1",
            "-l",
            "127.0.0.2",
            "-o",
            "hashpower=16",
            "-o",
            "idle_timeout=7",
        ])
        .unwrap();
        assert_eq!(s.listen, ["127.0.0.1", "127.0.0.2"]);
        assert_eq!(s.hashpower, Some(16));
        assert_eq!(s.idle_timeout_secs, 7);
    }
}
