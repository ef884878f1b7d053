//! Ports and listeners: a free port, waiting until something accepts, and the server a test
//! is pointed at by `WEFT_TEST_SERVER`.

use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::process::Child;
use std::time::{Duration, Instant};

/// The variable that points the memcached-protocol tests at a server already running, as
/// memcached's `T_MEMD_USE_DAEMON` does for its own test suite: `WEFT_TEST_SERVER=host:port`.
///
/// Honoured by the tests that start a server on the default settings and assume nothing of
/// its state (weft-cache's `hostile.rs`, the five on default settings, and
/// `differential_flags.rs`'s `http_request_line_closes_like_memcached`); a test that needs
/// other settings, or looks inside the server, still starts its own. The server must speak
/// memcached 1.6.18's text protocol with its default limits (`weft memcached` with no flags,
/// say a release build, or one under `strace` or `perf`).
pub const SERVER_ENV: &str = "WEFT_TEST_SERVER";

/// The server [`SERVER_ENV`] names, or `None` when it is unset or empty. A value that does not
/// resolve fails the test: a typo must not quietly test the in-process server instead.
pub fn server_from_env() -> Option<SocketAddr> {
    let value = std::env::var(SERVER_ENV).ok().filter(|v| !v.is_empty())?;
    let addr = value
        .to_socket_addrs()
        .unwrap_or_else(|e| panic!("{SERVER_ENV}={value}: not host:port ({e})"))
        .next()
        .unwrap_or_else(|| panic!("{SERVER_ENV}={value}: resolves to no address"));
    eprintln!("{SERVER_ENV}: testing the server on {addr}");
    Some(addr)
}

/// A free TCP port on 127.0.0.1 (bound and released; good enough for a child to take).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits (up to 10 s) until something accepts on `addr`. With `child`, its early exit fails
/// the test at once, with `what` and its status.
pub fn wait_listening(addr: SocketAddr, child: Option<&mut Child>, what: &str) {
    if let Err(e) = listening_within(addr, child, Duration::from_secs(10)) {
        panic!("{what}: {e}");
    }
}

/// Waits until something accepts on `addr`: `Err` (saying which) if `child` exits first or
/// `within` passes.
pub fn listening_within(
    addr: SocketAddr,
    mut child: Option<&mut Child>,
    within: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + within;
    while TcpStream::connect(addr).is_err() {
        if let Some(child) = child.as_deref_mut() {
            if let Some(status) = child.try_wait().unwrap() {
                return Err(format!("exited ({status}) before listening on {addr}"));
            }
        }
        if Instant::now() >= deadline {
            return Err(format!("nothing listens on {addr} after {within:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}
