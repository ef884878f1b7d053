//! What the binary's integration tests share: the `weft` command and starting `weft memcached`
//! on a free port. The guard that kills a child by PID, waiting for a child to exit, reading a
//! process's memory from `/proc` and the peers come from `weft_testkit`.
#![allow(dead_code)] // each test binary uses its own subset

use std::net::SocketAddr;
use std::process::{Command, Stdio};

use weft_testkit::{is_root, ChildGuard};

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
    let started = weft_testkit::start_listening(|port| {
        let port = port.to_string();
        let mut args = vec!["-p", &port, "-l", "127.0.0.1", "-U", "0", "-t", threads];
        args.extend_from_slice(extra);
        ChildGuard(memcached_command(&args).spawn().unwrap())
    });
    // A start whose port another process took first is retried (its stderr, above, says so).
    started.unwrap_or_else(|e| panic!("weft memcached {extra:?}: {e}; its stderr is above"))
}
