//! Hostile clients: each gets memcached's reply or is disconnected, and after each the server
//! still serves a well-behaved client. Memory stays bounded for a client that never reads.
//!
//! The tests on the default settings (all but the connection limit and the client that never
//! reads, which set their own and look inside the server) run against the server
//! `WEFT_TEST_SERVER=host:port` names when it is set: each uses keys of its own and assumes
//! nothing of what other clients did before.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{exchange, session, test_settings, WeftServer};

fn still_serves(server: &WeftServer) {
    let reply = session(server.addr, b"set ok 0 0 2\r\nok\r\nget ok\r\n");
    assert_eq!(reply, b"STORED\r\nVALUE ok 0 2\r\nok\r\nEND\r\nMN\r\n");
}

fn read_to_end(s: &mut TcpStream, timeout: Duration) -> Vec<u8> {
    s.set_read_timeout(Some(timeout)).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) => {
                out.extend_from_slice(b"<closed>");
                return out;
            }
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                out.extend_from_slice(b"<reset>");
                return out;
            }
            Err(_) => return out,
        }
    }
}

#[test]
fn overlong_line_without_newline_is_closed() {
    let server = WeftServer::default_or_env();
    let reply = exchange(server.addr, &[b'x'; 5000], b"", Duration::from_secs(2));
    assert_eq!(reply, b"<closed>");
    // A long line that does end is just an unknown command.
    let mut line = vec![b'y'; 2100];
    line.extend_from_slice(b"\r\n");
    assert_eq!(session(server.addr, &line), b"ERROR\r\nMN\r\n");
    still_serves(&server);
}

#[test]
fn bad_numbers_get_memcached_errors() {
    let server = WeftServer::default_or_env();
    let reply = session(
        server.addr,
        b"set k 0 0 -5\r\nset k x 0 1\r\nincr k 99999999999999999999\r\ntouch k x\r\nflush_all x\r\n",
    );
    assert_eq!(
        reply,
        b"CLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad command line format\r\n\
          CLIENT_ERROR invalid numeric delta argument\r\nCLIENT_ERROR invalid exptime argument\r\n\
          CLIENT_ERROR invalid exptime argument\r\nMN\r\n"
    );
    still_serves(&server);
}

#[test]
fn truncated_data_block_then_close_stores_nothing() {
    let server = WeftServer::default_or_env();
    {
        let mut s = TcpStream::connect(server.addr).unwrap();
        s.write_all(b"set trunc 0 0 100\r\nonly a few bytes")
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(session(server.addr, b"get trunc\r\n"), b"END\r\nMN\r\n");
    still_serves(&server);
}

#[test]
fn binary_garbage_is_answered_or_closed() {
    let server = WeftServer::default_or_env();
    let mut seed = 0x1234_5678_9abc_def0u64;
    for round in 0..20 {
        let garbage: Vec<u8> = (0..4096 + round * 512)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        let mut s = TcpStream::connect(server.addr).unwrap();
        let _ = s.write_all(&garbage);
        let _ = s.write_all(b"\r\n");
        let _ = read_to_end(&mut s, Duration::from_millis(300));
    }
    still_serves(&server);
}

#[test]
fn one_byte_at_a_time_client_is_served() {
    let server = WeftServer::default_or_env();
    let mut s = TcpStream::connect(server.addr).unwrap();
    s.set_nodelay(true).unwrap();
    for b in b"set slow 0 0 5\r\nhello\r\nget slow\r\n" {
        s.write_all(&[*b]).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        // Meanwhile others are served.
    }
    still_serves(&server);
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let want = b"STORED\r\nVALUE slow 0 5\r\nhello\r\nEND\r\n";
    let mut got = vec![0u8; want.len()];
    s.read_exact(&mut got).unwrap();
    assert_eq!(got, want);
}

#[test]
fn connections_over_the_limit_are_refused() {
    let mut settings = test_settings();
    settings.max_connections = 4;
    let server = WeftServer::start(settings);
    let mut held: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut s = TcpStream::connect(server.addr).unwrap();
            s.write_all(b"version\r\n").unwrap();
            let mut buf = [0u8; 64];
            let n = s.read(&mut buf).unwrap();
            assert!(buf[..n].starts_with(b"VERSION "));
            s
        })
        .collect();
    let mut extra = TcpStream::connect(server.addr).unwrap();
    let reply = read_to_end(&mut extra, Duration::from_secs(5));
    assert_eq!(reply, b"ERROR Too many open connections\r\n<closed>");
    let stats = &server.server().context().store.stats;
    assert_eq!(stats.rejected_connections.load(Ordering::Relaxed), 1);
    // Closing one makes room again.
    held.pop();
    let deadline = Instant::now() + Duration::from_secs(5);
    while server
        .server()
        .context()
        .curr_connections
        .load(Ordering::Relaxed)
        >= 4
    {
        assert!(
            Instant::now() < deadline,
            "the closed connection was not noticed"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    still_serves(&server);
}

#[test]
fn client_that_never_reads_is_bounded_and_disconnected() {
    let mut settings = test_settings();
    settings.write_stall_timeout_ms = 300;
    let server = WeftServer::start(settings);
    let value = vec![b'v'; 512 * 1024];
    let mut set = b"set huge 0 0 524288\r\n".to_vec();
    set.extend_from_slice(&value);
    set.extend_from_slice(b"\r\n");
    assert_eq!(session(server.addr, &set), b"STORED\r\nMN\r\n");

    let ctx = server.server().context().clone();
    let before = ctx.curr_connections.load(Ordering::Relaxed);
    let mut hog = TcpStream::connect(server.addr).unwrap();
    // Ask for ~200 MB of replies and never read them.
    hog.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    for _ in 0..400 {
        if hog.write_all(b"get huge\r\n").is_err() {
            break;
        }
    }
    // Others are served meanwhile.
    still_serves(&server);
    let deadline = Instant::now() + Duration::from_secs(20);
    while ctx.curr_connections.load(Ordering::Relaxed) > before {
        assert!(
            Instant::now() < deadline,
            "a client that never reads was not disconnected"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    still_serves(&server);
}
