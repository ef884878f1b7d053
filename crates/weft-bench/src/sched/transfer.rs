//! `transfer`: a leader bumps a shared epoch and waits until every fiber has seen it, then
//! hands the leader role to another fiber chosen at random. One operation is one epoch.
//!
//! Fibers that are not leading poll the epoch and yield between looks; the leader yields
//! between scans of who has not seen its epoch yet. So each epoch needs every fiber to be
//! scheduled at least once: this measures how quickly the scheduler gets *all* runnable fibers
//! through a processor, not just the hot ones (a scheduler that starves a fiber stalls it).

use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use super::harness::{self, Flags, Padded, Rng};
use super::{Measured, Setup};

/// State all fibers share.
struct Shared {
    /// The current epoch; only the leader writes it.
    epoch: Padded<AtomicU64>,
    /// The index of the leading fiber.
    leader: Padded<AtomicUsize>,
    /// The last epoch each fiber has seen, one cache line each (each is written by its owner
    /// and read by the leader).
    seen: Box<[Padded<AtomicU64>]>,
}

/// One fiber's side of the protocol, written once for both runtimes: `advance` never blocks,
/// the caller yields between calls in its runtime's way.
struct Worker {
    me: usize,
    shared: Arc<Shared>,
    flags: Arc<Flags>,
    rng: Rng,
    /// While leading: the epoch announced and the first fiber not yet known to have seen it.
    leading: Option<(u64, usize)>,
    /// Epochs this fiber led to completion.
    ops: u64,
}

impl Worker {
    fn new(me: usize, shared: Arc<Shared>, flags: Arc<Flags>) -> Worker {
        Worker {
            me,
            shared,
            flags,
            rng: Rng::new(me as u64),
            leading: None,
            ops: 0,
        }
    }

    /// Does what can be done without waiting; returns `false` once the run is over.
    fn advance(&mut self) -> bool {
        if self.flags.stopped() {
            return false;
        }
        let shared = &*self.shared;
        let n = shared.seen.len();
        if let Some((epoch, mut next)) = self.leading {
            while next < n {
                if next != self.me && shared.seen[next].0.load(Ordering::Acquire) < epoch {
                    self.leading = Some((epoch, next));
                    return true;
                }
                next += 1;
            }
            // Everyone has seen `epoch`: pass the role on.
            self.ops += 1;
            self.leading = None;
            let successor = if n > 1 {
                (self.me + 1 + self.rng.below(n - 1)) % n
            } else {
                self.me
            };
            shared.leader.0.store(successor, Ordering::Release);
            return true;
        }
        if shared.leader.0.load(Ordering::Acquire) == self.me {
            // The previous leader saw every fiber reach the current epoch: start the next.
            let epoch = shared.epoch.0.load(Ordering::Relaxed) + 1;
            shared.seen[self.me].0.store(epoch, Ordering::Relaxed);
            shared.epoch.0.store(epoch, Ordering::Release);
            self.leading = Some((epoch, 0));
            return true;
        }
        let epoch = shared.epoch.0.load(Ordering::Acquire);
        let mine = &shared.seen[self.me].0;
        if epoch > mine.load(Ordering::Relaxed) {
            mine.store(epoch, Ordering::Release);
        }
        true
    }
}

fn shared(fibers: usize) -> Arc<Shared> {
    Arc::new(Shared {
        epoch: Padded(AtomicU64::new(0)),
        leader: Padded(AtomicUsize::new(0)),
        seen: (0..fibers).map(|_| Padded(AtomicU64::new(0))).collect(),
    })
}

pub(super) fn weft(setup: &Setup) -> io::Result<Measured> {
    let cluster = harness::weft_cluster(setup)?;
    let flags = Flags::new(setup.fibers);
    let shared = shared(setup.fibers);
    let handles: Vec<_> = (0..setup.fibers)
        .map(|me| {
            let mut worker = Worker::new(me, shared.clone(), flags.clone());
            super::harness::spawn_fiber(setup, &cluster, move || {
                worker.flags.wait_start_weft();
                while worker.advance() {
                    weft::yield_now();
                }
                worker.ops
            })
        })
        .collect();
    let seconds = flags.run_for(setup.params.duration, || {});
    let ops = harness::sum_weft(handles)?;
    cluster.shutdown();
    Ok(Measured::throughput(ops, seconds))
}

pub(super) fn tokio(setup: &Setup) -> io::Result<Measured> {
    let rt = harness::tokio_runtime(setup)?;
    let flags = Flags::new(setup.fibers);
    let shared = shared(setup.fibers);
    let handles: Vec<_> = (0..setup.fibers)
        .map(|me| {
            let mut worker = Worker::new(me, shared.clone(), flags.clone());
            rt.spawn(async move {
                worker.flags.wait_start_tokio().await;
                while worker.advance() {
                    tokio::task::yield_now().await;
                }
                worker.ops
            })
        })
        .collect();
    let seconds = flags.run_for(setup.params.duration, || {});
    let ops = harness::sum_tokio(&rt, handles)?;
    Ok(Measured::throughput(ops, seconds))
}
