//! Behaviour of the runtime core seen through the public API: cancellation, migration,
//! fiber-local storage, the blocking pool, spawning from plain threads.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft::{Cancelled, Cluster, FiberLocal, JoinError};

fn cluster(name: &str, processors: usize) -> Cluster {
    Cluster::builder()
        .name(name)
        .processors(processors)
        .build()
        .unwrap()
}

#[test]
fn cancelling_a_sleeping_fiber_returns_cancelled_promptly() {
    let c = cluster("cancel", 2);
    let h = c.spawn(|| weft::sleep(Duration::from_secs(600)));
    std::thread::sleep(Duration::from_millis(20));
    let start = Instant::now();
    h.cancel();
    assert_eq!(h.join().unwrap(), Err(Cancelled));
    assert!(start.elapsed() < Duration::from_secs(60));
}

#[test]
fn cancellation_is_sticky_and_visible() {
    let c = cluster("sticky", 1);
    let h = c.spawn(|| {
        let first = weft::sleep(Duration::from_secs(600));
        let second = weft::sleep(Duration::from_secs(600));
        (first, second, weft::is_cancelled())
    });
    std::thread::sleep(Duration::from_millis(10));
    h.cancel();
    assert_eq!(h.join().unwrap(), (Err(Cancelled), Err(Cancelled), true));
}

#[test]
fn a_cancelled_joiner_gets_cancelled_and_the_target_keeps_running() {
    let c = cluster("join-cancel", 2);
    let finished = Arc::new(AtomicUsize::new(0));
    let f2 = finished.clone();
    let joiner = c.spawn(move || {
        let target = weft::spawn(move || {
            let _ = weft::sleep(Duration::from_millis(100));
            f2.fetch_add(1, Ordering::SeqCst);
        });
        target.join().map(|_| ())
    });
    std::thread::sleep(Duration::from_millis(10));
    joiner.cancel();
    assert!(matches!(joiner.join().unwrap(), Err(JoinError::Cancelled)));
    let deadline = Instant::now() + Duration::from_secs(30);
    while finished.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "detached fiber never finished");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_panic_ends_only_its_fiber() {
    let c = cluster("panic", 2);
    let bad = c.spawn(|| -> u32 { panic!("fiber {} gave up", 7) });
    let good = c.spawn(|| 5u32);
    let err = bad.join().unwrap_err();
    assert!(err.is_panic());
    assert_eq!(err.panic_message(), Some("fiber 7 gave up"));
    assert_eq!(good.join().unwrap(), 5);
    assert_eq!(c.spawn(|| 6u32).join().unwrap(), 6);
}

#[test]
fn fibers_migrate_between_clusters() {
    let a = cluster("mig-a", 1);
    let b = cluster("mig-b", 1);
    let b2 = b.clone();
    let names = a
        .spawn(move || {
            // Thread-local reads in a function of their own: LLVM may keep a thread-local's
            // address across the switch inside `migrate` in the function that calls it.
            #[inline(never)]
            fn whereabouts() -> (String, Option<String>) {
                let cluster = Cluster::current().unwrap().name().to_owned();
                (cluster, std::thread::current().name().map(str::to_owned))
            }
            let (before, thread_before) = whereabouts();
            // SAFETY: nothing thread-bound is alive across the move (`whereabouts` reads the
            // thread afresh on each side).
            unsafe { weft::migrate(&b2) };
            let (after, thread_after) = whereabouts();
            (before, after, thread_before, thread_after)
        })
        .join()
        .unwrap();
    assert_eq!(names.0, "mig-a");
    assert_eq!(names.1, "mig-b");
    assert_eq!(names.2.as_deref(), Some("weft-mig-a-0"));
    assert_eq!(names.3.as_deref(), Some("weft-mig-b-0"));
}

#[test]
fn fiber_ids_and_names() {
    let c = cluster("names", 1);
    let h = weft::Builder::new()
        .name("worker-1")
        .cluster(&c)
        .spawn(|| (weft::fiber::name(), weft::fiber::id()))
        .unwrap();
    let id = h.id();
    assert_eq!(h.name(), Some("worker-1"));
    let (name, seen_id) = h.join().unwrap();
    assert_eq!(name.as_deref(), Some("worker-1"));
    assert_eq!(seen_id, Some(id));
    assert_eq!(weft::fiber::id(), None);
}

static PER_FIBER: FiberLocal<Cell<usize>> = FiberLocal::new(|| Cell::new(0));

#[test]
fn fiber_locals_follow_the_fiber_not_the_thread() {
    let c = cluster("locals", 2);
    let handles: Vec<_> = (0..200)
        .map(|i| {
            c.spawn(move || {
                PER_FIBER.with(|v| v.set(i));
                for _ in 0..20 {
                    weft::yield_now();
                    let _ = weft::sleep(Duration::from_micros(50));
                    assert_eq!(PER_FIBER.with(|v| v.get()), i);
                }
                i
            })
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(h.join().unwrap(), i);
    }
}

#[test]
fn blocking_work_does_not_stall_the_processor() {
    let c = cluster("blocking", 1);
    let ticks = Arc::new(AtomicUsize::new(0));
    let t2 = ticks.clone();
    let ticker = c.spawn(move || {
        for _ in 0..20 {
            let _ = weft::sleep(Duration::from_millis(5));
            t2.fetch_add(1, Ordering::SeqCst);
        }
    });
    let slow = c.spawn(|| {
        weft::blocking(|| {
            std::thread::sleep(Duration::from_millis(300));
            std::thread::current().name().map(str::to_owned)
        })
    });
    let thread = slow.join().unwrap();
    assert_eq!(thread.as_deref(), Some("weft-blocking"));
    // The ticker ran while the blocking call was in progress on the single processor.
    assert!(ticks.load(Ordering::SeqCst) >= 5);
    ticker.join().unwrap();
}

#[test]
fn blocking_panics_reach_the_caller() {
    let c = cluster("blocking-panic", 1);
    let h = c.spawn(|| weft::blocking(|| -> u8 { panic!("in the pool") }));
    assert_eq!(h.join().unwrap_err().panic_message(), Some("in the pool"));
}

#[test]
fn plain_threads_spawn_on_the_default_cluster_and_join() {
    let h = weft::spawn(|| Cluster::current().map(|c| c.name().to_owned()));
    assert_eq!(h.join().unwrap().as_deref(), Some("default"));
}

#[test]
fn bad_cluster_settings_are_refused_clearly() {
    let err = Cluster::builder().processors(0).build().unwrap_err();
    assert!(err.to_string().contains("at least one processor"));
    let err = Cluster::builder().scheduler("nope").build().unwrap_err();
    assert!(
        err.to_string().contains("unknown scheduler policy 'nope'"),
        "{err}"
    );
    let err = Cluster::builder().stack_size(100).build().unwrap_err();
    assert!(err.to_string().contains("below the minimum"), "{err}");
    let c = cluster("small-stack", 1);
    let err = weft::Builder::new()
        .cluster(&c)
        .stack_size(10)
        .spawn(|| ())
        .unwrap_err();
    assert!(err.to_string().contains("below the minimum"), "{err}");
}

#[test]
fn many_fibers_spawn_and_join() {
    let c = cluster("many", 2);
    let n = 100_000;
    let done = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let d = done.clone();
            c.spawn(move || {
                d.fetch_add(1, Ordering::Relaxed);
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(done.load(Ordering::SeqCst), n);
}
