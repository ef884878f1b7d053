#!/usr/bin/env python3
"""Where the slow requests of one open-loop run were, and what held the CPUs then.

Input: a trace written by `openloop --trace FILE` (first line: the window's start on
CLOCK_MONOTONIC; then one line per recorded request: intended time in us after the window
opened, latency in us, worker, connection, latency to the reply's arrival in this host's
kernel in us). Optionally a `perf record -k CLOCK_MONOTONIC -e sched:sched_switch -a` file of
the same run, to say which tasks ran on the server's and the load's CPU during each episode.

An episode is a run of 5 ms bins (by intended time) holding requests at least --slow-us slow,
bins at most 10 ms apart merged. For each: the slow requests, the worst latency, the longest
span with no reply at all (the server, or its path, stopped), and the CPU time per task on
each of --cpus inside the episode.

Usage: benches/episodes.py TRACE [--perf FILE] [--cpus 0,1] [--slow-us 4000] [--min-slow 50]
"""
import argparse
import collections
import re
import subprocess
import sys

BIN_US = 5000


def load(path):
    with open(path) as f:
        first = f.readline().split()
        if first[:1] != ["#"]:
            sys.exit(f"episodes.py: {path} is not an openloop --trace file")
        start_s = float(first[-2]) / 1e6
        rows = [tuple(map(float, line.split())) for line in f if line.strip()]
    return start_s, rows


def episodes(rows, slow_us, min_slow):
    bins = collections.defaultdict(lambda: [0, 0.0])
    for intended, latency, *_ in rows:
        if latency >= slow_us:
            b = bins[int(intended // BIN_US)]
            b[0] += 1
            b[1] = max(b[1], latency)
    runs = []
    for b in sorted(bins):
        if runs and b - runs[-1][1] <= 2:
            runs[-1][1] = b
        else:
            runs.append([b, b])
    out = []
    for a, b in runs:
        slow = sum(bins[x][0] for x in range(a, b + 1))
        if slow >= min_slow:
            worst = max(bins[x][1] for x in range(a, b + 1))
            # The episode spans from its first slow request's intended time to the reply of
            # its slowest one; start a little earlier to catch what began it.
            out.append((a * BIN_US / 1000 - 10, b * BIN_US / 1000 + worst / 1000 + 5, slow, worst))
    return out


def reply_gap_ms(rows, lo_ms, hi_ms):
    """The longest span inside [lo, hi] ms with no reply received."""
    done = sorted((i + l) / 1000 for i, l, *_ in rows if lo_ms <= (i + l) / 1000 <= hi_ms)
    edges = [lo_ms] + done + [hi_ms]
    return max(b - a for a, b in zip(edges, edges[1:]))


SWITCH = re.compile(
    r"\s*\[(\d+)\]\s+([\d.]+):\s+prev_comm=(.*?) prev_pid=\d+.*prev_state=\S+ ==> next_comm=(.*?) next_pid="
)


def cpu_time(perf, cpus, start_s, spans):
    """Per CPU in `cpus`: per span {task: ms}, and {task: ms} over the whole recording."""
    text = subprocess.run(
        ["perf", "script", "-i", perf, "-F", "cpu,time,trace"], capture_output=True, text=True
    ).stdout
    per = {c: [collections.Counter() for _ in spans] for c in cpus}
    whole = {c: collections.Counter() for c in cpus}
    running = {}
    for line in text.splitlines():
        m = SWITCH.match(line)
        if not m or int(m.group(1)) not in per:
            continue
        cpu = int(m.group(1))
        t = (float(m.group(2)) - start_s) * 1000
        if cpu in running:
            since, task = running[cpu]
            whole[cpu][task] += t - since
            for i, (lo, hi, _, _) in enumerate(spans):
                overlap = min(t, hi) - max(since, lo)
                if overlap > 0:
                    per[cpu][i][task] += overlap
        running[cpu] = (t, m.group(4))
    return per, whole


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--perf", help="perf sched_switch record of the same run (CLOCK_MONOTONIC)")
    ap.add_argument("--cpus", default="0,1", help="CPUs to report: the server's, the load's [0,1]")
    ap.add_argument("--slow-us", type=float, default=4000, help="what counts as slow [4000]")
    ap.add_argument("--min-slow", type=int, default=50, help="smallest episode shown [50]")
    args = ap.parse_args()
    start_s, rows = load(args.trace)
    lat = sorted(r[1] for r in rows)
    if not lat:
        sys.exit("episodes.py: the trace has no requests")
    n = len(lat)
    slow = sum(1 for x in lat if x >= args.slow_us)
    print(
        f"{n} requests: p50 {lat[n // 2] / 1000:.2f} ms, p99 {lat[int(n * 0.99)] / 1000:.1f} ms, "
        f"p999 {lat[int(n * 0.999)] / 1000:.1f} ms; {slow} at least {args.slow_us / 1000:g} ms"
    )
    spans = episodes(rows, args.slow_us, args.min_slow)
    in_spans = sum(s for _, _, s, _ in spans)
    print(f"{len(spans)} episodes hold {in_spans} of the slow requests")
    cpus = [int(c) for c in args.cpus.split(",")]
    per = whole = None
    if args.perf:
        per, whole = cpu_time(args.perf, cpus, start_s, spans)
        for c in cpus:
            top = ", ".join(f"{k} {v:.0f}" for k, v in whole[c].most_common(5))
            print(f"CPU {c} over the whole recording (ms): {top}")
    for i, (lo, hi, s, worst) in enumerate(spans):
        line = (
            f"  {lo:7.0f}–{hi:7.0f} ms: {s:5d} slow, worst {worst / 1000:5.1f} ms, "
            f"longest span without a reply {reply_gap_ms(rows, lo, hi):5.1f} ms"
        )
        if per:
            for c in cpus:
                line += f"\n      CPU {c}: " + ", ".join(f"{k} {v:.1f}" for k, v in per[c][i].most_common(3))
        print(line)


if __name__ == "__main__":
    main()
