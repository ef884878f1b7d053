//! Arrival tickets: one process-wide order in which received bytes and checks of outside
//! state (a file's `fstat`) can be compared, so that one check can stand for every request
//! that was in before it began.
//!
//! A ticket is a value of one counter that only ever grows by read-modify-writes (`AcqRel`
//! `fetch_add`). Three kinds of code take one:
//! - the io_uring driver, once per batch of completions it reads from the ring, after reading
//!   it and before it wakes their fibers, and only for a batch in which a receive asked for
//!   one ([`crate::net::TcpStream::read_arrived`]; plain reads never make it take one): every
//!   byte a receive in that batch returns was in the kernel before the ticket was taken, so
//!   the ticket is the receive's arrival;
//! - a receive made any other way (a system call on the epoll backend or a plain thread, a
//!   `try_read`) takes a fresh one after the call returned ([`Arrival::now`]);
//! - a check takes one just before it looks ([`Arrival::now`]), and records it in a
//!   [`Verified`] mark when what it saw was unchanged.
//!
//! Invariant (the reason for the read-modify-writes): if a request's ticket `r` is below a
//! check's ticket `c`, the taking of `r` happens before the taking of `c` (all of them are
//! `AcqRel` read-modify-writes of one location, so each one continues the release sequence
//! that every earlier one heads), and so the request's bytes were in before the check looked.
//! A request with `r < c` may then be answered on that check, as though it had made its own:
//! whatever changed before the request was sent, the check saw. The loom models below check
//! exactly that: a change made before a request's bytes arrive is never hidden from it by a
//! check that [`Verified::covers`] its ticket.
//!
//! Tickets only order; they are not clocks, and a later ticket is always a safe stand-in for
//! an earlier one (it asks for a check that began later). The counter is 64 bits and grows by
//! one a batch or a check: it does not wrap in the life of a process.

use crate::loom::{AtomicU64, Ordering};

#[cfg(not(loom))]
static NEXT: AtomicU64 = AtomicU64::new(1);

#[cfg(loom)]
::loom::lazy_static! {
    static ref NEXT: AtomicU64 = AtomicU64::new(1);
}

/// Takes the next ticket from `counter` (the process's, or a model's own).
#[inline]
fn take(counter: &AtomicU64) -> u64 {
    counter.fetch_add(1, Ordering::AcqRel)
}

/// The driver's ticket for a batch of completions just read from its ring (see the module
/// docs); never 0.
#[inline]
pub(crate) fn stamp() -> u64 {
    take(&NEXT)
}

/// A point in the process's order of arrivals and checks (see the module docs). Tickets
/// compare: a smaller one was taken first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Arrival(u64);

impl Arrival {
    /// A fresh ticket: later than every ticket already taken. Take it after a receive made by
    /// a system call (the bytes are in), or just before a check (whatever the check sees was
    /// there no earlier than this ticket).
    #[inline]
    pub fn now() -> Arrival {
        Arrival(take(&NEXT))
    }

    /// The ticket a driver stamped on a completion, or a fresh one for `0` (none stamped: the
    /// bytes came by a system call just made).
    #[inline]
    pub(crate) fn stamped_or_now(stamp: u64) -> Arrival {
        if stamp == 0 {
            Arrival::now()
        } else {
            Arrival(stamp)
        }
    }

    /// The ticket's place in the order (for logs and tests).
    pub fn get(self) -> u64 {
        self.0
    }
}

/// The latest check that found something unchanged, as the ticket it took before looking:
/// every request whose ticket is below it may be answered on that check (see the module
/// docs).
#[derive(Debug)]
pub struct Verified(AtomicU64);

impl Verified {
    /// A mark for what a check that began at `began` saw (an open, say: the ticket taken
    /// before its `stat`).
    pub fn new(began: Arrival) -> Verified {
        Verified(AtomicU64::new(began.0))
    }

    /// Whether a check that began after `arrival` found the thing unchanged: a request that
    /// arrived then needs no check of its own.
    #[inline]
    pub fn covers(&self, arrival: Arrival) -> bool {
        arrival.0 < self.0.load(Ordering::Acquire)
    }

    /// Records that a check which took `began` (with [`Arrival::now`], before it looked)
    /// found the thing unchanged. Marks only move forward.
    #[inline]
    pub fn checked(&self, began: Arrival) {
        self.0.fetch_max(began.0, Ordering::AcqRel);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn tickets_grow_and_a_mark_covers_only_what_came_before_its_check() {
        let request = Arrival::now();
        let mark = Verified::new(Arrival::now());
        assert!(mark.covers(request));
        let later = Arrival::now();
        assert!(later > request);
        assert!(!mark.covers(later));
        // A check that began after `later` covers it; an older check does not take it back.
        let check = Arrival::now();
        mark.checked(check);
        assert!(mark.covers(later));
        mark.checked(request);
        assert!(mark.covers(later));
        assert_eq!(Arrival::stamped_or_now(7).get(), 7);
        assert!(Arrival::stamped_or_now(0) > check);
    }
}

#[cfg(all(test, loom))]
mod loom {
    use ::loom::sync::atomic::AtomicBool;
    use ::loom::sync::Arc;
    use ::loom::thread;

    use super::*;

    /// A file the writer changes (`version` 0 → 1) and a client that sends its request only
    /// once the change is done (`sent`), as a test or an operator does; the driver stamps the
    /// request's arrival once the bytes are in.
    struct World {
        version: AtomicU64,
        sent: AtomicBool,
        mark: Verified,
    }

    /// A check begun at any point (before the change, between it and the request, after
    /// the request) against a request's arrival: if the mark covers the request, the check
    /// that set it saw the change. (Serving on a check that saw the old file would hand the
    /// request what the file held before its client changed it.)
    #[test]
    fn a_covering_check_saw_every_change_made_before_the_request() {
        ::loom::model(|| {
            let world = Arc::new(World {
                version: AtomicU64::new(0),
                sent: AtomicBool::new(false),
                mark: Verified(AtomicU64::new(0)),
            });
            let writer = {
                let world = world.clone();
                thread::spawn(move || {
                    world.version.store(1, Ordering::Relaxed);
                    world.sent.store(true, Ordering::Release);
                })
            };
            let checker = {
                let world = world.clone();
                thread::spawn(move || {
                    let began = Arrival::now();
                    if world.version.load(Ordering::Relaxed) == 0 {
                        // Unchanged as far as this check saw: it vouches for the old file.
                        world.mark.checked(began);
                    }
                })
            };
            // The driver's side: the request is in (its client sent it after the change).
            if world.sent.load(Ordering::Acquire) {
                let arrival = Arrival(stamp());
                if world.mark.covers(arrival) {
                    panic!("a request was answered on a check that missed its client's change");
                }
            }
            writer.join().unwrap();
            checker.join().unwrap();
        });
    }

    /// An open shared by waiters: a waiter may take the open's outcome only if its request
    /// came before the open's ticket, taken before the open looked. Then the outcome is never
    /// older than a change its client made before sending.
    #[test]
    fn a_shared_open_is_taken_only_by_requests_that_came_before_it_looked() {
        ::loom::model(|| {
            let version = Arc::new(AtomicU64::new(0));
            let sent = Arc::new(AtomicBool::new(false));
            let opener = {
                let version = version.clone();
                thread::spawn(move || {
                    let began = Arrival::now();
                    (began, version.load(Ordering::Relaxed))
                })
            };
            let writer = {
                let (version, sent) = (version.clone(), sent.clone());
                thread::spawn(move || {
                    version.store(1, Ordering::Relaxed);
                    sent.store(true, Ordering::Release);
                })
            };
            let arrival = sent.load(Ordering::Acquire).then(|| Arrival(stamp()));
            let (began, saw) = opener.join().unwrap();
            writer.join().unwrap();
            if let Some(arrival) = arrival {
                if arrival < began {
                    assert_eq!(
                        saw, 1,
                        "a waiter took an open that looked before its change"
                    );
                }
            }
        });
    }
}
