//! Single-threaded behaviour of the ring, and a multi-threaded stress test of steal-half.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering as StdOrdering};
use std::sync::{Arc as StdArc, Mutex};

use super::*;

/// An overflow sink for one thread.
#[derive(Default)]
struct VecSink<T> {
    values: RefCell<Vec<T>>,
    /// How many `push_batch` calls arrived (one per overflow).
    batches: RefCell<usize>,
}

impl<T> Overflow<T> for VecSink<T> {
    fn push(&self, value: T) {
        self.values.borrow_mut().push(value);
    }
    fn push_batch(&self, values: impl Iterator<Item = T>) {
        *self.batches.borrow_mut() += 1;
        self.values.borrow_mut().extend(values);
    }
}

/// An overflow sink shared by threads.
struct MutexSink<T>(Mutex<Vec<T>>);

impl<T> Overflow<T> for MutexSink<T> {
    fn push(&self, value: T) {
        self.0.lock().unwrap().push(value);
    }
    fn push_batch(&self, values: impl Iterator<Item = T>) {
        self.0.lock().unwrap().extend(values);
    }
}

#[test]
fn fifo_order_and_len() {
    let (mut local, steal) = new::<u32>(8);
    assert!(local.is_empty() && steal.is_empty());
    for i in 0..5 {
        local.push_back(i).unwrap();
    }
    assert_eq!((local.len(), steal.len()), (5, 5));
    assert_eq!(local.pop(), Some(0));
    assert_eq!(local.pop(), Some(1));
    local.push_back(5).unwrap();
    let rest: Vec<_> = std::iter::from_fn(|| local.pop()).collect();
    assert_eq!(rest, [2, 3, 4, 5]);
    assert!(local.pop().is_none());
}

#[test]
fn push_back_refuses_when_full() {
    let (mut local, _steal) = new::<u32>(4);
    for i in 0..4 {
        local.push_back(i).unwrap();
    }
    assert_eq!(local.push_back(9), Err(9));
    assert_eq!(local.pop(), Some(0));
    local.push_back(9).unwrap();
    assert_eq!(local.len(), 4);
}

#[test]
fn overflow_moves_oldest_half_and_the_new_value_in_one_batch() {
    let (mut local, _steal) = new::<u32>(8);
    let sink = VecSink::default();
    for i in 0..8 {
        assert_eq!(local.push_back_or_overflow(i, &sink), 0, "room for {i}");
    }
    assert!(sink.values.borrow().is_empty());
    // The count moved is what the policies owe the shared queue (ring_stealing, work_stealing).
    assert_eq!(local.push_back_or_overflow(8, &sink), 5);
    assert_eq!(*sink.values.borrow(), [0, 1, 2, 3, 8]);
    assert_eq!(*sink.batches.borrow(), 1);
    let rest: Vec<_> = std::iter::from_fn(|| local.pop()).collect();
    assert_eq!(rest, [4, 5, 6, 7]);
}

#[test]
fn steal_takes_half_rounded_up_and_returns_one() {
    let (mut src, steal) = new::<u32>(16);
    let (mut dst, _) = new::<u32>(16);
    for i in 0..7 {
        src.push_back(i).unwrap();
    }
    // Half of 7 rounded up is 4: values 0..4 move, the last of them is returned.
    assert_eq!(steal.steal_into(&mut dst), Some(3));
    let moved: Vec<_> = std::iter::from_fn(|| dst.pop()).collect();
    assert_eq!(moved, [0, 1, 2]);
    let left: Vec<_> = std::iter::from_fn(|| src.pop()).collect();
    assert_eq!(left, [4, 5, 6]);
    assert_eq!(steal.steal_into(&mut dst), None);
}

#[test]
fn steal_respects_the_room_left_in_dst() {
    let (mut src, steal) = new::<u32>(16);
    let (mut dst, _) = new::<u32>(4);
    for i in 0..16 {
        src.push_back(i).unwrap();
    }
    dst.push_back(100).unwrap();
    dst.push_back(101).unwrap();
    // Half of 16 is 8 but only 2 slots are free in `dst`.
    assert_eq!(steal.steal_into(&mut dst), Some(1));
    assert_eq!(dst.len(), 3);
    dst.push_back(102).unwrap();
    assert_eq!(steal.steal_into(&mut dst), None);
    assert_eq!(src.len(), 14);
}

#[test]
fn counters_wrap_around_u32() {
    let (mut local, steal) = new_at::<u32>(8, u32::MAX - 5);
    let (mut other, _) = new::<u32>(8);
    let sink = VecSink::default();
    let mut next = 0;
    let mut seen = Vec::new();
    for round in 0..50 {
        for _ in 0..(round % 11) {
            local.push_back_or_overflow(next, &sink);
            next += 1;
        }
        if round % 3 == 0 {
            seen.extend(steal.steal_into(&mut other));
            seen.extend(std::iter::from_fn(|| other.pop()));
        }
        seen.extend(local.pop());
    }
    seen.extend(std::iter::from_fn(|| local.pop()));
    seen.extend(sink.values.take());
    seen.sort_unstable();
    assert_eq!(seen, (0..next).collect::<Vec<_>>());
}

#[test]
fn dropping_the_ring_drops_what_is_left_once() {
    let token = StdArc::new(());
    let (mut local, steal) = new::<StdArc<()>>(8);
    for _ in 0..6 {
        local.push_back(token.clone()).unwrap();
    }
    drop(local.pop());
    assert_eq!(StdArc::strong_count(&token), 6);
    drop(local);
    // The stealer keeps the buffer alive.
    assert_eq!(StdArc::strong_count(&token), 6);
    drop(steal);
    assert_eq!(StdArc::strong_count(&token), 1);
}

#[test]
#[should_panic(expected = "power of two")]
fn capacity_must_be_a_power_of_two() {
    let _ = new::<u32>(100);
}

/// An owner pushes and pops millions of values (overflowing now and then) while stealers take
/// halves; every value must come out exactly once.
#[test]
fn stress_every_value_exactly_once() {
    const VALUES: usize = if cfg!(debug_assertions) {
        2_000_000
    } else {
        10_000_000
    };
    const STEALERS: usize = 3;
    let seen: StdArc<Vec<AtomicU8>> = StdArc::new((0..VALUES).map(|_| AtomicU8::new(0)).collect());
    let count = StdArc::new(AtomicUsize::new(0));
    let done = StdArc::new(AtomicBool::new(false));
    let (mut owner, steal) = new::<usize>(DEFAULT_CAPACITY);
    let sink = StdArc::new(MutexSink(Mutex::new(Vec::new())));
    let mark = {
        let seen = seen.clone();
        let count = count.clone();
        move |v: usize| {
            let before = seen[v].fetch_add(1, StdOrdering::Relaxed);
            assert_eq!(before, 0, "value {v} came out twice");
            count.fetch_add(1, StdOrdering::Relaxed);
        }
    };
    let stealers: Vec<_> = (0..STEALERS)
        .map(|_| {
            let steal = steal.clone();
            let done = done.clone();
            let mark = mark.clone();
            std::thread::spawn(move || {
                let (mut mine, _) = new::<usize>(DEFAULT_CAPACITY);
                let mut stolen = 0usize;
                while !done.load(StdOrdering::Acquire) {
                    match steal.steal_into(&mut mine) {
                        Some(v) => {
                            stolen += 1;
                            mark(v);
                            while let Some(v) = mine.pop() {
                                mark(v);
                            }
                        }
                        None => std::hint::spin_loop(),
                    }
                }
                stolen
            })
        })
        .collect();
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = 0;
    while next < VALUES {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        // Bursts of pushes (some past capacity, to overflow), then a few pops.
        let burst = (rng % 300) as usize;
        for _ in 0..burst.min(VALUES - next) {
            owner.push_back_or_overflow(next, &*sink);
            next += 1;
        }
        for _ in 0..(rng >> 32) % 200 {
            match owner.pop() {
                Some(v) => mark(v),
                None => break,
            }
        }
    }
    while let Some(v) = owner.pop() {
        mark(v);
    }
    done.store(true, StdOrdering::Release);
    let steals: usize = stealers.into_iter().map(|t| t.join().unwrap()).sum();
    for v in sink.0.lock().unwrap().drain(..) {
        mark(v);
    }
    assert_eq!(count.load(StdOrdering::Relaxed), VALUES);
    assert!(steals > 0, "no steal succeeded");
}
