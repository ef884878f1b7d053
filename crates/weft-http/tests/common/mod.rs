//! Helpers shared by the integration tests: a server on 127.0.0.1:0 in this process, a file
//! tree, raw HTTP over std sockets; the guard that kills child processes by PID and the rule
//! for a missing peer come from `weft_testkit`.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use weft_http::{Config, Server, ShutdownHandle};

/// A running server; shuts it down (and waits for `run` to return) on drop.
pub struct TestServer {
    pub addr: SocketAddr,
    handle: ShutdownHandle,
    thread: Option<std::thread::JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    pub fn start(config: Config) -> TestServer {
        let server = Server::bind(config).expect("bind");
        let addr = server.local_addr();
        let handle = server.shutdown_handle();
        let thread = std::thread::spawn(move || server.run());
        TestServer {
            addr,
            handle,
            thread: Some(thread),
        }
    }

    /// A server on an ephemeral port with test-friendly settings.
    pub fn serve(root: &Path) -> TestServer {
        TestServer::start(config(root))
    }

    /// Shuts down and waits for `run` to return; returns its result.
    pub fn stop(mut self) -> std::io::Result<()> {
        self.handle.shutdown();
        self.thread.take().unwrap().join().unwrap()
    }

    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.handle.clone()
    }

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    }

    /// One request on a new connection; the response.
    pub fn get(&self, request: &str) -> Response {
        let mut s = self.connect();
        s.write_all(request.as_bytes()).unwrap();
        read_response(&mut s, request.starts_with("HEAD")).expect("a response")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.handle.shutdown();
            let _ = t.join();
        }
    }
}

/// The defaults, on port 0, with short grace so a failing test does not hang.
pub fn config(root: &Path) -> Config {
    let mut c = Config::new(root);
    c.listen = "127.0.0.1:0".parse().unwrap();
    c.shutdown_grace = Duration::from_secs(10);
    c
}

/// A tree exercising every feature: files of several types, a directory with and without an
/// index, a nested file, a file with a space in its name.
pub fn tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::write(
        p.join("index.html"),
        "<html><body>root index</body></html>\n",
    )
    .unwrap();
    std::fs::write(p.join("a.txt"), "hello, world\n").unwrap();
    std::fs::write(p.join("style.css"), "body { color: red }\n").unwrap();
    std::fs::write(p.join("data.json"), "{\"a\": 1}\n").unwrap();
    std::fs::write(p.join("image.png"), pattern(3000)).unwrap();
    std::fs::write(p.join("photo.jpg"), pattern(5000)).unwrap();
    std::fs::write(p.join("big.bin"), pattern(300_000)).unwrap();
    std::fs::write(p.join("empty.txt"), "").unwrap();
    std::fs::write(p.join("with space.txt"), "spaced\n").unwrap();
    std::fs::create_dir(p.join("docs")).unwrap();
    std::fs::write(p.join("docs/index.html"), "<p>docs</p>\n").unwrap();
    std::fs::write(p.join("docs/page.html"), "<p>page</p>\n").unwrap();
    std::fs::create_dir(p.join("noindex")).unwrap();
    std::fs::write(p.join("noindex/x.txt"), "x\n").unwrap();
    std::fs::create_dir_all(p.join("deep/er/still")).unwrap();
    std::fs::write(p.join("deep/er/still/leaf.txt"), "leaf\n").unwrap();
    dir
}

/// Deterministic non-text bytes.
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// A parsed response.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one response (the body by `Content-Length`; none for HEAD or 304); `None` if the
/// connection closed before a status line.
pub fn read_response(s: &mut impl Read, head_only: bool) -> Option<Response> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            other => {
                if std::env::var_os("WEFT_TEST_DEBUG").is_some() {
                    eprintln!("read_response: {other:?} after {} bytes", head.len());
                }
                return None;
            }
        }
    }
    let text = String::from_utf8(head).unwrap();
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap();
    assert!(status_line.starts_with("HTTP/1.1 "), "{status_line}");
    let status: u16 = status_line[9..12].parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (n, v) = l.split_once(':').unwrap();
            (n.to_owned(), v.trim().to_owned())
        })
        .collect();
    let mut r = Response {
        status,
        headers,
        body: Vec::new(),
    };
    if !head_only && status != 304 {
        let len: usize = r.header("content-length").unwrap().parse().unwrap();
        r.body = vec![0; len];
        s.read_exact(&mut r.body)
            .unwrap_or_else(|e| panic!("the {len}-byte body of a {status} response: {e}"));
    }
    Some(r)
}

/// Whether the server closed the connection (EOF or reset) within 10 s, sending nothing more.
pub fn closed_by_server(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut b = [0u8; 1];
    loop {
        match s.read(&mut b) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Ok(0) => return true,
            Ok(_) => return false,
            Err(e) => {
                return !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                )
            }
        }
    }
}

/// `GET path` with HTTP/1.1 and a Host header, plus extra header lines.
pub fn get(path: &str, extra: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{extra}\r\n")
}

/// Requests `path` from `addr` with a small receive buffer, truncates the file to 1 MiB once
/// the head arrived, then reads to EOF; returns (body bytes received, Content-Length).
pub fn truncate_in_flight(addr: std::net::SocketAddr, p: &Path, path: &str) -> (usize, usize) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    shrink_receive_buffer(&s);
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .unwrap();
    let announced = read_head_content_length(&mut s);
    std::fs::OpenOptions::new()
        .write(true)
        .open(p)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    (read_to_eof(&mut s), announced)
}

/// Reads a response head byte by byte; returns its Content-Length.
pub fn read_head_content_length(s: &mut impl Read) -> usize {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(
            s.read(&mut byte).unwrap(),
            1,
            "the connection ended in a head"
        );
        head.push(byte[0]);
    }
    String::from_utf8(head)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .unwrap()
        .parse()
        .unwrap()
}

/// Reads until the server ends the connection (EOF or reset); returns the bytes read.
pub fn read_to_eof(s: &mut impl Read) -> usize {
    let mut got = 0;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("no EOF after a short body ({got} bytes): {e}"),
        }
    }
    got
}

/// A small receive buffer, so a server is still sending a big body when the test acts.
pub fn shrink_receive_buffer(s: &std::net::TcpStream) {
    use std::os::fd::AsRawFd;
    let size: libc::c_int = 16 * 1024;
    // SAFETY: setsockopt with a valid descriptor and an int option that outlives the call.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0);
}
