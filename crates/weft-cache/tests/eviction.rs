//! Filling the cache beyond `-m` evicts the least recently used items (and counts them), and
//! with `-M` refuses instead, like memcached. (The LRU is per shard, like memcached's per slab
//! class, so only "the oldest go first" across a whole fill is checked, not an exact order.)

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};

use common::{test_settings, WeftServer};
use weft_cache::Settings;

const VALUE_BYTES: usize = 100_000;

struct Client {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Client {
    fn connect(addr: SocketAddr) -> Client {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
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

    fn set(&mut self, key: &str, fill: u8) -> String {
        let mut req = format!("set {key} 0 0 {VALUE_BYTES}\r\n").into_bytes();
        req.resize(req.len() + VALUE_BYTES, fill);
        req.extend_from_slice(b"\r\n");
        self.writer.write_all(&req).unwrap();
        self.line()
    }

    /// The value's first byte, or `None` on a miss.
    fn get(&mut self, key: &str) -> Option<u8> {
        write!(self.writer, "get {key}\r\n").unwrap();
        let head = self.line();
        if head == "END" {
            return None;
        }
        assert!(
            head.starts_with(&format!("VALUE {key} 0 {VALUE_BYTES}")),
            "{head}"
        );
        let mut data = vec![0u8; VALUE_BYTES + 2];
        self.reader.read_exact(&mut data).unwrap();
        assert!(data[..VALUE_BYTES].iter().all(|&b| b == data[0]));
        assert_eq!(self.line(), "END");
        Some(data[0])
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

fn small_server(evictions: bool) -> WeftServer {
    WeftServer::start(Settings {
        memory_limit_mb: 2,
        evictions,
        ..test_settings()
    })
}

#[test]
fn filling_beyond_the_limit_evicts_the_oldest() {
    let server = small_server(true);
    let mut c = Client::connect(server.addr);
    // 60 values of 100 KB into 2 MB: most must go.
    for i in 0..60u8 {
        assert_eq!(c.set(&format!("k{i}"), b'a' + i % 26), "STORED");
    }
    assert_eq!(c.get("k0"), None, "the first key was evicted");
    assert_eq!(c.get("k1"), None);
    assert_eq!(c.get("k59"), Some(b'a' + 59 % 26), "the last key is kept");
    let evictions = c.stat("evictions");
    let items = c.stat("curr_items");
    assert!(evictions >= 40, "evictions {evictions}");
    assert_eq!(evictions + items, 60);
    assert_eq!(c.stat("evicted_unfetched"), evictions, "none was read before");
    assert!(c.stat("bytes") <= 2 * 1024 * 1024);
}

#[test]
fn without_evictions_a_full_cache_refuses() {
    let server = small_server(false);
    let mut c = Client::connect(server.addr);
    let mut replies = Vec::new();
    for i in 0..60u8 {
        replies.push(c.set(&format!("k{i}"), b'z'));
    }
    assert_eq!(replies[0], "STORED");
    assert_eq!(
        replies.last().unwrap(),
        "SERVER_ERROR out of memory storing object"
    );
    assert_eq!(c.get("k0"), Some(b'z'), "nothing was evicted");
    assert_eq!(c.stat("evictions"), 0);
}
