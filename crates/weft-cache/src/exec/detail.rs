//! `stats detail`: per-prefix counters (memcached's `stats_prefix.c`), on with `-D` or
//! `stats detail on`. A key's prefix is what comes before the first delimiter; keys without
//! one are not counted (as in memcached). Classic `get`/`gets`/`gat`/`gats` count gets and
//! hits, the classic storage commands count sets, `delete` counts deletes; meta commands
//! count nothing, as in memcached 1.6.18.
//!
//! Bounded: at most [`MAX_PREFIXES`] prefixes are tracked (memcached tracks any number); new
//! prefixes beyond that are not counted. `stats detail dump` lists prefixes in byte order
//! (memcached lists them in its prefix hash table's order).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::output::Output;

/// Most prefixes tracked at once.
pub const MAX_PREFIXES: usize = 65_536;

/// What one prefix counted.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    get: u64,
    hit: u64,
    set: u64,
    del: u64,
}

/// The per-prefix counters.
#[derive(Debug)]
pub struct Detail {
    delimiter: u8,
    enabled: AtomicBool,
    prefixes: Mutex<BTreeMap<Box<[u8]>, Counts>>,
}

/// Which counter an operation bumps.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    Get { hit: bool },
    Set,
    Delete,
}

impl Detail {
    pub fn new(delimiter: u8, enabled: bool) -> Detail {
        Detail {
            delimiter,
            enabled: AtomicBool::new(enabled),
            prefixes: Mutex::new(BTreeMap::new()),
        }
    }

    /// Whether operations are being counted (checked before doing any work).
    #[inline]
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }

    /// Counts one operation on `key` (call only when [`Detail::enabled`]).
    pub fn record(&self, key: &[u8], op: Op) {
        let Some(end) = key.iter().position(|&b| b == self.delimiter) else {
            return;
        };
        let prefix = &key[..end];
        let mut map = crate::fatal::lock(&self.prefixes, "stats detail");
        if !map.contains_key(prefix) {
            if map.len() >= MAX_PREFIXES {
                return;
            }
            map.insert(prefix.into(), Counts::default());
        }
        let Some(counts) = map.get_mut(prefix) else {
            return;
        };
        match op {
            Op::Get { hit } => {
                counts.get += 1;
                counts.hit += u64::from(hit);
            }
            Op::Set => counts.set += 1,
            Op::Delete => counts.del += 1,
        }
    }

    /// `stats detail dump`: one `PREFIX` line per prefix, then `END`.
    pub fn dump(&self, out: &mut Output) {
        let map = crate::fatal::lock(&self.prefixes, "stats detail");
        for (prefix, c) in map.iter() {
            out.push(b"PREFIX ");
            out.push(prefix);
            out.push(
                format!(
                    " get {} hit {} set {} del {}\r\n",
                    c.get, c.hit, c.set, c.del
                )
                .as_bytes(),
            );
        }
        out.push(b"END\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_prefix_and_skips_keys_without_one() {
        let d = Detail::new(b':', true);
        d.record(b"a:1", Op::Get { hit: true });
        d.record(b"a:2", Op::Get { hit: false });
        d.record(b"plain", Op::Set);
        d.record(b"b:x:y", Op::Set);
        d.record(b"a:1", Op::Delete);
        let mut out = Output::new();
        d.dump(&mut out);
        let mut sink = Vec::new();
        out.write_to(&mut sink).unwrap();
        assert_eq!(
            sink,
            b"PREFIX a get 2 hit 1 set 0 del 1\r\nPREFIX b get 0 hit 0 set 1 del 0\r\nEND\r\n"
        );
    }
}
