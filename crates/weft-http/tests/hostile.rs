//! Hostile and unlucky clients: garbage, oversized heads, slow senders, idle connections,
//! too many connections, and shutdown while responses are in flight.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;

fn answer_then_close(server: &TestServer, bytes: &[u8]) -> u16 {
    let mut s = server.connect();
    s.write_all(bytes).unwrap();
    let r = read_response(&mut s, false).expect("a response before the close");
    assert_eq!(r.header("connection"), Some("close"));
    assert!(closed_by_server(&mut s));
    r.status
}

#[test]
fn garbage_is_400_and_close() {
    let dir = tree();
    let server = TestServer::serve(dir.path());
    for garbage in [
        &b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage-tls-hello\r\n\r\n"[..],
        b"GET\r\n\r\n",
        b"GET / HTTP/1.1\r\nno colon here\r\n\r\n",
        b"GET / HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"GET / FOO/1.1\r\nHost: x\r\n\r\n",
        b"GET relative HTTP/1.1\r\nHost: x\r\n\r\n",
    ] {
        assert_eq!(answer_then_close(&server, garbage), 400, "{garbage:?}");
    }
    assert_eq!(
        answer_then_close(&server, b"GET / HTTP/2.0\r\nHost: x\r\n\r\n"),
        505
    );
    // Random bytes never crash it; it still serves afterwards.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..200 {
        let len = (seed % 300) as usize + 1;
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        let mut s = server.connect();
        let _ = s.write_all(&bytes);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    }
    assert_eq!(server.get(&get("/a.txt", "")).status, 200);
}

#[test]
fn oversized_heads() {
    let dir = tree();
    let server = TestServer::serve(dir.path());
    let long_uri = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(10_000));
    assert_eq!(answer_then_close(&server, long_uri.as_bytes()), 414);
    // The request line alone, never finished, already too long.
    let endless = format!("GET /{}", "a".repeat(20_000));
    assert_eq!(answer_then_close(&server, endless.as_bytes()), 414);
    let big_header = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nCookie: {}\r\n\r\n",
        "c".repeat(70_000)
    );
    assert_eq!(answer_then_close(&server, big_header.as_bytes()), 431);
    // Many short lines are fine (nginx counts none), up to the byte limit.
    let many: String = (0..1000).map(|i| format!("X-H{i}: v\r\n")).collect();
    let many = format!("GET /a.txt HTTP/1.1\r\nHost: x\r\n{many}\r\n");
    assert_eq!(server.get(&many).status, 200);
    let too_many: String = (0..20_000).map(|_| "X:\r\n").collect();
    let too_many = format!("GET / HTTP/1.1\r\nHost: x\r\n{too_many}\r\n");
    assert_eq!(answer_then_close(&server, too_many.as_bytes()), 431);
    // Just under the limits is fine.
    let ok = format!(
        "GET /a.txt?{} HTTP/1.1\r\nHost: x\r\n\r\n",
        "q".repeat(8000)
    );
    assert_eq!(server.get(&ok).status, 200);
}

/// Every head limit is a setting, and each answers with its status (RFC 9112 §3: 414 for a
/// long request line; RFC 6585 §5: 431 for header fields too large or too many; RFC 9110
/// §15.5.14: 413 for a body too large); one request under each limit passes.
#[test]
fn configured_limits_and_their_statuses() {
    let dir = tree();
    let mut c = config(dir.path());
    c.max_request_line_bytes = 100;
    c.max_head_bytes = 500;
    c.max_header_lines = 10;
    c.max_body_bytes = 10;
    let server = TestServer::start(c);
    let line = |n: usize| format!("GET /a.txt?{} HTTP/1.1\r\nHost: x\r\n\r\n", "q".repeat(n));
    assert_eq!(answer_then_close(&server, line(100).as_bytes()), 414);
    assert_eq!(server.get(&line(60)).status, 200);
    let head = |n: usize| get("/a.txt", &format!("X: {}\r\n", "h".repeat(n)));
    assert_eq!(answer_then_close(&server, head(500).as_bytes()), 431);
    assert_eq!(server.get(&head(300)).status, 200);
    let lines = |n: usize| get("/a.txt", &"X: y\r\n".repeat(n));
    // Host is one of the lines.
    assert_eq!(answer_then_close(&server, lines(10).as_bytes()), 431);
    assert_eq!(server.get(&lines(9)).status, 200);
    let body = |n: usize| get("/a.txt", &format!("Content-Length: {n}\r\n"));
    assert_eq!(answer_then_close(&server, body(11).as_bytes()), 413);
    let mut ok = body(10);
    ok.push_str("0123456789");
    assert_eq!(server.get(&ok).status, 200);
}

#[test]
fn slow_header_gets_408_and_idle_connections_close() {
    let dir = tree();
    let mut c = config(dir.path());
    c.header_timeout = Duration::from_millis(300);
    c.keepalive_timeout = Duration::from_millis(300);
    let server = TestServer::start(c);
    // A slowloris: a byte at a time, never finishing; the deadline counts from the first
    // byte, so trickling does not extend it.
    let mut s = server.connect();
    let started = Instant::now();
    let mut status = None;
    for b in b"GET /a.txt HTTP/1.1\r\nHost: x\r\nX-Slow: ".iter().cycle() {
        if s.write_all(&[*b]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        s.set_nonblocking(true).unwrap();
        let mut peek = [0u8; 1];
        let ready = s.peek(&mut peek).is_ok();
        s.set_nonblocking(false).unwrap();
        if ready {
            status = read_response(&mut s, false).map(|r| r.status);
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "never timed out"
        );
    }
    assert_eq!(status, Some(408));
    // An idle kept-alive connection is closed without a response.
    let mut s = server.connect();
    s.write_all(get("/a.txt", "").as_bytes()).unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().status, 200);
    assert!(closed_by_server(&mut s));
    // A connection that never sends anything is closed too.
    let mut s = server.connect();
    assert!(closed_by_server(&mut s));
}

#[test]
fn connection_limit_refuses_with_503_and_recovers() {
    let dir = tree();
    let mut c = config(dir.path());
    c.max_connections = 4;
    let server = TestServer::start(c);
    let mut held: Vec<TcpStream> = Vec::new();
    for _ in 0..4 {
        let mut s = server.connect();
        s.write_all(get("/a.txt", "").as_bytes()).unwrap();
        assert_eq!(read_response(&mut s, false).unwrap().status, 200);
        held.push(s);
    }
    let r = server.get(&get("/a.txt", ""));
    assert_eq!(r.status, 503);
    assert_eq!(r.header("connection"), Some("close"));
    // The held connections still work.
    for s in &mut held {
        s.write_all(get("/style.css", "").as_bytes()).unwrap();
        assert_eq!(read_response(s, false).unwrap().status, 200);
    }
    // Once they close, new connections are served again.
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = server.get(&get("/a.txt", ""));
        if r.status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "never recovered: {}", r.status);
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Raises this process's descriptor limit (the test opens both ends of every connection):
/// the hard limit too when privileged, else up to the hard limit. Returns the soft limit.
fn raise_nofile(want: u64) -> u64 {
    // SAFETY: getrlimit/setrlimit on a local struct.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        if r.rlim_cur >= want {
            return r.rlim_cur;
        }
        let raised = libc::rlimit {
            rlim_cur: want,
            rlim_max: want.max(r.rlim_max),
        };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        r.rlim_cur
    }
}

fn many_connections(n: usize) {
    let limit = raise_nofile(2 * n as u64 + 1000);
    let fit = (limit as usize).saturating_sub(1000) / 2;
    if fit < n {
        eprintln!("note: RLIMIT_NOFILE {limit} allows only {fit} of the {n} connections");
    }
    let n = n.min(fit);
    let dir = tree();
    let server = TestServer::serve(dir.path());
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        conns.push(server.connect());
    }
    // Every one of them gets answered, in a round over all, then again.
    for round in 0..2 {
        for s in conns.iter_mut() {
            s.write_all(get("/a.txt", "").as_bytes()).unwrap();
        }
        for (i, s) in conns.iter_mut().enumerate() {
            let r = read_response(s, false).unwrap_or_else(|| panic!("conn {i} round {round}"));
            assert_eq!(r.status, 200);
        }
    }
}

#[test]
fn two_thousand_connections_at_once() {
    many_connections(2_000);
}

/// The 20,000, with the clients in a child process (this test binary re-executed) so
/// that each side needs one descriptor per connection: as many as the hard descriptor limit
/// allows, up to 20,000. Slow in debug builds, so run it on demand:
/// `cargo test --release -p weft-http --test hostile -- --ignored`.
#[test]
#[ignore]
fn twenty_thousand_connections_at_once() {
    const TEST: &str = "twenty_thousand_connections_at_once";
    const READY: &str = "WEFT-HTTP-CLIENTS-DONE";
    if let Ok(spec) = std::env::var("WEFT_HTTP_MANY_CLIENT") {
        let (addr, n) = spec.split_once(',').unwrap();
        let n: usize = n.parse().unwrap();
        raise_nofile(n as u64 + 100);
        let mut conns: Vec<TcpStream> = (0..n)
            .map(|i| TcpStream::connect(addr).unwrap_or_else(|e| panic!("connection {i}: {e}")))
            .collect();
        for round in 0..2 {
            for s in conns.iter_mut() {
                s.write_all(get("/a.txt", "").as_bytes()).unwrap();
            }
            for (i, s) in conns.iter_mut().enumerate() {
                s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                let r = read_response(s, false)
                    .unwrap_or_else(|| panic!("connection {i}, round {round}: no answer"));
                assert_eq!(r.status, 200);
            }
        }
        println!("{READY} {n}");
        return;
    }
    let limit = raise_nofile(20_300);
    let n = 20_000.min(limit as usize - 300);
    if n < 20_000 {
        eprintln!("note: RLIMIT_NOFILE {limit} allows {n} connections per process, not 20,000");
    }
    let dir = tree();
    let mut c = config(dir.path());
    c.max_connections = n;
    let server = TestServer::start(c);
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            TEST,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("WEFT_HTTP_MANY_CLIENT", format!("{},{n}", server.addr))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains(&format!("{READY} {n}")),
        "the client process failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{n} connections held open at once, each answered twice");
}

#[test]
fn shutdown_finishes_responses_in_flight_and_closes_idle_connections() {
    let dir = tree();
    let big = pattern(8 << 20);
    std::fs::write(dir.path().join("huge.bin"), &big).unwrap();
    let server = TestServer::serve(dir.path());
    // An idle kept-alive connection.
    let mut idle = server.connect();
    idle.write_all(get("/a.txt", "").as_bytes()).unwrap();
    assert_eq!(read_response(&mut idle, false).unwrap().status, 200);
    // A slow reader mid-download of a file larger than the socket buffers.
    let mut slow = server.connect();
    shrink_receive_buffer(&slow);
    slow.write_all(get("/huge.bin", "").as_bytes()).unwrap();
    let mut head = [0u8; 64];
    slow.read_exact(&mut head).unwrap();
    // A client half-way through a request head: nothing is owed to it yet.
    let mut partial = server.connect();
    partial
        .write_all(b"GET /a.txt HTTP/1.1\r\nHost: x\r\nX-Half")
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let handle = server.shutdown_handle();
    let stopper = std::thread::spawn(move || {
        handle.shutdown();
    });
    stopper.join().unwrap();
    // The idle and the half-sent ones are closed without an answer (well before the 30 s
    // header timeout); the download completes in full.
    assert!(closed_by_server(&mut idle));
    assert!(closed_by_server(&mut partial));
    let mut rest = Vec::new();
    slow.read_to_end(&mut rest).unwrap();
    let mut whole = head.to_vec();
    whole.extend_from_slice(&rest);
    let body_at = whole.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert_eq!(whole.len() - body_at, big.len());
    assert!(whole[body_at..] == big[..]);
    let addr = server.addr;
    server.stop().unwrap();
    // The listener is closed.
    assert!(TcpStream::connect(addr).is_err());
}

/// A small receive buffer, so the server's send really has to wait for the reader.
fn shrink_receive_buffer(s: &TcpStream) {
    use std::os::fd::AsRawFd;
    let size: libc::c_int = 16 * 1024;
    // SAFETY: setsockopt with a valid descriptor and an int option that outlives the call.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}
