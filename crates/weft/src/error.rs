//! Errors of blocking points: cancellation and timeouts.

use std::fmt;

/// The current fiber was cancelled (see [`crate::JoinHandle::cancel`]).
///
/// Cancellation is sticky: once a fiber is cancelled, every later blocking point in it returns
/// this error at once, so `?` carries it out to the fiber's entry function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cancelled;

impl fmt::Display for Cancelled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the fiber was cancelled")
    }
}

impl std::error::Error for Cancelled {}

/// Why a wait with a deadline ended without what it waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WaitError {
    /// The fiber was cancelled while it waited.
    Cancelled,
    /// The deadline passed first.
    TimedOut,
}

impl fmt::Display for WaitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitError::Cancelled => f.write_str("the fiber was cancelled"),
            WaitError::TimedOut => f.write_str("the wait timed out"),
        }
    }
}

impl std::error::Error for WaitError {}

impl From<Cancelled> for WaitError {
    fn from(_: Cancelled) -> Self {
        WaitError::Cancelled
    }
}
