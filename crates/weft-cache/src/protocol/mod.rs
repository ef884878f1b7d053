//! The memcached text protocol: turns the front of a connection's input buffer into one
//! [`Command`] and the number of bytes it used, or says more input is needed, or that the
//! connection must be closed.
//!
//! Invariants:
//! - Parsing never copies: every slice in a `Command` borrows the input buffer.
//! - The request line is tokenized exactly as memcached's `tokenize_command` does (spaces only,
//!   at most 23 tokens then "the rest"), the line ends at `\n` with one `\r` stripped, and is
//!   cut at the first NUL byte (memcached works on C strings). Dispatch follows
//!   `process_command_ascii`, including which errors honour `noreply`.
//! - A storage command is returned only with its whole data block in the buffer
//!   ([`Data::Inline`]); when the block can never be stored (over the item size limit) it is
//!   [`Data::Skipped`] and the caller discards that many bytes as they arrive, so a huge
//!   declared length never makes the buffer grow.

pub(crate) mod bytes;
pub mod meta;
pub mod number;
mod tokens;

pub use tokens::{Tokens, MAX_TOKENS};

use memchr::memchr;
use number::{strtol32, strtoul32, strtoull};

/// Longest key memcached accepts (`KEY_MAX_LENGTH`).
pub const KEY_MAX_BYTES: usize = 250;
/// Without a newline in this many bytes the line must be a long `get`/`gets`, else the
/// connection is closed (memcached's rule in `try_read_command_ascii`).
pub const LINE_WITHOUT_NEWLINE_MAX_BYTES: usize = 2048;
/// Hard cap on one request line, even a `get` with many keys (memcached grows its buffer
/// without bound; weft refuses to).
pub const LINE_MAX_BYTES: usize = 2 * 1024 * 1024;
/// memcached's item header (`sizeof(item)` on 64-bit) used in the item size limit.
pub const ITEM_HEADER_BYTES: usize = 48;
/// Bytes memcached adds per item for the CAS value.
pub const ITEM_CAS_BYTES: usize = 8;

/// The version string we answer with: clients and tests compare it with memcached's.
pub const VERSION: &str = "1.6.18";

/// The size memcached charges an item against `-I` (`item_make_header` + CAS).
pub fn item_total_bytes(key_len: usize, flags: u32, data_len_with_crlf: usize) -> usize {
    ITEM_HEADER_BYTES
        + key_len
        + 1
        + data_len_with_crlf
        + if flags == 0 { 0 } else { 4 }
        + ITEM_CAS_BYTES
}

/// Limits the parser needs from the server settings.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// `-I`: the largest item (header + key + data) that can be stored.
    pub item_size_max: usize,
}

/// Which storage command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreMode {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

/// A data block following a storage command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Data<'a> {
    /// The whole block (the declared length plus two bytes, normally `\r\n`) is in the buffer.
    Inline(&'a [u8]),
    /// The item cannot be stored whatever the block holds; the caller swallows this many bytes.
    Skipped(usize),
}

/// One parsed request.
#[derive(Debug)]
pub enum Command<'a> {
    /// `get`/`gets`/`gat`/`gats`/`bget`: `keys` is the rest of the line from the first key.
    Get {
        keys: &'a [u8],
        with_cas: bool,
        touch_exptime: Option<i32>,
    },
    Store {
        mode: StoreMode,
        key: &'a [u8],
        flags: u32,
        exptime: i32,
        cas_unique: u64,
        data: Data<'a>,
        noreply: bool,
    },
    Delete {
        key: &'a [u8],
        noreply: bool,
    },
    Arith {
        incr: bool,
        key: &'a [u8],
        delta: u64,
        noreply: bool,
    },
    Touch {
        key: &'a [u8],
        exptime: i32,
        noreply: bool,
    },
    /// `delay` is `None` when it is not a number (reported after the `-F` check, as
    /// memcached does).
    FlushAll {
        delay: Option<i32>,
        noreply: bool,
    },
    /// `shutdown` (`graceful` when the second token was that; `mode_ok` false for any
    /// other shape).
    Shutdown {
        mode_ok: bool,
    },
    /// A line memcached closes the connection on without a reply: an unknown command whose
    /// last token starts with `HTTP/` (an HTTP request sent to the cache port).
    CloseNow,
    Version,
    Quit,
    Verbosity {
        level: u32,
        noreply: bool,
    },
    Stats(&'a Tokens<'a>),
    CacheMemlimit {
        megabytes: u32,
        noreply: bool,
    },
    /// `mn`.
    MetaNoop,
    /// `mg`, `md`, `ma`, `me` (`op` is the second letter).
    Meta {
        op: u8,
        tokens: &'a Tokens<'a>,
    },
    /// `ms` with its data block.
    MetaSet {
        tokens: &'a Tokens<'a>,
        data: Data<'a>,
    },
    /// A fixed reply (an error or a disabled feature's answer), suppressed under `noreply`.
    Reply {
        line: &'static str,
        noreply: bool,
    },
}

/// The result of looking at the front of the buffer.
#[derive(Debug)]
pub enum Parse<'a> {
    /// No complete request yet.
    NeedMore,
    /// memcached closes the connection here (an overlong line without a newline).
    Close,
    /// A request that used the first `consumed` bytes.
    Ready {
        consumed: usize,
        command: Command<'a>,
    },
}

const ERROR: &str = "ERROR";
const BAD_FORMAT: &str = "CLIENT_ERROR bad command line format";
const BAD_EXPTIME: &str = "CLIENT_ERROR invalid exptime argument";

fn reply(line: &'static str, noreply: bool) -> Command<'static> {
    Command::Reply { line, noreply }
}

/// Parses one request from the front of `buf`, splitting its line into `tokens`.
///
/// The tokens go into the caller's slot and a command borrows them there: a [`Tokens`] is
/// 208 bytes, and carried by value in the command it was copied once a request on the way
/// (about 1 % of the cache's CPU at 16 connections, `docs/notes/scale.md`).
pub fn parse<'a>(buf: &'a [u8], limits: &Limits, tokens: &'a mut Tokens<'a>) -> Parse<'a> {
    let Some(nl) = bytes::find(b'\n', buf) else {
        if buf.len() > LINE_WITHOUT_NEWLINE_MAX_BYTES {
            let spaces = buf.iter().take_while(|&&b| b == b' ').count();
            let rest = &buf[spaces..];
            let long_get = rest.starts_with(b"get ") || rest.starts_with(b"gets ");
            if spaces > 100 || !long_get || buf.len() > LINE_MAX_BYTES {
                return Parse::Close;
            }
        }
        return Parse::NeedMore;
    };
    let mut end = nl;
    if nl > 1 && buf[nl - 1] == b'\r' {
        end -= 1;
    }
    let line_len = nl + 1;
    // Cut at its first NUL, if any (memcached works on C strings).
    tokens.fill_c_line(&buf[..end]);
    let tokens: &'a Tokens<'a> = tokens;
    let line = tokens.line();
    let command = match dispatch(line, tokens, buf, line_len, limits) {
        Some(c) => c,
        None => return Parse::NeedMore,
    };
    let consumed = match &command {
        Command::Store {
            data: Data::Inline(d),
            ..
        }
        | Command::MetaSet {
            data: Data::Inline(d),
            ..
        } => line_len + d.len(),
        _ => line_len,
    };
    Parse::Ready { consumed, command }
}

/// How many bytes the request at the front of `buf` needs in all, when it is a storage
/// command (classic or `ms`) whose line has arrived but whose data block has not: the caller
/// can then make room for the whole block at once instead of growing read by read. `None`
/// for anything else (it is only a sizing hint: [`parse`] decides what the request is).
pub fn incomplete_request_bytes(buf: &[u8]) -> Option<usize> {
    let nl = memchr(b'\n', buf)?;
    let end = if nl > 0 && buf[nl - 1] == b'\r' {
        nl - 1
    } else {
        nl
    };
    let tokens = Tokens::new(&buf[..end]);
    let length_token = match tokens.get(0) {
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => 4,
        b"ms" => 2,
        _ => return None,
    };
    let block = usize::try_from(strtol32(tokens.get(length_token))?).ok()? + 2;
    let total = nl + 1 + block;
    (total > buf.len()).then_some(total)
}

/// `set_noreply_maybe`: the last real token is exactly `noreply`.
fn noreply_flag(t: &Tokens<'_>) -> bool {
    t.count() >= 1 && t.get(t.count() - 1) == b"noreply"
}

/// Returns `None` when a storage command's data block is not complete yet.
fn dispatch<'a>(
    line: &'a [u8],
    t: &'a Tokens<'a>,
    buf: &'a [u8],
    line_len: usize,
    limits: &Limits,
) -> Option<Command<'a>> {
    let n = t.ntokens();
    let cmd = t.get(0);
    if n < 2 || cmd.len() < 2 {
        return Some(reply(ERROR, false));
    }
    let want = |ok: bool, f: &dyn Fn() -> Option<Command<'a>>| -> Option<Command<'a>> {
        if ok {
            f()
        } else {
            Some(reply(ERROR, false))
        }
    };
    if cmd[0] == b'm' && cmd.len() == 2 {
        return match cmd[1] {
            b'g' | b'd' | b'a' | b'e' => Some(Command::Meta {
                op: cmd[1],
                tokens: t,
            }),
            b's' => meta::parse_ms(t, buf, line_len, limits),
            b'n' => Some(Command::MetaNoop),
            _ => Some(reply(ERROR, false)),
        };
    }
    match cmd {
        b"get" | b"gets" | b"gat" | b"gats" | b"bget" => {
            if n < 3 {
                return Some(reply(ERROR, false));
            }
            let with_cas = cmd == b"gets" || cmd == b"gats";
            let touch = cmd == b"gat" || cmd == b"gats";
            let (touch_exptime, first_key) = if touch {
                match strtol32(t.get(1)) {
                    Some(e) => (Some(e), 2),
                    None => return Some(reply(BAD_EXPTIME, false)),
                }
            } else {
                (None, 1)
            };
            let keys = if first_key < t.count() {
                let off = t.offset_of(first_key);
                &line[off..]
            } else {
                t.rest().unwrap_or(&[])
            };
            Some(Command::Get {
                keys,
                with_cas,
                touch_exptime,
            })
        }
        b"set" => want(n == 6 || n == 7, &|| {
            store(StoreMode::Set, t, buf, line_len, limits)
        }),
        b"add" => want(n == 6 || n == 7, &|| {
            store(StoreMode::Add, t, buf, line_len, limits)
        }),
        b"append" => want(n == 6 || n == 7, &|| {
            store(StoreMode::Append, t, buf, line_len, limits)
        }),
        b"replace" => want(n == 6 || n == 7, &|| {
            store(StoreMode::Replace, t, buf, line_len, limits)
        }),
        b"prepend" => want(n == 6 || n == 7, &|| {
            store(StoreMode::Prepend, t, buf, line_len, limits)
        }),
        b"cas" => want(n == 7 || n == 8, &|| {
            store(StoreMode::Cas, t, buf, line_len, limits)
        }),
        b"incr" | b"decr" => want(n == 4 || n == 5, &|| {
            let noreply = noreply_flag(t);
            if t.get(1).len() > KEY_MAX_BYTES {
                return Some(reply(BAD_FORMAT, noreply));
            }
            Some(match strtoull(t.get(2)) {
                Some(delta) => Command::Arith {
                    incr: cmd == b"incr",
                    key: t.get(1),
                    delta,
                    noreply,
                },
                None => reply("CLIENT_ERROR invalid numeric delta argument", noreply),
            })
        }),
        b"delete" => want((3..=5).contains(&n), &|| Some(delete(t))),
        b"touch" => want(n == 4 || n == 5, &|| {
            let noreply = noreply_flag(t);
            if t.get(1).len() > KEY_MAX_BYTES {
                return Some(reply(BAD_FORMAT, noreply));
            }
            Some(match strtol32(t.get(2)) {
                Some(exptime) => Command::Touch {
                    key: t.get(1),
                    exptime,
                    noreply,
                },
                None => reply(BAD_EXPTIME, noreply),
            })
        }),
        b"flush_all" => want((2..=4).contains(&n), &|| {
            let noreply = noreply_flag(t);
            let delay = if n != if noreply { 3 } else { 2 } {
                strtol32(t.get(1))
            } else {
                Some(0)
            };
            Some(Command::FlushAll { delay, noreply })
        }),
        b"version" => Some(Command::Version),
        b"quit" => Some(Command::Quit),
        b"verbosity" => want(n == 3 || n == 4, &|| {
            let noreply = noreply_flag(t);
            Some(match strtoul32(t.get(1)) {
                Some(level) => Command::Verbosity { level, noreply },
                None => reply(BAD_FORMAT, noreply),
            })
        }),
        b"stats" => Some(Command::Stats(t)),
        b"cache_memlimit" => want(n == 3 || n == 4, &|| {
            let noreply = noreply_flag(t);
            Some(match strtoul32(t.get(1)) {
                Some(megabytes) => Command::CacheMemlimit { megabytes, noreply },
                None => reply(ERROR, noreply),
            })
        }),
        b"shutdown" => Some(Command::Shutdown {
            mode_ok: n == 2 || (n == 3 && t.get(1) == b"graceful"),
        }),
        b"watch" => Some(reply(
            "CLIENT_ERROR watch commands not allowed",
            noreply_flag(t),
        )),
        b"slabs" => Some(slabs(t)),
        b"lru_crawler" => Some(
            if n == 4 && (t.get(1) == b"crawl" || t.get(1) == b"metadump") {
                reply("CLIENT_ERROR lru crawler disabled", false)
            } else {
                reply(ERROR, false)
            },
        ),
        // memcached checks for an HTTP request line only after every command name, and
        // never for a line whose first letter starts a command family it knows.
        _ if !matches!(cmd[0], b'g' | b's' | b'a' | b'c' | b'i' | b'd' | b't')
            && t.get(t.count() - 1).starts_with(b"HTTP/") =>
        {
            Some(Command::CloseNow)
        }
        _ => Some(reply(ERROR, false)),
    }
}

fn slabs<'a>(t: &Tokens<'a>) -> Command<'a> {
    let n = t.ntokens();
    if n == 5 && t.get(1) == b"reassign" {
        return reply("CLIENT_ERROR slab reassignment disabled", false);
    }
    if n >= 4 && t.get(1) == b"automove" {
        let noreply = noreply_flag(t);
        if t.get(2) == b"ratio" {
            return reply(ERROR, noreply);
        }
        return match strtoul32(t.get(2)) {
            None => reply(BAD_FORMAT, noreply),
            Some(0..=2) => reply("OK", noreply),
            Some(_) => reply(ERROR, noreply),
        };
    }
    reply(ERROR, false)
}

fn delete<'a>(t: &Tokens<'a>) -> Command<'a> {
    let n = t.ntokens();
    let mut noreply = false;
    if n > 3 {
        let hold_is_zero = t.get(2) == b"0";
        noreply = noreply_flag(t);
        let valid = (n == 4 && (hold_is_zero || noreply)) || (n == 5 && hold_is_zero && noreply);
        if !valid {
            return reply(
                "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]",
                noreply,
            );
        }
    }
    if t.get(1).len() > KEY_MAX_BYTES {
        return reply(BAD_FORMAT, noreply);
    }
    Command::Delete {
        key: t.get(1),
        noreply,
    }
}

/// `process_update_command`.
fn store<'a>(
    mode: StoreMode,
    t: &Tokens<'a>,
    buf: &'a [u8],
    line_len: usize,
    limits: &Limits,
) -> Option<Command<'a>> {
    let noreply = noreply_flag(t);
    let key = t.get(1);
    if key.len() > KEY_MAX_BYTES {
        return Some(reply(BAD_FORMAT, noreply));
    }
    let (Some(flags), Some(exptime), Some(vlen)) =
        (strtoul32(t.get(2)), strtol32(t.get(3)), strtol32(t.get(4)))
    else {
        return Some(reply(BAD_FORMAT, noreply));
    };
    let mut cas_unique = 0;
    if mode == StoreMode::Cas {
        match strtoull(t.get(5)) {
            Some(c) => cas_unique = c,
            None => return Some(reply(BAD_FORMAT, noreply)),
        }
    }
    if !(0..=i32::MAX - 2).contains(&vlen) {
        return Some(reply(BAD_FORMAT, noreply));
    }
    let block = vlen as usize + 2;
    let data = if item_total_bytes(key.len(), flags, block) > limits.item_size_max {
        Data::Skipped(block)
    } else if buf.len() < line_len + block {
        return None;
    } else {
        Data::Inline(&buf[line_len..line_len + block])
    };
    Some(Command::Store {
        mode,
        key,
        flags,
        exptime,
        cas_unique,
        data,
        noreply,
    })
}

#[cfg(test)]
mod tests;
