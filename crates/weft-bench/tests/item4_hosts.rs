//! benches/item4_hosts.py on records written here in `weft bench memcached`'s format: the
//! invocations with a host line are read and sorted by a system call's price, those without
//! one are skipped and counted, a ratio that rises with the price is told apart from one that
//! does not, and a record that cannot be read is a clear error.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use weft_testkit::{bench_script_json, run_bench_script, scratch_dir, ScriptRun};

/// One invocation as `weft bench memcached --server-cpu-pct 40` prints it; `host` is the
/// round trip and system call in ns, or none (a record from before the host line).
fn invocation(host: Option<(u32, u32)>, weft: f64, memcached: f64) -> String {
    let mut lines = vec![
        "servers capped together at 40 % of their core (cgroup CPU quota, 10 ms period)"
            .to_string(),
        "first in a run: weft in run(s) 2, memcached in run(s) 1, 3".to_string(),
    ];
    if let Some((trip, call)) = host {
        lines.push(format!(
            "host: CPU 0 <-> CPU 1 cache-line round trip {trip} ns; a system call on CPU 0 {call} ns"
        ));
    }
    lines.push("weft memcached vs memcached, -t 1 each, pinned to CPU 0".to_string());
    lines.push(format!(
        "{:<45}{:>12}{:>13}    ratio",
        "", "weft", "memcached"
    ));
    lines.push(format!(
        "{:<45}{weft:>12.1}{memcached:>13.1}    {:.2}x",
        "peak req/s (closed loop, depth 4, meta)",
        weft / memcached
    ));
    lines.push(format!(
        "{:<45}{:>12}{:>13}    {:.2}x",
        "server CPU µs/request at peak", "2.0", "2.4", 0.83
    ));
    lines.push(format!(
        "{:<45}{:>12}{:>13}    {:.2}x",
        "server CPU µs/request there", "3.0", "3.0", 1.0
    ));
    lines.join("\n") + "\n"
}

fn scratch(test: &str) -> PathBuf {
    scratch_dir("weft-item4-hosts", test)
}

fn write(dir: &Path, name: &str, invocations: &[String]) -> PathBuf {
    let path = dir.join(name);
    let body = format!("# a header line\n{}", invocations.concat());
    std::fs::write(&path, body).expect("write the record");
    path
}

/// item4_hosts.py on `args`; `None` without python3 (a failure under `CI=true`).
fn run(args: &[&OsStr]) -> Option<ScriptRun> {
    run_bench_script("python3", "item4_hosts.py", args, &[])
}

fn json(args: &[&OsStr]) -> Option<serde_json::Value> {
    let out = bench_script_json("python3", "item4_hosts.py", args)?;
    Some(serde_json::from_str(&out).expect("item4_hosts.py --json prints JSON"))
}

#[test]
fn invocations_are_sorted_by_a_system_calls_price_and_those_without_a_host_are_counted() {
    let dir = scratch("sorted");
    let old = write(&dir, "old.txt", &[invocation(None, 130.0, 100.0)]);
    let new = write(
        &dir,
        "new.txt",
        &[
            invocation(Some((180, 150)), 115.0, 100.0),
            invocation(Some((140, 110)), 125.0, 100.0),
            invocation(None, 140.0, 100.0),
        ],
    );
    let Some(out) = json(&[old.as_os_str(), new.as_os_str()]) else {
        return;
    };
    assert_eq!(out["skipped_without_host"], 2, "{out}");
    let rows = out["invocations"].as_array().expect("invocations");
    let calls: Vec<u64> = rows
        .iter()
        .map(|r| r["syscall_ns"].as_u64().unwrap())
        .collect();
    assert_eq!(calls, [110, 150], "{out}");
    let ratio = rows[0]["ratio"].as_f64().unwrap();
    assert!((ratio - 1.25).abs() < 1e-9, "{out}");
    assert!(
        (rows[0]["cpu_ratio"].as_f64().unwrap() - 0.83).abs() < 1e-9,
        "{out}"
    );
    // Two invocations: no correlation is claimed.
    assert!(out.get("spearman_rho").is_none(), "{out}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_ratio_that_falls_as_system_calls_get_cheaper_is_told_apart() {
    let dir = scratch("falls");
    // Six invocations: the dearer the system call, the larger weft's lead.
    let follows: Vec<String> = (0..6)
        .map(|i| invocation(Some((150, 100 + 20 * i)), 100.0 + 5.0 * i as f64, 100.0))
        .collect();
    let record = write(&dir, "follows.txt", &follows);
    let Some(out) = json(&[record.as_os_str()]) else {
        return;
    };
    assert!(
        (out["spearman_rho"].as_f64().unwrap() - 1.0).abs() < 1e-9,
        "{out}"
    );
    // Exact over 720 orders: only this one and its reverse are as far from zero.
    assert!(
        (out["spearman_p"].as_f64().unwrap() - 2.0 / 720.0).abs() < 1e-9,
        "{out}"
    );
    assert_eq!(out["cheaper_half"].as_array().unwrap().len(), 3, "{out}");

    // The same prices with ratios in no order with them: not told apart.
    let ratios = [1.10, 1.25, 1.05, 1.20, 1.15, 1.12];
    let mixed: Vec<String> = ratios
        .iter()
        .enumerate()
        .map(|(i, r)| invocation(Some((150, 100 + 20 * i as u32)), 100.0 * r, 100.0))
        .collect();
    let record = write(&dir, "mixed.txt", &mixed);
    let Some(out) = json(&[record.as_os_str()]) else {
        return;
    };
    assert!(out["spearman_p"].as_f64().unwrap() > 0.2, "{out}");

    // The table names the correlation in words.
    let text = run(&[record.as_os_str()]).expect("python3 ran above");
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(text.stdout.contains("Spearman's rho"), "{}", text.stdout);
    assert!(text.stdout.contains("| 100 | 150 |"), "{}", text.stdout);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_record_that_cannot_be_read_is_a_clear_error() {
    let Some(out) = run(&[OsStr::new("/nonexistent/item4.txt")]) else {
        return;
    };
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains("cannot read /nonexistent/item4.txt"),
        "{}",
        out.stderr
    );
    let Some(help) = run(&[]) else {
        return;
    };
    assert_eq!(help.code, 2);
    assert!(help.stdout.contains("RECORD"), "{}", help.stdout);
}
