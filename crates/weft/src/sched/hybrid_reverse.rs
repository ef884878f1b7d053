//! `hybrid-reverse`: a LIFO stack that is reversed every `n` pops (default
//! [`DEFAULT_PERIOD`]).
//!
//! Between reversals it is pure LIFO (push and pop the top). Reversing puts the oldest task on
//! top, so a task buried under a stream of new work waits at most about one period after the
//! next reversal. The deque is not copied: the rule swaps which end is the top, so a reversal
//! costs nothing. The skeleton is `hybrid.rs`.

use std::sync::Arc;

use super::hybrid::{End, Ends, Hybrid};
use super::Policy;

/// The name on command lines.
pub const NAME: &str = "hybrid-reverse";

/// Pops between reversals by default.
pub const DEFAULT_PERIOD: u32 = 32;

/// Builds the policy for `processors` processors with [`DEFAULT_PERIOD`].
pub fn build(processors: usize) -> Arc<dyn Policy> {
    with_period(processors, DEFAULT_PERIOD)
}

/// Builds the policy reversing the stack every `period` pops (at least 1).
pub fn with_period(processors: usize, period: u32) -> Arc<dyn Policy> {
    Arc::new(Hybrid::new(NAME, processors, |_| Reverse {
        period: period.max(1),
        pops: 0,
        top: End::Back,
    }))
}

struct Reverse {
    period: u32,
    /// Pops since the last reversal.
    pops: u32,
    /// The end that is the top of the stack now.
    top: End,
}

impl Ends for Reverse {
    fn push_end(&mut self) -> End {
        self.top
    }

    fn pop_end(&mut self) -> End {
        if self.pops == self.period {
            self.pops = 0;
            self.top = match self.top {
                End::Back => End::Front,
                End::Front => End::Back,
            };
        }
        self.pops += 1;
        self.top
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_top_flips_every_period_and_pushes_follow_it() {
        let mut r = Reverse {
            period: 2,
            pops: 0,
            top: End::Back,
        };
        assert_eq!(r.push_end(), End::Back);
        assert_eq!([r.pop_end(), r.pop_end()], [End::Back, End::Back]);
        assert_eq!(r.pop_end(), End::Front);
        assert_eq!(r.push_end(), End::Front);
        assert_eq!(r.pop_end(), End::Front);
        assert_eq!(r.pop_end(), End::Back);
    }
}
