//! Opening a generator's persistent connections: many at once, but a bounded number of
//! attempts in flight, and an attempt that timed out tried again.
//!
//! Why: a connection the server has not accepted yet waits in its listen queue, whose length
//! is the server's backlog capped by `net.core.somaxconn` (4096 by default; std's listeners
//! ask for 128, nginx for 511, memcached for 1024). A SYN that finds the queue full is
//! dropped, and the client sends it again only after a second, then after two more: 15,360
//! connects started at once against memcached lost 188 to a 5 s connect timeout on
//! 2026-11-30, and 3,000 against a listener of 128 that accepts a thread at a time lost 1,822
//! to a 500 ms one (`docs/notes/scale.md`). A connect completes at the handshake, before the
//! server accepts, so bounding the attempts in flight ([`IN_FLIGHT`]) slows the flood but does
//! not bound the queue (the same 3,000 lost 384–640); an attempt that timed out is therefore
//! made again, up to [`ATTEMPTS`] times, by when the flood has been accepted.
//!
//! Invariant: at most `in_flight` connects are outstanding at any time; every index in
//! `0..count` yields one connection or one error.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use weft::net::TcpStream;

/// Connect attempts outstanding at once by default: no more than the shortest listen queue
/// a server here asks for (std's 128).
pub const IN_FLIGHT: usize = 128;

/// Attempts a connection gets when they time out (any other error ends it at once).
pub const ATTEMPTS: usize = 3;

/// Stack of a connecting fiber (it only connects and sets options).
const CONNECTOR_STACK_BYTES: usize = 64 * 1024;

/// What [`connect_many`] opened, and what it could not.
#[derive(Debug)]
pub struct Connected {
    /// The connections opened, in no particular order.
    pub streams: Vec<TcpStream>,
    /// Every failed attempt's error.
    pub failures: Vec<std::io::Error>,
}

/// Opens `count` connections to `addr` from at most `in_flight` fibers at once, each attempt
/// with `timeout` (up to [`ATTEMPTS`] of them when they time out), with `TCP_NODELAY` and
/// `SO_LINGER` 0: held for the whole run and closed with a reset after it, so no `TIME_WAIT`
/// sockets, whose expiry a minute later and all at once on the CPU that took the server's FIN
/// would stall a later run (6.7 ms for 15,360 connections on the benchmark VM).
pub fn connect_many(
    addr: SocketAddr,
    count: usize,
    timeout: Duration,
    in_flight: usize,
) -> std::io::Result<Connected> {
    let next = Arc::new(AtomicUsize::new(0));
    let connectors = (0..in_flight.clamp(1, count.max(1)))
        .map(|i| {
            let next = Arc::clone(&next);
            weft::Builder::new()
                .name(format!("load-connect-{i}"))
                .stack_size(CONNECTOR_STACK_BYTES)
                .spawn(move || {
                    let mut streams = Vec::new();
                    let mut failures = Vec::new();
                    while next.fetch_add(1, Ordering::Relaxed) < count {
                        match open(addr, timeout) {
                            Ok(s) => streams.push(s),
                            Err(e) => failures.push(e),
                        }
                    }
                    (streams, failures)
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut connected = Connected {
        streams: Vec::with_capacity(count),
        failures: Vec::new(),
    };
    for c in connectors {
        match c.join() {
            Ok((streams, failures)) => {
                connected.streams.extend(streams);
                connected.failures.extend(failures);
            }
            Err(e) => connected.failures.push(std::io::Error::other(format!(
                "a connecting fiber failed: {e}"
            ))),
        }
    }
    Ok(connected)
}

fn open(addr: SocketAddr, timeout: Duration) -> std::io::Result<TcpStream> {
    let mut attempt = 1;
    let s = loop {
        match TcpStream::connect_timeout(&addr, timeout) {
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut && attempt < ATTEMPTS => {
                attempt += 1
            }
            result => break result?,
        }
    };
    s.set_nodelay(true)?;
    s.set_linger(Some(Duration::ZERO))?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_connection_is_tried_once_and_a_refusal_is_not_tried_again() {
        let addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let started = std::time::Instant::now();
        let connected =
            crate::cpu::run_on_own_cluster("connect-test", 1, Duration::ZERO, move || {
                Ok(connect_many(addr, 300, Duration::from_secs(5), 16)?)
            })
            .unwrap();
        assert!(connected.streams.is_empty());
        assert_eq!(connected.failures.len(), 300);
        assert!(connected
            .failures
            .iter()
            .all(|e| e.kind() == std::io::ErrorKind::ConnectionRefused));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "no timeout waited"
        );
    }

    #[test]
    fn every_connection_opens_against_a_listener_that_accepts() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let accepter = std::thread::spawn(move || {
            (0..200)
                .map(|_| listener.accept().unwrap().0)
                .collect::<Vec<_>>()
        });
        let connected =
            crate::cpu::run_on_own_cluster("connect-test", 1, Duration::ZERO, move || {
                Ok(connect_many(addr, 200, Duration::from_secs(5), 16)?)
            })
            .unwrap();
        assert_eq!(connected.streams.len(), 200);
        assert!(connected.failures.is_empty(), "{:?}", connected.failures);
        assert_eq!(accepter.join().unwrap().len(), 200);
    }
}
