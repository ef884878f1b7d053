//! `threads_per_connection`: each connection is served by an OS thread of its own, and
//! shutdown still ends idle ones. One test, so no other server of this binary starts or
//! stops connection threads while it counts them.

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use weft_testkit::threads_named;

use common::*;

/// Waits until `count()` is `want` connection threads.
fn settle(want: usize, count: impl Fn() -> usize) {
    weft_testkit::settle_count(want, "connection threads", count);
}

#[test]
fn each_connection_runs_on_its_own_os_thread_and_shutdown_ends_idle_ones() {
    let name = weft_http::CONNECTION_THREAD_NAME;
    let dir = tree();
    let expected = std::fs::read(dir.path().join("a.txt")).unwrap();
    let count = || threads_named(name).len();

    // Fibers: no connection thread whatever the connections.
    let fibers = TestServer::serve(dir.path());
    let mut open: Vec<_> = (0..4).map(|_| fibers.connect()).collect();
    for s in &mut open {
        s.write_all(get("/a.txt", "").as_bytes()).unwrap();
        assert_eq!(read_response(s, false).unwrap().body, expected);
    }
    assert_eq!(count(), 0, "fibers mode started connection threads");
    drop(open);
    fibers.stop().unwrap();

    // Threads: one thread per open connection, each a different one, gone when it closes.
    let mut c = config(dir.path());
    c.threads_per_connection = true;
    c.shutdown_grace = Duration::from_secs(30);
    let threads = TestServer::start(c);
    let mut open: Vec<_> = (0..5).map(|_| threads.connect()).collect();
    for s in &mut open {
        s.write_all(get("/a.txt", "").as_bytes()).unwrap();
        let r = read_response(s, false).unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, expected.as_slice()));
    }
    settle(5, count);
    let tids = threads_named(name);
    let mut distinct = tids.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 5, "threads {tids:?}");
    // A second request on each connection is answered by the same thread set.
    for s in &mut open {
        s.write_all(get("/a.txt", "").as_bytes()).unwrap();
        assert_eq!(read_response(s, false).unwrap().status, 200);
    }
    let mut again = threads_named(name);
    again.sort_unstable();
    assert_eq!(again, distinct);
    open.truncate(2);
    settle(2, count);

    // Shutdown with two idle keep-alive connections: their threads are woken and end, well
    // before the 30 s grace period.
    let started = Instant::now();
    threads.stop().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "shutdown waited {:?} for idle connection threads",
        started.elapsed()
    );
    for s in &mut open {
        assert!(closed_by_server(s));
    }
    settle(0, count);
}
