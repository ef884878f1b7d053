//! `weft http` as an operator runs it: the binary, its flags, its errors, and SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

mod common;
use common::weft;
use weft_testkit::{wait_exit, ChildGuard};

/// A fresh directory under the system temp dir with one file.
fn site(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weft-http-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("hello.txt"), "hello from weft\n").unwrap();
    dir
}

/// Starts `weft http` on an ephemeral port and returns it with the address it printed.
fn start(root: &PathBuf, extra: &[&str]) -> (ChildGuard, SocketAddr) {
    let mut child = weft()
        .args(["http", "--root"])
        .arg(root)
        .args(["--listen", "127.0.0.1:0"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let guard = ChildGuard(child);
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .parse()
        .unwrap();
    (guard, addr)
}

fn fetch(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn sigterm(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn serves_then_exits_zero_on_sigterm() {
    for io in ["uring", "epoll"] {
        let root = site(&format!("serve-{io}"));
        let log = root.join("access.log");
        let (mut guard, addr) = start(
            &root,
            &[
                "--io",
                io,
                "--processors",
                "2",
                "--access-log",
                log.to_str().unwrap(),
            ],
        );
        let reply = fetch(addr, "/hello.txt");
        assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
        assert!(reply.ends_with("\r\n\r\nhello from weft\n"), "{reply}");
        // An idle keep-alive connection must not hold the shutdown up.
        let mut idle = TcpStream::connect(addr).unwrap();
        idle.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut buf = [0u8; 512];
        let _ = idle.read(&mut buf).unwrap();
        sigterm(&guard.0);
        let status = wait_exit(&mut guard.0, Duration::from_secs(30));
        assert!(status.success(), "{status:?}");
        assert!(
            TcpStream::connect(addr).is_err(),
            "still listening after exit"
        );
        let logged = std::fs::read_to_string(&log).unwrap();
        assert!(
            logged.contains("\"GET /hello.txt HTTP/1.1\" 200 16"),
            "{logged}"
        );
        let _ = std::fs::remove_dir_all(&root);
    }
}

#[test]
fn defaults_to_the_current_directory() {
    let root = site("cwd");
    let mut child = weft()
        .args(["http", "--listen", "127.0.0.1:0"])
        .current_dir(&root)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let guard = ChildGuard(child);
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let addr: SocketAddr = line.trim()["listening on ".len()..].parse().unwrap();
    assert!(fetch(addr, "/hello.txt").ends_with("hello from weft\n"));
    drop(guard);
    let _ = std::fs::remove_dir_all(&root);
}

fn fails_with(args: &[&str], expected: &str) {
    let out = weft().args(args).output().unwrap();
    assert!(!out.status.success(), "{args:?} succeeded");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(expected), "{args:?}: {err}");
}

#[test]
fn clear_errors() {
    fails_with(
        &[
            "http",
            "--root",
            "/nonexistent/weft-root",
            "--listen",
            "127.0.0.1:0",
        ],
        "/nonexistent/weft-root",
    );
    let root = site("errors");
    let file = root.join("hello.txt");
    fails_with(
        &[
            "http",
            "--root",
            file.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ],
        "not a directory",
    );
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().to_string();
    fails_with(
        &["http", "--root", root.to_str().unwrap(), "--listen", &port],
        "Address already in use",
    );
    fails_with(
        &["http", "--listen", "nonsense"],
        "invalid value 'nonsense'",
    );
    fails_with(&["http", "--processors", "0"], "--processors");
    fails_with(&["http", "--scheduler", "nope"], "nope");
    fails_with(&["http", "--io", "kqueue"], "kqueue");
    fails_with(&["http", "--max-connections", "0"], "--max-connections");
    let _ = std::fs::remove_dir_all(&root);
}

/// The head limits are flags, and each answers with its status.
#[test]
fn head_limit_flags() {
    let root = site("limits");
    let (_guard, addr) = start(
        &root,
        &[
            "--max-request-line-bytes",
            "100",
            "--max-header-bytes",
            "400",
            "--max-header-lines",
            "5",
            "--max-body-bytes",
            "10",
            "--max-ranges",
            "2",
        ],
    );
    let status = |request: String| -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out)
            .lines()
            .next()
            .unwrap_or("")
            .to_owned()
    };
    let get = |path: &str, extra: &str| {
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{extra}\r\n")
    };
    let long = format!("/hello.txt?{}", "q".repeat(100));
    assert!(status(get(&long, "")).starts_with("HTTP/1.1 414"));
    let big = format!("X: {}\r\n", "b".repeat(400));
    assert!(status(get("/hello.txt", &big)).starts_with("HTTP/1.1 431"));
    let lines = "A: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n";
    assert!(status(get("/hello.txt", lines)).starts_with("HTTP/1.1 431"));
    let lines = "A: 1\r\nB: 2\r\nC: 3\r\n";
    assert!(status(get("/hello.txt", lines)).starts_with("HTTP/1.1 200"));
    let body = "Content-Length: 11\r\n";
    assert!(status(get("/hello.txt", body)).starts_with("HTTP/1.1 413"));
    let ranges = "Range: bytes=0-0,2-2,4-4\r\n";
    assert!(status(get("/hello.txt", ranges)).starts_with("HTTP/1.1 200"));
    let ranges = "Range: bytes=0-0,2-2\r\n";
    assert!(status(get("/hello.txt", ranges)).starts_with("HTTP/1.1 206"));
    fails_with(&["http", "--max-header-lines", "0"], "--max-header-lines");
    fails_with(&["http", "--max-header-bytes", "10"], "--max-header-bytes");
    let _ = std::fs::remove_dir_all(&root);
}

/// A file truncated while its body is in flight: the connection ends early and the server
/// says so on stderr (as nginx's error log says "file was truncated").
#[test]
fn a_file_truncated_in_flight_is_logged() {
    let root = site("truncated");
    let huge = root.join("huge.bin");
    let len = 32usize << 20;
    std::fs::write(&huge, vec![7u8; len]).unwrap();
    let mut child = weft()
        .args(["http", "--root"])
        .arg(&root)
        .args(["--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let _guard = ChildGuard(child);
    let (lines_tx, lines) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in stderr.lines() {
            let Ok(line) = line else { return };
            if lines_tx.send(line).is_err() {
                return;
            }
        }
    });
    let first = lines.recv_timeout(Duration::from_secs(10)).unwrap();
    let addr: SocketAddr = first
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {first:?}"))
        .parse()
        .unwrap();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"GET /huge.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).unwrap(), 1);
        head.push(byte[0]);
    }
    assert!(String::from_utf8_lossy(&head).contains(&format!("Content-Length: {len}\r\n")));
    std::fs::OpenOptions::new()
        .write(true)
        .open(&huge)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let mut got = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("no end after {got} bytes: {e}"),
        }
    }
    assert!(got < len, "{got}");
    let line = lines.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        line.contains("\"/huge.bin\" was truncated while being sent")
            && line.contains(&format!("of {len} bytes")),
        "{line}"
    );
    let _ = std::fs::remove_dir_all(&root);
}
