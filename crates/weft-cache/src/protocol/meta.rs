//! Meta-command flags (`mg`, `ms`, `md`, `ma`): memcached's `_meta_flag_preparse`, with its
//! error precedence (a later bad flag overwrites an earlier message; an unknown or repeated
//! flag stops at once), and the framing of `ms` and its data block.

use base64::Engine;

use super::number::{strtol32, strtoul32, strtoull};
use super::{item_total_bytes, reply, Command, Data, Limits, Tokens, KEY_MAX_BYTES};

/// memcached's `MFLAG_MAX_OPT_LENGTH`: more tokens than this is refused.
pub const MAX_OPTION_TOKENS: usize = 20;
/// memcached's `MFLAG_MAX_OPAQUE_LENGTH`.
pub const MAX_OPAQUE_BYTES: usize = 32;

pub const BAD_FORMAT: &str = "CLIENT_ERROR bad command line format";

/// What the flags of one meta command asked for (memcached's `struct _meta_flags`).
/// Times are the raw client values; the executor converts them with the server clock.
#[derive(Debug, Default, Clone)]
pub struct MetaFlags {
    pub no_update: bool,
    pub vivify: bool,
    pub value: bool,
    pub set_stale: bool,
    pub no_reply: bool,
    pub has_cas: bool,
    pub new_ttl: bool,
    pub key_binary: bool,
    /// The `M` switch (ms: E A P R S; ma: I + D -), 0 when absent.
    pub mode: u8,
    pub exptime: i32,
    pub autoviv_exptime: i32,
    pub recache_time: i32,
    pub client_flags: u32,
    pub req_cas: u64,
    pub delta: u64,
    pub initial: u64,
    /// The key after base64 decoding (`b`), when given.
    pub decoded_key: Option<Vec<u8>>,
}

/// Parses flags from token `start` on. `Err` carries memcached's message.
///
/// The usual request names only flags that take no value here (`v`, `q`, the return flags):
/// those are read by a short loop, and any other flag sends the whole list to
/// `preparse_all` (the full parser was about 160 instructions for an `mg <key> v`, most
/// of them setting up for flags the request did not name).
pub fn preparse(t: &Tokens<'_>, start: usize) -> Result<MetaFlags, &'static str> {
    let mut of = MetaFlags {
        delta: 1,
        ..MetaFlags::default()
    };
    let mut seen = [0u64; 2];
    for i in start..t.count() {
        let o = t.get(i)[0];
        let (word, bit) = (usize::from(o >> 6), 1u64 << (o & 63));
        if o >= 127 || seen[word] & bit != 0 {
            return Err("CLIENT_ERROR duplicate flag");
        }
        seen[word] |= bit;
        match o {
            b'v' => of.value = true,
            b'u' => of.no_update = true,
            b'q' => of.no_reply = true,
            b'I' => of.set_stale = true,
            b'l' | b'O' | b'P' | b'L' | b'k' | b's' | b't' | b'c' | b'f' | b'h' => {}
            _ => return preparse_all(t, start),
        }
    }
    Ok(of)
}

/// [`preparse`] for any flags.
#[inline(never)]
fn preparse_all(t: &Tokens<'_>, start: usize) -> Result<MetaFlags, &'static str> {
    let mut of = MetaFlags {
        delta: 1,
        ..MetaFlags::default()
    };
    let mut errstr = BAD_FORMAT;
    let mut has_error = false;
    // Which flag characters were seen, one bit each (a 127-byte array to zero was about a
    // tenth of this function's instructions for the usual one or two flags).
    let mut seen = 0u128;
    for tok in t.from(start) {
        let o = tok[0];
        if o >= 127 || seen & (1 << o) != 0 {
            return Err("CLIENT_ERROR duplicate flag");
        }
        seen |= 1 << o;
        let arg = &tok[1..];
        let mut bad_token = |ok: bool| {
            if !ok {
                errstr = "CLIENT_ERROR bad token in command line format";
                has_error = true;
            }
        };
        match o {
            b'b' => {
                match base64::engine::general_purpose::STANDARD.decode(t.get(1)) {
                    Ok(k) if !k.is_empty() => of.decoded_key = Some(k),
                    _ => {
                        errstr = "CLIENT_ERROR error decoding key";
                        has_error = true;
                        of.decoded_key = Some(Vec::new());
                    }
                }
                of.key_binary = true;
            }
            b'N' => {
                of.vivify = true;
                let v = strtol32(arg);
                bad_token(v.is_some());
                of.autoviv_exptime = v.unwrap_or(0);
            }
            b'T' => {
                let v = strtol32(arg);
                bad_token(v.is_some());
                if let Some(v) = v {
                    of.exptime = v;
                    of.new_ttl = true;
                }
            }
            b'R' => {
                let v = strtol32(arg);
                bad_token(v.is_some());
                of.recache_time = v.unwrap_or(0);
            }
            b'l' | b'O' | b'P' | b'L' | b'k' | b's' | b't' | b'c' | b'f' | b'h' => {}
            b'v' => of.value = true,
            b'u' => of.no_update = true,
            b'q' => of.no_reply = true,
            b'F' => match strtoul32(arg) {
                Some(f) => of.client_flags = f,
                None => has_error = true,
            },
            b'C' => {
                let v = strtoull(arg);
                bad_token(v.is_some());
                if let Some(v) = v {
                    of.req_cas = v;
                    of.has_cas = true;
                }
            }
            b'M' => {
                if tok.len() != 2 {
                    errstr = "CLIENT_ERROR incorrect length for M token";
                    has_error = true;
                } else {
                    of.mode = tok[1];
                }
            }
            b'J' => match strtoull(arg) {
                Some(v) => of.initial = v,
                None => {
                    errstr = "CLIENT_ERROR invalid numeric initial value";
                    has_error = true;
                }
            },
            b'D' => match strtoull(arg) {
                Some(v) => of.delta = v,
                None => {
                    errstr = "CLIENT_ERROR invalid numeric delta value";
                    has_error = true;
                }
            },
            b'I' => of.set_stale = true,
            _ => return Err("CLIENT_ERROR invalid flag"),
        }
    }
    if has_error {
        Err(errstr)
    } else {
        Ok(of)
    }
}

/// The framing of `ms <key> <datalen> <flags>*`: errors found before the data length is known
/// leave the data block to be parsed as commands (as memcached does); otherwise the block is
/// part of the request.
pub(super) fn parse_ms<'a>(
    t: &'a Tokens<'a>,
    buf: &'a [u8],
    line_len: usize,
    limits: &Limits,
) -> Option<Command<'a>> {
    let n = t.ntokens();
    if n < 3 {
        return Some(reply("ERROR", false));
    }
    if t.get(1).len() > KEY_MAX_BYTES || n == 3 {
        return Some(reply(BAD_FORMAT, false));
    }
    if n > MAX_OPTION_TOKENS {
        return Some(reply("CLIENT_ERROR options flags too long", false));
    }
    let vlen = match strtol32(t.get(2)) {
        Some(v) if (0..=i32::MAX - 2).contains(&v) => v as usize,
        _ => return Some(reply(BAD_FORMAT, false)),
    };
    let block = vlen + 2;
    let data = if item_total_bytes(0, 0, block) > limits.item_size_max {
        Data::Skipped(block)
    } else if buf.len() < line_len + block {
        return None;
    } else {
        Data::Inline(&buf[line_len..line_len + block])
    };
    Some(Command::MetaSet { tokens: t, data })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The short loop gives what the full parser gives, for every list of flags: the ones
    /// it reads, the ones it hands over, repeats, unknown and out-of-range bytes.
    #[test]
    fn the_short_loop_agrees_with_the_full_parser() {
        let flags: [&[u8]; 16] = [
            b"v", b"q", b"u", b"I", b"k", b"s", b"t", b"c", b"f", b"h", b"l", b"Oabc", b"T30",
            b"N5", b"Tx", b"\x7f",
        ];
        let mut lines = 0;
        for a in &flags {
            for b in &flags {
                for c in &flags {
                    let mut line = b"mg key".to_vec();
                    for f in [a, b, c] {
                        line.push(b' ');
                        line.extend_from_slice(f);
                    }
                    let t = Tokens::new(&line);
                    let fast = format!("{:?}", preparse(&t, 2));
                    let full = format!("{:?}", preparse_all(&t, 2));
                    assert_eq!(fast, full, "{}", String::from_utf8_lossy(&line));
                    lines += 1;
                }
            }
        }
        assert_eq!(lines, 16 * 16 * 16);
        let t = Tokens::new(b"mg key");
        assert_eq!(
            format!("{:?}", preparse(&t, 2)),
            format!("{:?}", preparse_all(&t, 2))
        );
    }
}
