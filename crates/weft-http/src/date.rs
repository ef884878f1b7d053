//! The `Date` header value, formatted at most once a second and shared by every processor.
//!
//! A seqlock: the 29-byte IMF-fixdate lives in four atomic words guarded by a sequence number
//! that is odd while a writer updates them. Readers never block and never take a lock; the
//! one reader that first sees a new second formats it (others keep retrying or reading the old
//! value until it is published). Invariant: a reader returns only bytes that were all written
//! under the same even sequence number.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::time::UNIX_EPOCH;

/// Length of an IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`.
pub const DATE_BYTES: usize = 29;

/// The cached date string.
pub struct DateCache {
    /// Even when stable, odd while being rewritten.
    seq: AtomicU64,
    /// The second (since the epoch) the words hold.
    secs: AtomicU64,
    /// The formatted date, little-endian, padded to 32 bytes.
    words: [AtomicU64; 4],
}

impl Default for DateCache {
    fn default() -> Self {
        Self::new()
    }
}

impl DateCache {
    pub const fn new() -> DateCache {
        DateCache {
            seq: AtomicU64::new(0),
            secs: AtomicU64::new(u64::MAX),
            words: [
                AtomicU64::new(0),
                AtomicU64::new(0),
                AtomicU64::new(0),
                AtomicU64::new(0),
            ],
        }
    }

    /// The date for now (as of the kernel's last tick: the coarse clock, at most a tick
    /// behind, costs a fraction of a precise reading, `weft::coarse_clock`).
    pub fn now(&self) -> [u8; DATE_BYTES] {
        self.at(weft::coarse_clock::realtime_secs())
    }

    /// The date for `secs` since the epoch (formatted if the cache holds another second).
    pub fn at(&self, secs: u64) -> [u8; DATE_BYTES] {
        loop {
            let seq = self.seq.load(Ordering::Acquire);
            if seq % 2 == 0 {
                if self.secs.load(Ordering::Relaxed) == secs {
                    let mut raw = [0u8; 32];
                    for (chunk, word) in raw.chunks_exact_mut(8).zip(&self.words) {
                        chunk.copy_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
                    }
                    fence(Ordering::Acquire);
                    if self.seq.load(Ordering::Relaxed) == seq {
                        let mut out = [0u8; DATE_BYTES];
                        out.copy_from_slice(&raw[..DATE_BYTES]);
                        return out;
                    }
                    continue;
                }
                if self
                    .seq
                    .compare_exchange(seq, seq + 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    let formatted = format(secs);
                    let mut raw = [0u8; 32];
                    raw[..DATE_BYTES].copy_from_slice(&formatted);
                    for (chunk, word) in raw.chunks_exact(8).zip(&self.words) {
                        let mut b = [0u8; 8];
                        b.copy_from_slice(chunk);
                        word.store(u64::from_le_bytes(b), Ordering::Relaxed);
                    }
                    self.secs.store(secs, Ordering::Relaxed);
                    self.seq.store(seq + 2, Ordering::Release);
                    return formatted;
                }
            }
            std::hint::spin_loop();
        }
    }
}

/// Formats `secs` since the epoch as an IMF-fixdate.
pub fn format(secs: u64) -> [u8; DATE_BYTES] {
    let text = httpdate::fmt_http_date(UNIX_EPOCH + std::time::Duration::from_secs(secs));
    let mut out = [0u8; DATE_BYTES];
    out.copy_from_slice(&text.as_bytes()[..DATE_BYTES]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_caches() {
        let cache = DateCache::new();
        assert_eq!(&cache.at(784111777), b"Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(&cache.at(784111777), b"Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(&cache.at(784111778), b"Sun, 06 Nov 1994 08:49:38 GMT");
        assert_eq!(cache.now().len(), DATE_BYTES);
    }

    #[test]
    fn concurrent_readers_see_whole_strings() {
        let cache = std::sync::Arc::new(DateCache::new());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let cache = cache.clone();
                std::thread::spawn(move || {
                    for i in 0..20_000u64 {
                        let secs = 784111777 + (i + t) % 7;
                        assert_eq!(cache.at(secs), format(secs));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}
