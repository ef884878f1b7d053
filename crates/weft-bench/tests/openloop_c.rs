//! benches/openloop/openloop.c, the independent C generator `benches/scale.sh` drives, built
//! with `cc` and run briefly against the real memcached: its report carries the latency
//! figures and the segments on the wire per request, both ways, and it leaves no
//! `TIME_WAIT` sockets behind.

use std::path::PathBuf;
use std::process::Command;

use weft_testkit::{build_bench_c, new_time_wait_to, start_memcached, time_wait_sockets_to};

/// Builds openloop.c into a fresh directory named after `test`; `None` when `cc` is missing
/// (a failure under `CI=true`).
fn build_openloop(test: &str) -> Option<PathBuf> {
    build_bench_c(
        "openloop/openloop.c",
        "weft-openloop-test",
        test,
        &[],
        &["-lpthread", "-lm"],
    )
}

/// What one run of openloop against a fresh memcached `-t 1` left: its standard output, and
/// the `TIME_WAIT` sockets to the server's port it added. `None` when `cc` or memcached is
/// missing (a failure under `CI=true`).
struct Run {
    stdout: Vec<u8>,
    new_time_wait: usize,
}

/// Builds openloop for `test` and runs it with `connections`, `qps` and `duration_s` (a 0.1 s
/// warm-up, 100 keys); fails the test if openloop fails.
fn run_openloop(test: &str, connections: u32, qps: u32, duration_s: f64) -> Option<Run> {
    let openloop = build_openloop(test)?;
    let (_memcached, addr) = start_memcached(&["-t", "1"])?;
    // The start-up probe's connections are there already.
    let before = time_wait_sockets_to(addr.port());
    let out = Command::new(&openloop)
        .args(["--server", &addr.to_string()])
        .args(["--connections", &connections.to_string()])
        .args(["--qps", &qps.to_string()])
        .args(["--duration", &duration_s.to_string()])
        .args(["--warmup", "0.1", "--keys", "100"])
        .output()
        .expect("run openloop");
    let _ = std::fs::remove_dir_all(openloop.parent().expect("its directory"));
    assert!(
        out.status.success(),
        "openloop: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(Run {
        stdout: out.stdout,
        new_time_wait: new_time_wait_to(addr.port(), &before),
    })
}

#[test]
fn openloop_reports_segments_per_request_both_ways() {
    let Some(run) = run_openloop("segments", 20, 2000, 0.5) else {
        return;
    };
    let report: serde_json::Value =
        serde_json::from_slice(&run.stdout).expect("openloop prints one JSON object");
    let number = |field: &str| {
        report[field]
            .as_f64()
            .unwrap_or_else(|| panic!("{field} missing or not a number in {report}"))
    };
    assert_eq!(number("errors"), 0.0, "{report}");
    let sent = number("requests_sent");
    assert!(
        sent >= number("recorded") && sent > 0.0,
        "requests_sent counts the warm-up too: {report}"
    );
    // Every request is one data segment each way (a get of a 32-byte value fits one), plus
    // the handshakes and the pure ACKs; the data part is what the totals minus the pure ACKs
    // leave.
    for side in ["generator", "server"] {
        let segs = number(&format!("{side}_segs_per_request"));
        let pure = number(&format!("{side}_pure_acks_per_request"));
        assert!(
            (0.0..=segs).contains(&pure),
            "{side}: pure ACKs within its segments: {report}"
        );
        let data = segs - pure;
        assert!(
            (0.95..1.2).contains(&data),
            "{side}: about one data segment a request, got {data:.3}: {report}"
        );
    }
}

/// openloop ends its connections with a reset: a run's `TIME_WAIT` sockets expire together a
/// minute later on the CPU that took the server's FIN (the server's), and with thousands of
/// connections that stalled the server core of a later run for milliseconds.
#[test]
fn openloop_leaves_no_time_wait_behind() {
    let Some(run) = run_openloop("time-wait", 50, 1000, 0.3) else {
        return;
    };
    assert_eq!(
        run.new_time_wait, 0,
        "openloop's connections to memcached left in TIME_WAIT"
    );
}
