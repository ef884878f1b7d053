//! `yield`: every fiber loops on `yield_now`. One operation is one yield.
//!
//! With many fibers per processor this measures the cost of going through the scheduler's
//! yield path (weft: the cluster's global yield queue; tokio: the worker's deferred-task list);
//! with one fiber per processor each processor mostly finds its own fiber again.

use std::io;

use super::harness::{self, Flags};
use super::{Measured, Setup};

pub(super) fn weft(setup: &Setup) -> io::Result<Measured> {
    let cluster = harness::weft_cluster(setup)?;
    let flags = Flags::new(setup.fibers);
    let handles: Vec<_> = (0..setup.fibers)
        .map(|_| {
            let flags = flags.clone();
            super::harness::spawn_fiber(setup, &cluster, move || {
                flags.wait_start_weft();
                let mut ops = 0u64;
                while !flags.stopped() {
                    weft::yield_now();
                    ops += 1;
                }
                ops
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
    let handles: Vec<_> = (0..setup.fibers)
        .map(|_| {
            let flags = flags.clone();
            rt.spawn(async move {
                flags.wait_start_tokio().await;
                let mut ops = 0u64;
                while !flags.stopped() {
                    tokio::task::yield_now().await;
                    ops += 1;
                }
                ops
            })
        })
        .collect();
    let seconds = flags.run_for(setup.params.duration, || {});
    let ops = harness::sum_tokio(&rt, handles)?;
    Ok(Measured::throughput(ops, seconds))
}
