//! `weft bench memcached --open-loop` and `weft bench http --open-loop` as a user runs them,
//! tiny: both servers in one table with their p999, and the flags' limits. The real memcached
//! and nginx are required under `CI=true`; elsewhere a missing one is a `SKIP`.

use std::process::Command;

fn weft() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weft"))
}

#[test]
fn open_loop_prints_both_servers_side_by_side_with_p999() {
    if weft_testkit::require("memcached").is_none() {
        return;
    }
    let out = weft()
        .args([
            "bench",
            "memcached",
            "--open-loop",
            "0.5",
            "--connections",
            "64",
        ])
        .args(["--duration", "1", "--runs", "1", "--keys", "1000"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("memcached peak (closed loop"), "{stdout}");
    let header = stdout
        .lines()
        .find(|l| l.starts_with("| fraction |"))
        .unwrap_or_else(|| panic!("no table header:\n{stdout}"));
    for col in [
        "offered req/s",
        "actual req/s",
        "p50 ms",
        "p99 ms",
        "p999 ms",
    ] {
        assert!(header.contains(col), "{header}");
    }
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .filter(|l| l.starts_with("| 0.5 |"))
        .map(|l| l.split('|').map(str::trim).collect())
        .collect();
    let servers: Vec<&str> = rows.iter().map(|r| r[3]).collect();
    assert_eq!(servers, ["weft", "memcached"], "{stdout}");
    for r in &rows {
        let actual: f64 = r[4].parse().unwrap();
        assert!(actual > 0.0, "{stdout}");
        let p999: f64 = r[7].parse().unwrap();
        let p50: f64 = r[5].parse().unwrap();
        assert!(p999 >= p50, "{stdout}");
    }
}

#[test]
fn connections_beyond_15360_and_bad_fractions_are_refused() {
    for (flag, bad) in [
        ("--connections", "15361"),
        ("--open-loop", "0"),
        ("--open-loop", "0.5,x"),
    ] {
        let out = weft()
            .args(["bench", "memcached", flag, bad])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{flag} {bad} accepted");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(flag),
            "the error names {flag}"
        );
    }
}

#[test]
fn http_open_loop_prints_nginx_and_weft_side_by_side() {
    if weft_testkit::require("nginx").is_none() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("weft-bench-http-test-{}", std::process::id()));
    let out = weft()
        .args(["bench", "http", "--open-loop", "0.5", "--connections", "32"])
        .args(["--duration", "1", "--runs", "1", "--scale", "0.001"])
        .arg("--fileset-dir")
        .arg(&dir)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("p999 ms"), "{stdout}");
    let servers: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("| 0.5 |"))
        .map(|l| l.split('|').map(str::trim).nth(3).unwrap())
        .collect();
    assert_eq!(servers, ["nginx", "weft"], "{stdout}");
}
