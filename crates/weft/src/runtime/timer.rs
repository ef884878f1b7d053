//! Per-processor timers: a min-heap of deadlines, each waking one fiber.
//!
//! A fiber that parks with a deadline adds an entry on the processor it runs on; the processor
//! fires due entries every few scheduling rounds and bounds its idle sleep by the earliest one.
//! The fiber may wake for another reason and move to another processor, so it cannot remove its
//! entry. Instead each entry carries the fiber's *timer generation* at the time it was armed,
//! and the fiber bumps its generation when it wakes ([`crate::fiber::Fiber::timer_gen`]): an
//! entry whose generation is no longer the fiber's is stale and never wakes anyone. Stale
//! entries are dropped when they come due, or in a sweep when the heap has doubled since the
//! last sweep: a sweep scans at most twice the entries pushed since the previous one, so its
//! cost is O(1) per armed timer however many timers are live (a server keeps one per idle
//! connection).
//!
//! Arming a timer allocates nothing (the entry holds a reference to the fiber, not a shared
//! cancellation record): I/O calls with a deadline arm one on every wait.

use crate::loom::Ordering;
use std::cmp::{Ordering as CmpOrdering, Reverse};
use std::collections::BinaryHeap;
use std::time::Instant;

use crate::fiber::core::FiberRef;

struct Entry {
    deadline: Instant,
    /// The fiber's timer generation when the entry was armed.
    generation: u64,
    fiber: FiberRef,
}

impl Entry {
    /// Whether the fiber has woken since (for any reason): then the entry must not wake it.
    fn is_stale(&self) -> bool {
        self.fiber.0.timer_gen.load(Ordering::Acquire) != self.generation
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.deadline == other.deadline
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        self.deadline.cmp(&other.deadline)
    }
}

/// One processor's timers.
#[derive(Default)]
pub(crate) struct TimerHeap {
    heap: BinaryHeap<Reverse<Entry>>,
    /// The heap's length at which the next sweep runs: twice what the last one left (at least
    /// [`MIN_SWEEP_LEN`]), so every sweep is paid for by as many pushes as it scans entries.
    sweep_at_len: usize,
    /// Entries looked at by sweeps so far (their cost, for tests and statistics).
    swept_entries: u64,
}

/// No sweep below this many entries: dropping stale entries as they come due is enough.
const MIN_SWEEP_LEN: usize = 1024;

impl TimerHeap {
    /// Wakes `fiber` at `deadline` unless it has bumped its timer generation past `generation`
    /// by then.
    pub(crate) fn add(&mut self, deadline: Instant, fiber: FiberRef, generation: u64) {
        if self.heap.len() >= self.sweep_at_len.max(MIN_SWEEP_LEN) {
            self.swept_entries += self.heap.len() as u64;
            self.heap.retain(|e| !e.0.is_stale());
            self.sweep_at_len = (self.heap.len() * 2).max(MIN_SWEEP_LEN);
        }
        self.heap.push(Reverse(Entry {
            deadline,
            generation,
            fiber,
        }));
    }

    /// The earliest deadline, cancelled entries included (waking early for one is harmless).
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.heap.peek().map(|e| e.0.deadline)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Removes every entry due at `now` and returns the fibers to wake.
    pub(crate) fn expire(&mut self, now: Instant, due: &mut Vec<FiberRef>) {
        while let Some(top) = self.heap.peek() {
            if top.0.deadline > now {
                break;
            }
            let entry = self.heap.pop().expect("peeked").0;
            if !entry.is_stale() {
                due.push(entry.fiber);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{mpsc, Arc};
    use std::time::{Duration, Instant};

    use super::TimerHeap;
    use crate::fiber::park::{current_unparker, park, Parked};

    /// A fiber parks with a deadline, is woken early, then parks without one: the first park's
    /// timer entry is stale and must not end the second park when its deadline passes.
    #[test]
    fn a_stale_timer_does_not_wake_a_later_park() {
        let cluster = crate::Cluster::builder()
            .name("timer-stale")
            .processors(1)
            .build()
            .unwrap();
        let (tx, rx) = mpsc::channel();
        let wakes = Arc::new(AtomicU32::new(0));
        let seen = wakes.clone();
        let fiber = cluster.spawn(move || {
            tx.send(current_unparker()).unwrap();
            let first = park(Some(Instant::now() + Duration::from_millis(200)));
            seen.fetch_add(1, Ordering::SeqCst);
            // Parks until unparked; spurious returns are allowed, so count them.
            let mut spurious = 0;
            while seen.load(Ordering::SeqCst) < 2 {
                park(None);
                spurious += 1;
                if spurious > 1 {
                    break;
                }
            }
            (first, spurious)
        });
        let unparker = rx.recv().unwrap();
        // Let it park first: an unpark that comes before leaves a token and no timer is armed.
        std::thread::sleep(Duration::from_millis(15));
        unparker.unpark();
        // Past the stale deadline: a live entry would have unparked the fiber by now.
        std::thread::sleep(Duration::from_millis(300));
        let before = wakes.load(Ordering::SeqCst);
        wakes.fetch_add(1, Ordering::SeqCst);
        unparker.unpark();
        let (first, spurious) = fiber.join().unwrap();
        assert_eq!(
            first,
            Parked::Woken,
            "the early unpark ended the first park"
        );
        assert_eq!(before, 1);
        assert_eq!(spurious, 1, "only the second unpark ended the untimed park");
        cluster.shutdown();
    }

    /// Timers fire in deadline order, each exactly once.
    #[test]
    fn timers_fire_in_deadline_order() {
        let cluster = crate::Cluster::builder()
            .name("timer-order")
            .processors(1)
            .build()
            .unwrap();
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let start = Instant::now();
        let fibers: Vec<_> = [40u64, 10, 30, 20]
            .into_iter()
            .map(|ms| {
                let order = order.clone();
                cluster.spawn(move || {
                    let deadline = start + Duration::from_millis(ms);
                    while park(Some(deadline)) != Parked::TimedOut {}
                    order.lock().unwrap().push(ms);
                })
            })
            .collect();
        for f in fibers {
            f.join().unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![10, 20, 30, 40]);
        cluster.shutdown();
    }
    /// The sweep of stale entries costs O(1) per armed timer, amortised, however many live
    /// timers there are: a server with thousands of connections keeps one live read deadline
    /// per connection and makes one stale entry per request. Sweeping whenever the heap
    /// reached a power of two scanned the whole heap every (2^k - live) pushes: with 4,000 live
    /// entries, all 4,096 of them every 96 pushes.
    #[test]
    fn sweeping_stale_entries_scans_a_bounded_number_per_push() {
        const LIVE: usize = 4_000;
        const STALE_PUSHES: u64 = 40_000;
        let cluster = crate::Cluster::builder()
            .name("timer-sweep")
            .processors(1)
            .build()
            .unwrap();
        let scanned = cluster
            .spawn(|| {
                let me = crate::fiber::current::current_ref().unwrap();
                let gen = me.0.timer_gen.load(Ordering::Acquire);
                let far = Instant::now() + Duration::from_secs(3600);
                let mut heap = TimerHeap::default();
                for _ in 0..LIVE {
                    heap.add(far, me.clone(), gen);
                }
                let before = heap.swept_entries;
                for _ in 0..STALE_PUSHES {
                    heap.add(far, me.clone(), gen.wrapping_sub(1));
                }
                assert!(heap.heap.len() >= LIVE, "live entries were swept");
                heap.swept_entries - before
            })
            .join()
            .unwrap();
        let per_push = scanned as f64 / STALE_PUSHES as f64;
        assert!(
            per_push <= 4.0,
            "the sweeps scanned {scanned} entries for {STALE_PUSHES} pushes ({per_push:.1} each)"
        );
        cluster.shutdown();
    }
}
