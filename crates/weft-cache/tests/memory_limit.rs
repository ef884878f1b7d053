//! `-m` bounds the memory the server takes at four processors: the process's peak RSS above
//! its RSS before the load stays within 1.2 × `-m` while one connection fills the cache with
//! small values, three others replace them all, and four then run the write-heavy load of
//! random sizes that `weft bench memory` uses (90 % sets of 100–50,000 bytes). With the items
//! in malloc'd buffers this test saw 1.58–1.61 × `-m` (glibc's per-thread arenas: a value
//! freed by another processor leaves a hole only its own processor's allocations reuse);
//! with the store's own pages it is the pages plus the index (0.88 × `-m`).
//!
//! Alone in its test binary, so no other test's memory is counted.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

use common::{test_settings, WeftServer};
use weft_cache::Settings;

const LIMIT_MB: usize = 32;
const CLIENTS: usize = 4;
/// Bytes of values each client sets in the random phase: four times `-m` in all.
const SET_BYTES_PER_CLIENT: usize = LIMIT_MB * 1024 * 1024 * 4 / CLIENTS;
const KEYS: u64 = 50_000;
const BATCH: usize = 10;

/// `VmRSS` or `VmHWM` of this process, in bytes.
fn status_bytes(field: &str) -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field}"));
    let kib: usize = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap();
    kib * 1024
}

/// xorshift64*: the same sizes and keys on every run.
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// Sets keys `keys` (every `stride`-th from `first`) with values of `min..=max` random bytes,
/// nine `noreply` sets and one get a batch, reading the get's reply; at most `bytes` of values.
#[allow(clippy::too_many_arguments)]
fn load(
    addr: std::net::SocketAddr,
    seed: u64,
    keys: Option<(u64, u64, u64)>,
    min: usize,
    max: usize,
    bytes: usize,
) {
    let writer = TcpStream::connect(addr).unwrap();
    let mut reader = BufReader::new(writer.try_clone().unwrap());
    let mut writer = writer;
    let mut rng = seed;
    let mut req = Vec::new();
    let mut line = String::new();
    let mut sent = 0;
    let mut walk = keys.map(|(first, _, _)| first);
    while sent < bytes {
        req.clear();
        for i in 0..BATCH {
            let key = match (keys, walk.as_mut()) {
                (Some((_, stride, end)), Some(at)) => {
                    if *at >= end {
                        break;
                    }
                    *at += stride;
                    *at - stride
                }
                _ => next(&mut rng) % KEYS,
            };
            if i + 1 == BATCH {
                req.extend_from_slice(format!("get k{key}\r\n").as_bytes());
            } else {
                let len = min + (next(&mut rng) % (max - min + 1) as u64) as usize;
                req.extend_from_slice(format!("set k{key} 0 0 {len} noreply\r\n").as_bytes());
                req.resize(req.len() + len, b'v');
                req.extend_from_slice(b"\r\n");
                sent += len;
            }
        }
        req.extend_from_slice(b"version\r\n");
        writer.write_all(&req).unwrap();
        loop {
            line.clear();
            reader.read_line(&mut line).unwrap();
            assert!(!line.is_empty(), "the server closed the connection");
            if line.starts_with("VALUE ") {
                let len: usize = line.split_whitespace().nth(3).unwrap().parse().unwrap();
                let mut value = vec![0; len + 2];
                std::io::Read::read_exact(&mut reader, &mut value).unwrap();
                assert!(value[..len].iter().all(|&b| b == b'v'));
            } else if line.starts_with("VERSION") {
                break;
            } else {
                assert_eq!(line, "END\r\n");
            }
        }
        if walk.zip(keys).is_some_and(|(at, (_, _, end))| at >= end) {
            return;
        }
    }
}

#[test]
fn rss_stays_near_the_limit_under_random_sizes_at_four_processors() {
    let server = WeftServer::start(Settings {
        memory_limit_mb: LIMIT_MB,
        processors: 4,
        ..test_settings()
    });
    let limit = LIMIT_MB * 1024 * 1024;
    let before = status_bytes("VmRSS:");
    // One connection fills the cache with small values; three others then replace every
    // one of them. Values allocated by one processor and freed by others leave holes that
    // only the first processor's allocations could reuse.
    let small = (100, 4_000);
    let items = (limit / ((small.0 + small.1) / 2)) as u64;
    load(
        server.addr,
        1,
        Some((0, 1, items)),
        small.0,
        small.1,
        usize::MAX,
    );
    std::thread::scope(|s| {
        for first in 0..3 {
            let addr = server.addr;
            s.spawn(move || {
                load(
                    addr,
                    first + 2,
                    Some((first, 3, items)),
                    small.0,
                    small.1,
                    usize::MAX,
                )
            });
        }
    });
    // Then the load of `weft bench memory`: 90 % sets of 100–50,000 bytes from four clients.
    std::thread::scope(|s| {
        for seed in 1..=CLIENTS as u64 {
            let addr = server.addr;
            let seed = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            s.spawn(move || load(addr, seed, None, 100, 50_000, SET_BYTES_PER_CLIENT));
        }
    });
    let peak = status_bytes("VmHWM:");
    let grown = peak.saturating_sub(before);
    let ratio = grown as f64 / limit as f64;
    eprintln!("peak RSS grew by {} MiB: {ratio:.2} × -m", grown >> 20);
    assert!(
        ratio <= 1.2,
        "peak RSS grew by {} MiB under -m {LIMIT_MB}: {ratio:.2} × -m",
        grown >> 20
    );
}
