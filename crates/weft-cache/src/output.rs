//! A connection's pending responses, copied into one buffer: values are copied out of the
//! store's chunks under the shard lock, so a chunk is never referenced by a reply and is
//! free as soon as its item is unlinked (`crate::store`). The buffer is written with one
//! `write` and shrunk back when one reply made it large.

use std::io::{self, Write};

/// Pending output that is written before a batch (or one multi-get) goes on: with it, what
/// one connection holds is bounded whatever its requests ask for.
pub const FLUSH_BYTES: usize = 256 * 1024;
/// A buffer grown past this by a large reply is given back (to a quarter of it) once
/// written, so an idle connection keeps at most this much.
const KEEP_BYTES: usize = 64 * 1024;

/// Pending responses for one connection.
#[derive(Debug, Default)]
pub struct Output {
    buf: Vec<u8>,
    /// CAS values of the items an `mg` hit replied about, while that reply is pending.
    /// memcached keeps a reference to such an item until the reply is written, and
    /// `incr`/`decr` then allocate a new item instead of rewriting in place (so no space
    /// padding); tracked so the values read back the same. (A classic `get` does not.)
    held: Vec<u64>,
}

/// A position in the output to roll back to (memcached drops a failed multi-get's partial
/// response).
#[derive(Clone, Copy, Debug)]
pub struct Mark {
    buf: usize,
    held: usize,
}

impl Output {
    pub fn new() -> Output {
        Output::default()
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// A line: `text` then `\r\n`.
    pub fn line(&mut self, text: &str) {
        self.push(text.as_bytes());
        self.push(b"\r\n");
    }

    pub fn push_u64(&mut self, mut v: u64) {
        let mut tmp = [0u8; 20];
        let mut i = tmp.len();
        loop {
            i -= 1;
            tmp[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        self.push(&tmp[i..]);
    }

    /// A stored value (with its `\r\n`), from its pieces.
    pub fn push_value<'a>(&mut self, pieces: impl Iterator<Item = &'a [u8]>) {
        for p in pieces {
            self.push(p);
        }
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn mark(&self) -> Mark {
        Mark {
            buf: self.buf.len(),
            held: self.held.len(),
        }
    }

    pub fn rollback(&mut self, m: Mark) {
        self.buf.truncate(m.buf);
        self.held.truncate(m.held);
    }

    /// Notes that a pending reply refers to the item with this CAS value.
    pub fn hold(&mut self, cas: u64) {
        self.held.push(cas);
    }

    /// Whether a pending reply refers to the item with this CAS value.
    pub fn holds(&self, cas: u64) -> bool {
        self.held.contains(&cas)
    }

    pub fn clear(&mut self) {
        self.buf.clear();
        if self.buf.capacity() > KEEP_BYTES {
            self.buf.shrink_to(KEEP_BYTES / 4);
        }
        self.held.clear();
    }

    /// Writes everything and empties the output.
    pub fn write_to(&mut self, w: &mut impl Write) -> io::Result<()> {
        if !self.buf.is_empty() {
            w.write_all(&self.buf)?;
        }
        self.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_keep_order_and_a_large_buffer_is_given_back() {
        let big = vec![b'x'; KEEP_BYTES];
        let mut o = Output::new();
        o.push(b"A");
        o.push_value([&big[..10], &big[10..]].into_iter());
        o.push(b"B");
        o.push_u64(1234);
        let m = o.mark();
        o.push_value(std::iter::once(&big[..]));
        o.rollback(m);
        assert_eq!(o.len(), 1 + KEEP_BYTES + 5);
        let mut sink = Vec::new();
        o.write_to(&mut sink).unwrap();
        let mut want = b"A".to_vec();
        want.extend_from_slice(&big);
        want.extend_from_slice(b"B1234");
        assert_eq!(sink, want);
        assert!(o.is_empty());
        assert!(o.buf.capacity() <= KEEP_BYTES, "{}", o.buf.capacity());
    }
}
