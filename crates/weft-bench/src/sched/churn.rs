//! `churn` (the thesis's): N fibers and N semaphores. Each fiber picks a random semaphore,
//! releases it, then acquires it; one operation is one release + acquire pair.
//!
//! All semaphores start empty and the first half of the fibers skip their first release, so
//! the system always runs N/2 permits short: at any moment at least N/2 fibers are parked, and
//! most operations park or wake a fiber on another semaphore's wait list.
//!
//! It never deadlocks. For each semaphore s, permits(s) = waiters(s) − skips(s), where skips(s)
//! counts skipped first releases that picked s. If every fiber were parked, every semaphore
//! with waiters would have no permits, so the waiters would add up to the skips: N = N/2,
//! impossible for N ≥ 1.

use std::io;
use std::sync::Arc;

use super::harness::{self, Flags, Rng};
use super::{Measured, Setup};

/// Whether fiber `index` of `fibers` skips its first release.
fn skips_first_release(index: usize, fibers: usize) -> bool {
    index < fibers / 2
}

pub(super) fn weft(setup: &Setup) -> io::Result<Measured> {
    use weft::sync::Semaphore;
    let cluster = harness::weft_cluster(setup)?;
    let flags = Flags::new(setup.fibers);
    let n = setup.fibers;
    let sems: Arc<[Semaphore]> = (0..n).map(|_| Semaphore::new(0)).collect();
    let handles: Vec<_> = (0..n)
        .map(|index| {
            let flags = flags.clone();
            let sems = sems.clone();
            cluster.spawn(move || {
                let mut rng = Rng::new(index as u64);
                let mut skip = skips_first_release(index, n);
                flags.wait_start_weft();
                let mut ops = 0u64;
                while !flags.stopped() {
                    let sem = &sems[rng.below(n)];
                    if !skip {
                        sem.release();
                    }
                    skip = false;
                    if sem.acquire().is_err() || flags.stopped() {
                        break;
                    }
                    ops += 1;
                }
                ops
            })
        })
        .collect();
    let seconds = flags.run_for(setup.params.duration, || {});
    // Let every parked fiber through so it can see the stop flag.
    for sem in sems.iter() {
        sem.add_permits(n);
    }
    let ops = harness::sum_weft(handles)?;
    cluster.shutdown();
    Ok(Measured {
        ops,
        seconds,
        ..Measured::default()
    })
}

pub(super) fn tokio(setup: &Setup) -> io::Result<Measured> {
    use tokio::sync::Semaphore;
    let rt = harness::tokio_runtime(setup)?;
    let flags = Flags::new(setup.fibers);
    let n = setup.fibers;
    let sems: Arc<[Semaphore]> = (0..n).map(|_| Semaphore::new(0)).collect();
    let handles: Vec<_> = (0..n)
        .map(|index| {
            let flags = flags.clone();
            let sems = sems.clone();
            rt.spawn(async move {
                let mut rng = Rng::new(index as u64);
                let mut skip = skips_first_release(index, n);
                flags.wait_start_tokio().await;
                let mut ops = 0u64;
                while !flags.stopped() {
                    let sem = &sems[rng.below(n)];
                    if !skip {
                        sem.add_permits(1);
                    }
                    skip = false;
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
    let seconds = flags.run_for(setup.params.duration, || {});
    // Let every parked fiber through so it can see the stop flag.
    for sem in sems.iter() {
        sem.add_permits(n);
    }
    let ops = harness::sum_tokio(&rt, handles)?;
    Ok(Measured {
        ops,
        seconds,
        ..Measured::default()
    })
}
