//! The tick keeper (`ClusterBuilder::keep_tick`): while a processor serves requests that come
//! further apart than its period, its sleeps are cut by the keeper's timer (so the timer is
//! really armed, on both backends); once the requests stop, it stops arming the timer within a
//! few periods (an idle processor takes no wake-ups for it).
//!
//! Observed through the processor thread's voluntary context switches: one per sleep. Counts,
//! not times: a slow machine stretches the gaps, which only adds keeper periods.

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use weft::{Cluster, IoBackend};

/// The processor thread `weft-NAME-0`'s voluntary context switches so far.
fn processor_switches(name: &str) -> u64 {
    let comm = format!("weft-{name}-0");
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = task.unwrap().path();
        let Ok(c) = std::fs::read_to_string(dir.join("comm")) else {
            continue;
        };
        if c.trim_end() != comm {
            continue;
        }
        let status = std::fs::read_to_string(dir.join("status")).unwrap();
        let line = status
            .lines()
            .find(|l| l.starts_with("voluntary_ctxt_switches:"))
            .unwrap();
        return line.split_whitespace().nth(1).unwrap().parse().unwrap();
    }
    panic!("no thread named {comm}");
}

/// Serves 60 round trips spaced `gap` apart on a one-processor cluster with a keeper of
/// `keep_tick`, then stays idle for 400 ms; returns the processor's sleeps during the requests
/// and during the idle time.
fn sleeps(backend: IoBackend, keep_tick: Duration, gap: Duration, name: &str) -> (u64, u64) {
    const REQUESTS: u64 = 60;
    let c = common::cluster_with(
        backend,
        Cluster::builder()
            .name(name)
            .processors(1)
            .keep_tick(keep_tick),
    );
    let addr = common::echo_server(&c);
    let mut client = std::net::TcpStream::connect(addr).unwrap();
    client.set_nodelay(true).unwrap();
    let mut buf = [0u8; 8];
    client.write_all(b"warm-up!").unwrap();
    client.read_exact(&mut buf).unwrap();
    let before = processor_switches(name);
    for i in 0..REQUESTS {
        std::thread::sleep(gap);
        client.write_all(&i.to_le_bytes()).unwrap();
        client.read_exact(&mut buf).unwrap();
        assert_eq!(buf, i.to_le_bytes());
    }
    let served = processor_switches(name);
    std::thread::sleep(Duration::from_millis(400));
    let idle = processor_switches(name);
    drop(client);
    (served - before, idle - served)
}

/// On both backends: requests spaced `gap` apart with a keeper of `keep_tick` take at least
/// twice the sleeps they take without one (the keeper's timer is really armed and cuts the
/// gaps), and once they stop, an idle processor does not keep waking for it (at most 20
/// sleeps in 400 ms, where a keeper that kept arming would wake it hundreds of times).
/// `prefix` names the clusters (thread names are short).
fn keeper_cuts_gaps_and_stops_when_idle(prefix: &str, keep_tick: Duration, gap: Duration) {
    for backend in common::backends() {
        let short = match backend {
            IoBackend::Uring => format!("{prefix}-u"),
            IoBackend::Epoll => format!("{prefix}-e"),
        };
        let (off_served, off_idle) = sleeps(backend, Duration::ZERO, gap, &format!("{short}0"));
        let (on_served, on_idle) = sleeps(backend, keep_tick, gap, &format!("{short}1"));
        eprintln!(
            "{backend}, keeper {keep_tick:?}, gaps {gap:?}: sleeps serving {off_served} -> \
             {on_served}, idle {off_idle} -> {on_idle}"
        );
        assert!(
            on_served >= 2 * off_served,
            "{backend}: the keeper ({keep_tick:?}) did not cut the sleeps: {on_served} sleeps \
             with it, {off_served} without, over 60 gaps of {gap:?}"
        );
        assert!(
            on_idle <= 20,
            "{backend}: an idle processor kept waking for its keeper: {on_idle} sleeps in 400 ms \
             (without a keeper: {off_idle})"
        );
    }
}

#[test]
fn the_keeper_cuts_sleeps_while_serving_and_stops_when_idle() {
    // 60 gaps of at least 3 ms: without a keeper about one sleep per request; with a 1 ms
    // keeper each gap is cut into at least three sleeps.
    keeper_cuts_gaps_and_stops_when_idle("kt", Duration::from_millis(1), Duration::from_millis(3));
}

#[test]
fn the_default_keeper_rides_on_the_tick_and_stops_when_idle() {
    // The default keeper is due at the kernel's next tick (at most 4 ms ahead at HZ=100, one
    // tick at HZ 250 and up): gaps of 10 ms are each cut at least twice by it.
    keeper_cuts_gaps_and_stops_when_idle("kd", weft::DEFAULT_KEEP_TICK, Duration::from_millis(10));
}

/// On both backends: while the keeper stands in for the sleep's own timeout (a keeper in flight
/// that expires first), a fiber timer due well after it still fires: the processor wakes at
/// each keeper, finds the timer not yet due, and the last sleep before it takes its own
/// timeout. Checked while requests keep the keeper armed, and once the processor is idle and
/// the keeper has stopped.
#[test]
fn timers_past_the_keeper_still_fire() {
    for backend in common::backends() {
        let name = match backend {
            IoBackend::Uring => "kf-u",
            IoBackend::Epoll => "kf-e",
        };
        let c = common::cluster_with(
            backend,
            Cluster::builder()
                .name(name)
                .processors(1)
                .keep_tick(Duration::from_millis(1)),
        );
        let addr = common::echo_server(&c);
        let mut client = std::net::TcpStream::connect(addr).unwrap();
        client.set_nodelay(true).unwrap();
        let start = std::time::Instant::now();
        let sleeper = c.spawn(|| weft::sleep(Duration::from_millis(60)).unwrap());
        // Requests every 2 ms keep the keeper armed through the sleeper's 60 ms.
        let mut buf = [0u8; 8];
        for i in 0u64..60 {
            client.write_all(&i.to_le_bytes()).unwrap();
            client.read_exact(&mut buf).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        sleeper.join().unwrap();
        assert!(
            start.elapsed() >= Duration::from_millis(60),
            "{backend}: woke early"
        );
        // Idle now (the keeper stops after a few quiet periods): a timer far past it fires.
        std::thread::sleep(Duration::from_millis(50));
        let start = std::time::Instant::now();
        c.spawn(|| weft::sleep(Duration::from_millis(100)).unwrap())
            .join()
            .unwrap();
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(100), "{backend}: woke early");
        eprintln!("{backend}: an idle 100 ms sleep took {took:?}");
    }
}
