//! One-shot channels (promises): [`channel`] carries exactly one value, once.
//!
//! One OS lock guards the slot, whether each half is alive, and the receivers' `WaitList`
//! (a `Receiver` may be shared by reference, so several fibers may wait on it; the first to look
//! after the send gets the value, the others `Closed`). `send` fills the slot and notifies every
//! waiter; a notified waiter re-checks under the lock, so notifications are hints and a waiter
//! that gives up never holds the value. Values are dropped outside the lock.

use std::fmt;
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use super::wait_queue::{deadline_after, wait, WaitList, Woke};
use crate::poison::Recover;

pub use super::error::{RecvError, RecvTimeoutError, TryRecvError};

/// A promise: the sending half of a one-shot channel. `Sender` by another name.
pub type Promise<T> = Sender<T>;

/// A one-shot channel: the sender sends (at most) one value, the receiver receives it.
///
/// ```
/// let (promise, rx) = weft::sync::oneshot::channel();
/// let worker = weft::spawn(move || promise.send(6 * 7).unwrap());
/// assert_eq!(rx.recv(), Ok(42));
/// worker.join().unwrap();
/// ```
pub fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        state: std::sync::Mutex::new(State {
            value: None,
            sender: true,
            receiver: true,
            waiters: WaitList::new(),
        }),
    });
    (
        Sender {
            shared: Some(shared.clone()),
        },
        Receiver { shared },
    )
}

/// What both halves share.
struct Shared<T> {
    /// The slot and the waiters; see the module docs.
    state: std::sync::Mutex<State<T>>,
}

struct State<T> {
    /// The value, between the send and the receive.
    value: Option<T>,
    /// Whether the `Sender` is alive (it dies when it sends, or is dropped).
    sender: bool,
    /// Whether the `Receiver` is alive; once it is gone `send` gives the value back.
    receiver: bool,
    /// Receivers waiting for the value or for the sender to go.
    waiters: WaitList,
}

/// Why an internal receive gave up.
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
}

/// The sending half of a one-shot channel (a [`Promise`]).
pub struct Sender<T> {
    /// The channel; `None` once `send` used it up (so `Drop` has nothing left to do).
    shared: Option<Arc<Shared<T>>>,
}

impl<T> Sender<T> {
    /// Sends the value and wakes the receiver; gives it back if the receiver is gone.
    pub fn send(mut self, value: T) -> Result<(), T> {
        let shared = self.shared.take().expect("a live sender has its channel");
        let wakes = {
            let mut state = shared.lock();
            state.sender = false;
            if !state.receiver {
                return Err(value);
            }
            state.value = Some(value);
            state.waiters.notify_all()
        };
        wakes.wake();
        Ok(())
    }

    /// Whether the receiver is gone (so a send would give the value back).
    pub fn is_closed(&self) -> bool {
        match &self.shared {
            Some(shared) => !shared.lock().receiver,
            None => true,
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let Some(shared) = self.shared.take() else {
            return;
        };
        let wakes = {
            let mut state = shared.lock();
            state.sender = false;
            state.waiters.notify_all()
        };
        wakes.wake();
    }
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender")
            .field("closed", &self.is_closed())
            .finish()
    }
}

/// The receiving half of a one-shot channel.
pub struct Receiver<T> {
    /// The channel.
    shared: Arc<Shared<T>>,
}

impl<T> Receiver<T> {
    /// Waits for the value, parking the fiber (or blocking the thread).
    ///
    /// Fails with [`RecvError::Closed`] when the sender was dropped without sending (or the
    /// value was already received), and with [`RecvError::Cancelled`] when the fiber is
    /// cancelled while it would wait.
    pub fn recv(&self) -> Result<T, RecvError> {
        self.recv_until(None).map_err(|why| match why {
            Fail::Closed => RecvError::Closed,
            // No deadline, so no timeout.
            Fail::Cancelled | Fail::TimedOut => RecvError::Cancelled,
        })
    }

    /// As [`Receiver::recv`], giving up after `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        self.recv_until(deadline_after(timeout))
            .map_err(|why| match why {
                Fail::Closed => RecvTimeoutError::Closed,
                Fail::Cancelled => RecvTimeoutError::Cancelled,
                Fail::TimedOut => RecvTimeoutError::TimedOut,
            })
    }

    /// Takes the value if it is there right now.
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        let mut state = self.shared.lock();
        match state.value.take() {
            Some(value) => Ok(value),
            None if state.sender => Err(TryRecvError::Empty),
            None => Err(TryRecvError::Closed),
        }
    }

    fn recv_until(&self, deadline: Option<Instant>) -> Result<T, Fail> {
        loop {
            let waiter = {
                let mut state = self.shared.lock();
                if let Some(value) = state.value.take() {
                    return Ok(value);
                }
                if !state.sender {
                    return Err(Fail::Closed);
                }
                state.waiters.push()
            };
            let woke = wait(&waiter, deadline, || {
                self.shared.lock().waiters.remove(&waiter)
            });
            match woke {
                Woke::Notified => continue,
                Woke::TimedOut => return Err(Fail::TimedOut),
                Woke::Cancelled => return Err(Fail::Cancelled),
            }
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let value = {
            let mut state = self.shared.lock();
            state.receiver = false;
            state.value.take()
        };
        // Dropped outside the lock: its destructor may block.
        drop(value);
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.lock();
        f.debug_struct("Receiver")
            .field("ready", &state.value.is_some())
            .field("sender_alive", &state.sender)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_then_receive() {
        let (tx, rx) = channel();
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        assert!(!tx.is_closed());
        tx.send(5).unwrap();
        assert_eq!(
            format!("{rx:?}"),
            "Receiver { ready: true, sender_alive: false }"
        );
        assert_eq!(rx.recv(), Ok(5));
        assert_eq!(rx.recv(), Err(RecvError::Closed), "the value comes once");
    }

    #[test]
    fn dropped_sender_closes() {
        let (tx, rx) = channel::<u8>();
        drop(tx);
        assert_eq!(rx.recv(), Err(RecvError::Closed));
        assert_eq!(rx.try_recv(), Err(TryRecvError::Closed));
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)),
            Err(RecvTimeoutError::Closed)
        );
    }

    #[test]
    fn dropped_receiver_gives_the_value_back() {
        let (tx, rx) = channel();
        drop(rx);
        assert!(tx.is_closed());
        assert_eq!(tx.send("v"), Err("v"));
    }

    #[test]
    fn timeout_then_value_across_threads() {
        let (tx, rx) = channel();
        let start = Instant::now();
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(20)),
            Err(RecvTimeoutError::TimedOut)
        );
        assert!(start.elapsed() >= Duration::from_millis(20));
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            tx.send(String::from("late")).unwrap();
        });
        assert_eq!(rx.recv().as_deref(), Ok("late"));
        t.join().unwrap();
        assert!(rx.shared.lock().waiters.is_empty());
    }
}
