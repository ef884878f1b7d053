//! benches/scale_pool.py's `--significance`, run on records written here: a weft that is the
//! slowest and busiest of every round is told apart from the peer, and one that takes each
//! place in turn is not; the control's own split (the peer's two runs) is printed beside. A
//! record's idle poll counts only under the cpuidle driver that reads it, and a variant is
//! paired with the defaults it ran beside (`--against weft`). Each point is held against the
//! peer's second run, the server and the peer's first run alike. `--per-record` judges item
//! 3's letter one table at a time, beside the peer against itself. The p50 and p90 get the
//! same sign test as the busy CPU, each beside the peer's two runs.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use weft_testkit::{run_bench_script, scratch_dir, ScriptRun};

/// One record row, in the fields scale_pool.py reads.
fn row(server: &str, offered: u32, actual: u32, p99_us: u32, busy: f64) -> String {
    format!(
        r#"{{"proto": "mc", "connections": 1000, "offered_qps": {offered}, "actual_qps": {actual}, "p50_us": {}, "p90_us": {}, "p99_us": {p99_us}, "p999_us": {}, "server": "{server}", "server_busy": {busy}, "isolate": "fifo", "guest_halt_poll_ns": 200000}}"#,
        p99_us / 2,
        p99_us * 3 / 4,
        p99_us * 4
    )
}

/// A record of `rounds` rounds at 25 % and 50 % of a 100,000 req/s peak, in scale.sh's order
/// (weft, memcached, memcached-2 each round), the p99s and weft's busy CPU given per round by
/// `round`; the peer's busy CPU is 0.5.
fn record(dir: &Path, name: &str, rounds: u32, round: impl Fn(u32) -> ([u32; 3], f64)) -> PathBuf {
    let mut lines = vec![row("memcached", 400_000, 100_000, 600_000, 0.9)];
    for offered in [25_000, 50_000] {
        for r in 0..rounds {
            let ([weft, peer, peer2], busy) = round(r);
            lines.push(row("weft", offered, offered, weft, busy));
            lines.push(row("memcached", offered, offered, peer, 0.5));
            lines.push(row("memcached-2", offered, offered, peer2, 0.5));
        }
    }
    let path = dir.join(name);
    std::fs::write(&path, lines.join("\n") + "\n").expect("write the record");
    path
}

/// scale_pool.py run on `args`, which must succeed; `None` without python3 (a failure under
/// `CI=true`).
fn pool(args: &[&OsStr]) -> Option<ScriptRun> {
    let out = run_bench_script("python3", "scale_pool.py", args, &[])?;
    assert_eq!(out.code, 0, "scale_pool.py failed: {}", out.stderr);
    Some(out)
}

/// scale_pool.py's output for `record` with `--significance`.
fn significance(record: &Path) -> Option<String> {
    Some(pool(&[record.as_os_str(), OsStr::new("--significance")])?.stdout)
}

fn scratch(test: &str) -> PathBuf {
    scratch_dir("weft-scale-pool", test)
}

#[test]
fn a_server_slowest_and_busiest_in_every_round_is_told_apart() {
    let dir = scratch("apart");
    let path = record(&dir, "worse.jsonl", 20, |r| ([300 + r, 200, 210], 0.6));
    let Some(out) = significance(&path) else {
        return;
    };
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.contains("40 rounds of three runs") && out.contains("weft 3.00 (p < 0.001)"),
        "{out}"
    );
    assert!(
        out.contains(
            "under the peer's second run's in 0 of 40 rounds (ties left out; sign test p < 0.001)"
        ),
        "{out}"
    );
    assert!(
        out.contains("busy CPU over the peer's in 40 of 40 rounds (sign test p < 0.001)"),
        "{out}"
    );
    // The control's own split: here the peer's first run is under its second in every round.
    assert!(
        out.contains(
            "the peer's p99 under its second run's in 40 of 40 rounds (ties left out; sign test p < 0.001)"
        ),
        "{out}"
    );
    // The body of the distribution (a row's p50 and p90 follow its p99 here).
    for name in ["p50", "p90"] {
        assert!(
            out.contains(&format!(
                "weft's {name} over the peer's in 40 of 40 rounds (ties left out; sign test p < 0.001); \
                 the peer's over its second run's in 0 of 40 (p < 0.001)"
            )),
            "{out}"
        );
    }
}

#[test]
fn a_server_that_takes_each_place_in_turn_is_not() {
    let dir = scratch("alike");
    // Ranks 1, 2, 3 in turn, the others sharing the rest; the CPU above and below in turn.
    let path = record(&dir, "alike.jsonl", 18, |r| match r % 3 {
        0 => ([100, 200, 300], 0.4),
        1 => ([200, 300, 100], 0.6),
        _ => ([300, 100, 200], if r % 2 == 0 { 0.4 } else { 0.6 }),
    });
    let Some(out) = significance(&path) else {
        return;
    };
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.contains("weft 2.00 (p 1.000)"), "{out}");
    // Under the second run in the rounds where weft ranks 1 (12) and where the second run
    // ranks 3 (none more): 12 of 36, p = 0.065.
    assert!(
        out.contains(
            "under the peer's second run's in 12 of 36 rounds (ties left out; sign test p 0.065)"
        ),
        "{out}"
    );
    assert!(
        out.contains("busy CPU over the peer's in 18 of 36 rounds (sign test p 1.000)"),
        "{out}"
    );
    // The peer under its second run where weft ranks 1 or 3 (rounds 0 and 2 of every three).
    assert!(
        out.contains(
            "the peer's p99 under its second run's in 24 of 36 rounds (ties left out; sign test p 0.065)"
        ),
        "{out}"
    );
    // The body: weft over the peer where it ranks 3 (12 rounds), the peer over its second run
    // where the second ranks 1 (12): neither apart.
    assert!(
        out.contains(
            "weft's p50 over the peer's in 12 of 36 rounds (ties left out; sign test p 0.065); \
             the peer's over its second run's in 12 of 36 (p 0.065)"
        ),
        "{out}"
    );
}

/// scale_pool.py's warnings for `records` (no options).
fn pool_warnings(records: &[PathBuf]) -> Option<String> {
    let args: Vec<&OsStr> = records.iter().map(|r| r.as_os_str()).collect();
    Some(pool(&args)?.stderr)
}

/// A copy of the record at `path`, named `name` beside it, whose rows `edit` writes: it gets
/// each row of the original and pushes what the copy holds in its place.
fn rewritten(path: &Path, name: &str, mut edit: impl FnMut(&str, &mut Vec<String>)) -> PathBuf {
    let text = std::fs::read_to_string(path).expect("read the record");
    let out = path.with_file_name(name);
    let mut rows = Vec::new();
    for line in text.lines() {
        edit(line, &mut rows);
    }
    std::fs::write(&out, rows.join("\n") + "\n").expect("write the record");
    out
}

/// `path` with every row given the cpuidle driver `driver`.
fn with_driver(path: &Path, driver: &str, name: &str) -> PathBuf {
    rewritten(path, name, |line, rows| {
        rows.push(line.replacen('{', &format!(r#"{{"cpuidle_driver": "{driver}", "#), 1));
    })
}

#[test]
fn a_recorded_idle_poll_counts_only_under_the_haltpoll_driver() {
    let dir = scratch("idle-poll");
    let plain = record(&dir, "plain.jsonl", 4, |_| ([100, 100, 100], 0.5));
    let none = with_driver(&plain, "none", "none.jsonl");
    let haltpoll = with_driver(&plain, "haltpoll", "haltpoll.jsonl");
    // Both say guest_halt_poll_ns 200000, but under no cpuidle driver it did nothing.
    let Some(err) = pool_warnings(&[plain.clone(), none.clone()]) else {
        return;
    };
    assert!(
        err.contains("different guest idle polls") && err.contains("cpuidle driver none"),
        "{err}"
    );
    // Under haltpoll the recorded value is the one in effect, as for records without a driver.
    let Some(err) = pool_warnings(&[plain.clone(), haltpoll]) else {
        return;
    };
    assert!(!err.contains("different guest idle polls"), "{err}");
    let Some(err) = pool_warnings(&[none.clone(), with_driver(&plain, "none", "none2.jsonl")])
    else {
        return;
    };
    assert!(!err.contains("different guest idle polls"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `path` with a variant's row (`name`) after each of weft's, its p99 and busy CPU weft's
/// times `p99_times` and `busy_times`.
fn with_variant(path: &Path, name: &str, p99_times: f64, busy_times: f64) -> PathBuf {
    rewritten(path, "variant.jsonl", |line, rows| {
        rows.push(line.to_string());
        let mut r: serde_json::Value = serde_json::from_str(line).expect("a record row");
        if r["server"] == "weft" {
            r["server"] = name.into();
            r["p99_us"] = (r["p99_us"].as_f64().unwrap() * p99_times).round().into();
            r["server_busy"] = (r["server_busy"].as_f64().unwrap() * busy_times).into();
            rows.push(r.to_string());
        }
    })
}

#[test]
fn a_variant_is_paired_with_the_defaults_it_ran_beside() {
    let dir = scratch("variant");
    let plain = record(&dir, "plain.jsonl", 10, |r| ([200 + r, 200, 200], 0.5));
    let path = with_variant(&plain, "weft:--idle-poll-us,50", 0.5, 1.2);
    let variant = OsStr::new("weft:--idle-poll-us,50");
    let args = [
        path.as_os_str(),
        OsStr::new("--server"),
        variant,
        OsStr::new("--against"),
        OsStr::new("weft"),
        OsStr::new("--significance"),
    ];
    let Some(out) = pool(&args) else {
        return;
    };
    assert!(
        out.stdout
            .contains("weft:--idle-poll-us,50 p99 / weft's 0.50 (20 of 20 rounds at or under)"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(
            "p99 under weft's in 20 of 20 rounds (ties left out; sign test p < 0.001); \
             its busy CPU over in 20 of 20 (sign test p < 0.001)"
        ),
        "{}",
        out.stdout
    );
    // --significance ranks the variant, not weft, among the round's three runs.
    assert!(
        out.stdout
            .contains("weft:--idle-poll-us,50 1.00 (p < 0.001)"),
        "{}",
        out.stdout
    );
    // A server is not paired with itself.
    let same = [
        path.as_os_str(),
        OsStr::new("--against"),
        OsStr::new("weft"),
    ];
    let Some(out) = run_bench_script("python3", "scale_pool.py", &same, &[]) else {
        return;
    };
    assert_ne!(out.code, 0, "{}", out.stdout);
    assert!(
        out.stderr.contains("pairs weft with itself"),
        "{}",
        out.stderr
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `path` with the rounds of a `stalls` run added after its peak row (scale.sh's
/// `generator: "stall"` rows, at 50 % of the same peak): weft's p99 in them 100 times the
/// peer's.
fn with_stall_rounds(path: &Path, rounds: u32) -> PathBuf {
    let mut peak_seen = false;
    rewritten(path, "stalls.jsonl", |line, rows| {
        rows.push(line.to_string());
        if std::mem::replace(&mut peak_seen, true) {
            return;
        }
        for _ in 0..rounds {
            for (server, p99_us) in [
                ("memcached", 20_000),
                ("weft", 2_000_000),
                ("memcached-2", 20_000),
            ] {
                let mut r: serde_json::Value =
                    serde_json::from_str(&row(server, 50_000, 50_000, p99_us, 0.5)).expect("a row");
                r["generator"] = "stall".into();
                r["worst_ms_median"] = 30.0.into();
                rows.push(r.to_string());
            }
        }
    })
}

#[test]
fn each_point_is_judged_on_its_own_rounds_and_stalls_are_left_out() {
    let dir = scratch("points");
    // Under the peer's p99 in every round at both points: 20 of 20 each.
    let plain = record(&dir, "plain.jsonl", 20, |r| ([100 + r, 200, 210], 0.5));
    let path = with_stall_rounds(&plain, 5);
    let Some(out) = significance(&path) else {
        return;
    };
    let _ = std::fs::remove_dir_all(&dir);
    // The stalls' rounds (stopped on purpose, over the peer's) are not pooled with the plain
    // ones: the 50 % point keeps its 20 rounds, all under.
    for point in ["| mc | 1000 | 25 % | 20 |", "| mc | 1000 | 50 % | 20 |"] {
        let line = out
            .lines()
            .find(|l| l.starts_with(point))
            .unwrap_or_else(|| panic!("no row {point}: {out}"));
        assert!(line.contains("| 20 / 0 (p < 0.001) |"), "{line}");
    }
    // `--significance` ranks each point on its own too.
    assert!(
        out.contains("mc 1000 50 %, 20 rounds: mean rank weft 1.00 (p < 0.001)"),
        "{out}"
    );
}

#[test]
fn each_point_holds_the_server_and_the_peer_against_the_peers_second_run() {
    let dir = scratch("second");
    // Over the peer's first run in every round and under its second: a point where the first
    // run is the lucky one. Against the first run alone weft is behind in every round; the
    // second run shows the first run under it just as often.
    let path = record(&dir, "second.jsonl", 20, |r| ([150 + r, 100, 200 + r], 0.5));
    let Some(out) = significance(&path) else {
        return;
    };
    let _ = std::fs::remove_dir_all(&dir);
    let line = out
        .lines()
        .find(|l| l.starts_with("mc 1000 50 %, 20 rounds:"))
        .unwrap_or_else(|| panic!("no line for the 50 % point: {out}"));
    assert!(line.contains("mean rank weft 2.00 (p 1.000)"), "{line}");
    assert!(
        line.ends_with(
            "under the second run's p99: weft in 20 of 20 (p < 0.001), the peer in 20 of 20 (p < 0.001)"
        ),
        "{line}"
    );
}

#[test]
fn cpu_0s_own_busy_time_is_tested_beside_the_servers_own() {
    let dir = scratch("cpu0");
    // weft's own time over the peer's in every round; CPU 0's time over in one round of two.
    let path = record(&dir, "cpu0.jsonl", 20, |r| ([200 + r, 200, 210], 0.6));
    let text = std::fs::read_to_string(&path).expect("read the record");
    let mut turn = 0;
    let lines: Vec<String> = text
        .lines()
        .map(|l| {
            let cpu0 = if l.contains(r#""server": "weft""#) {
                turn += 1;
                if turn % 2 == 0 {
                    0.7
                } else {
                    0.6
                }
            } else {
                0.65
            };
            l.replace(
                r#""server_busy""#,
                &format!(r#""server_cpu0_busy": {cpu0}, "server_busy""#),
            )
        })
        .collect();
    std::fs::write(&path, lines.join("\n") + "\n").expect("write the record");
    let Some(out) = significance(&path) else {
        return;
    };
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.contains("busy CPU over the peer's in 40 of 40 rounds (sign test p < 0.001)"),
        "{out}"
    );
    assert!(
        out.contains(
            "CPU 0 busier with weft than with the peer in 20 of 40 rounds (sign test p 1.000)"
        ),
        "{out}"
    );
}

/// A record of two connection counts (1,000 and 4,000) at 25 % and 50 % of a 100,000 req/s
/// peak, four rounds a point in scale.sh's order; `p99` gives (weft, memcached, memcached-2)
/// for a point's connection count and fraction. Every p999 is four times its p99.
fn sweep_record(dir: &Path, name: &str, p99: impl Fn(u32, u32) -> [u32; 3]) -> PathBuf {
    let mut lines = Vec::new();
    for conns in [1000, 4000] {
        let at = |r: String| {
            r.replace(
                r#""connections": 1000"#,
                &format!(r#""connections": {conns}"#),
            )
        };
        lines.push(at(row("memcached", 400_000, 100_000, 600_000, 0.9)));
        for fraction in [25, 50] {
            let offered = fraction * 1000;
            for _ in 0..4 {
                let [weft, peer, peer2] = p99(conns, fraction);
                lines.push(at(row("weft", offered, offered, weft, 0.5)));
                lines.push(at(row("memcached", offered, offered, peer, 0.5)));
                lines.push(at(row("memcached-2", offered, offered, peer2, 0.5)));
            }
        }
    }
    let path = dir.join(name);
    std::fs::write(&path, lines.join("\n") + "\n").expect("write the record");
    path
}

#[test]
fn the_letter_is_judged_one_table_at_a_time_beside_the_peer_against_itself() {
    let dir = scratch("letter");
    // Under the peer at every point: met; the peer's second run over its first at one point.
    let under = sweep_record(&dir, "under.jsonl", |conns, fraction| {
        let peer2 = if (conns, fraction) == (4000, 50) {
            150
        } else {
            100
        };
        [90, 100, peer2]
    });
    // Level everywhere but one point, where weft's p99 is over: not met; the control is.
    let over = sweep_record(&dir, "over.jsonl", |conns, fraction| {
        let weft = if (conns, fraction) == (1000, 25) {
            120
        } else {
            100
        };
        [weft, 100, 100]
    });
    let Some(out) = pool(&[
        under.as_os_str(),
        over.as_os_str(),
        OsStr::new("--per-record"),
    ]) else {
        return;
    };
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.stdout.contains(
            "mc, item 3's letter one table at a time: weft met it at every 25 % and 50 % point in \
             1 of 2 records, at every point in 1; memcached's second run against its first in 1 \
             and 1 of 2"
        ),
        "{}",
        out.stdout
    );
}
