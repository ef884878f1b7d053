//! Many simultaneous clients on the `weft memcached` binary: every connection is opened first
//! and kept open, then each sends a set and a get in one write, then every reply is read, so
//! all of them are served at once. Over `-c`, clients get memcached's
//! `ERROR Too many open connections` and are closed while the admitted ones keep working.
//!
//! The 15,360- and 20,000-connection tests are `#[ignore]`d (seconds in release, long in
//! debug): `cargo test --release -p weft-cli --test memcached_connections -- --ignored`.
//! They need a descriptor hard limit above the connection count (`ulimit -Hn`); the 20,000
//! test opens as many as the limit allows and says how many. The tests of this file take turns
//! (they share the process's descriptor limit), and clients close with a reset, so that tens of
//! thousands of `TIME_WAIT` sockets do not use up the ephemeral ports the next test needs.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

const TOO_MANY: &[u8] = b"ERROR Too many open connections\r\n";
/// Descriptors the test process keeps for itself (stdio, the harness, the child's pipes).
const SPARE_DESCRIPTORS: u64 = 100;

mod common;
use common::start_memcached;
use weft_testkit::ChildGuard;

/// Raises this process's soft descriptor limit to the hard one; returns the new limit.
fn raise_nofile_limit() -> u64 {
    // SAFETY: getrlimit/setrlimit on a local struct.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut r), 0);
        if r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &r), 0);
        }
        r.rlim_cur
    }
}

/// Starts `weft memcached -c CONNS -t 2` on a free localhost port.
fn start(max_connections: usize) -> (ChildGuard, SocketAddr) {
    start_memcached(&["-c", &max_connections.to_string()])
}

/// Held by each test for its whole run: they would otherwise share the descriptor limit.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// A client connection that closes with a reset (`SO_LINGER` 0): no `TIME_WAIT` left behind.
fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a socket we own, with a pointer to a live `linger` and its size.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "SO_LINGER: {}", std::io::Error::last_os_error());
    s
}

/// A connection that has made a full round trip, so it is counted by the server.
fn counted_connection(addr: SocketAddr) -> TcpStream {
    let mut s = connect(addr);
    s.write_all(b"version\r\n").unwrap();
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line).unwrap();
    assert!(line.starts_with("VERSION"), "{line:?}");
    s
}

/// Polls `stats` on `probe` until the server counts exactly `want` connections.
fn wait_connections(probe: &mut TcpStream, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        probe.write_all(b"stats\r\n").unwrap();
        let mut reader = BufReader::new(&*probe);
        let mut curr = None;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if line == "END\r\n" || line.is_empty() {
                break;
            }
            if let Some(v) = line.strip_prefix("STAT curr_connections ") {
                curr = Some(v.trim().parse::<u64>().unwrap());
            }
        }
        if curr == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "server counts {curr:?} connections, want {want}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends a set and a get on every connection (all before reading any reply), then checks
/// every reply: each connection is served while all are open.
fn set_and_get_on_all(conns: &mut [TcpStream], tag: &str) {
    for (i, s) in conns.iter_mut().enumerate() {
        let value = format!("value-{i}");
        write!(
            s,
            "set {tag}{i} 0 0 {}\r\n{value}\r\nget {tag}{i}\r\n",
            value.len()
        )
        .unwrap();
    }
    for (i, s) in conns.iter_mut().enumerate() {
        let value = format!("value-{i}");
        let want = format!(
            "STORED\r\nVALUE {tag}{i} 0 {}\r\n{value}\r\nEND\r\n",
            value.len()
        );
        let mut got = vec![0u8; want.len()];
        s.read_exact(&mut got)
            .unwrap_or_else(|e| panic!("connection {i}: {e}"));
        assert_eq!(String::from_utf8_lossy(&got), want, "connection {i}");
    }
}

/// Opens `n` connections, keeps them open, serves a set+get on each.
fn many_connections(n: usize, max_connections: usize) {
    let _turn = one_at_a_time();
    let limit = raise_nofile_limit();
    if limit < n as u64 + SPARE_DESCRIPTORS {
        eprintln!(
            "SKIP: {n} connections need a descriptor limit above {} (ulimit -Hn is {limit})",
            n as u64 + SPARE_DESCRIPTORS
        );
        return;
    }
    let (_server, addr) = start(max_connections);
    let mut probe = counted_connection(addr);
    let mut conns: Vec<TcpStream> = (0..n).map(|_| connect(addr)).collect();
    set_and_get_on_all(&mut conns, "c");
    wait_connections(&mut probe, n as u64 + 1);
    drop(conns);
    wait_connections(&mut probe, 1);
}

#[test]
fn two_thousand_concurrent_connections_are_all_served() {
    many_connections(2000, 4096);
}

#[test]
#[ignore = "15,360 connections: run in release with --ignored"]
fn fifteen_thousand_three_hundred_sixty_connections() {
    many_connections(15_360, 16_384);
}

#[test]
#[ignore = "20,000 connections: run in release with --ignored"]
fn twenty_thousand_connections_over_a_limit_of_1024() {
    const ADMITTED: usize = 1024;
    let _turn = one_at_a_time();
    let limit = raise_nofile_limit();
    let total = 20_000.min(limit.saturating_sub(SPARE_DESCRIPTORS) as usize);
    assert!(
        total > ADMITTED + 1000,
        "descriptor limit {limit} is too low"
    );
    if total < 20_000 {
        eprintln!(
            "note: the descriptor hard limit is {limit}: opening {total} connections, not 20,000"
        );
    }
    let (_server, addr) = start(ADMITTED);
    // The probe is the first admitted connection; wait for the start-up probe to be gone.
    let mut probe = counted_connection(addr);
    wait_connections(&mut probe, 1);
    let mut admitted: Vec<TcpStream> = (1..ADMITTED).map(|_| connect(addr)).collect();
    let mut refused: Vec<TcpStream> = (ADMITTED..total).map(|_| connect(addr)).collect();
    // Every connection past the limit is told so and closed...
    for (i, s) in refused.iter_mut().enumerate() {
        let mut got = Vec::new();
        s.read_to_end(&mut got)
            .unwrap_or_else(|e| panic!("refused connection {i}: {e}"));
        assert_eq!(got, TOO_MANY, "connection {} over the limit", ADMITTED + i);
    }
    // ...while the admitted ones are all served.
    set_and_get_on_all(&mut admitted, "a");
    wait_connections(&mut probe, ADMITTED as u64);
    eprintln!(
        "{total} connections: {ADMITTED} served, {} refused with \"ERROR Too many open \
         connections\"",
        refused.len()
    );
    drop(refused);
    drop(admitted);
    wait_connections(&mut probe, 1);
    // Room again: a new client is served.
    let mut again = vec![connect(addr)];
    set_and_get_on_all(&mut again, "again");
}
