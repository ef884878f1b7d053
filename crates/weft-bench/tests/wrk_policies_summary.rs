//! benches/wrk_policies_summary.py on run lines in `benches/wrk_policies.sh`'s format: each
//! weft setting's run is paired with nginx's of the same round and client, records are
//! pooled, and a record it cannot pair is a clear error naming the place; and the script's
//! own `weft_args` maps each setting to `weft http`'s flags and refuses one it does not know.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use weft_testkit::{
    bench_script_json, bench_script_refuses, run_bench_functions, run_bench_script, scratch_dir,
    ScriptRun,
};

/// One wrk run line as wrk_policies.sh prints it; latencies in µs.
fn wrk_line(
    round: u32,
    server: &str,
    setting: &str,
    rps: u32,
    p99: u32,
    p999: u32,
    max: u32,
) -> String {
    format!(
        "round {round} server {server} setting {setting} client wrk req/s {rps} p50_us 5000 \
         p99_us {p99} p999_us {p999} p9999_us {max} max_us {max} errors 0\n"
    )
}

/// One ab run line (no p99.9 or p99.99: ab does not print them).
fn ab_line(round: u32, server: &str, p99: u32, max: u32, errors: u32) -> String {
    format!(
        "round {round} server {server} setting default client ab req/s 90000 p50_us 10000 \
         p99_us {p99} max_us {max} errors {errors}\n"
    )
}

fn scratch(test: &str) -> PathBuf {
    scratch_dir("weft-wrk-policies-summary", test)
}

fn write(dir: &Path, name: &str, lines: &[String]) -> PathBuf {
    let path = dir.join(name);
    let body = format!(
        "# 2026-12-01 05:09 UTC, commit 0000000, a header\n{}\
         | client | weft setting | rounds | the table a record keeps |\n|---|---|---|---|\n",
        lines.concat()
    );
    std::fs::write(&path, body).expect("write the record");
    path
}

fn run(args: &[&OsStr]) -> Option<ScriptRun> {
    run_bench_script("python3", "wrk_policies_summary.py", args, &[])
}

fn close(value: &serde_json::Value, expected: f64) -> bool {
    (value.as_f64().expect("a number") - expected).abs() < 1e-9
}

#[test]
fn runs_are_paired_with_nginx_by_round_and_client_and_records_pooled() {
    let dir = scratch("pooled");
    // Round 1: weft's default at half nginx's p99, its p99.9 2.5x (over the item's 2x);
    // round 2 (nginx listed last): weft's p99 1.5x, p99.9 equal. epoll in round 1 only.
    let first = write(
        &dir,
        "first.txt",
        &[
            wrk_line(1, "nginx", "default", 100_000, 10_000, 12_000, 20_000),
            wrk_line(1, "weft", "default", 120_000, 5_000, 30_000, 40_000),
            wrk_line(1, "weft", "epoll", 100_000, 10_000, 12_000, 20_000),
            wrk_line(2, "weft", "default", 100_000, 15_000, 12_000, 20_000),
            wrk_line(2, "nginx", "default", 100_000, 10_000, 12_000, 20_000),
            ab_line(1, "weft", 30_000, 35_000, 0),
            ab_line(1, "nginx", 20_000, 35_000, 2),
        ],
    );
    // A second record: one round, weft's p99 equal to nginx's (at or under).
    let second = write(
        &dir,
        "second.txt",
        &[
            wrk_line(1, "weft", "default", 100_000, 10_000, 12_000, 20_000),
            wrk_line(1, "nginx", "default", 100_000, 10_000, 12_000, 20_000),
        ],
    );
    let Some(out) = bench_script_json(
        "python3",
        "wrk_policies_summary.py",
        &[first.as_os_str(), second.as_os_str()],
    ) else {
        return;
    };
    let out: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let rows = out["rows"].as_array().expect("rows");
    let row = |client: &str, setting: &str| {
        rows.iter()
            .find(|r| r["client"] == client && r["setting"] == setting)
            .unwrap_or_else(|| panic!("a row for {client} {setting}: {out}"))
    };
    let default = row("wrk", "default");
    assert_eq!(default["rounds"], 3, "{out}");
    assert!(close(&default["p99_ratio"]["min"], 0.5), "{out}");
    assert!(close(&default["p99_ratio"]["median"], 1.0), "{out}");
    assert!(close(&default["p99_ratio"]["max"], 1.5), "{out}");
    assert_eq!(default["p99_at_or_under"], 2, "{out}");
    assert!(close(&default["p999_ratio"]["max"], 2.5), "{out}");
    assert_eq!(default["p999_within_2x"], 2, "{out}");
    assert!(close(&default["max_ratio"]["max"], 2.0), "{out}");
    assert!(close(&default["rps_ratio"]["max"], 1.2), "{out}");
    assert!(close(&default["nginx_p99_ms"], 10.0), "{out}");
    assert_eq!(row("wrk", "epoll")["rounds"], 1, "{out}");
    let ab = row("ab", "default");
    assert_eq!(ab["rounds"], 1, "{out}");
    assert!(close(&ab["p99_ratio"]["median"], 1.5), "{out}");
    assert_eq!(ab["p99_at_or_under"], 0, "{out}");
    assert!(ab.get("p999_ratio").is_none(), "ab has no p99.9: {out}");
    assert_eq!(ab["nginx_errors"], 2, "{out}");

    // Text: one table row a client and setting.
    let text = run(&[first.as_os_str()]).expect("python3 ran above");
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(
        text.stdout.contains(
            "| ab | default | 1 | 1.50-1.50-1.50 | 0 of 1 | - | - | 1.00-1.00-1.00 | \
             1.00-1.00-1.00 | 30.0 / 20.0 | 0 / 2 |"
        ),
        "{}",
        text.stdout
    );
    std::fs::remove_dir_all(dir).ok();
}

/// Runs the script on `record` and requires it to refuse with `message` on stderr.
fn refused(record: &OsStr, message: &str) {
    bench_script_refuses("python3", "wrk_policies_summary.py", &[record], message);
}

#[test]
fn a_record_it_cannot_pair_is_a_clear_error() {
    let dir = scratch("errors");
    let lone = write(
        &dir,
        "lone.txt",
        &[wrk_line(
            3, "weft", "default", 100_000, 10_000, 12_000, 20_000,
        )],
    );
    refused(
        lone.as_os_str(),
        "round 3 has wrk runs of weft but none of nginx",
    );

    let twice = write(
        &dir,
        "twice.txt",
        &[
            wrk_line(1, "nginx", "default", 100_000, 10_000, 12_000, 20_000),
            wrk_line(1, "weft", "epoll", 100_000, 10_000, 12_000, 20_000),
            wrk_line(1, "weft", "epoll", 100_000, 10_000, 12_000, 20_000),
        ],
    );
    refused(
        twice.as_os_str(),
        "twice.txt:4: round 1 has wrk on weft epoll twice",
    );

    // A wrk line must carry the p99.9 the item's second bar needs.
    let short = write(
        &dir,
        "short.txt",
        &["round 1 server weft setting default client wrk req/s 1 p50_us 1 p99_us 1 max_us 1 errors 0\n".to_string()],
    );
    refused(
        short.as_os_str(),
        "short.txt:2: a wrk line needs p999_us and p9999_us",
    );

    let garbled = dir.join("garbled.txt");
    std::fs::write(
        &garbled,
        "round 1 server weft setting default client wrk req/s lots\n",
    )
    .expect("write");
    refused(garbled.as_os_str(), "garbled.txt:1: not a run line");

    refused(
        OsStr::new("/nonexistent/wrk-policies.txt"),
        "cannot read /nonexistent/wrk-policies.txt",
    );
    std::fs::remove_dir_all(dir).ok();
}

/// The script's `policies=(...)` assignment, as it stands in the script.
fn policies_assignment() -> String {
    let script = std::fs::read_to_string(weft_testkit::bench_script("wrk_policies.sh"))
        .expect("read benches/wrk_policies.sh");
    let start = script
        .find("\npolicies=(")
        .expect("the script lists the policies")
        + 1;
    let end = start + script[start..].find(')').expect("the list ends") + 1;
    script[start..end].to_string()
}

#[test]
fn the_script_lists_every_policy_weft_ships() {
    let assignment = policies_assignment();
    let listed: Vec<&str> = assignment["policies=(".len()..assignment.len() - 1]
        .split_whitespace()
        .collect();
    assert_eq!(listed, weft::sched::names());
}

#[test]
fn each_setting_maps_to_weft_http_flags_and_an_unknown_one_is_refused() {
    let Some(lines) = run_bench_functions(
        "wrk_policies.sh",
        &["weft_args"],
        &format!("set -u\n{}", policies_assignment()),
        "echo \"[$(weft_args default)]\"; weft_args epoll; weft_args relaxed-fifo; \
         (weft_args fastest 2>&1) || echo \"exit $?\"",
    ) else {
        return;
    };
    assert_eq!(lines.len(), 5, "{lines:?}");
    assert_eq!(lines[..3], ["[]", "--io epoll", "--scheduler relaxed-fifo"]);
    assert!(
        lines[3].starts_with(
            "unknown setting 'fastest' (default, epoll or a scheduling policy: work-stealing "
        ),
        "{lines:?}"
    );
    assert_eq!(lines[4], "exit 2");
}
