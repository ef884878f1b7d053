//! benches/keepalive_summary.py on run lines in `benches/http_keepalive.sh`'s format: rounds
//! are paired within a record (weft's req/s over nginx's, nginx's CPU a request over weft's),
//! records are pooled, and a record it cannot pair is a clear error naming the place.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use weft_testkit::{
    bench_script_json, bench_script_refuses, run_bench_script, scratch_dir, ScriptRun,
};

/// One run line as http_keepalive.sh prints it.
fn run_line(round: u32, server: &str, rps: f64, busy: f64) -> String {
    format!("round {round} server {server} req/s {rps:.2} p99 500.00us busy {busy:.2}\n")
}

fn scratch(test: &str) -> PathBuf {
    scratch_dir("weft-keepalive-summary", test)
}

fn write(dir: &Path, name: &str, lines: &[String]) -> PathBuf {
    let path = dir.join(name);
    let body = format!(
        "# 2026-12-01 01:47 UTC, commit 0000000, a header\n{}weft / nginx req/s 1.00-1.00-1.00 over 1 rounds\n",
        lines.concat()
    );
    std::fs::write(&path, body).expect("write the record");
    path
}

/// A record of one round: weft's and nginx's (req/s, busy).
fn one_round(dir: &Path, name: &str, weft: (f64, f64), nginx: (f64, f64)) -> PathBuf {
    write(
        dir,
        name,
        &[
            run_line(1, "weft", weft.0, weft.1),
            run_line(1, "nginx", nginx.0, nginx.1),
        ],
    )
}

/// keepalive_summary.py on `args`; `None` without python3 (a failure under `CI=true`).
fn run(args: &[&OsStr]) -> Option<ScriptRun> {
    run_bench_script("python3", "keepalive_summary.py", args, &[])
}

fn json(args: &[&OsStr]) -> Option<serde_json::Value> {
    let out = bench_script_json("python3", "keepalive_summary.py", args)?;
    Some(serde_json::from_str(&out).expect("keepalive_summary.py --json prints JSON"))
}

fn close(value: &serde_json::Value, expected: f64) -> bool {
    (value.as_f64().expect("a number") - expected).abs() < 1e-9
}

#[test]
fn rounds_are_paired_within_a_record_and_records_are_pooled() {
    let dir = scratch("pooled");
    // Round 1: weft 1.2x the req/s at the same busy (nginx's CPU a request 1.2x weft's);
    // round 2: weft 1.0x the req/s but only half as busy (wrk-bound: CPU 2.0x).
    let first = write(
        &dir,
        "first.txt",
        &[
            run_line(1, "weft", 120_000.0, 1.0),
            run_line(1, "nginx", 100_000.0, 1.0),
            run_line(2, "nginx", 100_000.0, 1.0),
            run_line(2, "weft", 100_000.0, 0.5),
        ],
    );
    // One round, 1.5x: the pooled median over three rounds is the first record's 1.2.
    let second = one_round(&dir, "second.txt", (120_000.0, 1.0), (80_000.0, 1.0));
    let Some(out) = json(&[first.as_os_str(), second.as_os_str()]) else {
        return;
    };
    let first_summary = &out["records"][0];
    assert_eq!(first_summary["rounds"], 2, "{out}");
    assert!(close(&first_summary["rps_ratio"]["min"], 1.0), "{out}");
    assert!(close(&first_summary["rps_ratio"]["max"], 1.2), "{out}");
    assert!(close(&first_summary["cpu_ratio"]["max"], 2.0), "{out}");
    assert_eq!(first_summary["rounds_at_target"], 1, "{out}");
    let pooled = &out["pooled"];
    assert_eq!(pooled["rounds"], 3, "{out}");
    assert!(close(&pooled["rps_ratio"]["median"], 1.2), "{out}");
    assert!(close(&pooled["rps_ratio"]["max"], 1.5), "{out}");
    assert_eq!(pooled["rounds_at_target"], 2, "{out}");

    // Text: one row a record and the pooled one.
    let text = run(&[first.as_os_str(), second.as_os_str()]).expect("python3 ran above");
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(
        text.stdout.contains("| pooled | 3 | 1.00-1.20-1.50 |"),
        "{}",
        text.stdout
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn one_record_prints_the_two_lines_the_script_prints() {
    let dir = scratch("one");
    let record = one_round(&dir, "one.txt", (110_000.0, 1.0), (100_000.0, 1.0));
    let Some(out) = run(&[record.as_os_str()]) else {
        return;
    };
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout,
        "weft / nginx req/s 1.10-1.10-1.10 over 1 rounds\n\
         nginx / weft CPU a request 1.10-1.10-1.10 over 1 rounds\n"
    );
    std::fs::remove_dir_all(dir).ok();
}

/// Runs the script on `record` and requires it to refuse with `message` on stderr.
fn refused(record: &OsStr, message: &str) {
    bench_script_refuses("python3", "keepalive_summary.py", &[record], message);
}

#[test]
fn a_record_it_cannot_pair_is_a_clear_error() {
    let dir = scratch("errors");
    let lone = write(&dir, "lone.txt", &[run_line(3, "weft", 100_000.0, 1.0)]);
    refused(lone.as_os_str(), "round 3 has only weft");

    let garbled = dir.join("garbled.txt");
    std::fs::write(&garbled, "round 1 server weft req/s lots\n").expect("write");
    refused(garbled.as_os_str(), "garbled.txt:1: not a run line");

    // A server with no CPU ticks over its run has no CPU a request to compare.
    let idle = one_round(&dir, "idle.txt", (100_000.0, 0.0), (100_000.0, 1.0));
    refused(
        idle.as_os_str(),
        "idle.txt:2: req/s and busy must be positive",
    );

    refused(
        OsStr::new("/nonexistent/keepalive.txt"),
        "cannot read /nonexistent/keepalive.txt",
    );
    std::fs::remove_dir_all(dir).ok();
}
