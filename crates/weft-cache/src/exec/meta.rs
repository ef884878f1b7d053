//! The meta commands `mg`, `ms`, `md`, `ma`, `me`, following memcached's
//! `process_m*_command` step by step: return flags are emitted in the order the client gave
//! them, `q` hides only the nominal reply of each command, and errors always show.

use base64::Engine;

use super::classic::{
    do_add_delta, store_or_rebalance, Delta, NewItem, StoreResult, OUT_OF_MEMORY, TOO_LARGE,
};
use super::{push_data, Context, Flow};
use crate::output::Output;
use crate::protocol::meta::{preparse, MetaFlags, BAD_FORMAT, MAX_OPAQUE_BYTES, MAX_OPTION_TOKENS};
use crate::protocol::{item_total_bytes, Data, StoreMode, Tokens, KEY_MAX_BYTES};
use crate::stats::bump;
use crate::store::classes::item_bytes;
use crate::store::{Entry, FETCHED, KEY_BINARY, STALE, TOKEN_SENT};

const OPAQUE_TOO_LONG: &str = "CLIENT_ERROR opaque token too long";

fn err(out: &mut Output, line: &str) -> Flow {
    out.line(line);
    Flow::Continue
}

/// `mg`, `md`, `ma`, `me`.
pub(super) fn meta(ctx: &Context, out: &mut Output, now: u32, op: u8, t: &Tokens<'_>) -> Flow {
    match op {
        b'g' => mget(ctx, out, now, t),
        b'd' => mdelete(ctx, out, now, t),
        b'a' => marith(ctx, out, now, t),
        _ => mdebug(ctx, out, now, t),
    }
}

/// ` k<key>` (base64 and ` b` for a binary key).
fn push_key(out: &mut Output, key: &[u8], binary: bool) {
    out.push(b" k");
    if binary {
        out.push(
            base64::engine::general_purpose::STANDARD
                .encode(key)
                .as_bytes(),
        );
        out.push(b" b");
    } else {
        out.push(key);
    }
}

fn push_flag_u64(out: &mut Output, flag: u8, v: u64) {
    out.push(&[b' ', flag]);
    out.push_u64(v);
}

/// The ` t` value: -1 for no expiry, else seconds left (unsigned arithmetic like memcached).
fn push_ttl(out: &mut Output, e: &Entry, now: u32) {
    out.push(b" t");
    if e.exptime == 0 {
        out.push(b"-1");
    } else {
        out.push_u64(u64::from(e.exptime.wrapping_sub(now)));
    }
}

/// Emits ` O...` and ` k...` for the tokens that ask for them; `Err` when an opaque is too
/// long.
fn push_opaque_and_key(
    out: &mut Output,
    t: &Tokens<'_>,
    from: usize,
    key: &[u8],
    binary: bool,
) -> Result<(), ()> {
    for tok in t.from(from) {
        match tok[0] {
            b'O' => {
                if tok.len() > MAX_OPAQUE_BYTES {
                    return Err(());
                }
                out.push(b" ");
                out.push(tok);
            }
            b'k' => push_key(out, key, binary),
            _ => {}
        }
    }
    Ok(())
}

fn meta_key<'a>(t: &'a Tokens<'_>, of: &'a MetaFlags) -> &'a [u8] {
    of.decoded_key.as_deref().unwrap_or(t.get(1))
}

/// `process_mget_command`.
fn mget(ctx: &Context, out: &mut Output, now: u32, t: &Tokens<'_>) -> Flow {
    let store = &ctx.store;
    let stats = &store.stats;
    if t.ntokens() < 3 {
        return err(out, "ERROR");
    }
    if t.get(1).len() > KEY_MAX_BYTES {
        return err(out, BAD_FORMAT);
    }
    if t.ntokens() > MAX_OPTION_TOKENS {
        return err(out, "CLIENT_ERROR options flags are too long");
    }
    let of = match preparse(t, 2) {
        Ok(of) => of,
        Err(e) => return err(out, e),
    };
    let key = meta_key(t, &of);
    let hash = store.hash(key);
    let mut lk = store.lock(hash, now);
    let mut idx = lk.get(hash, key);
    let mut created = false;
    if idx.is_none() && of.vivify {
        let bits = if of.key_binary { KEY_BINARY } else { 0 };
        if let Ok(i) = lk.link(hash, key, &[&b"\r\n"[..]], 0, 0, bits, None) {
            idx = Some(i);
            created = true;
        }
    }
    let mark = out.mark();
    let Some(idx) = idx else {
        drop(lk);
        if of.new_ttl {
            bump(&stats.cmd_touch);
            bump(&stats.touch_misses);
        } else {
            bump(&stats.cmd_get);
            bump(&stats.get_misses);
        }
        out.push(b"EN");
        if push_opaque_and_key(out, t, 2, key, of.key_binary).is_err() {
            out.rollback(mark);
            return err(out, OPAQUE_TOO_LONG);
        }
        if of.no_reply {
            out.rollback(mark);
        } else {
            out.push(b"\r\n");
        }
        return Flow::Continue;
    };
    if of.value {
        out.push(b"VA ");
        out.push_u64(lk.entry(idx).value_len() as u64);
    } else {
        out.push(b"HD");
    }
    let mut won = false;
    let mut ttl_set = false;
    // The times are converted only for the flags that use them.
    for tok in t.from(2) {
        let e = lk.entry(idx);
        match tok[0] {
            b'T' => {
                ttl_set = true;
                lk.set_exptime(idx, store.clock.exptime(of.exptime, now));
            }
            b'N' if created => {
                lk.set_exptime(idx, store.clock.exptime(of.autoviv_exptime, now));
                won = true;
            }
            b'R' if e.bits & TOKEN_SENT == 0
                && !created
                && e.exptime != 0
                && e.exptime < store.clock.exptime(of.recache_time, now) =>
            {
                won = true;
            }
            b's' => push_flag_u64(out, b's', e.value_len() as u64),
            b't' => push_ttl(out, e, now),
            b'c' => push_flag_u64(out, b'c', e.cas),
            b'f' => push_flag_u64(out, b'f', u64::from(e.flags)),
            b'l' => push_flag_u64(out, b'l', u64::from(now.wrapping_sub(e.time))),
            b'h' => out.push(if e.bits & FETCHED != 0 {
                b" h1"
            } else {
                b" h0"
            }),
            b'O' => {
                if tok.len() > MAX_OPAQUE_BYTES {
                    drop(lk);
                    out.rollback(mark);
                    return err(out, OPAQUE_TOO_LONG);
                }
                out.push(b" ");
                out.push(tok);
            }
            b'k' => push_key(out, e.key(), e.bits & KEY_BINARY != 0),
            _ => {}
        }
    }
    let e = lk.entry(idx);
    if e.bits & TOKEN_SENT != 0 {
        out.push(b" Z");
    }
    if e.bits & STALE != 0 {
        out.push(b" X");
        if e.bits & TOKEN_SENT == 0 {
            won = true;
        }
    }
    if won {
        out.push(b" W");
        lk.set_bits(idx, TOKEN_SENT, 0);
    }
    out.push(b"\r\n");
    if of.value {
        push_data(out, lk.entry(idx));
    }
    out.hold(lk.entry(idx).cas);
    if !of.no_update {
        lk.bump(idx);
    }
    drop(lk);
    if ttl_set {
        bump(&stats.cmd_touch);
        bump(&stats.touch_hits);
    } else {
        bump(&stats.cmd_get);
        bump(&stats.get_hits);
    }
    Flow::Continue
}

/// `process_mset_command` + `complete_nread_ascii` + `_finalize_mset`.
pub(super) fn mset(
    ctx: &Context,
    out: &mut Output,
    now: u32,
    t: &Tokens<'_>,
    data: Data<'_>,
) -> Flow {
    let store = &ctx.store;
    let stats = &store.stats;
    let block_len = match data {
        Data::Inline(d) => d.len(),
        Data::Skipped(n) => n,
    };
    // Errors from here on swallow the data block (when it is inline it is already consumed).
    let fail = |out: &mut Output, line: &str| -> Flow {
        out.line(line);
        match data {
            Data::Skipped(n) => Flow::Swallow(n),
            Data::Inline(_) => Flow::Continue,
        }
    };
    let of = match preparse(t, 3) {
        Ok(of) => of,
        Err(e) => return fail(out, e),
    };
    let key = meta_key(t, &of);
    for tok in t.from(2) {
        if tok[0] == b'O' && tok.len() > MAX_OPAQUE_BYTES {
            return fail(out, OPAQUE_TOO_LONG);
        }
    }
    let mut mode = match of.mode {
        0 | b'S' => StoreMode::Set,
        b'E' => StoreMode::Add,
        b'A' => StoreMode::Append,
        b'P' => StoreMode::Prepend,
        b'R' => StoreMode::Replace,
        _ => return fail(out, "CLIENT_ERROR invalid mode for ms M token"),
    };
    if of.has_cas && (mode == StoreMode::Set || mode == StoreMode::Replace) {
        mode = StoreMode::Cas;
    }
    let hash = store.hash(key);
    let too_large =
        item_total_bytes(key.len(), of.client_flags, block_len) > ctx.settings.item_size_max;
    if !too_large {
        store.make_room(key.len(), of.client_flags, block_len, now);
    }
    let mut lk = store.lock(hash, now);
    if too_large || lk.would_run_out(key.len(), of.client_flags, block_len) {
        let line = if too_large {
            bump(&stats.store_too_large);
            TOO_LARGE
        } else {
            bump(&stats.store_no_memory);
            OUT_OF_MEMORY
        };
        if let Some(idx) = lk.get(hash, key) {
            lk.unlink(idx);
        }
        drop(lk);
        return fail(out, line);
    }
    let Data::Inline(block) = data else {
        unreachable!("a skipped block is always too large")
    };
    bump(&stats.cmd_set);
    if !block.ends_with(b"\r\n") {
        drop(lk);
        return err(out, "CLIENT_ERROR bad data chunk");
    }
    let it = NewItem {
        key,
        hash,
        flags: of.client_flags,
        exptime: store.clock.exptime(of.exptime, now),
        data: block,
        cas_in: of.req_cas,
        set_stale: of.set_stale && mode == StoreMode::Cas,
        key_binary: of.key_binary,
    };
    let (res, cas) = store_or_rebalance(ctx, lk, mode, it, now);
    let mark = out.mark();
    out.push(match res {
        StoreResult::Stored => b"HD",
        StoreResult::Exists => b"EX",
        StoreResult::NotFound => b"NF",
        StoreResult::NotStored => b"NS",
        StoreResult::OutOfMemory => {
            bump(&stats.store_no_memory);
            return err(out, OUT_OF_MEMORY);
        }
    });
    for tok in t.from(2) {
        match tok[0] {
            b'O' => {
                out.push(b" ");
                out.push(tok);
            }
            b'k' => push_key(out, key, of.key_binary),
            b'c' => push_flag_u64(out, b'c', cas),
            _ => {}
        }
    }
    out.push(b"\r\n");
    if res == StoreResult::Stored && of.no_reply {
        out.rollback(mark);
    }
    Flow::Continue
}

/// The checks `process_mdelete_command` and `process_marithmetic_command` both start with, in
/// memcached's order and with their wording (`mg` and `ms` word theirs differently); on error
/// the reply is written and the flow returned.
fn delete_arith_flags(out: &mut Output, t: &Tokens<'_>) -> Result<MetaFlags, Flow> {
    if t.ntokens() < 3 {
        return Err(err(out, "ERROR"));
    }
    if t.get(1).len() > KEY_MAX_BYTES {
        return Err(err(out, BAD_FORMAT));
    }
    if t.ntokens() > MAX_OPTION_TOKENS {
        return Err(err(out, "CLIENT_ERROR options flags too long"));
    }
    preparse(t, 2).map_err(|_| err(out, "CLIENT_ERROR invalid or duplicate flag"))
}

/// `process_mdelete_command`.
fn mdelete(ctx: &Context, out: &mut Output, now: u32, t: &Tokens<'_>) -> Flow {
    let store = &ctx.store;
    let stats = &store.stats;
    let of = match delete_arith_flags(out, t) {
        Ok(of) => of,
        Err(flow) => return flow,
    };
    let key = meta_key(t, &of);
    let mut flags_out = Output::new();
    if push_opaque_and_key(&mut flags_out, t, 2, key, of.key_binary).is_err() {
        return err(out, OPAQUE_TOO_LONG);
    }
    let hash = store.hash(key);
    let mut lk = store.lock(hash, now);
    let (code, quiet_ok): (&[u8], bool) = match lk.get(hash, key) {
        Some(idx) if of.has_cas && lk.entry(idx).cas != of.req_cas => {
            bump(&stats.delete_misses);
            (b"EX", false)
        }
        Some(idx) if of.set_stale => {
            let exptime = store.clock.exptime(of.exptime, now);
            let cas = store.item_cas();
            if of.new_ttl {
                lk.set_exptime(idx, exptime);
            }
            lk.set_bits(idx, STALE, TOKEN_SENT);
            lk.set_cas(idx, cas);
            (b"HD", true)
        }
        Some(idx) => {
            bump(&stats.delete_hits);
            lk.unlink(idx);
            (b"HD", true)
        }
        None => {
            bump(&stats.delete_misses);
            (b"NF", false)
        }
    };
    drop(lk);
    if quiet_ok && of.no_reply {
        return Flow::Continue;
    }
    out.push(code);
    let mut sink = Vec::new();
    let _ = flags_out.write_to(&mut sink);
    out.push(&sink);
    out.push(b"\r\n");
    Flow::Continue
}

/// `process_marithmetic_command`.
fn marith(ctx: &Context, out: &mut Output, now: u32, t: &Tokens<'_>) -> Flow {
    let store = &ctx.store;
    let stats = &store.stats;
    let of = match delete_arith_flags(out, t) {
        Ok(of) => of,
        Err(flow) => return flow,
    };
    let key = meta_key(t, &of);
    let incr = match of.mode {
        0 | b'I' | b'i' | b'+' => true,
        b'D' | b'd' | b'-' => false,
        _ => return err(out, "CLIENT_ERROR invalid mode for ma M token"),
    };
    let hash = store.hash(key);
    let mut lk = store.lock(hash, now);
    let mark = out.mark();
    let mut created = false;
    let mut item: Option<(String, u32)> = None;
    let mut quiet_ok = false;
    match do_add_delta(ctx, out, &mut lk, hash, key, incr, of.delta, of.req_cas) {
        Delta::Ok(text, idx) => {
            quiet_ok = true;
            item = Some((text, idx));
        }
        Delta::NonNumeric => {
            return err(
                out,
                "CLIENT_ERROR cannot increment or decrement non-numeric value",
            )
        }
        Delta::OutOfMemory => return err(out, "SERVER_ERROR out of memory"),
        Delta::NotFound => {
            if of.vivify {
                let text = of.initial.to_string();
                let mut v = text.clone().into_bytes();
                v.extend_from_slice(b"\r\n");
                let bits = if of.key_binary { KEY_BINARY } else { 0 };
                match lk.link(hash, key, &[&v[..]], 0, 0, bits, None) {
                    Ok(idx) => {
                        created = true;
                        item = Some((text, idx));
                    }
                    Err(_) => return err(out, "SERVER_ERROR Out of memory allocating new item"),
                }
            } else {
                bump(if incr {
                    &stats.incr_misses
                } else {
                    &stats.decr_misses
                });
                out.push(b"NF");
            }
        }
        Delta::CasMismatch => out.push(b"EX"),
    }
    if let Some((text, idx)) = &item {
        if of.value {
            out.push(b"VA ");
            out.push_u64(text.len() as u64);
        } else {
            out.push(b"HD");
        }
        let exptime = store.clock.exptime(of.exptime, now);
        let autoviv = store.clock.exptime(of.autoviv_exptime, now);
        for tok in t.from(2) {
            match tok[0] {
                b'c' => push_flag_u64(out, b'c', lk.entry(*idx).cas),
                b't' => push_ttl(out, lk.entry(*idx), now),
                b'T' => lk.set_exptime(*idx, exptime),
                b'N' if created => lk.set_exptime(*idx, autoviv),
                b'O' => {
                    if tok.len() > MAX_OPAQUE_BYTES {
                        out.rollback(mark);
                        return err(out, OPAQUE_TOO_LONG);
                    }
                    out.push(b" ");
                    out.push(tok);
                }
                b'k' => push_key(out, key, of.key_binary),
                _ => {}
            }
        }
        if of.value {
            out.push(b"\r\n");
            out.push(text.as_bytes());
        }
    } else if push_opaque_and_key(out, t, 2, key, of.key_binary).is_err() {
        out.rollback(mark);
        return err(out, OPAQUE_TOO_LONG);
    }
    drop(lk);
    out.push(b"\r\n");
    if quiet_ok && of.no_reply {
        out.rollback(mark);
    }
    Flow::Continue
}

/// `process_meta_command` (`me`): an item's metadata in memcached's debug format.
fn mdebug(ctx: &Context, out: &mut Output, now: u32, t: &Tokens<'_>) -> Flow {
    let store = &ctx.store;
    if t.ntokens() < 3 || t.get(1).len() > KEY_MAX_BYTES {
        return err(out, BAD_FORMAT);
    }
    let decoded;
    let mut key = t.get(1);
    if t.ntokens() >= 4 && t.get(2) == b"b" {
        match base64::engine::general_purpose::STANDARD.decode(key) {
            Ok(k) if !k.is_empty() => {
                decoded = k;
                key = &decoded;
            }
            _ => return err(out, BAD_FORMAT),
        }
    }
    let hash = store.hash(key);
    let mut lk = store.lock(hash, now);
    match lk.get(hash, key) {
        Some(idx) => {
            let e = lk.entry(idx);
            out.push(b"ME ");
            if e.bits & KEY_BINARY != 0 {
                out.push(
                    base64::engine::general_purpose::STANDARD
                        .encode(e.key())
                        .as_bytes(),
                );
            } else {
                out.push(e.key());
            }
            let exp: i64 = if e.exptime == 0 {
                -1
            } else {
                i64::from(now.wrapping_sub(e.exptime) as i32)
            };
            let size = item_bytes(e.key().len(), e.flags, e.data_len(), ctx.settings.use_cas);
            let line = format!(
                " exp={exp} la={} cas={} fetch={} cls={} size={size}\r\n",
                now.wrapping_sub(e.time),
                e.cas,
                if e.bits & FETCHED != 0 { "yes" } else { "no" },
                e.class,
            );
            out.push(line.as_bytes());
        }
        None => out.line("EN"),
    }
    drop(lk);
    bump(&store.stats.cmd_meta);
    Flow::Continue
}
