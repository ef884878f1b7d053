//! benches/wake_path.py on traces written here: an episode runs from the server's thread
//! leaving idle to its first reply (the client's ACKs, sent from the server's context, and
//! other CPUs' and threads' events left out), its segments come out in the path's order, and
//! what the server does after the reply until it sleeps is told apart.

use std::ffi::OsStr;
use std::path::PathBuf;

use weft_testkit::{run_bench_script, scratch_dir, ScriptRun};

/// One line of `perf script --ns -F cpu,tid,time,event,trace`.
fn line(tid: u32, cpu: u32, t_us: f64, event: &str, rest: &str) -> String {
    format!(
        "{tid:6} [{cpu:03}] {:.9}: {event:>30}: {rest}",
        100.0 + t_us / 1e6
    )
}

fn switch(from: (&str, u32), to: (&str, u32)) -> String {
    format!(
        "prev_comm={} prev_pid={} prev_prio=120 prev_state=S ==> next_comm={} next_pid={} next_prio=89",
        from.0, from.1, to.0, to.1
    )
}

/// Two episodes of a server thread `srv` (pid 7) on CPU 0: woken, a system call, the reply
/// (after a client's ACK of 66 bytes), asleep. Around them: the generator on CPU 1, and a
/// thread of another name woken on CPU 0, neither of which may start an episode.
fn trace() -> String {
    let idle = ("swapper/0", 0);
    let srv = ("srv-worker", 7);
    let mut lines = Vec::new();
    for (start, call_us, reply_us) in [(0.0, 2.0, 5.0), (100.0, 4.0, 9.0)] {
        lines.push(line(
            9,
            1,
            start - 3.0,
            "net:net_dev_queue",
            "dev=lo skbaddr=0x1 len=84",
        ));
        lines.push(line(0, 0, start, "sched:sched_switch", &switch(idle, srv)));
        lines.push(line(
            7,
            0,
            start + call_us,
            "syscalls:sys_exit_read",
            "0x12",
        ));
        lines.push(line(
            7,
            0,
            start + 1.0 + call_us,
            "net:net_dev_queue",
            "dev=lo skbaddr=0x2 len=66",
        ));
        lines.push(line(
            7,
            0,
            start + reply_us,
            "net:net_dev_queue",
            "dev=lo skbaddr=0x3 len=130",
        ));
        lines.push(line(
            7,
            0,
            start + reply_us + 10.0,
            "sched:sched_switch",
            &switch(srv, idle),
        ));
    }
    // Another thread woken on CPU 0 and a reply-sized segment of its own: no episode.
    lines.push(line(
        0,
        0,
        300.0,
        "sched:sched_switch",
        &switch(idle, ("other", 8)),
    ));
    lines.push(line(
        8,
        0,
        302.0,
        "net:net_dev_queue",
        "dev=lo skbaddr=0x4 len=130",
    ));
    lines.join("\n") + "\n"
}

fn run(args: &[&OsStr]) -> Option<ScriptRun> {
    run_bench_script("python3", "wake_path.py", args, &[])
}

fn written(test: &str) -> (PathBuf, PathBuf) {
    let dir = scratch_dir("weft-wake-path", test);
    let path = dir.join("trace.txt");
    std::fs::write(&path, trace()).expect("write the trace");
    (dir, path)
}

#[test]
fn an_episode_runs_from_the_wake_up_to_the_first_reply() {
    let (dir, path) = written("episodes");
    let Some(out) = run(&[
        path.as_os_str(),
        OsStr::new("--comm"),
        OsStr::new("srv"),
        OsStr::new("--json"),
    ]) else {
        return;
    };
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(doc["episodes"], 2, "{doc}");
    let segments: Vec<(String, f64, f64)> = doc["segments"]
        .as_array()
        .expect("segments")
        .iter()
        .map(|s| {
            (
                s["segment"].as_str().expect("name").to_owned(),
                s["p50_us"].as_f64().expect("p50"),
                s["mean_us"].as_f64().expect("mean"),
            )
        })
        .collect();
    let names: Vec<&str> = segments.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "switch -> sys_exit_read",
            "sys_exit_read -> reply",
            "total",
            "reply -> asleep",
            "switch -> asleep"
        ],
        "{doc}"
    );
    // Means over the two episodes: the call at 2 and 4 µs, the reply at 5 and 9, asleep 10
    // µs after each reply; the ACK of 66 bytes is not the reply.
    let mean = |name: &str| segments.iter().find(|s| s.0 == name).expect(name).2;
    assert!(
        (mean("switch -> sys_exit_read") - 3.0).abs() < 0.01,
        "{doc}"
    );
    assert!((mean("sys_exit_read -> reply") - 4.0).abs() < 0.01, "{doc}");
    assert!((mean("total") - 7.0).abs() < 0.01, "{doc}");
    assert!((mean("reply -> asleep") - 10.0).abs() < 0.01, "{doc}");
    assert!((mean("switch -> asleep") - 17.0).abs() < 0.01, "{doc}");
}

#[test]
fn a_trace_without_the_server_says_so() {
    let (dir, path) = written("none");
    let Some(out) = run(&[path.as_os_str(), OsStr::new("--comm"), OsStr::new("nginx")]) else {
        return;
    };
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(out.stderr.contains("no episode in"), "{}", out.stderr);
}
