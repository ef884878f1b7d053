//! `weft bench echo` as a user runs it: its flags, and the server CPU cap.

use std::path::Path;
use std::process::Command;

fn weft() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weft"))
}

#[test]
fn a_cap_outside_1_to_100_is_refused() {
    for bad in ["0", "101", "half"] {
        let out = weft()
            .args(["bench", "echo", "--server-cpu-pct", bad])
            .output()
            .unwrap();
        assert!(!out.status.success(), "--server-cpu-pct {bad} accepted");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("--server-cpu-pct"),
            "the error names the flag"
        );
    }
}

/// Whether this machine can run the capped benchmark: two CPUs, root, a cgroup cpu controller.
fn can_cap() -> bool {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    // SAFETY: plain getter.
    let root = unsafe { libc::geteuid() } == 0;
    let controller = Path::new("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists()
        || std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers")
            .is_ok_and(|c| c.split_whitespace().any(|x| x == "cpu"));
    cpus >= 2 && root && controller
}

#[test]
fn a_capped_server_stays_under_its_cap_and_the_cgroup_is_removed() {
    if !can_cap() {
        eprintln!("skipped: needs 2 CPUs, root and a cgroup cpu controller");
        return;
    }
    let child = weft()
        .args(["bench", "echo", "--backend", "uring", "--connections", "16"])
        .args(["--duration", "1", "--server-cpu-pct", "30", "--json"])
        .output()
        .unwrap();
    assert!(
        child.status.success(),
        "{}",
        String::from_utf8_lossy(&child.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&child.stdout).unwrap();
    assert_eq!(report["server_cpu_pct"], 30);
    assert!(report["requests"].as_u64().unwrap() > 0);
    let share =
        report["server_cpu_seconds"].as_f64().unwrap() / report["seconds"].as_f64().unwrap();
    // 30 % of a core, plus the granularity of /proc's CPU clock (10 ms ticks) over 1 s.
    assert!(share <= 0.30 + 0.05, "the server used {share:.2} of a core");
    let leftover: Vec<_> = ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup"]
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("weft-bench-echo-")
        })
        .map(|e| e.path())
        .collect();
    assert!(leftover.is_empty(), "cgroups left behind: {leftover:?}");
}
