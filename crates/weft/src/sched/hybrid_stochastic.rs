//! `hybrid-stochastic`: each pop takes the newest task (LIFO) with probability `p` and the
//! oldest (FIFO) otherwise; default `p` is [`DEFAULT_LIFO_PROBABILITY`].
//!
//! The study's stochastic hybrid: in expectation a task waits no longer than `1 / (1 - p)`
//! times its FIFO wait, while a share `p` of pops still runs cache-hot work. The skeleton is
//! `hybrid.rs`.

use std::sync::Arc;

use super::hybrid::{End, Ends, Hybrid};
use super::rng::XorShift;
use super::Policy;

/// The name on command lines.
pub const NAME: &str = "hybrid-stochastic";

/// The default chance that a pop takes the newest task.
pub const DEFAULT_LIFO_PROBABILITY: f64 = 0.5;

/// Builds the policy for `processors` processors with [`DEFAULT_LIFO_PROBABILITY`].
pub fn build(processors: usize) -> Arc<dyn Policy> {
    with_probability(processors, DEFAULT_LIFO_PROBABILITY)
}

/// Builds the policy with each pop LIFO with probability `lifo` (clamped to `0..=1`).
pub fn with_probability(processors: usize, lifo: f64) -> Arc<dyn Policy> {
    // Compare 32 random bits against the probability scaled to 2^32 (exact at 0 and 1).
    let threshold = (lifo.clamp(0.0, 1.0) * 4_294_967_296.0) as u64;
    Arc::new(Hybrid::new(NAME, processors, |i| Coin {
        rng: XorShift::new(i as u64),
        threshold,
    }))
}

/// Tosses a biased coin per pop.
struct Coin {
    rng: XorShift,
    /// A pop is LIFO when 32 random bits are below this (out of 2^32).
    threshold: u64,
}

impl Ends for Coin {
    fn push_end(&mut self) -> End {
        End::Back
    }

    fn pop_end(&mut self) -> End {
        if (self.rng.next_u64() >> 32) < self.threshold {
            End::Back
        } else {
            End::Front
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lifo_share(p: f64) -> f64 {
        let mut coin = Coin {
            rng: XorShift::new(1),
            threshold: (p * 4_294_967_296.0) as u64,
        };
        let lifo = (0..10_000).filter(|_| coin.pop_end() == End::Back).count();
        lifo as f64 / 10_000.0
    }

    #[test]
    fn probability_sets_the_lifo_share() {
        assert_eq!(lifo_share(0.0), 0.0);
        assert_eq!(lifo_share(1.0), 1.0);
        assert!((lifo_share(0.5) - 0.5).abs() < 0.05);
        assert!((lifo_share(0.2) - 0.2).abs() < 0.05);
    }
}
