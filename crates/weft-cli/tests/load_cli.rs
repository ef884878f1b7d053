//! `weft load`, `weft fileset` and `weft experiment` as a user runs them: real processes.

use std::process::Command;

fn weft() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weft"))
}

/// Runs `cmd` to the end, fails the test with its output unless it succeeded, returns stdout.
fn stdout_of_success(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn temp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("weft-cli-{name}-{}", std::process::id()))
}

#[test]
fn bad_flags_are_refused_with_the_reason() {
    let out = weft()
        .args(["load", "memcached", "--value-size", "normal:3"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected fixed:N"));
    let out = weft()
        .args(["load", "memcached", "--connections", "0", "--duration", "1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--connections"));
    let out = weft()
        .args([
            "load",
            "memcached",
            "--idle-poll-us",
            "5000",
            "--duration",
            "1",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--idle-poll-us must be at most 1000"));
    let out = weft()
        .args(["load", "http", "--rate", "10"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "needs --fileset or --urls");
    let out = weft()
        .args(["experiment", "quick", "--rates", "5:1:1"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("FROM <= TO"));
}

#[test]
fn fileset_then_static_experiment_writes_results_and_plots() {
    let out_dir = temp("experiment");
    let set = out_dir.join("fileset");
    let status = weft()
        .args(["fileset", "--scale", "0.002", "--out"])
        .arg(&set)
        .status()
        .unwrap();
    assert!(status.success());
    assert!(set.join("weft-fileset.tsv").is_file());
    let stdout = stdout_of_success(
        weft()
            .args(["experiment", "static", "--no-peers", "--runs", "1"])
            .args([
                "--rates",
                "100:200:100",
                "--duration",
                "0.5",
                "--warmup",
                "0.1",
            ])
            .arg("--out")
            .arg(&out_dir)
            .arg("--fileset")
            .arg(&set),
    );
    assert!(stdout.contains("| static files | weft | 100 |"), "{stdout}");
    for f in [
        "results.json",
        "results.csv",
        "static-throughput.svg",
        "static-errors.svg",
    ] {
        assert!(out_dir.join(f).is_file(), "{f} missing");
    }
    let csv = std::fs::read_to_string(out_dir.join("results.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3, "{csv}");
    // One report per run: what ran, on what kernel, with which commit, every plot inline.
    let report = std::fs::read_to_string(out_dir.join("report.html")).expect("report.html");
    for needle in [
        "experiment static",
        "kernel",
        "commit",
        "<img src=\"static-throughput.svg\">",
        "<img src=\"static-errors.svg\">",
    ] {
        assert!(report.contains(needle), "{needle} missing from report.html");
    }
    std::fs::remove_dir_all(&out_dir).unwrap();
}

/// The README's main command writes to `weft-results`, a relative directory: the servers must
/// still find their files (nginx resolves relative paths against its own prefix, not ours).
#[test]
fn static_experiment_with_relative_paths_measures_nginx_too() {
    if weft_testkit::require("nginx").is_none() {
        return;
    }
    let cwd = temp("relative");
    std::fs::create_dir_all(&cwd).unwrap();
    let stdout = stdout_of_success(
        weft()
            .current_dir(&cwd)
            .args(["experiment", "static", "--runs", "1"])
            .args([
                "--rates",
                "100:100:100",
                "--duration",
                "0.5",
                "--warmup",
                "0.1",
                "--fileset-scale",
                "0.002",
                "--out",
                "results",
                "--fileset",
                "files",
            ]),
    );
    for server in ["weft", "nginx"] {
        assert!(
            stdout.contains(&format!("| static files | {server} | 100 |")),
            "{server} missing: {stdout}"
        );
    }
    assert!(cwd.join("results").join("results.csv").is_file());
    assert!(cwd.join("files").join("weft-fileset.tsv").is_file());
    std::fs::remove_dir_all(&cwd).unwrap();
}

/// Pids of the running children of `parent`, from /proc.
fn children_of(parent: u32) -> Vec<u32> {
    let mut kids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let after_name = &stat[stat.rfind(')').unwrap() + 2..];
        let ppid: u32 = after_name.split(' ').nth(1).unwrap().parse().unwrap();
        if ppid == parent {
            kids.push(pid);
        }
    }
    kids
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s[s.rfind(')').unwrap() + 2..].starts_with('Z'))
        .unwrap_or(false)
}

#[test]
fn ctrl_c_stops_the_experiment_and_kills_its_children() {
    let out_dir = temp("interrupt");
    let mut child = weft()
        .args(["experiment", "static", "--no-peers", "--runs", "1"])
        .args([
            "--rates",
            "100:100:100",
            "--duration",
            "60",
            "--warmup",
            "0",
        ])
        .args(["--fileset-scale", "0.002", "--out"])
        .arg(&out_dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the server and the load generator both run.
    let mut kids = Vec::new();
    for _ in 0..200 {
        kids = children_of(child.id());
        if kids.len() >= 2 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(kids.len() >= 2, "children: {kids:?}");
    // SAFETY: kill(2) on our own child, not yet reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let started = std::time::Instant::now();
    let status = child.wait().unwrap();
    assert!(!status.success(), "an interrupted run reports failure");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    for pid in kids {
        assert!(!alive(pid), "child {pid} survived Ctrl-C");
    }
    assert!(out_dir.join("results.json").is_file());
    std::fs::remove_dir_all(&out_dir).unwrap();
}
