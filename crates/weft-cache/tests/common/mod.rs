//! Shared helpers for the integration tests: an in-process weft server (or the one
//! `WEFT_TEST_SERVER` names), and a client that sends a script and collects the reply. The real
//! memcached in a child process, killed on drop, comes from `weft_testkit`.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use weft_cache::{Server, Settings};

/// Settings for a test server on a free localhost port.
pub fn test_settings() -> Settings {
    Settings {
        port: 0,
        listen: vec!["127.0.0.1".into()],
        processors: 2,
        ..Settings::default()
    }
}

/// A weft server that shuts down when dropped, or the already running server
/// `WEFT_TEST_SERVER` names ([`WeftServer::default_or_env`]), left running.
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

    /// The server `WEFT_TEST_SERVER` names if it is set, else one started on
    /// [`test_settings`]: for the tests that need nothing but the default settings and assume
    /// nothing of the server's state (see `weft_testkit::SERVER_ENV`).
    pub fn default_or_env() -> WeftServer {
        match weft_testkit::server_from_env() {
            Some(addr) => WeftServer { server: None, addr },
            None => WeftServer::start(test_settings()),
        }
    }

    /// The in-process server; a test that looks inside it does not honour `WEFT_TEST_SERVER`.
    pub fn server(&self) -> &Server {
        self.server
            .as_ref()
            .expect("an in-process server (this test ignores WEFT_TEST_SERVER)")
    }
}

impl Drop for WeftServer {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown(Duration::from_millis(200));
        }
    }
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
