//! Encoding the generator's requests: `get <key>` and `set <key> 0 0 <n>` in the classic text
//! protocol, `mg <key> v` and `ms <key> <n>` in the meta protocol.

use std::io::Write as _;
use std::str::FromStr;

/// Which of memcached's text protocols the generator's gets and sets use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// `get` / `set`, answered by `VALUE … END` / `STORED`.
    #[default]
    Classic,
    /// `mg <key> v` / `ms <key> <n>`, answered by `VA` (or `EN`) / `HD`. memcached 1.6 writes
    /// a pipelined batch of meta gets in one send, but each classic `get` in its own.
    Meta,
}

impl Protocol {
    /// The name `--protocol` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Classic => "classic",
            Protocol::Meta => "meta",
        }
    }
}

impl FromStr for Protocol {
    type Err = String;

    fn from_str(s: &str) -> Result<Protocol, String> {
        match s {
            "classic" => Ok(Protocol::Classic),
            "meta" => Ok(Protocol::Meta),
            _ => Err(format!("protocol `{s}` is neither `classic` nor `meta`")),
        }
    }
}

/// Bytes of every key: `key:` and 12 decimal digits, so all keys are the same size.
pub const KEY_BYTES: usize = 16;

/// Appends the key of index `index` to `out`: `key:` and the index in at least 12 digits.
#[inline]
pub fn push_key(out: &mut Vec<u8>, index: u64) {
    const TWELVE_DIGITS: u64 = 1_000_000_000_000;
    if index >= TWELVE_DIGITS {
        write!(out, "key:{index:012}").expect("writing to a Vec cannot fail");
        return;
    }
    // By hand: `write!` with a width went through the formatter's padding on every request,
    // about 1 % of the generator's CPU at 15,360 connections.
    let mut key = *b"key:000000000000";
    let mut rest = index;
    for digit in key[4..].iter_mut().rev() {
        *digit = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    out.extend_from_slice(&key);
}

/// Appends `get <key>\r\n`.
#[inline]
pub fn push_get(out: &mut Vec<u8>, index: u64) {
    out.extend_from_slice(b"get ");
    push_key(out, index);
    out.extend_from_slice(b"\r\n");
}

/// Appends a get of key `index` in `protocol`.
#[inline]
pub fn push_read(out: &mut Vec<u8>, protocol: Protocol, index: u64) {
    match protocol {
        Protocol::Classic => push_get(out, index),
        Protocol::Meta => {
            out.extend_from_slice(b"mg ");
            push_key(out, index);
            out.extend_from_slice(b" v\r\n");
        }
    }
}

/// Appends a set of key `index` to `filler` in `protocol`.
#[inline]
pub fn push_write(out: &mut Vec<u8>, protocol: Protocol, index: u64, filler: &[u8]) {
    match protocol {
        Protocol::Classic => push_set(out, index, filler),
        Protocol::Meta => {
            out.extend_from_slice(b"ms ");
            push_key(out, index);
            write!(out, " {}\r\n", filler.len()).expect("writing to a Vec cannot fail");
            out.extend_from_slice(filler);
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// Appends `set <key> 0 0 <len>\r\n<value>\r\n`, the value being `filler[..len]`.
#[inline]
pub fn push_set(out: &mut Vec<u8>, index: u64, filler: &[u8]) {
    out.extend_from_slice(b"set ");
    push_key(out, index);
    write!(out, " 0 0 {}\r\n", filler.len()).expect("writing to a Vec cannot fail");
    out.extend_from_slice(filler);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_format() {
        let mut out = Vec::new();
        push_get(&mut out, 7);
        push_set(&mut out, 123_456_789_012, b"abc");
        assert_eq!(
            out,
            b"get key:000000000007\r\nset key:123456789012 0 0 3\r\nabc\r\n"
        );
        let mut meta = Vec::new();
        push_read(&mut meta, Protocol::Meta, 7);
        push_write(&mut meta, Protocol::Meta, 8, b"abc");
        assert_eq!(
            meta,
            b"mg key:000000000007 v\r\nms key:000000000008 3\r\nabc\r\n"
        );
        let mut classic = Vec::new();
        push_read(&mut classic, Protocol::Classic, 7);
        push_write(&mut classic, Protocol::Classic, 123_456_789_012, b"abc");
        assert_eq!(classic, out);
        assert_eq!("meta".parse(), Ok(Protocol::Meta));
        assert_eq!("classic".parse(), Ok(Protocol::Classic));
        assert!("binary".parse::<Protocol>().is_err());
        for p in [Protocol::Classic, Protocol::Meta] {
            assert_eq!(p.as_str().parse(), Ok(p));
        }
        for index in [0, 9, 10, 4_294_967_296, 999_999_999_999, 1_000_000_000_000] {
            let mut key = Vec::new();
            push_key(&mut key, index);
            assert_eq!(key, format!("key:{index:012}").into_bytes());
        }
        let mut key = Vec::new();
        push_key(&mut key, 0);
        assert_eq!(key.len(), KEY_BYTES);
    }
}
