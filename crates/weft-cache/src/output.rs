//! A connection's pending responses: small pieces are copied into one buffer, large values
//! are referenced (shared with the store) and go out in the same vectored write, so a large
//! value is never copied into the output.

use std::io::{self, IoSlice, Write};
use std::sync::Arc;

/// Pending output that is written before a batch (or one multi-get) goes on: with it, what
/// one connection holds is bounded whatever its requests ask for.
pub const FLUSH_BYTES: usize = 256 * 1024;
/// Values at least this long are referenced instead of copied.
pub const REFERENCE_MIN_BYTES: usize = 4096;
/// Pieces per `writev` (the kernel's `IOV_MAX`).
const MAX_IOVECS: usize = 1024;

/// Pending responses for one connection.
#[derive(Debug, Default)]
pub struct Output {
    buf: Vec<u8>,
    /// `(offset in buf where the value goes, value)`, offsets non-decreasing.
    refs: Vec<(usize, Arc<[u8]>)>,
    /// Total bytes, copied and referenced.
    total: usize,
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
    refs: usize,
    total: usize,
    held: usize,
}

impl Output {
    pub fn new() -> Output {
        Output::default()
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
        self.total += bytes.len();
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

    /// A stored value (with its `\r\n`): copied when small, referenced when large.
    pub fn push_value(&mut self, data: &Arc<[u8]>) {
        if data.len() < REFERENCE_MIN_BYTES {
            self.push(data);
        } else {
            self.refs.push((self.buf.len(), data.clone()));
            self.total += data.len();
        }
    }

    pub fn len(&self) -> usize {
        self.total
    }

    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    pub fn mark(&self) -> Mark {
        Mark {
            buf: self.buf.len(),
            refs: self.refs.len(),
            total: self.total,
            held: self.held.len(),
        }
    }

    pub fn rollback(&mut self, m: Mark) {
        self.buf.truncate(m.buf);
        self.refs.truncate(m.refs);
        self.total = m.total;
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
        self.refs.clear();
        self.total = 0;
        self.held.clear();
    }

    /// The pieces in order, skipping the first `skip` bytes (already written).
    fn slices_from(&self, mut skip: usize) -> Vec<IoSlice<'_>> {
        let mut v = Vec::with_capacity(self.refs.len() * 2 + 1);
        let mut pieces: Vec<&[u8]> = Vec::with_capacity(self.refs.len() * 2 + 1);
        let mut at = 0;
        for (off, data) in &self.refs {
            if *off > at {
                pieces.push(&self.buf[at..*off]);
            }
            pieces.push(data);
            at = *off;
        }
        if at < self.buf.len() {
            pieces.push(&self.buf[at..]);
        }
        for p in pieces {
            if skip >= p.len() {
                skip -= p.len();
                continue;
            }
            v.push(IoSlice::new(&p[skip..]));
            skip = 0;
            if v.len() == MAX_IOVECS {
                break;
            }
        }
        v
    }

    /// Writes everything (one `write` when the kernel takes it all) and empties the output.
    pub fn write_to(&mut self, w: &mut impl Write) -> io::Result<()> {
        if self.total == 0 {
            return Ok(());
        }
        if self.refs.is_empty() {
            w.write_all(&self.buf)?;
        } else {
            let mut written = 0;
            while written < self.total {
                let slices = self.slices_from(written);
                let n = w.write_vectored(&slices)?;
                if n == 0 {
                    return Err(io::ErrorKind::WriteZero.into());
                }
                written += n;
            }
        }
        self.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_keep_order() {
        let big: Arc<[u8]> = vec![b'x'; REFERENCE_MIN_BYTES].into();
        let mut o = Output::new();
        o.push(b"A");
        o.push_value(&big);
        o.push(b"B");
        o.push_u64(1234);
        let m = o.mark();
        o.push_value(&big);
        o.rollback(m);
        assert_eq!(o.len(), 1 + REFERENCE_MIN_BYTES + 5);
        let mut sink = Vec::new();
        o.write_to(&mut sink).unwrap();
        let mut want = b"A".to_vec();
        want.extend_from_slice(&big);
        want.extend_from_slice(b"B1234");
        assert_eq!(sink, want);
        assert!(o.is_empty());
    }
}
