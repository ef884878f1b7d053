//! What the binary's integration tests share: the `weft` command and starting `weft memcached`
//! on a free port. The guard that kills a child by PID, waiting for a child to exit, reading a
//! process's memory from `/proc` and the peers come from `weft_testkit`.
#![allow(dead_code)] // each test binary uses its own subset

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use weft_testkit::{free_port, is_root, ChildGuard, NotListening};

/// The binary under test.
pub fn weft() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weft"))
}

/// `weft memcached` with `extra` flags, as memcached would be started (`-u root` when root);
/// stderr goes to the test's output.
pub fn memcached_command(extra: &[&str]) -> Command {
    let mut cmd = weft();
    cmd.arg("memcached").args(extra);
    if is_root() {
        cmd.args(["-u", "root"]);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    cmd
}

/// Spawns a memcached-like `cmd` as an operator would (`-u root` when root), its stderr piped
/// for the test to read.
pub fn spawn_with_stderr(cmd: &mut Command) -> ChildGuard {
    if is_root() {
        cmd.args(["-u", "root"]);
    }
    ChildGuard(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

/// Starts `weft memcached -t 2` with `extra` flags on a free localhost port and waits (up to
/// 10 s) until it accepts connections.
pub fn start_memcached(extra: &[&str]) -> (ChildGuard, SocketAddr) {
    start_memcached_threads("2", extra)
}

/// [`start_memcached`] with `-t threads` (weft refuses a repeated `-t`).
pub fn start_memcached_threads(threads: &str, extra: &[&str]) -> (ChildGuard, SocketAddr) {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let port = free_port().to_string();
        let mut args = vec!["-p", &port, "-l", "127.0.0.1", "-U", "0", "-t", threads];
        args.extend_from_slice(extra);
        let mut guard = ChildGuard(memcached_command(&args).spawn().unwrap());
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let within = Duration::from_secs(10);
        match weft_testkit::listening_within(addr, Some(&mut guard.0), within) {
            Ok(()) => return (guard, addr),
            // Another process took the free port first (its stderr, above, says so).
            Err(NotListening::Exited(_)) if attempt < weft_testkit::START_ATTEMPTS => continue,
            Err(e) => panic!("weft memcached {extra:?}: {e}; its stderr is above"),
        }
    }
}
