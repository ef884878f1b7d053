//! Behaviour every scheduling policy must have, run against every entry of
//! `weft::sched::POLICIES` (so a new policy is covered by adding it to the registry) with 1, 2
//! and 4 processors.
//!
//! Every wait is bounded: a policy that loses or starves a fiber fails with the policy's name
//! and the processor count instead of hanging the test run.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use weft::{Cluster, JoinError, JoinHandle};

const PROCESSOR_COUNTS: [usize; 3] = [1, 2, 4];

/// How long any one scenario may take before it counts as lost or starved work. Generous: two
/// cores, debug build, other tests running at once.
const LIMIT: Duration = Duration::from_secs(20);

/// Runs `scenario` on a fresh cluster for every policy and processor count.
fn for_each_config(test: &str, scenario: impl Fn(&Cluster, &str)) {
    for policy in weft::sched::POLICIES {
        for processors in PROCESSOR_COUNTS {
            let ctx = format!("{test} [{} x{processors}]", policy.name);
            let cluster = Cluster::builder()
                .name(format!("{}-{processors}", policy.name))
                .processors(processors)
                .scheduler(policy.name)
                .build()
                .unwrap_or_else(|e| panic!("{ctx}: cannot build the cluster: {e}"));
            assert_eq!(cluster.scheduler(), policy.name, "{ctx}");
            let started = Instant::now();
            scenario(&cluster, &ctx);
            cluster.shutdown();
            eprintln!("{ctx}: {:?}", started.elapsed());
        }
    }
}

/// Joins from a plain thread, failing (not hanging) if the fiber does not finish in time.
fn join_within<T>(handle: JoinHandle<T>, ctx: &str) -> Result<T, JoinError> {
    let deadline = Instant::now() + LIMIT;
    while !handle.is_finished() {
        assert!(
            Instant::now() < deadline,
            "{ctx}: fiber not finished after {LIMIT:?} (lost or starved)"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    handle.join()
}

/// Panics whose message starts with this are expected: the hook keeps them off stderr.
const EXPECTED_PANIC: &str = "policies-test: expected panic";

fn quiet_expected_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let message = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
            if !message.is_some_and(|m| m.starts_with(EXPECTED_PANIC)) {
                previous(info);
            }
        }));
    });
}

#[test]
fn registry_lists_the_default_first() {
    let names = weft::sched::names();
    assert_eq!(names.first().copied(), Some(weft::sched::DEFAULT_POLICY));
    for expected in [
        "work-stealing",
        "relaxed-fifo",
        "lifo-stealing",
        "global-fifo",
        "hybrid-stochastic",
        "hybrid-switch",
        "hybrid-reverse",
        "ws-nearest",
        "ws-overflow-locked",
        "ws-overflow-lockfree",
        "ws-overflow-sharded",
        "ws-grow",
        "ws-request",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    let mut unique = names.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "duplicate names in {names:?}");
    let default = Cluster::builder().processors(1).build().unwrap();
    assert_eq!(default.scheduler(), weft::sched::DEFAULT_POLICY);
    let err = Cluster::builder()
        .scheduler("no-such-policy")
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("work-stealing"), "{err}");
}

/// 100k fibers per configuration, in waves (so stacks are reused, not all mapped at once): half
/// spawned from outside the cluster (remote pushes), half from a fiber (local pushes, ring
/// overflow into the inject queue, stealing by idle processors).
#[test]
fn spawn_and_join_100k() {
    const TOTAL: u64 = 100_000;
    const WAVE: u64 = 5_000;
    for_each_config("spawn_and_join_100k", |cluster, ctx| {
        let mut sum = 0;
        for wave in 0..TOTAL / WAVE / 2 {
            let handles: Vec<_> = (0..WAVE)
                .map(|i| cluster.spawn(move || wave * WAVE + i))
                .collect();
            for h in handles {
                sum += join_within(h, ctx).unwrap();
            }
        }
        let inner = cluster.spawn(|| {
            let mut sum = 0;
            for wave in TOTAL / WAVE / 2..TOTAL / WAVE {
                let handles: Vec<_> = (0..WAVE)
                    .map(|i| weft::spawn(move || wave * WAVE + i))
                    .collect();
                sum += handles.into_iter().map(|h| h.join().unwrap()).sum::<u64>();
            }
            sum
        });
        sum += join_within(inner, ctx).unwrap();
        assert_eq!(sum, TOTAL * (TOTAL - 1) / 2, "{ctx}");
    });
}

/// Two fibers hand a token back and forth through an atomic (the waiter yields), while other
/// pairs do the same, so with several processors the hand-offs cross processors.
#[test]
fn ping_pong_through_an_atomic() {
    const ROUNDS: u64 = 2_000;
    const PAIRS: usize = 3;
    for_each_config("ping_pong_through_an_atomic", |cluster, ctx| {
        let deadline = Instant::now() + LIMIT;
        let mut handles = Vec::new();
        for _ in 0..PAIRS {
            let turn = Arc::new(AtomicU64::new(0));
            for side in 0..2u64 {
                let turn = turn.clone();
                let ctx = ctx.to_owned();
                handles.push(cluster.spawn(move || {
                    for round in 0..ROUNDS {
                        let mine = round * 2 + side;
                        while turn.load(Ordering::Acquire) != mine {
                            assert!(Instant::now() < deadline, "{ctx}: ping-pong stuck");
                            weft::yield_now();
                        }
                        turn.store(mine + 1, Ordering::Release);
                    }
                }));
            }
        }
        for h in handles {
            join_within(h, ctx).unwrap();
        }
    });
}

/// Ping-pong through park/unpark: a fiber spawns a child and joins it (parks), the child's exit
/// wakes it. Exercises the policies' spawn and wake pushes, the LIFO slot and stealing.
#[test]
fn ping_pong_through_spawn_and_join() {
    const ROUNDS: u64 = 3_000;
    for_each_config("ping_pong_through_spawn_and_join", |cluster, ctx| {
        let chains: Vec<_> = (0..3)
            .map(|_| {
                cluster.spawn(|| {
                    let mut sum = 0;
                    for i in 0..ROUNDS {
                        sum += weft::spawn(move || i).join().unwrap();
                    }
                    sum
                })
            })
            .collect();
        for h in chains {
            assert_eq!(
                join_within(h, ctx).unwrap(),
                ROUNDS * (ROUNDS - 1) / 2,
                "{ctx}"
            );
        }
    });
}

/// A fiber moves back and forth between two clusters of the same policy: every hop is a push
/// from another cluster's processor (`push_remote`).
#[test]
fn migrate_between_clusters() {
    const HOPS: usize = 300;
    for_each_config("migrate_between_clusters", |cluster, ctx| {
        let policy = cluster.scheduler();
        let other = Cluster::builder()
            .name("other")
            .processors(2)
            .scheduler(policy)
            .build()
            .unwrap();
        let home = cluster.clone();
        let away = other.clone();
        let h = cluster.spawn(move || {
            for _ in 0..HOPS {
                // SAFETY: nothing thread-bound is alive across the moves; `Cluster::current`
                // reads the processor through weft's non-inlined accessor.
                unsafe { weft::migrate(&away) };
                assert_eq!(Cluster::current().unwrap().name(), "other");
                // SAFETY: as above.
                unsafe { weft::migrate(&home) };
                assert_eq!(Cluster::current().unwrap().name(), home.name());
            }
        });
        join_within(h, ctx).unwrap();
        other.shutdown();
    });
}

/// Fibers that keep the processor busy in the two ways a policy can get wrong: hogs that wake
/// each other in a LIFO-friendly loop (spawn a child, join it: the child's exit wakes the hog,
/// which runs next) and spinners that yield. Counter fibers doing the same kinds of work must
/// still make progress and finish.
#[test]
fn busy_fibers_do_not_starve_a_counter() {
    const HOGS: usize = 3;
    const SPINNERS: usize = 4;
    const COUNT: u64 = 300;
    for_each_config("busy_fibers_do_not_starve_a_counter", |cluster, ctx| {
        let stop = Arc::new(AtomicBool::new(false));
        let busy: Vec<_> = (0..HOGS + SPINNERS)
            .map(|i| {
                let stop = stop.clone();
                cluster.spawn(move || {
                    let mut laps = 0u64;
                    while !stop.load(Ordering::Acquire) {
                        if i < HOGS {
                            weft::spawn(|| ()).join().unwrap();
                        } else {
                            weft::yield_now();
                        }
                        laps += 1;
                    }
                    laps
                })
            })
            .collect();
        // One counter gets back in line only through wake-ups (the hogs' way), one only by
        // yielding (the spinners' way).
        let counters: Vec<_> = [true, false]
            .into_iter()
            .map(|through_join| {
                cluster.spawn(move || {
                    let mut count = 0;
                    while count < COUNT {
                        if through_join {
                            weft::spawn(|| ()).join().unwrap();
                        } else {
                            weft::yield_now();
                        }
                        count += 1;
                    }
                    count
                })
            })
            .collect();
        let results: Vec<_> = counters.into_iter().map(|h| join_within(h, ctx)).collect();
        stop.store(true, Ordering::Release);
        let laps: u64 = busy.into_iter().map(|h| join_within(h, ctx).unwrap()).sum();
        for result in results {
            assert_eq!(result.unwrap(), COUNT, "{ctx}");
        }
        assert!(laps > 0, "{ctx}: the busy fibers never ran");
    });
}

/// The LIFO trap: a fiber that endlessly spawns and joins a child keeps being the newest
/// runnable task. Spawned after the workers (so it sits in the LIFO slot or on top of the
/// deque), it must not keep them from finishing: on one processor only a cap on LIFO runs (or
/// a periodic look at the oldest task) lets them run, and it stops only when they are done.
#[test]
fn newest_task_ping_pong_does_not_starve_older_ones() {
    const WORKERS: usize = 4;
    const LAPS: u32 = 200;
    for_each_config(
        "newest_task_ping_pong_does_not_starve_older_ones",
        |cluster, ctx| {
            let ctx_inner = ctx.to_owned();
            let root = cluster.spawn(move || {
                let deadline = Instant::now() + LIMIT;
                let workers: Vec<_> = (0..WORKERS)
                    .map(|_| {
                        weft::spawn(|| {
                            for _ in 0..LAPS {
                                weft::spawn(|| ()).join().unwrap();
                            }
                        })
                    })
                    .collect();
                let stop = Arc::new(AtomicBool::new(false));
                let hog = {
                    let stop = stop.clone();
                    weft::spawn(move || {
                        while !stop.load(Ordering::Acquire) {
                            assert!(Instant::now() < deadline, "{ctx_inner}: workers starved");
                            weft::spawn(|| ()).join().unwrap();
                        }
                    })
                };
                for w in workers {
                    w.join().unwrap();
                }
                stop.store(true, Ordering::Release);
                hog.join().unwrap();
            });
            join_within(root, ctx).unwrap();
        },
    );
}

/// Panicking fibers end alone; the processors keep running everything else.
#[test]
fn panics_stay_in_their_fiber() {
    quiet_expected_panics();
    for_each_config("panics_stay_in_their_fiber", |cluster, ctx| {
        let handles: Vec<_> = (0..200u32)
            .map(|i| {
                cluster.spawn(move || {
                    if i % 3 == 0 {
                        panic!("{EXPECTED_PANIC} {i}");
                    }
                    weft::yield_now();
                    i
                })
            })
            .collect();
        let mut panicked = 0;
        for (i, h) in handles.into_iter().enumerate() {
            match join_within(h, ctx) {
                Ok(v) => assert_eq!(v as usize, i, "{ctx}"),
                Err(e) => {
                    assert!(e.is_panic(), "{ctx}");
                    assert_eq!(e.panic_message(), Some(&*format!("{EXPECTED_PANIC} {i}")));
                    panicked += 1;
                }
            }
        }
        assert_eq!(panicked, 67, "{ctx}");
        // A panic inside a nested fiber, joined by its parent, which goes on.
        let h = cluster.spawn(|| {
            let inner = weft::spawn(|| -> u32 { panic!("{EXPECTED_PANIC} nested") });
            assert!(inner.join().unwrap_err().is_panic());
            7
        });
        assert_eq!(join_within(h, ctx).unwrap(), 7, "{ctx}");
    });
}

/// Sleeping fibers wake on time, many at once, and a cancelled sleeper (woken from a plain
/// thread, so through `push_remote`) wakes early.
#[test]
fn sleep_and_cancel() {
    for_each_config("sleep_and_cancel", |cluster, ctx| {
        let started = Instant::now();
        let sleepers: Vec<_> = (0..50u64)
            .map(|i| {
                cluster.spawn(move || {
                    let nap = Duration::from_millis(5 + i % 10);
                    let t = Instant::now();
                    weft::sleep(nap).unwrap();
                    assert!(t.elapsed() >= nap);
                })
            })
            .collect();
        for h in sleepers {
            join_within(h, ctx).unwrap();
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{ctx}: naps overslept"
        );

        let long = cluster.spawn(|| weft::sleep(Duration::from_secs(60)));
        std::thread::sleep(Duration::from_millis(10));
        long.cancel();
        assert_eq!(
            join_within(long, ctx).unwrap(),
            Err(weft::Cancelled),
            "{ctx}"
        );
    });
}

/// A tree of fibers spawning fibers: every level joins its children.
#[test]
fn nested_spawn_tree() {
    fn tree(depth: u32) -> u64 {
        if depth == 0 {
            return 1;
        }
        let children: Vec<_> = (0..5)
            .map(|_| weft::spawn(move || tree(depth - 1)))
            .collect();
        1 + children.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
    }
    for_each_config("nested_spawn_tree", |cluster, ctx| {
        // 1 + 5 + 25 + 125 + 625 fibers.
        let h = cluster.spawn(|| tree(4));
        assert_eq!(join_within(h, ctx).unwrap(), 781, "{ctx}");
    });
}

/// Work pushed from several plain threads at once (remote pushes racing each other and the
/// processors) is all run exactly once.
#[test]
fn remote_pushes_from_many_threads() {
    const THREADS: usize = 4;
    const PER_THREAD: usize = 2_000;
    for_each_config("remote_pushes_from_many_threads", |cluster, ctx| {
        let ran = Arc::new(AtomicUsize::new(0));
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                let ran = ran.clone();
                s.spawn(move || {
                    let handles: Vec<_> = (0..PER_THREAD)
                        .map(|_| {
                            let ran = ran.clone();
                            cluster.spawn(move || {
                                ran.fetch_add(1, Ordering::Relaxed);
                            })
                        })
                        .collect();
                    for h in handles {
                        join_within(h, ctx).unwrap();
                    }
                });
            }
        });
        assert_eq!(ran.load(Ordering::Relaxed), THREADS * PER_THREAD, "{ctx}");
    });
}

/// Processors fall asleep between bursts and must be woken for each one, from outside (remote
/// push) and from inside (local pushes that overflow the LIFO slot). Pauses of random length
/// aim at the window between a processor registering to sleep and its last look at the queues:
/// a lost wake-up shows up as a burst that never finishes.
#[test]
fn wakes_after_idle() {
    const BURSTS: u64 = 200;
    for_each_config("wakes_after_idle", |cluster, ctx| {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..BURSTS {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            std::thread::sleep(Duration::from_micros(seed % 400));
            let h = cluster.spawn(|| {
                let inner: Vec<_> = (0..4)
                    .map(|i| {
                        weft::spawn(move || {
                            weft::yield_now();
                            i
                        })
                    })
                    .collect();
                inner.into_iter().map(|h| h.join().unwrap()).sum::<i32>()
            });
            assert_eq!(join_within(h, ctx).unwrap(), 6, "{ctx}");
        }
        // A long pause: every processor is surely asleep.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(join_within(cluster.spawn(|| 5), ctx).unwrap(), 5, "{ctx}");
    });
}
