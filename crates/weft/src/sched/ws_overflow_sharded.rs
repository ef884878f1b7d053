//! `ws-overflow-sharded`: FIFO work-stealing whose full rings overflow to a global queue that is
//! one locked queue per processor, pushes spread by fiber-id hash.
//!
//! The study's question: does the global queue's synchronisation matter once rings absorb most
//! pushes? The skeleton is `ring_stealing.rs`; only the global queue differs between the
//! `ws-overflow-*` policies.

use std::sync::Arc;

use super::global_queue::Sharded;
use super::ring_stealing::RingStealing;
use super::victims::Victims;
use super::Policy;

/// The name on command lines.
pub const NAME: &str = "ws-overflow-sharded";

/// Builds the policy for `processors` processors.
pub fn build(processors: usize) -> Arc<dyn Policy> {
    Arc::new(RingStealing::<Sharded>::new(NAME, processors, Victims::All))
}
