//! benches/defer_accept.sh and its summary: the summary pairs `--defer-accept 0` with the
//! default, and nginx with and without `deferred`, by round, and refuses a line that is not a
//! run; the script counts a server's children in its CPU (nginx's worker does the work) and
//! refuses a setting or quota it does not know before it starts anything.

use std::ffi::OsStr;
use std::path::PathBuf;

use weft_testkit::{run_bench_functions, run_bench_script, scratch_dir};

fn scratch(test: &str) -> PathBuf {
    scratch_dir("weft-defer-accept-summary", test)
}

/// benches/defer_accept_summary.py over `path` (`None`: python3 missing outside CI).
fn summarize(path: &std::path::Path) -> Option<weft_testkit::ScriptRun> {
    run_bench_script(
        "python3",
        "defer_accept_summary.py",
        &[path.as_os_str()],
        &[],
    )
}

/// One run line as defer_accept.sh prints it.
fn line(round: u32, rate: u32, server: &str, p99_ms: f64, p999_ms: f64, cpu_us: f64) -> String {
    format!("{round} {rate} {server} {rate} 0 0.2 {p99_ms} {p999_ms} {cpu_us} 0.5\n")
}

#[test]
fn defer0_is_paired_with_the_default_by_round_and_rate() {
    let dir = scratch("paired");
    let path = dir.join("runs.txt");
    let body = [
        "# 2026-12-01 09:18 UTC, commit 0000000, a header\n".to_string(),
        "round rate server replies_per_sec errors p50_ms p99_ms p999_ms cpu_us_per_reply \
             load_busy\n"
            .to_string(),
        // Rate 6000: defer0 at half the default's p99 in round 1, 1.5x in round 2.
        line(1, 6000, "defer1", 2.0, 4.0, 60.0),
        line(1, 6000, "defer0", 1.0, 4.0, 66.0),
        line(2, 6000, "defer0", 3.0, 2.0, 60.0),
        line(2, 6000, "defer1", 2.0, 4.0, 60.0),
        line(1, 6000, "nginx", 1.0, 2.0, 50.0),
        // Rate 12000: only the default, so no pair is printed there.
        line(1, 12000, "defer1", 5.0, 9.0, 55.0),
    ]
    .concat();
    std::fs::write(&path, body).expect("write the runs");
    let Some(out) = summarize(&path) else {
        return;
    };
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    let pair = lines
        .iter()
        .find(|l| l.contains("defer0 / defer1"))
        .unwrap_or_else(|| panic!("no pair line in {}", out.stdout));
    assert!(
        pair.contains("p99 0.5–1–1.5 (1 of 2 at or under)"),
        "{pair}"
    );
    assert!(
        pair.contains("p99.9 0.5–0.75–1 (2 of 2 at or under)"),
        "{pair}"
    );
    assert!(
        pair.contains("CPU 1–1.05–1.1 (1 of 2 at or under)"),
        "{pair}"
    );
    let vs_nginx = lines
        .iter()
        .find(|l| l.contains("defer1 / nginx"))
        .unwrap_or_else(|| panic!("no defer1 / nginx line in {}", out.stdout));
    assert!(
        vs_nginx.contains("p99 2–2–2 (0 of 1 at or under)"),
        "{vs_nginx}"
    );
    let at_12000 = out.stdout.split("rate 12000").nth(1).expect("rate 12000");
    assert!(
        !at_12000.contains(" / "),
        "a pair with one side: {at_12000}"
    );
    assert!(at_12000.contains("p99 5–5–5 ms"), "{at_12000}");
}

/// The open-file cache window nginx's `open_file_cache` has (valid60) is paired with weft's
/// default and with nginx.
#[test]
fn valid60_is_paired_with_the_default_and_with_nginx() {
    let dir = scratch("valid60");
    let path = dir.join("runs.txt");
    let body = [
        line(1, 9000, "defer1", 4.0, 8.0, 40.0),
        line(1, 9000, "valid60", 2.0, 8.0, 38.0),
        line(1, 9000, "nginx", 1.0, 4.0, 38.0),
    ]
    .concat();
    std::fs::write(&path, body).expect("write the runs");
    let Some(out) = summarize(&path) else {
        return;
    };
    assert_eq!(out.code, 0, "{}", out.stderr);
    let find = |pair: &str| {
        out.stdout
            .lines()
            .find(|l| l.contains(pair))
            .unwrap_or_else(|| panic!("no {pair} line in {}", out.stdout))
            .to_owned()
    };
    let over_default = find("valid60 / defer1");
    assert!(
        over_default.contains("p99 0.5–0.5–0.5 (1 of 1 at or under)"),
        "{over_default}"
    );
    let over_nginx = find("valid60 / nginx");
    assert!(
        over_nginx.contains("p99 2–2–2 (0 of 1 at or under)"),
        "{over_nginx}"
    );
    assert!(
        over_nginx.contains("CPU 1–1–1 (1 of 1 at or under)"),
        "{over_nginx}"
    );
}

#[test]
fn a_line_that_is_not_a_run_is_refused_with_its_number() {
    let dir = scratch("refused");
    let path = dir.join("runs.txt");
    std::fs::write(
        &path,
        line(1, 6000, "defer1", 2.0, 4.0, 60.0) + "1 6000 defer0 6000\n",
    )
    .expect("write the runs");
    let Some(out) = summarize(&path) else {
        return;
    };
    assert_eq!(out.code, 1, "accepted: {}", out.stdout);
    assert!(
        out.stderr.contains("line 2: 4 fields, expected 10"),
        "{}",
        out.stderr
    );
}

#[test]
fn cpu_ticks_counts_the_children_of_a_server() {
    // A busy child of the shell spins for a while; the shell itself sleeps. The shell's count
    // must include the child's ticks (nginx's master does nothing, its worker everything).
    let program = r#"
        ( end=$((SECONDS + 1)); while [ $SECONDS -lt $end ]; do :; done; sleep 5 ) &
        child=$!
        sleep 1.5
        read -r -a f <"/proc/$child/stat"
        echo "child $((f[13] + f[14]))"
        echo "total $(cpu_ticks $$)"
        kill $child
    "#;
    let Some(lines) = run_bench_functions("defer_accept.sh", &["cpu_ticks"], "", program) else {
        return;
    };
    let value = |key: &str| -> u64 {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in {lines:?}"))
            .trim()
            .parse()
            .expect("a count")
    };
    let child = value("child ");
    let total = value("total ");
    assert!(child > 0, "the busy child used no CPU: {lines:?}");
    assert!(total >= child, "the child's {child} ticks not in {total}");
}

#[test]
fn an_unknown_setting_or_quota_is_refused_before_anything_starts() {
    for (key, value, message) in [
        ("SETTINGS", "defer1 apache", "unknown setting 'apache'"),
        ("QUOTA_PCT", "30%", "QUOTA_PCT must be a whole number"),
    ] {
        let Some(out) = run_bench_script(
            "bash",
            "defer_accept.sh",
            &[OsStr::new("1")],
            &[
                (key, OsStr::new(value)),
                ("WEFT", OsStr::new("/nonexistent")),
            ],
        ) else {
            return;
        };
        assert_eq!(out.code, 2, "{key}={value} accepted: {}", out.stdout);
        assert!(out.stderr.contains(message), "{}", out.stderr);
    }
}

#[test]
fn a_server_and_the_processes_it_forks_run_under_the_quota() {
    let controller = std::path::Path::new("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists()
        || std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers")
            .is_ok_and(|c| c.split_whitespace().any(|w| w == "cpu"));
    if !weft_testkit::is_root() || !controller {
        weft_testkit::missing("root and a cgroup cpu controller", "run the tests as root");
        return;
    }
    // A "server" that forks at once, as nginx's master forks its worker: started by in_quota,
    // both are inside the limit; moved in after `&` (the old way), the child is left outside,
    // and outside_quota says so.
    let program = r#"
        quota_group 50
        in_quota sh -c 'sleep 30 & exec sleep 30' &
        joined=$!
        sh -c 'sleep 30 & exec sleep 30' &
        late=$!
        sleep 0.3
        echo "$late" >"$cg/cgroup.procs"
        echo "joined $(outside_quota "$joined" | wc -l)"
        echo "late $(outside_quota "$late" | wc -l)"
        echo "held $(wc -l <"$cg/cgroup.procs")"
        pkill -P "$joined"; pkill -P "$late"; kill "$joined" "$late"
        wait
        rmdir "$cg"
    "#;
    let Some(lines) = run_bench_functions(
        "defer_accept.sh",
        &["quota_group", "in_quota", "outside_quota"],
        "",
        program,
    ) else {
        return;
    };
    let want = ["joined 0", "late 1", "held 3"];
    for w in want {
        assert!(lines.iter().any(|l| l == w), "no '{w}' in {lines:?}");
    }
}
