//! Child processes: the guard that kills one by PID, waiting for an exit, and what `/proc`
//! says of one (or of this process's own threads).

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// A child process killed (by its PID) and reaped on drop, if it is still running.
pub struct ChildGuard(pub Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether the tests run as root (memcached then needs `-u root`).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
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

/// This process's descriptor table capacity (`FDSize` in `/proc/self/status`).
pub fn descriptor_table_size() -> usize {
    let text = std::fs::read_to_string("/proc/self/status").unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("FDSize:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("no FDSize in /proc/self/status")
}

/// The OS threads of this process named `name` (their `comm`), as the kernel lists them.
pub fn threads_named(name: &str) -> Vec<u32> {
    let mut tids = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == name {
            tids.push(task.file_name().to_string_lossy().parse().unwrap());
        }
    }
    tids
}

/// Waits until `count()` is `want`; fails the test with what it last saw (`what`) after 10 s.
pub fn settle_count(want: usize, what: &str, count: impl Fn() -> usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = count();
        if n == want {
            return;
        }
        assert!(Instant::now() < deadline, "{n} {what}, expected {want}");
        std::thread::sleep(Duration::from_millis(10));
    }
}
