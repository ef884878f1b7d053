//! Errors of [`super::channel`] and [`super::oneshot`]: why a value was not sent or received.
//!
//! Send errors give the value back. Every enum says which of these happened:
//! - **Closed**: the other side is gone (every receiver, or every sender, was dropped);
//! - **Cancelled**: the calling fiber was cancelled while it would have waited;
//! - **TimedOut**: the timeout of a `*_timeout` call passed;
//! - **Full** / **Empty**: a `try_*` call would have had to wait.
//!
//! `Debug` never prints the value, so it needs no `T: Debug` (as std's channel errors).

use std::fmt;

use crate::error::{Cancelled, WaitError};

/// Why [`super::channel::Sender::send`] gave the value back.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum SendError<T> {
    /// Every receiver is gone.
    Closed(T),
    /// The fiber was cancelled while the channel was full.
    Cancelled(T),
}

/// Why [`super::channel::Sender::send_timeout`] gave the value back.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum SendTimeoutError<T> {
    /// Every receiver is gone.
    Closed(T),
    /// The fiber was cancelled while the channel was full.
    Cancelled(T),
    /// The channel stayed full until the timeout.
    TimedOut(T),
}

/// Why [`super::channel::Sender::try_send`] gave the value back.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum TrySendError<T> {
    /// The channel is full.
    Full(T),
    /// Every receiver is gone.
    Closed(T),
}

/// Why a blocking receive returned no value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecvError {
    /// Nothing is left and nothing will come: every sender is gone.
    Closed,
    /// The fiber was cancelled while it waited.
    Cancelled,
}

/// Why a receive with a timeout returned no value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecvTimeoutError {
    /// Nothing is left and nothing will come: every sender is gone.
    Closed,
    /// The fiber was cancelled while it waited.
    Cancelled,
    /// Nothing arrived before the timeout.
    TimedOut,
}

/// Why a non-blocking receive returned no value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TryRecvError {
    /// Nothing is there right now.
    Empty,
    /// Nothing is left and nothing will come: every sender is gone.
    Closed,
}

impl<T> SendError<T> {
    /// The value that was not sent.
    pub fn into_inner(self) -> T {
        match self {
            SendError::Closed(v) | SendError::Cancelled(v) => v,
        }
    }
}

impl<T> SendTimeoutError<T> {
    /// The value that was not sent.
    pub fn into_inner(self) -> T {
        match self {
            SendTimeoutError::Closed(v)
            | SendTimeoutError::Cancelled(v)
            | SendTimeoutError::TimedOut(v) => v,
        }
    }
}

impl<T> TrySendError<T> {
    /// The value that was not sent.
    pub fn into_inner(self) -> T {
        match self {
            TrySendError::Full(v) | TrySendError::Closed(v) => v,
        }
    }
}

impl<T> From<SendError<T>> for SendTimeoutError<T> {
    fn from(e: SendError<T>) -> Self {
        match e {
            SendError::Closed(v) => SendTimeoutError::Closed(v),
            SendError::Cancelled(v) => SendTimeoutError::Cancelled(v),
        }
    }
}

impl From<Cancelled> for RecvError {
    fn from(_: Cancelled) -> Self {
        RecvError::Cancelled
    }
}

impl From<RecvError> for RecvTimeoutError {
    fn from(e: RecvError) -> Self {
        match e {
            RecvError::Closed => RecvTimeoutError::Closed,
            RecvError::Cancelled => RecvTimeoutError::Cancelled,
        }
    }
}

impl From<WaitError> for RecvTimeoutError {
    fn from(e: WaitError) -> Self {
        match e {
            WaitError::Cancelled => RecvTimeoutError::Cancelled,
            WaitError::TimedOut => RecvTimeoutError::TimedOut,
        }
    }
}

impl<T> fmt::Debug for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::Closed(_) => f.write_str("Closed(..)"),
            SendError::Cancelled(_) => f.write_str("Cancelled(..)"),
        }
    }
}

impl<T> fmt::Debug for SendTimeoutError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendTimeoutError::Closed(_) => f.write_str("Closed(..)"),
            SendTimeoutError::Cancelled(_) => f.write_str("Cancelled(..)"),
            SendTimeoutError::TimedOut(_) => f.write_str("TimedOut(..)"),
        }
    }
}

impl<T> fmt::Debug for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::Full(_) => f.write_str("Full(..)"),
            TrySendError::Closed(_) => f.write_str("Closed(..)"),
        }
    }
}

const CLOSED_SEND: &str = "sending on a closed channel";
const CLOSED_RECV: &str = "receiving on an empty and closed channel";
const CANCELLED: &str = "the fiber was cancelled";
const TIMED_OUT: &str = "the wait timed out";

impl<T> fmt::Display for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SendError::Closed(_) => CLOSED_SEND,
            SendError::Cancelled(_) => CANCELLED,
        })
    }
}

impl<T> fmt::Display for SendTimeoutError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SendTimeoutError::Closed(_) => CLOSED_SEND,
            SendTimeoutError::Cancelled(_) => CANCELLED,
            SendTimeoutError::TimedOut(_) => TIMED_OUT,
        })
    }
}

impl<T> fmt::Display for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TrySendError::Full(_) => "sending on a full channel",
            TrySendError::Closed(_) => CLOSED_SEND,
        })
    }
}

impl fmt::Display for RecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RecvError::Closed => CLOSED_RECV,
            RecvError::Cancelled => CANCELLED,
        })
    }
}

impl fmt::Display for RecvTimeoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RecvTimeoutError::Closed => CLOSED_RECV,
            RecvTimeoutError::Cancelled => CANCELLED,
            RecvTimeoutError::TimedOut => TIMED_OUT,
        })
    }
}

impl fmt::Display for TryRecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TryRecvError::Empty => "receiving on an empty channel",
            TryRecvError::Closed => CLOSED_RECV,
        })
    }
}

impl<T> std::error::Error for SendError<T> {}
impl<T> std::error::Error for SendTimeoutError<T> {}
impl<T> std::error::Error for TrySendError<T> {}
impl std::error::Error for RecvError {}
impl std::error::Error for RecvTimeoutError {}
impl std::error::Error for TryRecvError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_come_back_and_messages_read_well() {
        assert_eq!(SendError::Closed(1).into_inner(), 1);
        assert_eq!(SendError::Cancelled(2).into_inner(), 2);
        assert_eq!(SendTimeoutError::TimedOut(3).into_inner(), 3);
        assert_eq!(TrySendError::Full(4).into_inner(), 4);
        assert_eq!(
            SendTimeoutError::from(SendError::Cancelled(5)),
            SendTimeoutError::Cancelled(5)
        );
        struct NoDebug;
        assert_eq!(format!("{:?}", SendError::Closed(NoDebug)), "Closed(..)");
        assert_eq!(
            TrySendError::Full(()).to_string(),
            "sending on a full channel"
        );
        assert_eq!(
            RecvTimeoutError::from(WaitError::TimedOut),
            RecvTimeoutError::TimedOut
        );
        assert_eq!(RecvError::from(Cancelled), RecvError::Cancelled);
        assert_eq!(
            RecvTimeoutError::from(RecvError::Closed).to_string(),
            CLOSED_RECV
        );
        assert_eq!(
            TryRecvError::Empty.to_string(),
            "receiving on an empty channel"
        );
    }
}
