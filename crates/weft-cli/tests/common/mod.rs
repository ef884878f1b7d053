//! What the binary's integration tests share: the `weft` command, a guard that kills a child
//! by PID, starting `weft memcached` on a free port, waiting for a child to exit, reading a
//! process's memory from `/proc`.
#![allow(dead_code)] // each test binary uses its own subset

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Kills the child by PID on drop (if it is still running).
pub struct ChildGuard(pub Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The binary under test.
pub fn weft() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weft"))
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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
    let port = free_port().to_string();
    let mut args = vec!["-p", &port, "-l", "127.0.0.1", "-U", "0", "-t", threads];
    args.extend_from_slice(extra);
    let mut guard = ChildGuard(memcached_command(&args).spawn().unwrap());
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).is_err() {
        if let Some(status) = guard.0.try_wait().unwrap() {
            panic!("weft memcached {extra:?} exited ({status}); its stderr is above");
        }
        assert!(Instant::now() < deadline, "nothing listens on {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
    (guard, addr)
}

/// Waits for `child` to exit; fails the test after `within`.
pub fn wait_exit(child: &mut Child, within: Duration) -> ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "did not exit within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `kB` field of `/proc/PID/status` (`VmRSS`, `VmHWM`, ...), in KiB.
pub fn status_kib(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}
