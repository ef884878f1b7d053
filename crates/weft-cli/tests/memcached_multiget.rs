//! One request cannot grow the server without bound: a single `get` naming ~400,000 keys of
//! 4,000-byte values (1.6 GB of replies) from a client that never reads. The reply is written
//! as it is produced, so the server's resident set grows by at most a few times the 256 KiB
//! a connection may hold (not by the reply), the client is dropped after the write-stall
//! timeout, and other clients are served meanwhile. Measured on the real binary.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

mod common;
use common::start_memcached;
use weft_testkit::status_kib;

const VALUE_BYTES: usize = 4000;
const KEYS: usize = 1000;
/// Keys named by the one `get` (cycling over the stored ones).
const NAMED: usize = 400_000;
/// Resident growth allowed while the huge get runs (the old code grew by over a gigabyte).
const GROWTH_BOUND_KIB: u64 = 48 * 1024;
const STALL_MS: u64 = 1500;

fn connect(addr: SocketAddr) -> (BufReader<TcpStream>, TcpStream) {
    let s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    (BufReader::new(s.try_clone().unwrap()), s)
}

fn line(r: &mut BufReader<TcpStream>) -> String {
    let mut l = String::new();
    r.read_line(&mut l).unwrap();
    l.trim_end().to_owned()
}

fn curr_connections(r: &mut BufReader<TcpStream>, w: &mut TcpStream) -> u64 {
    w.write_all(b"stats\r\n").unwrap();
    let mut n = None;
    loop {
        let l = line(r);
        if l == "END" {
            return n.expect("no curr_connections");
        }
        if let Some(v) = l.strip_prefix("STAT curr_connections ") {
            n = Some(v.parse().unwrap());
        }
    }
}

/// A well-behaved client: set and read back one value.
fn round_trip(addr: SocketAddr, tag: usize) {
    let (mut r, mut w) = connect(addr);
    write!(w, "set ok{tag} 0 0 2\r\nok\r\nget ok{tag}\r\n").unwrap();
    assert_eq!(line(&mut r), "STORED");
    assert_eq!(line(&mut r), format!("VALUE ok{tag} 0 2"));
    assert_eq!(line(&mut r), "ok");
    assert_eq!(line(&mut r), "END");
}

#[test]
fn huge_multi_get_from_a_client_that_never_reads_stays_bounded() {
    let stall = STALL_MS.to_string();
    let (server, addr) = start_memcached(&["-m", "64", "--write-stall-timeout-ms", stall.as_str()]);
    let pid = server.0.id();

    let (mut r, mut w) = connect(addr);
    let mut load = Vec::new();
    for i in 0..KEYS {
        load.extend_from_slice(format!("set k{i} 0 0 {VALUE_BYTES} noreply\r\n").as_bytes());
        load.resize(load.len() + VALUE_BYTES, b'a' + (i % 26) as u8);
        load.extend_from_slice(b"\r\n");
    }
    load.extend_from_slice(b"version\r\n");
    w.write_all(&load).unwrap();
    assert!(line(&mut r).starts_with("VERSION "));
    let baseline = curr_connections(&mut r, &mut w);
    std::thread::sleep(Duration::from_millis(200));
    let idle_kib = status_kib(pid, "VmRSS");

    let mut get = b"get".to_vec();
    for i in 0..NAMED {
        get.extend_from_slice(format!(" k{}", i % KEYS).as_bytes());
    }
    get.extend_from_slice(b"\r\n");
    assert!(
        get.len() < 2 * 1024 * 1024,
        "the line must stay under weft's cap"
    );
    let mut hog = TcpStream::connect(addr).unwrap();
    hog.set_write_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    hog.write_all(&get).unwrap();

    // While the server is stuck writing to the hog: others are served, memory stays put,
    // and after the write-stall timeout the hog is gone.
    let deadline = Instant::now() + Duration::from_millis(STALL_MS * 6 + 5000);
    let mut served = 0;
    loop {
        let grown = status_kib(pid, "VmHWM").saturating_sub(idle_kib);
        assert!(
            grown <= GROWTH_BOUND_KIB,
            "one multi-get grew the server by {grown} KiB (idle {idle_kib} KiB)"
        );
        round_trip(addr, served);
        served += 1;
        if curr_connections(&mut r, &mut w) == baseline {
            break;
        }
        assert!(Instant::now() < deadline, "the hog was not disconnected");
        std::thread::sleep(Duration::from_millis(50));
    }
    let peak_kib = status_kib(pid, "VmHWM");
    eprintln!(
        "idle {idle_kib} KiB, peak {peak_kib} KiB (+{} KiB) for a {} MB reply; {served} \
         other clients served meanwhile",
        peak_kib - idle_kib,
        NAMED * VALUE_BYTES / 1_000_000
    );
    // The hog got the beginning of its reply, in order, then the connection closed.
    let mut head = [0u8; 64];
    hog.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    hog.read_exact(&mut head).unwrap();
    assert!(head.starts_with(b"VALUE k0 0 4000\r\naaaa"), "{:?}", head);
    round_trip(addr, served);
}
