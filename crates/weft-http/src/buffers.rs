//! Per-thread pools of connections' buffers: a connection takes its input buffer and its
//! output buffer when it starts and gives them back when it ends, so that a short connection
//! (the thesis's web workload: three requests, then a new connection) does not allocate,
//! zero and free 4 KiB of input and 1 KiB of output each time (`docs/notes/scale.md`).
//!
//! Invariants:
//! - a pooled buffer's contents are left from an earlier connection; a taker only reads what
//!   it wrote or read into it itself (the input buffer is read between `start..end` only,
//!   the output buffer comes back empty);
//! - only buffers of the size they were taken at go back (an input buffer grown for a long
//!   head, an output buffer grown for a pipelined burst, are freed), and a pool holds at most
//!   [`POOL_BUFFERS`], so the pools never hold more than a fixed, small amount of memory;
//! - the accessors are never inlined and never switch fibers: a fiber may resume on another
//!   OS thread, and an inlined thread-local access could reuse the old thread's address
//!   across the switch (the same rule as the runtime's own context, `weft::ctx`).

use std::cell::RefCell;

/// The input buffer's size (a head that outgrows it gets a bigger buffer of its own).
pub const INPUT_BYTES: usize = 4096;
/// The output buffer's first capacity.
pub const OUTPUT_BYTES: usize = 1024;
/// Most spare buffers of each kind a thread keeps.
const POOL_BUFFERS: usize = 256;

std::thread_local! {
    static INPUT: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    static OUTPUT: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// An input buffer of [`INPUT_BYTES`] (contents unspecified, from this thread's pool or new).
#[inline(never)]
pub fn take_input() -> Vec<u8> {
    INPUT
        .try_with(|p| p.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_else(|| vec![0; INPUT_BYTES])
}

/// Gives an input buffer back (freed instead when it grew or the pool is full).
#[inline(never)]
pub fn give_input(buf: Vec<u8>) {
    if buf.len() == INPUT_BYTES && buf.capacity() == INPUT_BYTES {
        put(&INPUT, buf);
    }
}

/// An empty output buffer with room for [`OUTPUT_BYTES`] at least.
#[inline(never)]
pub fn take_output() -> Vec<u8> {
    OUTPUT
        .try_with(|p| p.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_else(|| Vec::with_capacity(OUTPUT_BYTES))
}

/// Gives an output buffer back, emptied (freed instead when it grew or the pool is full).
#[inline(never)]
pub fn give_output(mut buf: Vec<u8>) {
    if buf.capacity() == OUTPUT_BYTES {
        buf.clear();
        put(&OUTPUT, buf);
    }
}

fn put(pool: &'static std::thread::LocalKey<RefCell<Vec<Vec<u8>>>>, buf: Vec<u8>) {
    // A thread being torn down frees the buffer instead.
    let _ = pool.try_with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < POOL_BUFFERS {
            p.push(buf);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc_count::allocations_in;

    #[test]
    fn buffers_given_back_are_taken_again_without_allocating() {
        give_input(take_input());
        give_output(take_output());
        let n = allocations_in(|| {
            let mut input = take_input();
            let mut output = take_output();
            assert_eq!(input.len(), INPUT_BYTES);
            assert!(output.is_empty() && output.capacity() >= OUTPUT_BYTES);
            input[0] = 1;
            output.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
            give_input(input);
            give_output(output);
        });
        assert_eq!(n, 0);
        assert!(
            take_output().is_empty(),
            "an output buffer comes back empty"
        );
    }

    #[test]
    fn grown_buffers_are_not_kept() {
        while INPUT.with(|p| p.borrow_mut().pop()).is_some() {}
        while OUTPUT.with(|p| p.borrow_mut().pop()).is_some() {}
        let mut input = take_input();
        input.resize(2 * INPUT_BYTES, 0);
        give_input(input);
        let mut output = take_output();
        output.resize(64 * 1024, 0);
        give_output(output);
        assert_eq!(INPUT.with(|p| p.borrow().len()), 0);
        assert_eq!(OUTPUT.with(|p| p.borrow().len()), 0);
    }

    #[test]
    fn a_pool_keeps_a_bounded_number() {
        let bufs: Vec<_> = (0..POOL_BUFFERS + 10).map(|_| take_input()).collect();
        bufs.into_iter().for_each(give_input);
        assert!(INPUT.with(|p| p.borrow().len()) <= POOL_BUFFERS);
    }
}
