//! Model checks of the ring under loom: every interleaving of the owner and one or two stealers
//! keeps each value exactly once, and no slot is read while it is written.
//!
//! Run: `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=/work/target-loom cargo test -p weft --release
//! --lib ring::loom`. The rings have 4 slots so overflow and wrap-around are reachable in a few
//! steps. The small models are explored exhaustively, the two larger ones with a preemption bound
//! (see `model_bounded`); the file runs in well under two minutes. `LOOM_MAX_PREEMPTIONS`
//! overrides the bound (0 stays 0: set a large number for exhaustive runs, about six minutes).

use std::cell::RefCell;

use ::loom::thread;

use super::{new, Local, Overflow};

/// Explores every interleaving (or as many as `LOOM_MAX_PREEMPTIONS` allows).
fn model(f: impl Fn() + Sync + Send + 'static) {
    ::loom::model::Builder::new().check(f);
}

/// For the larger models: at most `preemptions` forced switches per execution, unless
/// `LOOM_MAX_PREEMPTIONS` says otherwise. Five reaches every protocol step against every other
/// (tokio runs its equivalent tests with three) and keeps these to seconds instead of the
/// minutes an exhaustive run takes.
fn model_bounded(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = ::loom::model::Builder::new();
    builder.preemption_bound = builder.preemption_bound.or(Some(preemptions));
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
    model_bounded(5, || {
        let (mut local, steal) = new::<u32>(4);
        let th = thread::spawn(move || steal_rounds(steal, 2));
        let sink = Sink::default();
        let mut got = Vec::new();
        local.push_back_or_overflow(0, &sink);
        local.push_back_or_overflow(1, &sink);
        got.extend(local.pop());
        local.push_back_or_overflow(2, &sink);
        local.push_back_or_overflow(3, &sink);
        got.extend(local.pop());
        drain(&mut local, &mut got);
        got.extend(th.join().unwrap());
        got.extend(sink.0.take());
        assert_exactly(got, 4);
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
        let th = thread::spawn(move || steal_rounds(steal, 2));
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

/// Two stealers race each other and the owner's pop and push (which may overflow).
#[test]
fn two_stealers() {
    model_bounded(5, || {
        let (mut local, steal) = new::<u32>(4);
        for v in 0..4 {
            local.push_back(v).unwrap();
        }
        let a = {
            let steal = steal.clone();
            thread::spawn(move || steal_rounds(steal, 1))
        };
        let b = thread::spawn(move || steal_rounds(steal, 1));
        let sink = Sink::default();
        let mut got = Vec::new();
        got.extend(local.pop());
        local.push_back_or_overflow(4, &sink);
        got.extend(sink.0.take());
        got.extend(a.join().unwrap());
        got.extend(b.join().unwrap());
        drain(&mut local, &mut got);
        assert_exactly(got, 5);
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
