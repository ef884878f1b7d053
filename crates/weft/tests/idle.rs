//! An idle cluster sleeps (no spinning) and wakes for work and timers. One test per binary run
//! alone so that the process's CPU time is the cluster's.

mod common;
use common::process_cpu;

use std::time::{Duration, Instant};

#[test]
fn idle_cluster_uses_under_one_percent_and_still_wakes() {
    let c = weft::Cluster::builder()
        .name("idle")
        .processors(2)
        .build()
        .unwrap();
    // Some work first, so processors have been busy, searched and then gone to sleep.
    let hs: Vec<_> = (0..1000).map(|i| c.spawn(move || i)).collect();
    for h in hs {
        h.join().unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
    let cpu_before = process_cpu();
    let wall = Instant::now();
    std::thread::sleep(Duration::from_secs(5));
    let used = process_cpu() - cpu_before;
    let elapsed = wall.elapsed();
    let share = used.as_secs_f64() / elapsed.as_secs_f64();
    println!(
        "idle cluster: {used:?} CPU over {elapsed:?} = {:.3}% of a core",
        share * 100.0
    );
    assert!(
        share < 0.01,
        "idle cluster used {:.2}% of a core",
        share * 100.0
    );

    // A fully idle cluster wakes for new work...
    assert_eq!(c.spawn(|| 7).join().unwrap(), 7);
    // ...and for a timer armed by a fiber that then leaves every processor idle.
    let t = Instant::now();
    c.spawn(|| weft::sleep(Duration::from_millis(200)).unwrap())
        .join()
        .unwrap();
    assert!(t.elapsed() >= Duration::from_millis(200));
}
