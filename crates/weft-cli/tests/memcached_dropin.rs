//! `weft memcached` as a drop-in for memcached 1.6.18, checked on the real binary and, where
//! the behaviour is memcached's, on the real memcached too (its own port, killed by PID):
//! `-M` never loses an acknowledged write, and memcached's command line starts weft unchanged.
//!
//! The real memcached is required under `CI=true`; elsewhere a missing one is a `SKIP`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{free_port, is_root, start_memcached as start_weft, ChildGuard};

const MEMCACHED: &str = "/usr/bin/memcached";

/// The real memcached with `extra` flags on a free localhost port, or `None` (a `SKIP` note)
/// when it is not installed and this is not CI.
fn start_real(extra: &[&str]) -> Option<(ChildGuard, SocketAddr)> {
    if !std::path::Path::new(MEMCACHED).exists() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{MEMCACHED} is required under CI=true (apt-get install memcached)"
        );
        eprintln!("SKIP: {MEMCACHED} is not installed (apt-get install memcached)");
        return None;
    }
    let port = free_port();
    let mut cmd = Command::new(MEMCACHED);
    cmd.args(["-U", "0", "-l", "127.0.0.1", "-p", &port.to_string()])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if is_root() {
        cmd.args(["-u", "root"]);
    }
    let guard = ChildGuard(cmd.spawn().expect("spawn memcached"));
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).is_err() {
        assert!(
            Instant::now() < deadline,
            "memcached does not listen on {addr}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Some((guard, addr))
}

/// A line-oriented text-protocol client.
struct Client {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Client {
    fn connect(addr: SocketAddr) -> Client {
        let s = TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Client {
            reader: BufReader::new(s.try_clone().unwrap()),
            writer: s,
        }
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.reader.read_line(&mut l).unwrap();
        l.trim_end().to_owned()
    }

    fn set(&mut self, key: &str, exptime: u32, len: usize) -> String {
        let mut req = format!("set {key} 0 {exptime} {len}\r\n").into_bytes();
        req.resize(req.len() + len, b'v');
        req.extend_from_slice(b"\r\n");
        self.writer.write_all(&req).unwrap();
        self.line()
    }

    fn has(&mut self, key: &str) -> bool {
        write!(self.writer, "get {key}\r\n").unwrap();
        let head = self.line();
        if head == "END" {
            return false;
        }
        assert!(head.starts_with(&format!("VALUE {key} ")), "{head}");
        let len: usize = head.rsplit(' ').next().unwrap().parse().unwrap();
        let mut data = vec![0u8; len + 2];
        self.reader.read_exact(&mut data).unwrap();
        assert_eq!(self.line(), "END");
        true
    }

    fn stat(&mut self, name: &str) -> u64 {
        self.writer.write_all(b"stats\r\n").unwrap();
        let mut found = None;
        loop {
            let l = self.line();
            if l == "END" {
                break;
            }
            let mut parts = l.split(' ');
            if parts.nth(1) == Some(name) {
                found = parts.next().map(|v| v.parse().unwrap());
            }
        }
        found.unwrap_or_else(|| panic!("no stat {name}"))
    }
}

const VALUE_BYTES: usize = 8 * 1024;
const OUT_OF_MEMORY: &str = "SERVER_ERROR out of memory storing object";

/// Sets `prefix<i>` until the server refuses; returns the keys it acknowledged.
fn fill_until_refused(c: &mut Client, prefix: &str, exptime: u32) -> Vec<String> {
    let mut stored = Vec::new();
    for i in 0..2000 {
        let key = format!("{prefix}{i}");
        match c.set(&key, exptime, VALUE_BYTES).as_str() {
            "STORED" => stored.push(key),
            OUT_OF_MEMORY => return stored,
            other => panic!("set {key}: {other}"),
        }
    }
    panic!("2000 values of {VALUE_BYTES} bytes were all stored under -m 2");
}

/// Under `-M` every acknowledged item stays: filled to refusal, then left alone, then sets
/// spaced out in time (each must be refused, none may push an old item out).
fn keeps_every_acknowledged_item(addr: SocketAddr, who: &str) {
    let mut c = Client::connect(addr);
    let stored = fill_until_refused(&mut c, "keep", 0);
    assert!(stored.len() > 100, "{who}: only {} stored", stored.len());
    std::thread::sleep(Duration::from_millis(1500));
    for i in 0..10 {
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(
            c.set(&format!("late{i}"), 0, VALUE_BYTES),
            OUT_OF_MEMORY,
            "{who}"
        );
    }
    let lost: Vec<&String> = stored.iter().filter(|k| !c.has(k)).collect();
    assert!(
        lost.is_empty(),
        "{who}: {} of {} acknowledged items lost: {lost:?}",
        lost.len(),
        stored.len()
    );
    assert_eq!(c.stat("evictions"), 0, "{who}");
    eprintln!("{who}: {} items kept under -M -m 2", stored.len());
}

#[test]
fn no_evictions_keeps_every_acknowledged_item() {
    let (_weft, addr) = start_weft(&["-M", "-m", "2"]);
    keeps_every_acknowledged_item(addr, "weft");
    if let Some((_real, addr)) = start_real(&["-M", "-m", "2"]) {
        keeps_every_acknowledged_item(addr, "memcached");
    }
}

/// Under `-M`, expired items are reclaimed before a store is refused: after the 2-second
/// items of a full cache expire, as many new ones fit again.
fn reclaims_expired_before_refusing(addr: SocketAddr, who: &str) {
    let mut c = Client::connect(addr);
    let first = fill_until_refused(&mut c, "ttl", 2);
    std::thread::sleep(Duration::from_millis(3500));
    let second = fill_until_refused(&mut c, "after", 0);
    assert!(
        second.len() * 20 >= first.len() * 19,
        "{who}: {} fit with 2 s TTLs, only {} after they expired",
        first.len(),
        second.len()
    );
    assert_eq!(c.stat("evictions"), 0, "{who}");
    eprintln!(
        "{who}: {} then {} items; reclaimed {}",
        first.len(),
        second.len(),
        c.stat("reclaimed")
    );
}

#[test]
fn no_evictions_reclaims_expired_items_before_refusing() {
    let (_weft, addr) = start_weft(&["-M", "-m", "2"]);
    reclaims_expired_before_refusing(addr, "weft");
    if let Some((_real, addr)) = start_real(&["-M", "-m", "2"]) {
        reclaims_expired_before_refusing(addr, "memcached");
    }
}
