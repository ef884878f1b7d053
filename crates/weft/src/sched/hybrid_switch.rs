//! `hybrid-switch`: pops alternate between FIFO and LIFO order, switching every `n` pops
//! (default [`DEFAULT_PERIOD`]).
//!
//! A LIFO phase runs freshly made work while its data is hot; the FIFO phase that follows
//! serves the oldest tasks, bounding how long any task waits to about two periods times the
//! deque's length. The skeleton is `hybrid.rs`.

use std::sync::Arc;

use super::hybrid::{End, Ends, Hybrid};
use super::Policy;

/// The name on command lines.
pub const NAME: &str = "hybrid-switch";

/// Pops per phase by default.
pub const DEFAULT_PERIOD: u32 = 32;

/// Builds the policy for `processors` processors with [`DEFAULT_PERIOD`].
pub fn build(processors: usize) -> Arc<dyn Policy> {
    with_period(processors, DEFAULT_PERIOD)
}

/// Builds the policy switching order every `period` pops (at least 1).
pub fn with_period(processors: usize, period: u32) -> Arc<dyn Policy> {
    Arc::new(Hybrid::new(NAME, processors, |_| Switch {
        period: period.max(1),
        pops: 0,
        lifo: false,
    }))
}

struct Switch {
    period: u32,
    /// Pops in the current phase.
    pops: u32,
    /// Whether the current phase is LIFO.
    lifo: bool,
}

impl Ends for Switch {
    fn push_end(&mut self) -> End {
        End::Back
    }

    fn pop_end(&mut self) -> End {
        if self.pops == self.period {
            self.pops = 0;
            self.lifo = !self.lifo;
        }
        self.pops += 1;
        if self.lifo {
            End::Back
        } else {
            End::Front
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switches_every_period() {
        let mut s = Switch {
            period: 3,
            pops: 0,
            lifo: false,
        };
        let ends: Vec<End> = (0..9).map(|_| s.pop_end()).collect();
        use End::*;
        assert_eq!(
            ends,
            [Front, Front, Front, Back, Back, Back, Front, Front, Front]
        );
    }
}
