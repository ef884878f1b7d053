//! Bounded unfairness, under every policy in `weft::sched::POLICIES`: a runnable fiber waits at
//! most `rounds_bound(L)` scheduling rounds of its processor before it runs, where `L` is the
//! number of fibers that could be queued there (`weft::sched` states the bound). Counts, not
//! times: the cluster's scheduling statistics count each task's wait in its processor's rounds.
//!
//! The load is the adversary of LIFO orders: hundreds of fiber pairs ping-pong through
//! semaphores, so every wake-up is the newest task on its processor. A pure LIFO order lets one
//! pair run to the end while every other pair waits (tens of thousands of rounds here).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use weft::sync::Semaphore;
use weft::Cluster;

/// Fiber pairs; every fiber of the test can be queued at once, so L <= 2 * PAIRS + 1.
const PAIRS: usize = 200;
/// Hand-offs each pair makes.
const ROUNDS: usize = 100;

fn ping_pong_pairs(cluster: &Cluster) {
    ping_pong(cluster, PAIRS, false);
}

/// `pairs` fiber pairs hand off [`ROUNDS`] times each; `migratable` fibers are woken into the
/// policy's queues rather than their home processor's.
fn ping_pong(cluster: &Cluster, pairs: usize, migratable: bool) {
    let spawn = move |body: Box<dyn FnOnce() + Send>| {
        let builder = weft::Builder::new();
        let builder = if migratable {
            // SAFETY: the bodies hold nothing thread-bound across their waits, only two `Arc`s
            // of fiber semaphores.
            unsafe { builder.migratable() }
        } else {
            builder
        };
        builder.spawn(body).unwrap()
    };
    let done = cluster.spawn(move || {
        let mut fibers = Vec::with_capacity(2 * pairs);
        for _ in 0..pairs {
            let a = Arc::new(Semaphore::new(0));
            let b = Arc::new(Semaphore::new(0));
            let (a2, b2) = (a.clone(), b.clone());
            fibers.push(spawn(Box::new(move || {
                for _ in 0..ROUNDS {
                    b2.release();
                    a2.acquire().unwrap();
                }
            })));
            fibers.push(spawn(Box::new(move || {
                for _ in 0..ROUNDS {
                    b.acquire().unwrap();
                    a.release();
                }
            })));
        }
        for f in fibers {
            f.join().unwrap();
        }
    });
    done.join().unwrap();
}

#[test]
fn no_runnable_fiber_waits_more_than_the_stated_bound_under_any_policy() {
    let queued_max = 2 * PAIRS as u64 + 1;
    let bound = weft::sched::wait_rounds_bound(queued_max);
    let mut failures = Vec::new();
    for policy in weft::sched::POLICIES {
        for processors in [1, 2] {
            let cluster = Cluster::builder()
                .name(format!("fair-{}-{processors}", policy.name))
                .processors(processors)
                .scheduler(policy.name)
                .sched_stats(true)
                .build()
                .unwrap();
            ping_pong_pairs(&cluster);
            let stats = cluster.sched_stats().expect("statistics were asked for");
            cluster.shutdown();
            let max = stats.wait_rounds.max();
            println!(
                "{} x{processors}: {} waits counted, max {max} rounds (bound {bound})",
                policy.name,
                stats.wait_rounds.count()
            );
            // Every task's wait is counted in ns; in rounds only where the processor that
            // queued it ran it (with two, a shared queue hands many to the other).
            assert!(
                stats.wait_ns.count() > (PAIRS * ROUNDS) as u64 && stats.wait_rounds.count() > 0,
                "{} x{processors}: the waits were not counted",
                policy.name
            );
            if max > bound {
                failures.push(format!("{} x{processors}: {max} rounds", policy.name));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "runnable fibers waited longer than {bound} rounds (L = {queued_max}): {failures:?}"
    );
}

/// Pairs of the overflow test: with one of each pair runnable, more tasks wait at once than a
/// processor's ring holds (256), so a ring overflows into its shared queue again and again.
const OVERFLOW_PAIRS: usize = 600;

/// The policies whose own order is FIFO rings that overflow into a shared queue (the LIFO
/// slot of `work-stealing` aside).
const OVERFLOWING_POLICIES: [&str; 5] = [
    "work-stealing",
    "ws-overflow-locked",
    "ws-overflow-lockfree",
    "ws-overflow-sharded",
    "ws-nearest",
];

/// A full ring moves its oldest half to the shared queue; those tasks must still run before
/// the newer ones left in the ring. Migratable fibers, since only they are woken into the
/// policy's queues (a started fiber is otherwise bound to its home queue). FIFO order waits
/// about one round per queued task, two with the LIFO slot's runs; the bound is twice that.
#[test]
fn an_overflowing_ring_still_serves_its_oldest_tasks_first() {
    let queued_max = 2 * OVERFLOW_PAIRS as u64 + 1;
    let bound = 4 * queued_max + 64;
    let mut failures = Vec::new();
    for name in OVERFLOWING_POLICIES {
        let cluster = Cluster::builder()
            .name(format!("overflow-{name}"))
            .processors(1)
            .scheduler(name)
            .sched_stats(true)
            .build()
            .unwrap();
        ping_pong(&cluster, OVERFLOW_PAIRS, true);
        let stats = cluster.sched_stats().expect("statistics were asked for");
        cluster.shutdown();
        let max = stats.wait_rounds.max();
        println!(
            "{name} x1, migratable: {} waits counted, max {max} rounds (bound {bound})",
            stats.wait_rounds.count()
        );
        if max > bound {
            failures.push(format!("{name}: {max} rounds"));
        }
    }
    assert!(
        failures.is_empty(),
        "overflowed tasks waited longer than {bound} rounds (L = {queued_max}): {failures:?}"
    );
}

/// Fibers of the yield test: more than a processor's yield lane holds (256).
const YIELDERS: usize = 600;
/// Yields each of them makes.
const YIELDS: u32 = 40;

/// Migratable fibers that yield again and again keep their processor's yield lane full (a
/// started fiber that is not migratable yields into its home queue instead); the ones the lane
/// spilled into the shared overflow are older than the lane's and must keep their turns: with
/// FIFO turns every fiber is within a few yields of the others when the first finishes (37
/// of 40 here; before, the spilled ones had not yielded once).
#[test]
fn yielders_a_full_lane_spilled_keep_their_turns() {
    let cluster = Cluster::builder()
        .name("yield-lane")
        .processors(1)
        .build()
        .unwrap();
    let progress: Arc<Vec<AtomicU32>> =
        Arc::new((0..YIELDERS).map(|_| AtomicU32::new(0)).collect());
    let least_at_first_finish = Arc::new(AtomicU32::new(u32::MAX));
    let done = {
        let progress = progress.clone();
        let least = least_at_first_finish.clone();
        cluster.spawn(move || {
            let fibers: Vec<_> = (0..YIELDERS)
                .map(|i| {
                    let progress = progress.clone();
                    let least = least.clone();
                    // SAFETY: the body holds only `Arc`s of atomics across its yields.
                    let builder = unsafe { weft::Builder::new().migratable() };
                    builder
                        .spawn(move || {
                            for _ in 0..YIELDS {
                                weft::yield_now();
                                progress[i].fetch_add(1, Ordering::Relaxed);
                            }
                            let slowest = progress
                                .iter()
                                .map(|p| p.load(Ordering::Relaxed))
                                .min()
                                .unwrap_or(0);
                            let _ = least.compare_exchange(
                                u32::MAX,
                                slowest,
                                Ordering::Relaxed,
                                Ordering::Relaxed,
                            );
                        })
                        .unwrap()
                })
                .collect();
            for f in fibers {
                f.join().unwrap();
            }
        })
    };
    done.join().unwrap();
    cluster.shutdown();
    let least = least_at_first_finish.load(Ordering::Relaxed);
    println!("the slowest fiber had yielded {least} of {YIELDS} times when the first finished");
    assert!(
        least + 5 >= YIELDS,
        "a fiber had yielded only {least} of {YIELDS} times when the first finished"
    );
}
