//! A connection's pending responses, copied into one buffer: values are copied out of the
//! store's chunks under the shard lock, so a chunk is never referenced by a reply and is
//! free as soon as its item is unlinked (`crate::store`). The buffer is written with one
//! `write` and shrunk back when one reply made it large.
//!
//! Between batches a connection holds no buffer (unless a large reply grew it past a
//! spare's size): [`Output::take_spare`] takes one from its
//! thread's spares when a batch starts and [`Output::give_back`] returns it once written, so
//! an idle connection costs no output memory (3.8 MB less RSS at 15,360 connections) and the
//! next batch on that thread writes into the buffer written last (no CPU change measured,
//! `docs/notes/scale.md`). Spares are plain owned buffers: a fiber that moves to another
//! thread mid-batch gives its buffer back there.

use std::cell::RefCell;
use std::io::{self, Write};

/// Pending output that is written before a batch (or one multi-get) goes on: with it, what
/// one connection holds is bounded whatever its requests ask for.
pub const FLUSH_BYTES: usize = 256 * 1024;
/// A buffer grown past this by a large reply is given back (to a quarter of it) once
/// written, so an output that keeps its buffer between batches holds at most this much.
const KEEP_BYTES: usize = 64 * 1024;
/// At most this many spare buffers a thread, each at most [`SPARE_MAX_BYTES`]: a thread needs
/// about as many as its connections that are mid-batch at once.
const SPARE_BUFFERS: usize = 64;
const SPARE_MAX_BYTES: usize = 16 * 1024;
/// A new spare's capacity: a few replies without growing.
const SPARE_START_BYTES: usize = 2048;

thread_local! {
    static SPARES: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// Pending responses for one connection.
#[derive(Debug, Default)]
pub struct Output {
    buf: Vec<u8>,
    /// CAS values of the items an `mg` hit replied about, while that reply is pending.
    /// memcached keeps a reference to such an item until the reply is written, and
    /// `incr`/`decr` then allocate a new item instead of rewriting in place (so no space
    /// padding); tracked so the values read back the same. (A classic `get` holds none, and
    /// lets go of these: memcached writes the pending replies after it.)
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

    #[inline]
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// A line: `text` then `\r\n`.
    #[inline]
    pub fn line(&mut self, text: &str) {
        self.push(text.as_bytes());
        self.push(b"\r\n");
    }

    /// `v` in decimal (two digits a step, as `itoa` writes them: a value line's flags and
    /// length are two numbers a hit).
    #[inline]
    pub fn push_u64(&mut self, v: u64) {
        self.push(itoa::Buffer::new().format(v).as_bytes());
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

    /// Forgets the items pending replies refer to, as memcached does when it writes its
    /// pending replies: it writes them after every classic get (one segment each).
    pub fn release_holds(&mut self) {
        self.held.clear();
    }

    pub fn clear(&mut self) {
        self.buf.clear();
        if self.buf.capacity() > KEEP_BYTES {
            self.buf.shrink_to(KEEP_BYTES / 4);
        }
        self.held.clear();
    }

    /// A batch starts: unless this output holds a buffer, takes its thread's spare given
    /// back last (the warmest), or a new one.
    pub fn take_spare(&mut self) {
        if self.buf.capacity() == 0 {
            self.buf = SPARES
                .with(|s| s.borrow_mut().pop())
                .unwrap_or_else(|| Vec::with_capacity(SPARE_START_BYTES));
        }
    }

    /// A batch is written: hands the empty buffer to this thread's spares (dropped when they
    /// are full). A buffer grown past `SPARE_MAX_BYTES` stays with this output, as before
    /// the spares (at most `KEEP_BYTES`, see [`Output::clear`]): a client whose batches
    /// answer large multi-gets would otherwise grow a spare from its start size every batch.
    pub fn give_back(&mut self) {
        debug_assert!(self.buf.is_empty(), "give_back with output pending");
        if self.buf.capacity() == 0 || self.buf.capacity() > SPARE_MAX_BYTES {
            return;
        }
        let buf = std::mem::take(&mut self.buf);
        SPARES.with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < SPARE_BUFFERS {
                s.push(buf);
            }
        });
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
    fn a_written_buffer_goes_to_the_next_batch_on_the_thread() {
        let mut a = Output::new();
        a.take_spare();
        assert!(a.buf.capacity() >= SPARE_START_BYTES);
        a.push(b"STORED\r\n");
        let ptr = a.buf.as_ptr();
        a.write_to(&mut Vec::new()).unwrap();
        a.give_back();
        assert_eq!(a.buf.capacity(), 0, "an idle connection holds no buffer");
        let mut b = Output::new();
        b.take_spare();
        assert_eq!(
            b.buf.as_ptr(),
            ptr,
            "the spare given back last is taken first"
        );
        assert!(b.is_empty());
        // A buffer that grew past the spares' limit is not made a spare (its output keeps it).
        b.push(&vec![b'x'; SPARE_MAX_BYTES + 1]);
        b.write_to(&mut Vec::new()).unwrap();
        b.give_back();
        let mut c = Output::new();
        c.take_spare();
        assert!(c.buf.capacity() <= SPARE_MAX_BYTES);
        // An output that holds a buffer keeps it.
        let held = c.buf.as_ptr();
        c.take_spare();
        assert_eq!(c.buf.as_ptr(), held);
    }

    #[test]
    fn numbers_are_written_in_decimal() {
        let mut o = Output::new();
        for v in [0, 7, 10, 99, 100, 1234, u64::from(u32::MAX), u64::MAX] {
            o.push_u64(v);
            o.push(b" ");
        }
        let mut sink = Vec::new();
        o.write_to(&mut sink).unwrap();
        assert_eq!(
            sink,
            b"0 7 10 99 100 1234 4294967295 18446744073709551615 ".to_vec()
        );
    }

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
