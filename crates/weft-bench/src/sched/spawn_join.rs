//! `spawn-join`: a fiber spawns an empty fiber and joins it, in a loop. One operation is one
//! spawn + join. On tokio: `tokio::spawn(async {}).await` from a task.
//!
//! With `--fibers N`, N spawning fibers run this loop at once.

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
                    if weft::spawn(|| ()).join().is_err() {
                        break;
                    }
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
                    if tokio::spawn(async {}).await.is_err() {
                        break;
                    }
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
