//! Look-ahead over a read's pipelined gets: before the requests of one read run, the keys of
//! its gets are looked up once without an answer ([`crate::store::Store::prefetch_gets`]):
//! every key's table elements are asked for, then every element's item lines, so the misses
//! of all the keys are on their way together and the requests then find the lines in cache.
//!
//! Why: a get's time in the store is dependent cache misses, the table's control group and
//! element and then the item (its header, key and value lines). Run one after another, a read
//! of four gets waits for twelve misses; with the look-ahead the keys' misses overlap
//! (`docs/notes/scale.md`, "Pipelined gets" and the twenty-ninth session). A read with one
//! get has nothing to overlap and is left alone, so a connection with one request
//! outstanding pays only the scan.
//!
//! Invariants: the look-ahead changes no state (it takes each shard's lock only to read, and
//! only hints the processor); at most [`MAX_KEYS`] keys from the first [`MAX_SCAN_BYTES`]
//! bytes of a read, so a read of large values is not scanned through.

use crate::protocol::bytes;
use crate::store::Store;

/// Most keys one read's look-ahead asks for.
pub const MAX_KEYS: usize = 16;

/// Bytes of a read scanned for gets.
pub const MAX_SCAN_BYTES: usize = 4096;

/// Asks for the lines the gets in `buf` will read, when there are at least two.
///
/// Inlined into the caller: a read of one request (a connection with one request
/// outstanding, the usual case at thousands of connections) costs only the newline search
/// and `may_hold_two_keys`; the scan, with its arrays of keys, hashes and guards, is a
/// function of its own that such a read never enters (the check inside that function's
/// frame ran about 200 instructions a request at 1,000 connections, `docs/notes/scale.md`).
#[inline]
pub fn prefetch(buf: &[u8], store: &Store) {
    let Some(first_nl) = bytes::find(b'\n', buf) else {
        return;
    };
    if may_hold_two_keys(buf, first_nl) {
        scan(buf, first_nl, store);
    }
}

/// The look-ahead proper: the keys of `buf`'s gets, then their lines asked for.
#[inline(never)]
fn scan(buf: &[u8], first_nl: usize, store: &Store) {
    let mut keys = [&[][..]; MAX_KEYS];
    let n = keys_from(buf, first_nl, &mut keys);
    if n > 1 {
        store.prefetch_gets(&keys[..n]);
    }
}

/// Whether `buf`, whose first line ends at `first_nl`, may name two gets' keys: it holds
/// more than one line, or one `get`/`gets` line with a second argument. A read of one
/// request then costs one newline search instead of the scan, which ran about 270
/// instructions a request there (`benches/cachesim.sh`).
#[inline]
fn may_hold_two_keys(buf: &[u8], first_nl: usize) -> bool {
    if first_nl + 1 < buf.len() {
        return true;
    }
    let line = &buf[..first_nl];
    line.strip_prefix(b"get ")
        .or_else(|| line.strip_prefix(b"gets "))
        .is_some_and(|args| bytes::find(b' ', args.trim_ascii()).is_some())
}

/// The keys of the complete get lines at the front of `buf` (`get`, `gets`: every key of the
/// line; `mg`: its key), in order, at most `MAX_KEYS`; returns how many. Lines of other
/// commands, and a value block's lines, are skipped (a block line that happens to read like
/// a get costs a needless hint, nothing else).
pub fn get_keys<'a>(buf: &'a [u8], keys: &mut [&'a [u8]; MAX_KEYS]) -> usize {
    match bytes::find(b'\n', buf) {
        Some(first_nl) => keys_from(buf, first_nl, keys),
        None => 0,
    }
}

/// [`get_keys`], the first line's newline known. An `mg` line is read once: its key up to
/// the next space or newline, then its newline from there (the two searches of a line
/// before, from its start each time, were a third of the look-ahead's instructions).
fn keys_from<'a>(buf: &'a [u8], first_nl: usize, keys: &mut [&'a [u8]; MAX_KEYS]) -> usize {
    let buf = &buf[..buf.len().min(MAX_SCAN_BYTES)];
    let mut n = 0;
    let mut at = 0;
    let mut known_nl = Some(first_nl).filter(|&nl| nl < buf.len());
    while at < buf.len() {
        let rest = &buf[at..];
        if let Some(args) = rest.strip_prefix(b"mg ") {
            // The key is the first token (spaces before it are skipped, as the tokenizer
            // does), ending at a space or at the line's end.
            let skip = args.iter().take_while(|&&b| b == b' ').count();
            let from = 3 + skip;
            let Some(key_end) = bytes::find_either(b' ', b'\n', &rest[from..]) else {
                break;
            };
            let key = &rest[from..from + key_end];
            let key = key.strip_suffix(b"\r").unwrap_or(key);
            let Some(nl) = bytes::find(b'\n', &rest[from + key_end..]) else {
                break;
            };
            if !key.is_empty() {
                if n == MAX_KEYS {
                    return n;
                }
                keys[n] = key;
                n += 1;
            }
            at += from + key_end + nl + 1;
            known_nl = None;
            continue;
        }
        let nl = match known_nl.take() {
            Some(nl) => nl,
            None => match bytes::find(b'\n', rest) {
                Some(nl) => nl,
                None => break,
            },
        };
        let line = rest[..nl].strip_suffix(b"\r").unwrap_or(&rest[..nl]);
        at += nl + 1;
        let Some(args) = line
            .strip_prefix(b"get ")
            .or_else(|| line.strip_prefix(b"gets "))
        else {
            continue;
        };
        for key in args.split(|&b| b == b' ').filter(|k| !k.is_empty()) {
            if n == MAX_KEYS {
                return n;
            }
            keys[n] = key;
            n += 1;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys_of(buf: &[u8]) -> Vec<&[u8]> {
        let mut keys = [&[][..]; MAX_KEYS];
        let n = get_keys(buf, &mut keys);
        keys[..n].to_vec()
    }

    #[test]
    fn finds_the_keys_of_complete_get_lines() {
        assert_eq!(
            keys_of(b"mg a v\r\nget b\r\ngets c d\r\nmg e"),
            [&b"a"[..], b"b", b"c", b"d"]
        );
        assert_eq!(keys_of(b"get  x   y\r\n"), [&b"x"[..], b"y"]);
        assert_eq!(keys_of(b"get z\n"), [&b"z"[..]]);
        // An mg line's key ends at a space or at the line's end, `\r` or not; an unfinished
        // line gives none.
        assert_eq!(
            keys_of(b"mg a\r\nmg b\nmg   c v q\r\nmg d v"),
            [&b"a"[..], b"b", b"c"]
        );
        assert_eq!(keys_of(b"mg e"), [&[][..]; 0]);
    }

    #[test]
    fn skips_other_commands_and_value_blocks() {
        assert_eq!(
            keys_of(b"set k 0 0 5\r\nhello\r\ndelete q\r\nmg m v\r\nmn\r\n"),
            [&b"m"[..]]
        );
        assert!(keys_of(b"getx a\r\nGET b\r\nmget c\r\n").is_empty());
    }

    #[test]
    fn a_read_of_one_single_key_request_is_not_scanned() {
        let cases: [(&[u8], bool); 9] = [
            (b"get k\r\n", false),
            (b"gets k\r\n", false),
            (b"mg k v f t\r\n", false),
            (b"get k   \r\n", false),
            (b"get a b", false),
            (b"get a b\r\n", true),
            (b"gets  a  b\r\n", true),
            (b"mg a v\r\nmg b v\r\n", true),
            (b"mg a v\r\nmg b", true),
        ];
        for (read, scanned) in cases {
            let shown = String::from_utf8_lossy(read);
            let first_nl = bytes::find(b'\n', read);
            let may = first_nl.is_some_and(|nl| may_hold_two_keys(read, nl));
            assert_eq!(may, scanned, "{shown:?}");
        }
    }

    #[test]
    fn stops_at_its_bounds() {
        let many = b"mg k v\r\n".repeat(MAX_KEYS + 5);
        assert_eq!(keys_of(&many).len(), MAX_KEYS);
        let mut far = vec![b'x'; MAX_SCAN_BYTES];
        far.extend_from_slice(b"\r\nmg late v\r\n");
        assert!(keys_of(&far).is_empty());
    }
}
