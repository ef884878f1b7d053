//! `ws-overflow-locked`: FIFO work-stealing whose full rings overflow to a global queue that is
//! a locked `Mutex<VecDeque>`.
//!
//! The study's question: does the global queue's synchronisation matter once rings absorb most
//! pushes? The skeleton is `ring_stealing.rs`; only the global queue differs between the
//! `ws-overflow-*` policies.

use std::sync::Arc;

use super::inject::Inject;
use super::ring_stealing::RingStealing;
use super::victims::Victims;
use super::Policy;

/// The name on command lines.
pub const NAME: &str = "ws-overflow-locked";

/// Builds the policy for `processors` processors.
pub fn build(processors: usize) -> Arc<dyn Policy> {
    Arc::new(RingStealing::<Inject>::new(NAME, processors, Victims::All))
}
