//! `churn` (the thesis's): N fibers and N semaphores. Each fiber picks a random semaphore,
//! releases it, then acquires it; one operation is one release + acquire pair.
//!
//! All semaphores start empty, and the first half of the fibers begin with an acquire that
//! has no release before it (on a random semaphore, before the clock starts). So the system
//! always runs N/2 permits short: at least N/2 fibers are between a release and the end of
//! their acquire at any moment, and a release that lands on a semaphore with a waiter hands
//! the permit over and parks the releaser. The deficit is in place before the others start:
//! a fiber that never met a waiter would never switch out, and on a cooperative runtime it
//! would then run alone, measuring an uncontended semaphore instead of churn.
//!
//! It never deadlocks. For each semaphore s, permits(s) = in_progress(s) − skips(s), where
//! in_progress(s) counts fibers between their release of s (or the skipped one) and the end of
//! their acquire of s, and skips(s) the skipped releases that picked s. If every fiber were
//! parked, in_progress would be the waiters, every semaphore with waiters would have no
//! permits, and so the N waiters would add up to the N/2 skips: impossible for N ≥ 1.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::harness::{self, Flags, Rng};
use super::{Measured, Setup};

/// How many fibers start with an unmatched acquire (the deficit).
fn deficit(fibers: usize) -> usize {
    fibers / 2
}

pub(super) fn weft(setup: &Setup) -> io::Result<Measured> {
    use weft::sync::Semaphore;
    let cluster = harness::weft_cluster(setup)?;
    let n = setup.fibers;
    let short = deficit(n);
    let flags = Flags::new(n - short);
    let at_deficit = Arc::new(AtomicUsize::new(0));
    let sems: Arc<[Semaphore]> = (0..n).map(|_| Semaphore::new(0)).collect();
    let handles: Vec<_> = (0..n)
        .map(|index| {
            let flags = flags.clone();
            let sems = sems.clone();
            let at_deficit = at_deficit.clone();
            super::harness::spawn_fiber(setup, &cluster, move || {
                let mut rng = Rng::new(index as u64);
                if index < short {
                    let sem = &sems[rng.below(n)];
                    at_deficit.fetch_add(1, Ordering::Release);
                    if sem.acquire().is_err() {
                        return 0;
                    }
                } else {
                    flags.wait_start_weft();
                }
                let mut ops = 0u64;
                while !flags.stopped() {
                    let sem = &sems[rng.below(n)];
                    sem.release();
                    if sem.acquire().is_err() || flags.stopped() {
                        break;
                    }
                    ops += 1;
                }
                ops
            })
        })
        .collect();
    harness::wait_for_count(&at_deficit, short)?;
    let seconds = flags.run_for(setup.params.duration, || {});
    // Let every parked fiber through so it can see the stop flag.
    for sem in sems.iter() {
        sem.add_permits(n);
    }
    let ops = harness::sum_weft(handles)?;
    cluster.shutdown();
    Ok(Measured::throughput(ops, seconds))
}

pub(super) fn tokio(setup: &Setup) -> io::Result<Measured> {
    use tokio::sync::Semaphore;
    let rt = harness::tokio_runtime(setup)?;
    let n = setup.fibers;
    let short = deficit(n);
    let flags = Flags::new(n - short);
    let at_deficit = Arc::new(AtomicUsize::new(0));
    let sems: Arc<[Semaphore]> = (0..n).map(|_| Semaphore::new(0)).collect();
    let handles: Vec<_> = (0..n)
        .map(|index| {
            let flags = flags.clone();
            let sems = sems.clone();
            let at_deficit = at_deficit.clone();
            rt.spawn(async move {
                let mut rng = Rng::new(index as u64);
                if index < short {
                    let sem = &sems[rng.below(n)];
                    at_deficit.fetch_add(1, Ordering::Release);
                    match sem.acquire().await {
                        Ok(permit) => permit.forget(),
                        Err(_) => return 0,
                    }
                } else {
                    flags.wait_start_tokio().await;
                }
                let mut ops = 0u64;
                while !flags.stopped() {
                    let sem = &sems[rng.below(n)];
                    sem.add_permits(1);
                    match sem.acquire().await {
                        Ok(permit) => permit.forget(),
                        Err(_) => break,
                    }
                    if flags.stopped() {
                        break;
                    }
                    ops += 1;
                }
                ops
            })
        })
        .collect();
    harness::wait_for_count(&at_deficit, short)?;
    let seconds = flags.run_for(setup.params.duration, || {});
    // Let every parked fiber through so it can see the stop flag.
    for sem in sems.iter() {
        sem.add_permits(n);
    }
    let ops = harness::sum_tokio(&rt, handles)?;
    Ok(Measured::throughput(ops, seconds))
}
