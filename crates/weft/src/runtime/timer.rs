//! Per-processor timers: a min-heap of deadlines, each waking one fiber.
//!
//! A fiber that parks with a deadline adds an entry on the processor it runs on; the processor
//! fires due entries every few scheduling rounds and bounds its idle sleep by the earliest one.
//! The fiber may wake for another reason and move to another processor, so it cannot remove its
//! entry. Instead each entry carries the fiber's *timer generation* at the time it was armed,
//! and the fiber bumps its generation when it gives the entry up
//! ([`crate::fiber::core::Fiber::timer_gen`]): an entry whose generation is no longer the
//! fiber's is stale and never wakes anyone. A fiber keeps its entry across wake-ups while its next
//! deadlines are at or a little after it (`fiber::park::switch::reuses_live_timer`): a
//! connection parked once per request with a keep-alive deadline arms one entry every few
//! seconds, not one per request. It gives the entry up when it parks without a deadline, with
//! an earlier one or a much later one, and when it finishes.
//!
//! Stale entries are dropped when they come due, and by an incremental sweep: every push looks
//! at [`SWEEP_PER_PUSH`] entries at a cursor that walks the heap and wraps, and removes the
//! stale ones. Each push leaves at most one stale entry behind (the one it replaces), so the
//! sweep's work is spread evenly over the pushes that cause it.
//!
//! Invariants:
//! - a push does at most [`SWEEP_PER_PUSH`] stale checks and as many O(log n) removals: no
//!   push pays for a whole sweep (a stop-the-world sweep of 30,000 entries, each a cold load of
//!   a fiber's generation, held every request behind it for about a millisecond at 15,360
//!   connections: `docs/notes/scale.md`, "Timer sweeps without a stall");
//! - with pushes that go stale at once, the heap stays within about twice its live entries
//!   (each push adds one entry and removes one in expectation once half are stale).
//!
//! Arming a timer allocates nothing beyond the heap's growth (the entry holds a reference to
//! the fiber, not a shared cancellation record): I/O calls with a deadline arm one on every wait.

use crate::loom::Ordering;
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

/// One processor's timers.
#[derive(Default)]
pub(crate) struct TimerHeap {
    /// A binary min-heap by deadline: `heap[i]` is due no later than `heap[2i + 1]` and
    /// `heap[2i + 2]`.
    heap: Vec<Entry>,
    /// Where the incremental sweep looks next.
    cursor: usize,
    /// Entries looked at by the sweep so far (its cost, for tests).
    swept_entries: u64,
}

/// Entries the sweep looks at per push.
const SWEEP_PER_PUSH: usize = 2;

/// No sweep below this many entries: dropping stale entries as they come due is enough.
const MIN_SWEEP_LEN: usize = 1024;

impl TimerHeap {
    /// Wakes `fiber` at `deadline` unless it has bumped its timer generation past `generation`
    /// by then.
    pub(crate) fn add(&mut self, deadline: Instant, fiber: FiberRef, generation: u64) {
        self.heap.push(Entry {
            deadline,
            generation,
            fiber,
        });
        self.sift_up(self.heap.len() - 1);
        if self.heap.len() >= MIN_SWEEP_LEN {
            self.sweep_some();
        }
    }

    /// Looks at [`SWEEP_PER_PUSH`] entries at the cursor and removes the stale ones.
    fn sweep_some(&mut self) {
        for _ in 0..SWEEP_PER_PUSH {
            if self.cursor >= self.heap.len() {
                self.cursor = 0;
            }
            self.swept_entries += 1;
            if self.heap[self.cursor].is_stale() {
                // Another entry moves into the cursor's place: the next look checks it.
                self.remove_at(self.cursor);
            } else {
                self.cursor += 1;
            }
        }
    }

    /// The earliest deadline, cancelled entries included (waking early for one is harmless).
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.heap.first().map(|e| e.deadline)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Entries in the heap, stale ones included.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }

    /// Removes every entry due at `now` and returns the fibers to wake.
    pub(crate) fn expire(&mut self, now: Instant, due: &mut Vec<FiberRef>) {
        while self.heap.first().is_some_and(|top| top.deadline <= now) {
            let entry = self.remove_at(0);
            if !entry.is_stale() {
                due.push(entry.fiber);
            }
        }
    }

    /// Removes and returns `heap[i]`, keeping the heap ordered.
    fn remove_at(&mut self, i: usize) -> Entry {
        let entry = self.heap.swap_remove(i);
        if i < self.heap.len() {
            // The last entry moved to `i`: it may belong above or below.
            if i > 0 && self.heap[i].deadline < self.heap[(i - 1) / 2].deadline {
                self.sift_up(i);
            } else {
                self.sift_down(i);
            }
        }
        entry
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.heap[i].deadline >= self.heap[parent].deadline {
                break;
            }
            self.heap.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap.len();
        loop {
            let left = 2 * i + 1;
            if left >= n {
                break;
            }
            let right = left + 1;
            let child = if right < n && self.heap[right].deadline < self.heap[left].deadline {
                right
            } else {
                left
            };
            if self.heap[i].deadline <= self.heap[child].deadline {
                break;
            }
            self.heap.swap(i, child);
            i = child;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{mpsc, Arc};
    use std::time::{Duration, Instant};

    use super::{TimerHeap, SWEEP_PER_PUSH};
    use crate::fiber::park::{current_unparker, park, Parked};

    /// Spawns `f` on `cluster` and returns its handle and an unparker for its fiber.
    fn spawn_with_unparker<T: Send + 'static>(
        cluster: &crate::Cluster,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> (crate::JoinHandle<T>, crate::fiber::park::Unparker) {
        let (tx, rx) = mpsc::channel();
        let handle = cluster.spawn(move || {
            tx.send(current_unparker()).unwrap();
            f()
        });
        (handle, rx.recv().unwrap())
    }

    /// A cluster of one processor, so every timer of the test is in one heap.
    fn one_processor(name: &str) -> crate::Cluster {
        crate::Cluster::builder()
            .name(name)
            .processors(1)
            .build()
            .unwrap()
    }

    /// A fiber parks with a deadline, is woken early, then parks without one: the first park's
    /// timer entry is stale and must not end the second park when its deadline passes.
    #[test]
    fn a_stale_timer_does_not_wake_a_later_park() {
        let cluster = one_processor("timer-stale");
        let wakes = Arc::new(AtomicU32::new(0));
        let seen = wakes.clone();
        let (fiber, unparker) = spawn_with_unparker(&cluster, move || {
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

    /// Timers that come due at the same check run their fibers in deadline order, each
    /// exactly once. A fiber holds the only processor past every deadline, so all four come
    /// due together whatever the machine's load (a test that let the processor sleep between
    /// deadlines 10 ms apart saw them due together whenever the host stalled it for 20 ms, and
    /// the LIFO slot then ran the latest first). Attempts in which a deadline passed before
    /// all four fibers had parked are repeated: the premise did not hold.
    #[test]
    fn timers_due_together_run_in_deadline_order() {
        use std::sync::atomic::AtomicUsize;
        let cluster = one_processor("timer-order");
        for attempt in 1.. {
            let order = Arc::new(std::sync::Mutex::new(Vec::new()));
            let parked = Arc::new(AtomicUsize::new(0));
            let base = Instant::now() + Duration::from_millis(100);
            let (o, p) = (order.clone(), parked.clone());
            let premise_held = cluster
                .spawn(move || {
                    let fibers: Vec<_> = [40u64, 10, 30, 20]
                        .into_iter()
                        .map(|ms| {
                            let (order, parked) = (o.clone(), p.clone());
                            crate::spawn(move || {
                                let deadline = base + Duration::from_millis(ms);
                                parked.fetch_add(1, Ordering::SeqCst);
                                while park(Some(deadline)) != Parked::TimedOut {}
                                order.lock().unwrap().push(ms);
                            })
                        })
                        .collect();
                    while p.load(Ordering::SeqCst) < fibers.len() {
                        crate::yield_now();
                    }
                    let held = Instant::now() < base;
                    let past_all = base + Duration::from_millis(60);
                    while Instant::now() < past_all {
                        std::hint::spin_loop();
                    }
                    for f in fibers {
                        f.join().unwrap();
                    }
                    held
                })
                .join()
                .unwrap();
            if premise_held || attempt == 20 {
                assert!(
                    premise_held,
                    "a deadline passed before the fibers parked, 20 times"
                );
                assert_eq!(*order.lock().unwrap(), vec![10, 20, 30, 40]);
                break;
            }
        }
        cluster.shutdown();
    }

    /// Timers whose deadlines are far apart fire in deadline order while the processor sleeps
    /// between them.
    #[test]
    fn timers_fire_in_deadline_order() {
        let cluster = one_processor("timer-order-apart");
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let start = Instant::now();
        let fibers: Vec<_> = [400u64, 100, 300, 200]
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
        assert_eq!(*order.lock().unwrap(), vec![100, 200, 300, 400]);
        cluster.shutdown();
    }

    /// Whether `heap` is ordered (every parent due no later than its children).
    fn is_heap(heap: &TimerHeap) -> bool {
        (1..heap.heap.len()).all(|i| heap.heap[(i - 1) / 2].deadline <= heap.heap[i].deadline)
    }

    /// The sweep of stale entries costs a fixed number of looks on every push, however many
    /// live timers there are, and never a whole sweep at once: a server with thousands of
    /// connections keeps one live read deadline per connection and makes one stale entry per
    /// request. The sweep that ran when the heap had doubled looked at every entry in one
    /// push (8,000 of them here), holding every request behind it.
    #[test]
    fn sweeping_stale_entries_looks_at_a_few_entries_on_every_push() {
        const LIVE: usize = 4_000;
        const STALE_PUSHES: u64 = 40_000;
        let cluster = one_processor("timer-sweep");
        let (most_per_push, total, len) = cluster
            .spawn(|| {
                let me = crate::fiber::current::current_ref().unwrap();
                let gen = me.0.timer_gen.load(Ordering::Acquire);
                let far = Instant::now() + Duration::from_secs(3600);
                let mut heap = TimerHeap::default();
                for _ in 0..LIVE {
                    heap.add(far, me.clone(), gen);
                }
                let before = heap.swept_entries;
                let mut most = 0;
                for i in 0..STALE_PUSHES {
                    let looked = heap.swept_entries;
                    heap.add(
                        far + Duration::from_millis(i),
                        me.clone(),
                        gen.wrapping_sub(1),
                    );
                    most = most.max(heap.swept_entries - looked);
                }
                let live = heap.heap.iter().filter(|e| !e.is_stale()).count();
                assert_eq!(live, LIVE, "live entries were swept");
                assert!(is_heap(&heap));
                (most, heap.swept_entries - before, heap.heap.len())
            })
            .join()
            .unwrap();
        assert!(
            most_per_push <= SWEEP_PER_PUSH as u64,
            "one push looked at {most_per_push} entries"
        );
        assert!(total <= STALE_PUSHES * SWEEP_PER_PUSH as u64);
        assert!(
            len <= LIVE * 5 / 2,
            "the heap grew to {len} entries for {LIVE} live ones"
        );
        cluster.shutdown();
    }

    /// Removals from the middle (the sweep) keep the heap ordered, and expiry returns the live
    /// entries in deadline order.
    #[test]
    fn sweeping_keeps_the_heap_ordered_and_expiry_in_deadline_order() {
        let cluster = one_processor("timer-sweep-order");
        cluster
            .spawn(|| {
                let me = crate::fiber::current::current_ref().unwrap();
                let gen = me.0.timer_gen.load(Ordering::Acquire);
                let base = Instant::now();
                let mut heap = TimerHeap::default();
                // A simple generator of scattered deadlines; one entry in three live.
                let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
                let mut live = Vec::new();
                for i in 0..20_000u64 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let deadline = base + Duration::from_micros(x % 1_000_000);
                    let is_live = i % 3 == 0;
                    let g = if is_live { gen } else { gen.wrapping_sub(1) };
                    heap.add(deadline, me.clone(), g);
                    if is_live {
                        live.push(deadline);
                    }
                    if i % 997 == 0 {
                        assert!(is_heap(&heap));
                    }
                }
                assert!(is_heap(&heap));
                live.sort();
                // Expire in steps: each step returns exactly the live entries due by then.
                let mut due = Vec::new();
                let mut fired = 0;
                for step in 1..=10u64 {
                    let now = base + Duration::from_micros(step * 100_000);
                    heap.expire(now, &mut due);
                    fired += due.len();
                    due.clear();
                    assert_eq!(fired, live.iter().filter(|d| **d <= now).count());
                    assert!(is_heap(&heap));
                }
                assert!(heap.is_empty(), "every deadline was within the last step");
            })
            .join()
            .unwrap();
        cluster.shutdown();
    }

    /// The entries in the current processor's heap (called from a fiber on it).
    fn entries_here() -> usize {
        let p = crate::runtime::processor::current();
        assert!(!p.is_null());
        // SAFETY: a non-null `current` is this thread's live processor.
        unsafe { &*p }.timer_entries()
    }

    /// A connection's fiber parks with a read deadline seconds away once per request and is
    /// woken by the request long before it. One timer entry serves all those parks: the old
    /// code armed one per park and left each stale (1,022 entries here, the sweep starting at
    /// 1,024).
    #[test]
    fn a_fiber_woken_before_its_deadline_keeps_one_timer_entry() {
        const PARKS: usize = 2_000;
        let cluster = one_processor("timer-reuse");
        let parked = Arc::new(AtomicU32::new(0));
        let seen = parked.clone();
        let (waiter, unparker) = spawn_with_unparker(&cluster, move || {
            let mut woken = 0;
            while woken < PARKS {
                seen.fetch_add(1, Ordering::SeqCst);
                let deadline = Instant::now() + Duration::from_secs(60);
                if park(Some(deadline)) == Parked::Woken {
                    woken += 1;
                }
            }
            entries_here()
        });
        let waker = cluster.spawn(move || {
            for i in 1..=PARKS as u32 {
                while parked.load(Ordering::SeqCst) < i {
                    crate::fiber::current::yield_now();
                }
                unparker.unpark();
            }
        });
        waker.join().unwrap();
        let entries = waiter.join().unwrap();
        assert!(entries <= 2, "{entries} timer entries for {PARKS} parks");
        cluster.shutdown();
    }

    /// A kept entry may end a park a little before its deadline, but never as a timeout: the
    /// park says `Woken`, and the next park (past the kept entry) arms the real deadline.
    #[test]
    fn a_kept_timer_entry_never_times_a_park_out_early() {
        let cluster = one_processor("timer-kept");
        let (fiber, unparker) = spawn_with_unparker(&cluster, move || {
            let first = Instant::now() + Duration::from_millis(400);
            assert_eq!(park(Some(first)), Parked::Woken, "the unpark ended it");
            // 20 ms later, within an eighth of the wait: the first entry is kept.
            let second = first + Duration::from_millis(20);
            let mut spurious = 0;
            loop {
                match park(Some(second)) {
                    Parked::TimedOut => break,
                    Parked::Woken => spurious += 1,
                    Parked::Cancelled => unreachable!(),
                }
            }
            (Instant::now() >= second, spurious)
        });
        std::thread::sleep(Duration::from_millis(20));
        unparker.unpark();
        let (on_time, spurious) = fiber.join().unwrap();
        assert!(on_time, "the park timed out before its deadline");
        assert_eq!(
            spurious, 1,
            "the kept entry woke it once, at the first deadline"
        );
        cluster.shutdown();
    }
}
