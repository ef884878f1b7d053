//! `threads_per_connection`: each connection is served by an OS thread of its own, and
//! shutdown still ends idle ones. One test, so no other server of this binary starts or
//! stops connection threads while it counts them.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{test_settings, WeftServer};
use weft_cache::server::CONNECTION_THREAD_NAME;
use weft_cache::Settings;
use weft_testkit::threads_named;

/// Waits until `want` connection threads are running.
fn settle(want: usize) {
    weft_testkit::settle_count(want, "connection threads", || {
        threads_named(CONNECTION_THREAD_NAME).len()
    });
}

/// Sends `request` and reads until the reply ends with `until`.
fn ask(s: &mut TcpStream, request: &[u8], until: &[u8]) -> Vec<u8> {
    s.write_all(request).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while !got.ends_with(until) {
        let n = read_retrying(s, &mut buf);
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    got
}

/// `read`, again after `EINTR`: a signal to the test's thread (a CI run saw one) interrupts
/// a plain blocking read, as in the other tests' read loops (`common`, `hostile.rs`).
fn read_retrying(s: &mut TcpStream, buf: &mut [u8]) -> usize {
    loop {
        match s.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            r => return r.unwrap(),
        }
    }
}

fn connect(server: &WeftServer) -> TcpStream {
    let s = TcpStream::connect(server.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

#[test]
fn each_connection_runs_on_its_own_os_thread_and_shutdown_ends_idle_ones() {
    // Fibers: no connection thread.
    let fibers = WeftServer::start(test_settings());
    let mut open: Vec<_> = (0..4).map(|_| connect(&fibers)).collect();
    for s in &mut open {
        assert_eq!(ask(s, b"version\r\n", b"\r\n")[..8], *b"VERSION ");
    }
    assert!(threads_named(CONNECTION_THREAD_NAME).is_empty());
    drop(open);
    drop(fibers);

    // Threads: one per open connection, each a different one, all serving the same store.
    let threads = WeftServer::start(Settings {
        threads_per_connection: true,
        ..test_settings()
    });
    let mut open: Vec<_> = (0..5).map(|_| connect(&threads)).collect();
    let stored = ask(&mut open[0], b"set k 0 0 2\r\nhi\r\n", b"\r\n");
    assert_eq!(stored, b"STORED\r\n");
    for s in &mut open {
        assert_eq!(
            ask(s, b"get k\r\n", b"END\r\n"),
            b"VALUE k 0 2\r\nhi\r\nEND\r\n"
        );
    }
    settle(5);
    let mut tids = threads_named(CONNECTION_THREAD_NAME);
    tids.sort_unstable();
    tids.dedup();
    assert_eq!(tids.len(), 5);
    open.truncate(2);
    settle(2);

    // Shutdown with two idle connections: their reads end, their threads exit, and the
    // clients see the close, all within the 200 ms grace the helper gives.
    let started = Instant::now();
    drop(threads);
    assert!(started.elapsed() < Duration::from_secs(5));
    for s in &mut open {
        let mut buf = [0u8; 16];
        assert_eq!(read_retrying(s, &mut buf), 0, "connection left open");
    }
    settle(0);
}
