//! `switch`: two fibers on a one-processor cluster alternate through `yield_now`; one operation
//! is one fiber-to-fiber switch (fiber → processor loop → the other fiber). The loop is the
//! `yield` benchmark's, on one processor with two fibers.
//!
//! On weft it also reports `switch-raw`, a bare corosensei resume + suspend round trip on the
//! calling thread (two stack switches, no scheduler): the floor under the fiber number.

use std::io;
use std::time::Instant;

use corosensei::Coroutine;

use super::{yielding, Measured, Setup};
use crate::Record;

/// Round trips between two looks at the clock in `switch-raw`.
const RAW_BATCH: u64 = 4096;

pub(super) fn weft(setup: &Setup) -> io::Result<Measured> {
    let mut measured = yielding::weft(setup)?;
    measured.extra.push(raw_corosensei(setup));
    Ok(measured)
}

pub(super) fn tokio(setup: &Setup) -> io::Result<Measured> {
    yielding::tokio(setup)
}

/// Resumes a coroutine that suspends at once, for the run's duration.
fn raw_corosensei(setup: &Setup) -> Record {
    let mut co = Coroutine::new(|yielder, ()| loop {
        yielder.suspend(());
    });
    let duration = setup.params.duration;
    let start = Instant::now();
    let mut ops = 0u64;
    let seconds = loop {
        for _ in 0..RAW_BATCH {
            co.resume(());
        }
        ops += RAW_BATCH;
        let elapsed = start.elapsed();
        if elapsed >= duration {
            break elapsed.as_secs_f64();
        }
    };
    let mut r = Record::new("switch-raw", ops, seconds);
    r.fibers = 1;
    r.note = Some("corosensei resume+suspend round trip (two stack switches)".to_owned());
    r
}
