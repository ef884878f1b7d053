//! `cycle` and `locality-*`: rings of fibers passing one token around.
//!
//! Each fiber waits on its own semaphore (tokio: its own `Notify`), then releases the next
//! fiber's; each ring carries one token, so one fiber per ring is runnable at a time and every
//! hand-off is a park and a wake-up. One operation is one hand-off.
//!
//! The payload is what a hand-off carries ([`Payload`]): nothing (`cycle`), a 4 KiB block
//! shared by the ring that each receiver writes (`locality-shared`: the block follows the
//! token, so a scheduler that moves the receiver to another processor pays cache misses), or
//! the same writes on a block each fiber owns (`locality-noshare`: the same work, no data
//! moving with the token).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::harness::{self, Flags, Padded};
use super::{Measured, Setup, LOCALITY_BLOCK_BYTES};

/// What a hand-off carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Payload {
    /// Nothing: `cycle`.
    None,
    /// One block per ring, written by whoever holds the token: `locality-shared`.
    Shared,
    /// One block per fiber, written by its owner on each hand-off: `locality-noshare`.
    Private,
}

/// The block a fiber writes on each hand-off, if any.
type Block = Option<Arc<[AtomicU64]>>;

fn new_block() -> Arc<[AtomicU64]> {
    (0..LOCALITY_BLOCK_BYTES / 8)
        .map(|_| AtomicU64::new(0))
        .collect()
}

/// Reads and writes every word of `block`: relaxed atomics compile to plain loads and stores,
/// and the compiler may not drop them.
#[inline]
fn write_block(block: &Block) {
    if let Some(block) = block {
        for word in block.iter() {
            word.store(
                word.load(Ordering::Relaxed).wrapping_add(1),
                Ordering::Relaxed,
            );
        }
    }
}

/// How the fibers are arranged: `rings` rings of `size` fibers.
fn layout(setup: &Setup) -> (usize, usize) {
    let size = setup.params.ring_size.min(setup.fibers).max(1);
    (setup.fibers / size, size)
}

/// The blocks of one ring, one per member, following `payload`.
fn ring_blocks(payload: Payload, size: usize) -> Vec<Block> {
    match payload {
        Payload::None => vec![None; size],
        Payload::Shared => vec![Some(new_block()); size],
        Payload::Private => (0..size).map(|_| Some(new_block())).collect(),
    }
}

pub(super) fn weft(setup: &Setup, payload: Payload) -> io::Result<Measured> {
    use weft::sync::Semaphore;
    let cluster = harness::weft_cluster(setup)?;
    let flags = Flags::new(0);
    let (rings, size) = layout(setup);
    let mut firsts = Vec::with_capacity(rings);
    let mut handles = Vec::with_capacity(rings * size);
    for ring in 0..rings {
        let processor = setup
            .params
            .place_rings
            .then_some(ring * setup.processors.max(1) / rings);
        // Each member's wait object alone on its pair of cache lines, for both runtimes: the
        // allocator would otherwise put members of rings on different processors side by side.
        let sems: Vec<_> = (0..size)
            .map(|_| Arc::new(Padded(Semaphore::new(0))))
            .collect();
        firsts.push(sems[0].clone());
        for (i, block) in ring_blocks(payload, size).into_iter().enumerate() {
            let mine = sems[i].clone();
            let next = sems[(i + 1) % size].clone();
            let flags = flags.clone();
            handles.push(harness::spawn_fiber_on(
                setup,
                &cluster,
                processor,
                move || {
                    let mut ops = 0u64;
                    while mine.0.acquire().is_ok() {
                        if flags.stopped() {
                            // Pass the token on so the rest of the ring wakes up and sees the flag.
                            next.0.release();
                            break;
                        }
                        write_block(&block);
                        ops += 1;
                        next.0.release();
                    }
                    ops
                },
            ));
        }
    }
    let seconds = flags.run_for(setup.params.duration, || {
        for first in &firsts {
            first.0.release();
        }
    });
    let ops = harness::sum_weft(handles)?;
    cluster.shutdown();
    Ok(Measured::throughput(ops, seconds))
}

pub(super) fn tokio(setup: &Setup, payload: Payload) -> io::Result<Measured> {
    // `Notify` is tokio's wake-the-next-one primitive: `notify_one` with nobody waiting stores
    // the single permit a ring's one token needs. It measured faster than a `Semaphore` here.
    use tokio::sync::Notify;
    let rt = harness::tokio_runtime(setup)?;
    let flags = Flags::new(0);
    let (rings, size) = layout(setup);
    let mut firsts = Vec::with_capacity(rings);
    let mut handles = Vec::with_capacity(rings * size);
    for _ in 0..rings {
        let notifies: Vec<_> = (0..size).map(|_| Arc::new(Padded(Notify::new()))).collect();
        firsts.push(notifies[0].clone());
        for (i, block) in ring_blocks(payload, size).into_iter().enumerate() {
            let mine = notifies[i].clone();
            let next = notifies[(i + 1) % size].clone();
            let flags = flags.clone();
            handles.push(rt.spawn(async move {
                let mut ops = 0u64;
                loop {
                    mine.0.notified().await;
                    if flags.stopped() {
                        // Pass the token on so the rest of the ring wakes up and sees the flag.
                        next.0.notify_one();
                        break;
                    }
                    write_block(&block);
                    ops += 1;
                    next.0.notify_one();
                }
                ops
            }));
        }
    }
    let seconds = flags.run_for(setup.params.duration, || {
        for first in &firsts {
            first.0.notify_one();
        }
    });
    let ops = harness::sum_tokio(&rt, handles)?;
    Ok(Measured::throughput(ops, seconds))
}
