//! A tiny per-owner random number generator for picking victims and lanes.
//!
//! Scheduling only needs "different processors pick different victims, and no fixed order";
//! xorshift64* gives that in three shifts and a multiply, with no shared state to contend on.

use crate::loom::{Ordering, StaticAtomicU64};

/// Hands every new generator a different seed, even for equal `salt`s.
static SEEDS: StaticAtomicU64 = StaticAtomicU64::new(0x9e37_79b9_7f4a_7c15);

/// xorshift64*: good enough to spread choices, not for anything else.
#[derive(Debug, Clone)]
pub(crate) struct XorShift {
    /// Never zero (xorshift's fixed point).
    state: u64,
}

impl XorShift {
    /// A generator seeded from `salt` (say, a processor index) and a process-wide sequence.
    pub(crate) fn new(salt: u64) -> XorShift {
        let seed = SEEDS.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
        XorShift {
            state: mix(seed ^ salt.wrapping_mul(0xbf58_476d_1ce4_e5b9)) | 1,
        }
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (`n > 0`), with a bias too small to matter for `n` in the thousands.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        debug_assert!(n > 0);
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }
}

/// splitmix64's finaliser: turns a counter into a well-spread number.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_covers_the_range() {
        let mut rng = XorShift::new(3);
        let mut hits = [0u32; 5];
        for _ in 0..5000 {
            hits[rng.below(5)] += 1;
        }
        assert!(hits.iter().all(|&h| h > 800), "{hits:?}");
    }

    #[test]
    fn generators_differ() {
        let a = XorShift::new(0).next_u64();
        let b = XorShift::new(0).next_u64();
        assert_ne!(a, b);
    }
}
