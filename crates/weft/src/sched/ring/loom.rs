//! Model checks of the ring under loom: every interleaving (up to a preemption bound) of the
//! owner and one or two stealers keeps each value exactly once.
//!
//! Run: `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=/work/target-loom cargo test -p weft --release
//! --lib ring::loom`. The rings have 4 slots so overflow and wrap-around are reachable in a few
//! steps; the preemption bound keeps the whole file to well under two minutes.

use std::cell::RefCell;

use ::loom::thread;

use super::{new, Local, Overflow};

/// Preemptions loom explores per execution: 3 covers every bug seen in tokio's equivalent tests.
const PREEMPTION_BOUND: usize = 3;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = ::loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(PREEMPTION_BOUND);
    }
    builder.check(f);
}

/// The owner's overflow sink (only the owner touches it, so a `RefCell` is enough).
#[derive(Default)]
struct Sink(RefCell<Vec<u32>>);

impl Overflow<u32> for Sink {
    fn push(&self, value: u32) {
        self.0.borrow_mut().push(value);
    }
    fn push_batch(&self, values: impl Iterator<Item = u32>) {
        self.0.borrow_mut().extend(values);
    }
}

/// A stealer thread's whole take: `rounds` steals into its own ring, drained each time.
fn steal_rounds(steal: super::Steal<u32>, rounds: usize) -> Vec<u32> {
    let (mut mine, _) = new::<u32>(4);
    let mut got = Vec::new();
    for _ in 0..rounds {
        if let Some(v) = steal.steal_into(&mut mine) {
            got.push(v);
        }
        drain(&mut mine, &mut got);
    }
    got
}

fn drain(local: &mut Local<u32>, into: &mut Vec<u32>) {
    while let Some(v) = local.pop() {
        into.push(v);
    }
}

fn assert_exactly(mut got: Vec<u32>, n: u32) {
    got.sort_unstable();
    assert_eq!(got, (0..n).collect::<Vec<_>>());
}

/// Owner pushes and pops while one stealer steals.
#[test]
fn push_pop_vs_steal() {
    model(|| {
        let (mut local, steal) = new::<u32>(4);
        let th = thread::spawn(move || steal_rounds(steal, 1));
        let sink = Sink::default();
        let mut got = Vec::new();
        local.push_back_or_overflow(0, &sink);
        local.push_back_or_overflow(1, &sink);
        got.extend(local.pop());
        local.push_back_or_overflow(2, &sink);
        drain(&mut local, &mut got);
        got.extend(th.join().unwrap());
        got.extend(sink.0.take());
        assert_exactly(got, 3);
    });
}

/// The owner overflows (both the half-batch path and the mid-steal path) while a stealer
/// steals.
#[test]
fn overflow_vs_steal() {
    model(|| {
        let (mut local, steal) = new::<u32>(4);
        let sink = Sink::default();
        for v in 0..4 {
            local.push_back_or_overflow(v, &sink);
        }
        let th = thread::spawn(move || steal_rounds(steal, 1));
        local.push_back_or_overflow(4, &sink);
        local.push_back_or_overflow(5, &sink);
        let mut got = Vec::new();
        got.extend(local.pop());
        got.extend(th.join().unwrap());
        drain(&mut local, &mut got);
        got.extend(sink.0.take());
        assert_exactly(got, 6);
    });
}

/// Two stealers race each other and the owner's pops.
#[test]
fn two_stealers() {
    model(|| {
        let (mut local, steal) = new::<u32>(4);
        for v in 0..4 {
            local.push_back(v).unwrap();
        }
        let a = {
            let steal = steal.clone();
            thread::spawn(move || steal_rounds(steal, 1))
        };
        let b = thread::spawn(move || steal_rounds(steal, 1));
        let mut got = Vec::new();
        got.extend(local.pop());
        got.extend(a.join().unwrap());
        got.extend(b.join().unwrap());
        drain(&mut local, &mut got);
        assert_exactly(got, 4);
    });
}

/// A stealer steals from a ring whose values were themselves just stolen (the values cross two
/// rings, so the release/acquire chain through both tails is checked).
#[test]
fn chained_steal() {
    model(|| {
        let (mut a, a_steal) = new::<u32>(4);
        let (mut b, b_steal) = new::<u32>(4);
        for v in 0..4 {
            a.push_back(v).unwrap();
        }
        let th = thread::spawn(move || steal_rounds(b_steal, 1));
        let mut got = Vec::new();
        got.extend(a_steal.steal_into(&mut b));
        got.extend(b.pop());
        got.extend(th.join().unwrap());
        drain(&mut a, &mut got);
        drain(&mut b, &mut got);
        assert_exactly(got, 4);
    });
}
