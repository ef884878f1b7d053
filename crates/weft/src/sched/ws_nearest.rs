//! `ws-nearest`: FIFO work-stealing whose thieves try only the `k` processors nearest by index
//! distance (default [`DEFAULT_NEIGHBOURS`]), overflow and remote pushes in a locked global
//! queue.
//!
//! Nearby indices tend to share caches, so stolen work stays warm; the price is slower
//! balancing when the work sits on a far processor (it reaches it only through the global
//! queue, or hop by hop as neighbours steal from each other). The skeleton is
//! `ring_stealing.rs`.

use std::sync::Arc;

use super::inject::Inject;
use super::ring_stealing::RingStealing;
use super::victims::Victims;
use super::Policy;

/// The name on command lines.
pub const NAME: &str = "ws-nearest";

/// How many neighbours a thief tries by default: one on each side.
pub const DEFAULT_NEIGHBOURS: usize = 2;

/// Builds the policy for `processors` processors with [`DEFAULT_NEIGHBOURS`].
pub fn build(processors: usize) -> Arc<dyn Policy> {
    with_neighbours(processors, DEFAULT_NEIGHBOURS)
}

/// Builds the policy with thieves trying the `neighbours` nearest processors (at least 1).
pub fn with_neighbours(processors: usize, neighbours: usize) -> Arc<dyn Policy> {
    let victims = Victims::Nearest(neighbours.max(1));
    Arc::new(RingStealing::<Inject>::new(NAME, processors, victims))
}
