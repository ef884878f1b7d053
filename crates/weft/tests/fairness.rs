//! Bounded unfairness, under every policy in `weft::sched::POLICIES`: a runnable fiber waits at
//! most `rounds_bound(L)` scheduling rounds of its processor before it runs, where `L` is the
//! number of fibers that could be queued there (`weft::sched` states the bound). Counts, not
//! times: the cluster's scheduling statistics count each task's wait in its processor's rounds.
//!
//! The load is the adversary of LIFO orders: hundreds of fiber pairs ping-pong through
//! semaphores, so every wake-up is the newest task on its processor. A pure LIFO order lets one
//! pair run to the end while every other pair waits (tens of thousands of rounds here).

use std::sync::Arc;

use weft::sync::Semaphore;
use weft::Cluster;

/// Fiber pairs; every fiber of the test can be queued at once, so L <= 2 * PAIRS + 1.
const PAIRS: usize = 200;
/// Hand-offs each pair makes.
const ROUNDS: usize = 100;

fn ping_pong_pairs(cluster: &Cluster) {
    let done = cluster.spawn(|| {
        let mut fibers = Vec::with_capacity(2 * PAIRS);
        for _ in 0..PAIRS {
            let a = Arc::new(Semaphore::new(0));
            let b = Arc::new(Semaphore::new(0));
            let (a2, b2) = (a.clone(), b.clone());
            fibers.push(weft::spawn(move || {
                for _ in 0..ROUNDS {
                    b2.release();
                    a2.acquire().unwrap();
                }
            }));
            fibers.push(weft::spawn(move || {
                for _ in 0..ROUNDS {
                    b.acquire().unwrap();
                    a.release();
                }
            }));
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
