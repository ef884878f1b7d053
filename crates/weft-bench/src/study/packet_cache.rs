//! Packet processing with cache effects (the study's §7.1.2): each copy is widened to a
//! [`BUFFER_BYTES`] buffer and the handler visits its cache lines in an order the hardware
//! prefetcher cannot predict ([`STRIDE_LINES`] lines apart, modulo the length), so it runs
//! fast only if the buffer is still in cache.
//!
//! The spawner writes the buffer just before spawning; with tens of thousands of handlers
//! queued, a FIFO policy runs each one long after its buffer was evicted, while a LIFO policy
//! runs the newest one, whose buffer was just written. That is where LIFO beats FIFO.

use std::io;

use super::packet::{self, Handler};
use super::{Outcome, Params};

/// The per-task buffer: bigger than the packet so queued buffers outgrow the caches sooner.
pub const BUFFER_BYTES: usize = 16 * 1024;

/// Cache line size assumed by the walk.
pub const LINE: usize = 64;

/// The walk's stride in lines: odd (so it visits every line of a power-of-two buffer once)
/// and over a page (6,208 bytes), so consecutive reads land on different pages, which hardware
/// prefetchers do not follow.
pub const STRIDE_LINES: usize = 97;

/// The packet repeated to fill [`BUFFER_BYTES`].
pub(crate) fn widen(packet: &[u8]) -> Vec<u8> {
    let mut wide = Vec::with_capacity(BUFFER_BYTES);
    while wide.len() < BUFFER_BYTES {
        let take = packet.len().min(BUFFER_BYTES - wide.len());
        wide.extend_from_slice(&packet[..take]);
    }
    wide
}

/// Counts newlines visiting every cache line once, `STRIDE_LINES` lines apart modulo the
/// number of lines: cheap when the buffer is cached, a miss per line when it is not.
pub(crate) fn strided_newlines(buf: &[u8]) -> u64 {
    let lines = buf.len().div_ceil(LINE);
    let mut line = 0;
    let mut newlines = 0;
    for _ in 0..lines {
        let chunk = &buf[line * LINE..((line + 1) * LINE).min(buf.len())];
        newlines += chunk.iter().filter(|&&b| b == b'\n').count() as u64;
        line = (line + STRIDE_LINES) % lines;
    }
    newlines
}

/// Runs the cache-hostile variant.
pub fn run(params: &Params) -> io::Result<Outcome> {
    packet::run(params, Handler::Strided)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_visits_every_byte_once() {
        for p in packet::make_packets() {
            let wide = widen(&p);
            assert_eq!(wide.len(), BUFFER_BYTES);
            let scanned = wide.iter().filter(|&&b| b == b'\n').count() as u64;
            assert_eq!(strided_newlines(&wide), scanned);
        }
    }
}
