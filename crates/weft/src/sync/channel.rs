//! Bounded multi-producer multi-consumer channels: [`bounded`].
//!
//! One OS lock guards the whole state: the buffer, the sender and receiver counts, and two
//! `WaitList`s (senders waiting for room, receivers waiting for a value). Every critical
//! section is a push, a pop or a count change; values are never dropped under the lock (their
//! destructors may block) and nobody parks under it.
//!
//! A notification here is a hint, not a hand-off: every value sits in the buffer until a
//! receiver pops it, and each push notifies one waiting receiver, each pop one waiting sender. A
//! notified waiter locks again and re-checks; if another sender or receiver got there first it
//! queues again. So a value is never held by a waiter that gives up, and a cancelled receiver
//! cannot swallow a message: either it left the queue un-notified, or it goes back and takes
//! the value (the notification wins, see `sync/wait_queue.rs`).
//!
//! Closing: when the last sender goes, receivers are woken and drain what is left, then get
//! `Closed`; when the last receiver goes, senders are woken and get their values back with
//! `Closed`, and the buffered values are dropped.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use super::wait_queue::{deadline_after, wait, WaitList, Woke};
use crate::loom::{AtomicBool, Ordering};
use crate::poison::Recover;

pub use super::error::{
    RecvError, RecvTimeoutError, SendError, SendTimeoutError, TryRecvError, TrySendError,
};

/// A channel holding up to `capacity` values; both halves may be cloned.
///
/// `send` parks the fiber (or blocks the thread) while the channel is full, `recv` while it is
/// empty. The channel is closed once every sender or every receiver is dropped.
///
/// # Panics
/// When `capacity` is 0: rendezvous channels are not supported.
///
/// ```
/// let (tx, rx) = weft::sync::channel::bounded(2);
/// tx.send(1).unwrap();
/// tx.try_send(2).unwrap();
/// assert!(tx.try_send(3).is_err());
/// drop(tx);
/// assert_eq!(rx.recv(), Ok(1));
/// assert_eq!(rx.recv(), Ok(2));
/// assert_eq!(rx.recv(), Err(weft::sync::channel::RecvError::Closed));
/// ```
pub fn bounded<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    assert!(
        capacity > 0,
        "weft: channel::bounded(0): a channel needs a capacity of at least 1 \
         (rendezvous channels are not supported)"
    );
    let shared = Arc::new(Shared {
        state: std::sync::Mutex::new(State {
            buf: VecDeque::new(),
            senders: 1,
            receivers: 1,
            send_waiters: WaitList::new(),
            recv_waiters: WaitList::new(),
        }),
        capacity,
        closed: AtomicBool::new(false),
    });
    (
        Sender {
            shared: shared.clone(),
        },
        Receiver { shared },
    )
}

/// What both halves share.
struct Shared<T> {
    /// Everything that changes; see the module docs.
    state: std::sync::Mutex<State<T>>,
    /// The most values `buf` holds.
    capacity: usize,
    /// Set (under the lock) when the sender or receiver count reaches 0; lets `is_closed`
    /// answer without the lock.
    closed: AtomicBool,
}

struct State<T> {
    /// Values sent and not yet received, oldest first.
    buf: VecDeque<T>,
    /// Live `Sender`s; at 0 the channel is closed for receivers once `buf` is drained.
    senders: usize,
    /// Live `Receiver`s; at 0 sends fail.
    receivers: usize,
    /// Senders waiting for room.
    send_waiters: WaitList,
    /// Receivers waiting for a value.
    recv_waiters: WaitList,
}

/// Why an internal send or receive gave up.
enum Fail {
    Closed,
    Cancelled,
    TimedOut,
}

impl<T> Shared<T> {
    /// Locks the state. Nothing that can panic runs under this lock, so poisoning is ignored.
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().recover()
    }

    fn send_until(&self, value: T, deadline: Option<Instant>) -> Result<(), (Fail, T)> {
        loop {
            let waiter = {
                let mut state = self.lock();
                if state.receivers == 0 {
                    return Err((Fail::Closed, value));
                }
                if state.buf.len() < self.capacity {
                    state.buf.push_back(value);
                    let wake = state.recv_waiters.notify_one();
                    drop(state);
                    if let Some(wake) = wake {
                        wake.wake();
                    }
                    return Ok(());
                }
                state.send_waiters.push()
            };
            let woke = wait(&waiter, deadline, || {
                self.lock().send_waiters.remove(&waiter)
            });
            match woke {
                Woke::Notified => continue,
                Woke::TimedOut => return Err((Fail::TimedOut, value)),
                Woke::Cancelled => return Err((Fail::Cancelled, value)),
            }
        }
    }

    /// Sends without waiting.
    fn try_send(&self, value: T) -> Result<(), TrySendError<T>> {
        let mut state = self.lock();
        if state.receivers == 0 {
            return Err(TrySendError::Closed(value));
        }
        if state.buf.len() >= self.capacity {
            return Err(TrySendError::Full(value));
        }
        state.buf.push_back(value);
        let wake = state.recv_waiters.notify_one();
        drop(state);
        if let Some(wake) = wake {
            wake.wake();
        }
        Ok(())
    }

    fn recv_until(&self, deadline: Option<Instant>) -> Result<T, Fail> {
        loop {
            let waiter = {
                let mut state = self.lock();
                if let Some(value) = state.buf.pop_front() {
                    let wake = state.send_waiters.notify_one();
                    drop(state);
                    if let Some(wake) = wake {
                        wake.wake();
                    }
                    return Ok(value);
                }
                if state.senders == 0 {
                    return Err(Fail::Closed);
                }
                state.recv_waiters.push()
            };
            let woke = wait(&waiter, deadline, || {
                self.lock().recv_waiters.remove(&waiter)
            });
            match woke {
                Woke::Notified => continue,
                Woke::TimedOut => return Err(Fail::TimedOut),
                Woke::Cancelled => return Err(Fail::Cancelled),
            }
        }
    }

    fn try_recv(&self) -> Result<T, TryRecvError> {
        let mut state = self.lock();
        match state.buf.pop_front() {
            Some(value) => {
                let wake = state.send_waiters.notify_one();
                drop(state);
                if let Some(wake) = wake {
                    wake.wake();
                }
                Ok(value)
            }
            None if state.senders == 0 => Err(TryRecvError::Closed),
            None => Err(TryRecvError::Empty),
        }
    }

    fn len(&self) -> usize {
        self.lock().buf.len()
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

/// The sending half of a [`bounded`] channel. Clone it for more producers.
pub struct Sender<T> {
    /// The channel.
    shared: Arc<Shared<T>>,
}

impl<T> Sender<T> {
    /// Sends `value`, parking the fiber (or blocking the thread) while the channel is full.
    ///
    /// Gives the value back when every receiver is gone ([`SendError::Closed`]) or when the
    /// fiber is cancelled while it would wait ([`SendError::Cancelled`]).
    pub fn send(&self, value: T) -> Result<(), SendError<T>> {
        self.shared
            .send_until(value, None)
            .map_err(|(why, v)| match why {
                Fail::Closed => SendError::Closed(v),
                // No deadline, so no timeout.
                Fail::Cancelled | Fail::TimedOut => SendError::Cancelled(v),
            })
    }

    /// As [`Sender::send`], giving up after `timeout`.
    pub fn send_timeout(&self, value: T, timeout: Duration) -> Result<(), SendTimeoutError<T>> {
        self.shared
            .send_until(value, deadline_after(timeout))
            .map_err(|(why, v)| match why {
                Fail::Closed => SendTimeoutError::Closed(v),
                Fail::Cancelled => SendTimeoutError::Cancelled(v),
                Fail::TimedOut => SendTimeoutError::TimedOut(v),
            })
    }

    /// Sends `value` if there is room right now.
    pub fn try_send(&self, value: T) -> Result<(), TrySendError<T>> {
        self.shared.try_send(value)
    }

    /// Values in the channel right now.
    pub fn len(&self) -> usize {
        self.shared.len()
    }

    /// Whether the channel holds no value right now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most values the channel holds.
    pub fn capacity(&self) -> usize {
        self.shared.capacity
    }

    /// Whether every sender or every receiver is gone.
    pub fn is_closed(&self) -> bool {
        self.shared.is_closed()
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.shared.lock().senders += 1;
        Sender {
            shared: self.shared.clone(),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let wakes = {
            let mut state = self.shared.lock();
            state.senders -= 1;
            if state.senders > 0 {
                return;
            }
            self.shared.closed.store(true, Ordering::Release);
            state.recv_waiters.notify_all()
        };
        wakes.wake();
    }
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender")
            .field("len", &self.len())
            .field("capacity", &self.capacity())
            .field("closed", &self.is_closed())
            .finish()
    }
}

/// The receiving half of a [`bounded`] channel. Clone it for more consumers.
pub struct Receiver<T> {
    /// The channel.
    shared: Arc<Shared<T>>,
}

impl<T> Receiver<T> {
    /// Receives a value, parking the fiber (or blocking the thread) while the channel is empty.
    ///
    /// Fails with [`RecvError::Closed`] once the channel is empty and every sender is gone, and
    /// with [`RecvError::Cancelled`] when the fiber is cancelled while it would wait.
    pub fn recv(&self) -> Result<T, RecvError> {
        self.shared.recv_until(None).map_err(|why| match why {
            Fail::Closed => RecvError::Closed,
            // No deadline, so no timeout.
            Fail::Cancelled | Fail::TimedOut => RecvError::Cancelled,
        })
    }

    /// As [`Receiver::recv`], giving up after `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        self.shared
            .recv_until(deadline_after(timeout))
            .map_err(|why| match why {
                Fail::Closed => RecvTimeoutError::Closed,
                Fail::Cancelled => RecvTimeoutError::Cancelled,
                Fail::TimedOut => RecvTimeoutError::TimedOut,
            })
    }

    /// Receives a value if one is there right now.
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        self.shared.try_recv()
    }

    /// Values in the channel right now.
    pub fn len(&self) -> usize {
        self.shared.len()
    }

    /// Whether the channel holds no value right now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most values the channel holds.
    pub fn capacity(&self) -> usize {
        self.shared.capacity
    }

    /// Whether every sender or every receiver is gone (values may still wait to be received).
    pub fn is_closed(&self) -> bool {
        self.shared.is_closed()
    }
}

impl<T> Clone for Receiver<T> {
    fn clone(&self) -> Self {
        self.shared.lock().receivers += 1;
        Receiver {
            shared: self.shared.clone(),
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let (wakes, values) = {
            let mut state = self.shared.lock();
            state.receivers -= 1;
            if state.receivers > 0 {
                return;
            }
            self.shared.closed.store(true, Ordering::Release);
            (
                state.send_waiters.notify_all(),
                std::mem::take(&mut state.buf),
            )
        };
        wakes.wake();
        // Nobody can receive these any more; drop them outside the lock.
        drop(values);
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receiver")
            .field("len", &self.len())
            .field("capacity", &self.capacity())
            .field("closed", &self.is_closed())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_full_empty_and_counts() {
        let (tx, rx) = bounded(2);
        assert_eq!(tx.capacity(), 2);
        assert!(rx.is_empty());
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        tx.send(1).unwrap();
        tx.try_send(2).unwrap();
        assert_eq!(tx.try_send(3), Err(TrySendError::Full(3)));
        assert_eq!(rx.len(), 2);
        assert_eq!(rx.try_recv(), Ok(1));
        assert_eq!(rx.recv(), Ok(2));
        assert!(!tx.is_closed());
        assert_eq!(
            format!("{tx:?}"),
            "Sender { len: 0, capacity: 2, closed: false }"
        );
    }

    #[test]
    fn receivers_drain_after_the_senders_are_gone() {
        let (tx, rx) = bounded(4);
        let tx2 = tx.clone();
        tx.send("a").unwrap();
        tx2.send("b").unwrap();
        drop(tx);
        assert!(!rx.is_closed());
        drop(tx2);
        assert!(rx.is_closed());
        assert_eq!(rx.recv(), Ok("a"));
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok("b"));
        assert_eq!(rx.recv(), Err(RecvError::Closed));
        assert_eq!(rx.try_recv(), Err(TryRecvError::Closed));
    }

    #[test]
    fn senders_get_their_value_back_when_receivers_are_gone() {
        let (tx, rx) = bounded(1);
        let rx2 = rx.clone();
        drop(rx);
        tx.send(1).unwrap();
        drop(rx2);
        assert!(tx.is_closed());
        assert_eq!(tx.send(2), Err(SendError::Closed(2)));
        assert_eq!(tx.try_send(3), Err(TrySendError::Closed(3)));
        assert_eq!(
            tx.send_timeout(4, Duration::from_secs(5)),
            Err(SendTimeoutError::Closed(4))
        );
        assert_eq!(
            tx.len(),
            0,
            "values left behind are dropped with the last receiver"
        );
    }

    #[test]
    fn timeouts() {
        let (tx, rx) = bounded::<u8>(1);
        let start = Instant::now();
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(20)),
            Err(RecvTimeoutError::TimedOut)
        );
        assert!(start.elapsed() >= Duration::from_millis(20));
        tx.send(1).unwrap();
        let start = Instant::now();
        assert_eq!(
            tx.send_timeout(2, Duration::from_millis(20)),
            Err(SendTimeoutError::TimedOut(2))
        );
        assert!(start.elapsed() >= Duration::from_millis(20));
        let state = tx.shared.lock();
        assert!(state.send_waiters.is_empty() && state.recv_waiters.is_empty());
    }

    #[test]
    fn threads_pass_values_with_backpressure() {
        let (tx, rx) = bounded(1);
        let producers: Vec<_> = (0..3)
            .map(|p| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for i in 0..200 {
                        tx.send(p * 1000 + i).unwrap();
                    }
                })
            })
            .collect();
        drop(tx);
        let mut got = Vec::new();
        while let Ok(v) = rx.recv() {
            got.push(v);
        }
        for p in producers {
            p.join().unwrap();
        }
        got.sort_unstable();
        let want: Vec<_> = (0..3)
            .flat_map(|p| (0..200).map(move |i| p * 1000 + i))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    #[should_panic(expected = "capacity of at least 1")]
    fn zero_capacity_panics() {
        let _ = bounded::<()>(0);
    }
}
