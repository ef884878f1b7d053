//! The original text commands: get family, storage, delete, incr/decr, touch.

use std::borrow::Cow;
use std::io;

use super::detail::Op;
use super::{out_string, push_data, Context, Drain, Flow};
use crate::output::{Output, FLUSH_BYTES};
use crate::protocol::{item_total_bytes, Data, StoreMode, KEY_MAX_BYTES};
use crate::stats::bump;
use crate::store::{Locked, KEY_BINARY, STALE, TOKEN_SENT};

const BAD_FORMAT: &str = "CLIENT_ERROR bad command line format";
pub(super) const TOO_LARGE: &str = "SERVER_ERROR object too large for cache";
pub(super) const OUT_OF_MEMORY: &str = "SERVER_ERROR out of memory storing object";

/// `process_get_command`: keys are looked up in order; a key over the limit discards what
/// was produced so far and answers with an error instead. The reply is handed to `drain`
/// whenever it passes [`FLUSH_BYTES`] (between keys), so a get naming any number of keys
/// holds at most that much plus one value; a request with a key over the limit is known
/// before any lookup (its keys are scanned first) and then holds nothing, since its reply
/// would be discarded anyway.
pub(super) fn get(
    ctx: &Context,
    out: &mut Output,
    now: u32,
    keys: &[u8],
    with_cas: bool,
    touch_exptime: Option<i32>,
    drain: &mut Drain<'_>,
) -> io::Result<Flow> {
    let store = &ctx.store;
    let stats = &store.stats;
    // memcached writes the pending replies with this one, so the items earlier `mg` replies
    // held are let go of (an `incr` after this rewrites in place).
    out.release_holds();
    let mark = out.mark();
    let exptime = touch_exptime.map(|e| store.clock.exptime(e, now));
    let words = || keys.split(|&b| b == b' ').filter(|k| !k.is_empty());
    // memcached drops the partial reply of a get with an overlong key, but only when it
    // reaches that key: earlier keys are still looked up (hits counted, items touched).
    let fails = keys.len() > KEY_MAX_BYTES && words().any(|k| k.len() > KEY_MAX_BYTES);
    for key in words() {
        if key.len() > KEY_MAX_BYTES {
            out.rollback(mark);
            out.line(BAD_FORMAT);
            return Ok(Flow::Continue);
        }
        let hash = store.hash(key);
        let mut lk = store.lock(hash, now);
        let found = lk.get(hash, key);
        let hit = found.is_some();
        match found {
            Some(idx) => {
                lk.bump(idx);
                if let Some(exptime) = exptime {
                    lk.set_exptime(idx, exptime);
                }
                if !fails {
                    let e = lk.entry(idx);
                    out.push(b"VALUE ");
                    out.push(e.key());
                    out.push(b" ");
                    out.push_u64(u64::from(e.flags));
                    out.push(b" ");
                    out.push_u64(e.value_len() as u64);
                    if with_cas {
                        out.push(b" ");
                        out.push_u64(e.cas);
                    }
                    out.push(b"\r\n");
                    push_data(out, e);
                }
                drop(lk);
                if exptime.is_some() {
                    bump(&stats.cmd_touch);
                    bump(&stats.touch_hits);
                } else {
                    bump(&stats.cmd_get);
                    bump(&stats.get_hits);
                }
                if out.len() >= FLUSH_BYTES {
                    drain(out)?;
                }
            }
            None => {
                drop(lk);
                if exptime.is_some() {
                    bump(&stats.cmd_touch);
                    bump(&stats.touch_misses);
                } else {
                    bump(&stats.cmd_get);
                    bump(&stats.get_misses);
                }
            }
        }
        // After the shard lock is released: the prefix table's lock is taken alone.
        if ctx.detail.enabled() {
            ctx.detail.record(key, Op::Get { hit });
        }
    }
    out.push(b"END\r\n");
    Ok(Flow::Continue)
}

/// A storage command's arguments.
pub(super) struct StoreArgs<'a> {
    pub mode: StoreMode,
    pub key: &'a [u8],
    pub flags: u32,
    pub exptime: i32,
    pub cas_unique: u64,
    pub data: Data<'a>,
    pub noreply: bool,
}

/// memcached's `store_item_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StoreResult {
    Stored,
    NotStored,
    Exists,
    NotFound,
    OutOfMemory,
}

/// An item to store (memcached's freshly allocated `item` before `do_store_item`).
#[derive(Clone, Copy)]
pub(super) struct NewItem<'a> {
    pub key: &'a [u8],
    pub hash: u64,
    pub flags: u32,
    pub exptime: u32,
    pub data: &'a [u8],
    pub cas_in: u64,
    pub set_stale: bool,
    pub key_binary: bool,
}

/// `do_store_item`; returns the outcome and the stored item's CAS value (0 if not stored).
pub(super) fn do_store(
    ctx: &Context,
    lk: &mut Locked<'_>,
    mode: StoreMode,
    it: NewItem<'_>,
) -> (StoreResult, u64) {
    let stats = &ctx.store.stats;
    let old = lk.get(it.hash, it.key);
    #[derive(PartialEq)]
    enum CasRes {
        None,
        Match,
        BadVal,
        Stale,
    }
    let cas_res = match old {
        Some(o) if it.cas_in != 0 => {
            let old_cas = lk.entry(o).cas;
            if it.cas_in == old_cas {
                CasRes::Match
            } else if it.set_stale && it.cas_in < old_cas {
                CasRes::Stale
            } else {
                CasRes::BadVal
            }
        }
        _ => CasRes::None,
    };
    let mut bits = if it.key_binary { KEY_BINARY } else { 0 };
    let (flags, exptime, data) = match mode {
        StoreMode::Add => {
            if let Some(o) = old {
                lk.update(o);
                return (StoreResult::NotStored, 0);
            }
            (it.flags, it.exptime, Cow::Borrowed(it.data))
        }
        StoreMode::Cas => match old {
            None => {
                bump(&stats.cas_misses);
                return (StoreResult::NotFound, 0);
            }
            Some(_) if cas_res == CasRes::Match => {
                bump(&stats.cas_hits);
                (it.flags, it.exptime, Cow::Borrowed(it.data))
            }
            Some(o) if cas_res == CasRes::Stale => {
                // memcached: the value is replaced, the TTL and the stale marks are kept.
                bump(&stats.cas_hits);
                bits |= STALE;
                (it.flags, lk.entry(o).exptime, Cow::Borrowed(it.data))
            }
            Some(_) => {
                bump(&stats.cas_badval);
                return (StoreResult::Exists, 0);
            }
        },
        StoreMode::Append | StoreMode::Prepend => {
            if cas_res != CasRes::None && cas_res != CasRes::Match {
                return (StoreResult::Exists, 0);
            }
            let Some(o) = old else {
                return (StoreResult::NotStored, 0);
            };
            let e = lk.entry(o);
            let total = e.value_len() + it.data.len();
            if item_total_bytes(it.key.len(), e.flags, total) > ctx.settings.item_size_max {
                return (StoreResult::NotStored, 0);
            }
            let old = e.data_vec();
            let v = if mode == StoreMode::Append {
                [&old[..old.len() - 2], it.data].concat()
            } else {
                [&it.data[..it.data.len() - 2], &old[..]].concat()
            };
            bits |= e.bits & KEY_BINARY;
            (e.flags, e.exptime, Cow::Owned(v))
        }
        StoreMode::Replace => {
            if old.is_none() {
                return (StoreResult::NotStored, 0);
            }
            (it.flags, it.exptime, Cow::Borrowed(it.data))
        }
        StoreMode::Set => (it.flags, it.exptime, Cow::Borrowed(it.data)),
    };
    let old_bits = old.map_or(0, |o| lk.entry(o).bits);
    if bits & STALE != 0 {
        bits |= old_bits & TOKEN_SENT;
    }
    match lk.link(it.hash, it.key, &[&data[..]], flags, exptime, bits, old) {
        Ok(idx) => (StoreResult::Stored, lk.entry(idx).cas),
        Err(_) => (StoreResult::OutOfMemory, 0),
    }
}

/// [`do_store`]; when it ran out of memory with evictions on (its class found no chunk and
/// no page), moves a page to that class ([`crate::store::Store::rebalance`], with the lock
/// released) and tries once more. Releases the lock.
pub(super) fn store_or_rebalance(
    ctx: &Context,
    mut lk: Locked<'_>,
    mode: StoreMode,
    it: NewItem<'_>,
    now: u32,
) -> (StoreResult, u64) {
    let got = do_store(ctx, &mut lk, mode, it);
    drop(lk);
    let store = &ctx.store;
    if got.0 != StoreResult::OutOfMemory || !store.config().evictions || store.rebalance() == 0 {
        return got;
    }
    let mut lk = store.lock(it.hash, now);
    do_store(ctx, &mut lk, mode, it)
}

/// `process_update_command` + `complete_nread_ascii`.
pub(super) fn store(ctx: &Context, out: &mut Output, now: u32, a: StoreArgs<'_>) -> Flow {
    let store = &ctx.store;
    let stats = &store.stats;
    let hash = store.hash(a.key);
    if ctx.detail.enabled() {
        ctx.detail.record(a.key, Op::Set);
    }
    let block = match a.data {
        Data::Skipped(n) => {
            bump(&stats.store_too_large);
            out_string(out, TOO_LARGE, a.noreply);
            if a.mode == StoreMode::Set {
                let mut lk = store.lock(hash, now);
                if let Some(idx) = lk.get(hash, a.key) {
                    lk.unlink(idx);
                }
            }
            return Flow::Swallow(n);
        }
        Data::Inline(d) => d,
    };
    store.make_room(a.key.len(), a.flags, block.len(), now);
    let mut lk = store.lock(hash, now);
    if lk.would_run_out(a.key.len(), a.flags, block.len()) {
        bump(&stats.store_no_memory);
        out_string(out, OUT_OF_MEMORY, a.noreply);
        if a.mode == StoreMode::Set {
            if let Some(idx) = lk.get(hash, a.key) {
                lk.unlink(idx);
            }
        }
        return Flow::Continue;
    }
    bump(&stats.cmd_set);
    if !block.ends_with(b"\r\n") {
        drop(lk);
        out_string(out, "CLIENT_ERROR bad data chunk", a.noreply);
        return Flow::Continue;
    }
    let it = NewItem {
        key: a.key,
        hash,
        flags: a.flags,
        exptime: store.clock.exptime(a.exptime, now),
        data: block,
        cas_in: a.cas_unique,
        set_stale: false,
        key_binary: false,
    };
    let (res, _) = store_or_rebalance(ctx, lk, a.mode, it, now);
    let line = match res {
        StoreResult::Stored => "STORED",
        StoreResult::NotStored => "NOT_STORED",
        StoreResult::Exists => "EXISTS",
        StoreResult::NotFound => "NOT_FOUND",
        StoreResult::OutOfMemory => {
            bump(&stats.store_no_memory);
            OUT_OF_MEMORY
        }
    };
    out_string(out, line, a.noreply);
    Flow::Continue
}

pub(super) fn delete(ctx: &Context, out: &mut Output, now: u32, key: &[u8], noreply: bool) -> Flow {
    let store = &ctx.store;
    if ctx.detail.enabled() {
        ctx.detail.record(key, Op::Delete);
    }
    let hash = store.hash(key);
    let mut lk = store.lock(hash, now);
    let found = lk.get(hash, key).map(|idx| lk.unlink(idx)).is_some();
    drop(lk);
    if found {
        bump(&store.stats.delete_hits);
        out_string(out, "DELETED", noreply);
    } else {
        bump(&store.stats.delete_misses);
        out_string(out, "NOT_FOUND", noreply);
    }
    Flow::Continue
}

pub(super) fn touch(
    ctx: &Context,
    out: &mut Output,
    now: u32,
    key: &[u8],
    exptime: i32,
    noreply: bool,
) -> Flow {
    let store = &ctx.store;
    let hash = store.hash(key);
    let exptime = store.clock.exptime(exptime, now);
    let mut lk = store.lock(hash, now);
    let found = match lk.get(hash, key) {
        Some(idx) => {
            lk.bump(idx);
            lk.set_exptime(idx, exptime);
            true
        }
        None => false,
    };
    drop(lk);
    bump(&store.stats.cmd_touch);
    if found {
        bump(&store.stats.touch_hits);
        out_string(out, "TOUCHED", noreply);
    } else {
        bump(&store.stats.touch_misses);
        out_string(out, "NOT_FOUND", noreply);
    }
    Flow::Continue
}

/// memcached's `delta_result_type`.
pub(super) enum Delta {
    /// The new value as text, and the item's slot.
    Ok(String, u32),
    NonNumeric,
    OutOfMemory,
    NotFound,
    CasMismatch,
}

/// `do_add_delta` under the caller's lock. A result no longer than the old value is written
/// in place padded with spaces, exactly as memcached does (`decr` of "100" by 1 reads back
/// as "99 "); a longer one, or one whose item an earlier reply of the batch still holds,
/// goes into a new item with fresh state, as memcached's does.
#[allow(clippy::too_many_arguments)]
pub(super) fn do_add_delta(
    ctx: &Context,
    out: &Output,
    lk: &mut Locked<'_>,
    hash: u64,
    key: &[u8],
    incr: bool,
    delta: u64,
    cas_in: u64,
) -> Delta {
    let stats = &ctx.store.stats;
    let Some(idx) = lk.get(hash, key) else {
        return Delta::NotFound;
    };
    let e = lk.entry(idx);
    if e.data_len() <= 2 {
        return Delta::NonNumeric;
    }
    if cas_in != 0 && e.cas != cas_in {
        return Delta::CasMismatch;
    }
    let data = e
        .data()
        .map_or_else(|| Cow::Owned(e.data_vec()), Cow::Borrowed);
    let Some(value) = crate::protocol::number::strtoull(number_prefix(&data)) else {
        return Delta::NonNumeric;
    };
    let value = if incr {
        bump(&stats.incr_hits);
        value.wrapping_add(delta)
    } else {
        bump(&stats.decr_hits);
        value.saturating_sub(delta)
    };
    let text = value.to_string();
    let res = text.len();
    if res + 2 <= data.len() && e.chunks() == 1 && !out.holds(e.cas) {
        let mut v = Vec::with_capacity(data.len());
        v.extend_from_slice(text.as_bytes());
        v.resize(data.len() - 2, b' ');
        v.extend_from_slice(b"\r\n");
        drop(data);
        lk.replace_data(idx, &v);
        Delta::Ok(text, idx)
    } else {
        // A new item, as memcached's `do_item_alloc` makes it: not stale, no recache token
        // sent, not fetched, not active. memcached also drops the binary-key mark, and then
        // shows such a key raw; weft keeps it, so the key reads back as it was stored.
        let (flags, exptime, bits) = (e.flags, e.exptime, e.bits & KEY_BINARY);
        drop(data);
        let mut v = Vec::with_capacity(res + 2);
        v.extend_from_slice(text.as_bytes());
        v.extend_from_slice(b"\r\n");
        match lk.link(hash, key, &[&v[..]], flags, exptime, bits, Some(idx)) {
            Ok(new_idx) => Delta::Ok(text, new_idx),
            Err(_) => Delta::OutOfMemory,
        }
    }
}

/// What C's `strtoull` would read from an item's data: up to the first `\r\n` is enough,
/// since parsing stops at the `\r` anyway.
fn number_prefix(data: &[u8]) -> &[u8] {
    let end = data.len() - 2;
    &data[..end]
}

#[allow(clippy::too_many_arguments)]
pub(super) fn arith(
    ctx: &Context,
    out: &mut Output,
    now: u32,
    incr: bool,
    key: &[u8],
    delta: u64,
    noreply: bool,
) -> Flow {
    let store = &ctx.store;
    let hash = store.hash(key);
    let mut lk = store.lock(hash, now);
    let res = do_add_delta(ctx, out, &mut lk, hash, key, incr, delta, 0);
    drop(lk);
    match res {
        Delta::Ok(text, _) => out_string(out, &text, noreply),
        Delta::NonNumeric => out_string(
            out,
            "CLIENT_ERROR cannot increment or decrement non-numeric value",
            noreply,
        ),
        Delta::OutOfMemory => out_string(out, "SERVER_ERROR out of memory", noreply),
        Delta::NotFound => {
            bump(if incr {
                &store.stats.incr_misses
            } else {
                &store.stats.decr_misses
            });
            out_string(out, "NOT_FOUND", noreply);
        }
        Delta::CasMismatch => {}
    }
    Flow::Continue
}
