//! `hybrid-reverse`: a LIFO stack that is reversed every `n` pops (default
//! [`DEFAULT_PERIOD`]).
//!
//! Between reversals it is pure LIFO (pops take the newest). Reversing puts the oldest task on
//! top, so a task buried under a stream of new work is served after the next reversal. The
//! deque is not copied: the rule swaps the end pops take from, so a reversal costs nothing.
//!
//! New work always goes to the back. An earlier version pushed at whichever end was the top,
//! which is a literal reversed stack, but then both ends fill with new work under a steady
//! stream of wake-ups and the tasks in the middle are never served: 401 runnable fibers
//! ping-ponging in pairs left one waiting 39,665 rounds (`tests/fairness.rs`). With pushes at
//! the back the order is the same as `hybrid-switch`'s (LIFO and FIFO phases of `period` pops);
//! the name stays for the scheduler study's results. The skeleton is `hybrid.rs`.

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
        // Not `self.top`: see the module docs.
        End::Back
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
    fn the_top_flips_every_period_and_pushes_stay_at_the_back() {
        let mut r = Reverse {
            period: 2,
            pops: 0,
            top: End::Back,
        };
        assert_eq!(r.push_end(), End::Back);
        assert_eq!([r.pop_end(), r.pop_end()], [End::Back, End::Back]);
        assert_eq!(r.pop_end(), End::Front);
        assert_eq!(r.push_end(), End::Back);
        assert_eq!(r.pop_end(), End::Front);
        assert_eq!(r.pop_end(), End::Back);
    }
}
