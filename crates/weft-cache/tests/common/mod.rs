//! Shared helpers for the integration tests: an in-process weft server, a real memcached in a
//! child process (killed on drop), and a client that sends a script and collects the reply.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use weft_cache::{Server, Settings};

pub const MEMCACHED: &str = "/usr/bin/memcached";

/// Settings for a test server on a free localhost port.
pub fn test_settings() -> Settings {
    Settings {
        port: 0,
        listen: vec!["127.0.0.1".into()],
        processors: 2,
        ..Settings::default()
    }
}

/// A weft server that shuts down when dropped.
pub struct WeftServer {
    server: Option<Server>,
    pub addr: SocketAddr,
}

impl WeftServer {
    pub fn start(settings: Settings) -> WeftServer {
        let server = Server::start(settings).expect("start weft memcached");
        let addr = server.local_addrs()[0];
        WeftServer {
            server: Some(server),
            addr,
        }
    }

    pub fn server(&self) -> &Server {
        self.server.as_ref().unwrap()
    }
}

impl Drop for WeftServer {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown(Duration::from_millis(200));
        }
    }
}

/// A child process killed (by its PID) on drop.
pub struct ChildGuard(pub Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits until something accepts on `addr`.
pub fn wait_listening(addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts the real memcached with `extra` flags, or returns `None` (with a note) when it is
/// not installed; under `CI=true` a missing memcached fails the test instead.
pub fn start_memcached(extra: &[&str]) -> Option<(ChildGuard, SocketAddr)> {
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
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        cmd.args(["-u", "root"]);
    }
    let child = ChildGuard(cmd.spawn().expect("spawn memcached"));
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    wait_listening(addr);
    Some((child, addr))
}

/// Sends `script` on a new connection and reads until the reply ends with `until` (or the
/// server closes, or `idle` passes without a byte).
pub fn exchange(addr: SocketAddr, script: &[u8], until: &[u8], idle: Duration) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    s.write_all(script).unwrap();
    s.set_read_timeout(Some(idle)).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        if !until.is_empty() && out.ends_with(until) {
            return out;
        }
        match s.read(&mut buf) {
            Ok(0) => {
                out.extend_from_slice(b"<closed>");
                return out;
            }
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // Closing with unread input makes the kernel send a reset: still a close.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                out.extend_from_slice(b"<closed>");
                return out;
            }
            Err(_) => return out,
        }
    }
}

/// Sends one request script and returns everything up to the `mn` sentinel's `MN\r\n`.
pub fn session(addr: SocketAddr, script: &[u8]) -> Vec<u8> {
    let mut full = script.to_vec();
    full.extend_from_slice(b"mn\r\n");
    exchange(addr, &full, b"MN\r\n", Duration::from_millis(1500))
}

/// Escapes for readable assertion messages.
pub fn show(b: &[u8]) -> String {
    b.escape_ascii().to_string()
}
