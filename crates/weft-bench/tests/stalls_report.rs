//! benches/stalls.py's report on a trace written here: a stall's backlog is worked off when
//! the first millisecond after it whose requests are all answered within 1 ms begins
//! (`quiet_ms`), whatever a later stop of the host does within the report's 200 ms; the last
//! slow reply (`drain_ms`) is the figure such a stop decides.

use std::ffi::OsStr;
use std::path::PathBuf;

use weft_testkit::{run_bench_script, scratch_dir};

fn scratch(test: &str) -> PathBuf {
    scratch_dir("weft-stalls", test)
}

/// A request every 50 µs over one second from a window opened at CLOCK_MONOTONIC 1 s; a
/// stall from 300 to 320 ms, its backlog worked off by 330 ms (replies until then slow), and
/// a host stop of 5 ms at 450 ms, inside the 200 ms after the stall, whose requests wait 3 ms.
fn trace_and_times(dir: &std::path::Path) -> (PathBuf, PathBuf) {
    let mut lines = vec!["# window opened at CLOCK_MONOTONIC 1000000 us".to_owned()];
    for i in 0..20_000u32 {
        let t = f64::from(i) * 50.0;
        let latency = if (300_000.0..320_000.0).contains(&t) {
            320_000.0 - t + 1_500.0
        } else if (320_000.0..330_000.0).contains(&t) {
            1_500.0
        } else if (450_000.0..455_000.0).contains(&t) {
            3_000.0
        } else {
            100.0
        };
        // intended, connection, sent, arrived-in-user-space, latency to arrival (µs)
        lines.push(format!("{t} 0 {t} {} {latency}", t + latency));
    }
    let trace = dir.join("run.trace");
    std::fs::write(&trace, lines.join("\n") + "\n").expect("write the trace");
    let times = dir.join("run.trace.stalls");
    std::fs::write(&times, "1.300000 1.320000\n").expect("write the stall times");
    (trace, times)
}

#[test]
fn a_stall_is_worked_off_at_its_first_quiet_millisecond_whatever_comes_later() {
    let dir = scratch("quiet");
    let (trace, times) = trace_and_times(&dir);
    let Some(out) = run_bench_script(
        "python3",
        "stalls.py",
        &[
            OsStr::new("report"),
            trace.as_os_str(),
            times.as_os_str(),
            OsStr::new("--json"),
        ],
        &[],
    ) else {
        return;
    };
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.code, 0, "stalls.py failed: {}", out.stderr);
    let summary: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("JSON");
    assert_eq!(summary["stalls"], 1, "{summary}");
    // The backlog is gone from 330 ms on: 10 ms after the stall's end.
    assert_eq!(summary["quiet_ms_median"], 10.0, "{summary}");
    // The last slow reply is the host stop's (intended at 454.95 ms, 3 ms late), 137.95 ms
    // after the stall's end.
    assert_eq!(summary["drain_ms_median"], 137.95, "{summary}");
    // The worst: the first request of the stall, 20 ms plus 1.5.
    assert_eq!(summary["worst_ms_median"], 21.5, "{summary}");
}
