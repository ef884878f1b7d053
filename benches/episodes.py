#!/usr/bin/env python3
"""Where the slow requests of one open-loop run were, and what ran meanwhile.

Input: a trace written by `openloop --trace FILE` (first line: the window's start on
CLOCK_MONOTONIC; then one line per recorded request: intended time in us after the window
opened, latency in us, worker, connection, latency to the reply's arrival in this host's
kernel in us, and, in newer traces, when the request's send returned in us after intended).
Optionally the `benches/thread_times.py` samples of the same run (the server,
the generator and PID 1, every thread's run time every 10 ms), to say which threads ran
during each episode and on which CPU.

An episode is a run of 5 ms bins (by intended time) holding requests at least --slow-us slow,
bins at most 10 ms apart merged. For each: the slow requests, the worst latency, the longest
span with no reply at all (the server, or its path, stopped), and the run time per thread
inside the episode.

Then the tick's share: every request folded by its intended time modulo the kernel's tick
(--tick-us, 4 ms at HZ=250), the p90 latency to the reply's arrival per 100 us of that phase,
its peak against its median. On this 2-vCPU VM the timer softirq on the server's CPU runs
every tick for about 130 us at thousands of connections (the generator's delayed-ACK timers:
loopback runs the generator socket's receive, and so arms its timers, on the server's CPU),
and the requests sent in the few hundred microseconds before it are most of every server's
slowest percent.

Usage: benches/episodes.py TRACE [--threads FILE] [--slow-us 4000] [--min-slow 50]
       [--tick-us 4000]
"""
import argparse
import collections
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


def thread_time(path, start_s, spans):
    """From a benches/thread_times.py file of the same run: per span {thread: (ms, cpus)}, and
    {thread: ms} over the window; a thread is `COMM (PID)` for PID 1, else `COMM`."""
    names, samples = [], []
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                _, tid, pid, name = line.split(maxsplit=3)
                names.append(f"{name.strip()} (PID 1)" if pid == "1" else name.strip())
            elif line.strip():
                v = line.split()
                samples.append((int(v[0]) / 1e6 - start_s * 1000, [(int(v[1 + 2 * i]), v[2 + 2 * i]) for i in range(len(names))]))
    per = [collections.defaultdict(lambda: [0.0, set()]) for _ in spans]
    whole = collections.Counter()
    for (t0, a), (t1, b) in zip(samples, samples[1:]):
        for name, (r0, _), (r1, cpu) in zip(names, a, b):
            if r0 < 0 or r1 < 0 or r1 == r0:
                continue
            ms = (r1 - r0) / 1e6
            if t1 > 0:
                whole[name] += ms
            for i, (lo, hi, _, _) in enumerate(spans):
                # Run time inside the sample interval, spread evenly over it.
                overlap = min(t1, hi) - max(t0, lo)
                if overlap > 0:
                    per[i][name][0] += ms * overlap / (t1 - t0)
                    per[i][name][1].add(cpu)
    return per, whole


def tick_fold(rows, tick_us, bin_us=100):
    """Per phase bin of the tick, (p90 of the arrival latency, requests); rows without the
    arrival column use the latency."""
    bins = [[] for _ in range(int(tick_us // bin_us))]
    for r in rows:
        arrived = r[4] if len(r) > 4 else r[1]
        bins[int((r[0] % tick_us) // bin_us) % len(bins)].append(arrived)
    out = []
    for b in bins:
        b.sort()
        out.append((b[int(len(b) * 0.9)] if b else 0.0, len(b)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--threads", help="benches/thread_times.py samples of the same run")
    ap.add_argument("--slow-us", type=float, default=4000, help="what counts as slow [4000]")
    ap.add_argument("--min-slow", type=int, default=50, help="smallest episode shown [50]")
    ap.add_argument("--tick-us", type=float, default=4000, help="the kernel tick's period [4000]")
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
    per = None
    if args.threads:
        per, whole = thread_time(args.threads, start_s, spans)
        top = ", ".join(f"{k} {v:.0f}" for k, v in whole.most_common(6))
        print(f"run time from the window's start (ms): {top}")
    for i, (lo, hi, s, worst) in enumerate(spans):
        line = (
            f"  {lo:7.0f}–{hi:7.0f} ms: {s:5d} slow, worst {worst / 1000:5.1f} ms, "
            f"longest span without a reply {reply_gap_ms(rows, lo, hi):5.1f} ms"
        )
        if per:
            top = sorted(per[i].items(), key=lambda kv: -kv[1][0])[:4]
            line += "\n      ran: " + ", ".join(
                f"{k} {ms:.1f} ms (CPU {','.join(sorted(cpus))})" for k, (ms, cpus) in top if ms >= 0.05
            )
        print(line)
    fold = tick_fold(rows, args.tick_us)
    p90s = sorted(p for p, _ in fold)
    peak = max(range(len(fold)), key=lambda i: fold[i][0])
    print(
        f"by phase of a {args.tick_us / 1000:g} ms tick (p90 to the reply's arrival, 100 us bins): "
        f"peak {fold[peak][0]:.0f} us at {peak * 100}-{peak * 100 + 100} us, median {p90s[len(p90s) // 2]:.0f} us"
    )
    print("  " + " ".join(f"{p:.0f}" for p, _ in fold))


if __name__ == "__main__":
    main()
