#!/usr/bin/env python3
"""Injected stalls: stop a server for a few milliseconds at a time while open-loop load runs,
and report how each stall's backlog was served.

Why: on this VM the p999 (and often the p99) of a 5 s window at thousands of connections is
set by a few millisecond episodes in which a server gets no CPU (docs/notes/scale.md). They
come when they come, to one server in one round and not the next, so two servers cannot be
compared on them. A stall made by SIGSTOP/SIGCONT comes at known times, equally to every
server: what is left to compare is how fast each works off the same backlog.

  benches/stalls.py stop PID[,PID...] STALL_MS EVERY_MS COUNT DELAY_S [--after-fds GEN_PID N] > TIMES
      waits until process GEN_PID (the generator) holds N descriptors (its connections are
      open), then DELAY_S, then COUNT times (0: until GEN_PID exits): SIGSTOP to
      each PID, STALL_MS later SIGCONT, EVERY_MS until the next; writes each stall's start and
      end on CLOCK_MONOTONIC (s), one a line. Start it with the generator, at normal
      priority: it takes SCHED_FIFO (priority 20) itself only once its start-up is done, so
      that it does not take the generator's CPU in the window, and then keeps its times.
  benches/stalls.py report TRACE TIMES [--json]
      TRACE from `openloop --trace` of the same run. Per stall: the worst latency of a request
      intended from 2 ms before it to 200 ms after it ended; how long after the end the first
      quiet millisecond began, one whose requests (at least one) all got their replies within
      1 ms (the backlog worked off: `quiet_ms`); and how long after the end the last request
      slower than 1 ms in those 200 ms got its reply (`drain_ms`, kept for older records: a
      later stop of the host within the 200 ms decides it, so it is bimodal here, 12-40 ms or
      140-200 ms). A stall that is not quiet within the 200 ms gets 200. Latencies are to the
      reply's arrival in the generator's kernel, so the generator's own reading delay is left
      out.
"""
import bisect
import json
import os
import signal
import statistics
import sys
import time

BEFORE_US = 2_000
AFTER_US = 200_000
SLOW_US = 1_000


def descriptors(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None  # gone


def running(pid):
    """Whether `pid` lives and is not a zombie: one small read, unlike counting descriptors."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def stop(pids, stall_ms, every_ms, count, delay_s, after):
    if after:
        gen_pid, fds = after
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            n = descriptors(gen_pid)
            if n is None or n >= fds:
                break
            time.sleep(0.1)
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(20))
    except PermissionError:
        print("stalls.py: no SCHED_FIFO (not root?): stall lengths may stretch", file=sys.stderr)
    time.sleep(delay_s)
    times = []
    while len(times) < count or (count == 0 and after and running(after[0])):
        start = time.clock_gettime(time.CLOCK_MONOTONIC)
        try:
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            time.sleep(stall_ms / 1000)
        finally:
            # Never leave a server stopped, whatever interrupted the stall.
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        times.append((start, time.clock_gettime(time.CLOCK_MONOTONIC)))
        time.sleep(every_ms / 1000)
    for start, end in times:
        print(f"{start:.6f} {end:.6f}")


def report(trace, times):
    lines = open(trace).read().splitlines()
    # "# window opened at CLOCK_MONOTONIC <us> us"
    opened_us = float(lines[0].split("CLOCK_MONOTONIC")[1].split()[0])
    rows = []
    for line in lines[1:]:
        f = line.split()
        if len(f) >= 5:
            rows.append((float(f[0]), float(f[4])))  # intended (us), latency to arrival (us)
    rows.sort()
    intended = [r[0] for r in rows]
    stalls = []
    for line in open(times):
        start, end = (float(x) * 1e6 - opened_us for x in line.split())
        lo = bisect.bisect_left(intended, start - BEFORE_US)
        hi = bisect.bisect_left(intended, end + AFTER_US)
        around = rows[lo:hi]
        if not around or start < 0 or end + AFTER_US > intended[-1]:
            continue  # outside the measured window
        worst = max(lat for _, lat in around)
        late = [t + lat for t, lat in around if lat > SLOW_US]
        stalls.append(
            {
                "stall_ms": round((end - start) / 1000, 2),
                "worst_ms": round(worst / 1000, 2),
                "quiet_ms": first_quiet_ms(around, end),
                "drain_ms": round((max(late) - end) / 1000, 2) if late else 0.0,
            }
        )
    return stalls


def first_quiet_ms(rows, end):
    """Milliseconds from `end` to the first millisecond (counted from `end`) whose requests,
    by intended time, all had replies within SLOW_US; one without requests says nothing.
    AFTER_US / 1000 when none in `rows` (intended, latency; sorted) is."""
    bins = {}
    for t, lat in rows:
        if t >= end:
            b = int((t - end) // 1000)
            bins[b] = bins.get(b, True) and lat <= SLOW_US
    quiet = [b for b, ok in bins.items() if ok and b < AFTER_US // 1000]
    return float(min(quiet)) if quiet else AFTER_US / 1000


def main():
    if len(sys.argv) >= 7 and sys.argv[1] == "stop":
        pid, stall_ms, every_ms, count, delay_s = sys.argv[2:7]
        after = None
        if "--after-fds" in sys.argv:
            i = sys.argv.index("--after-fds")
            after = (int(sys.argv[i + 1]), int(sys.argv[i + 2]))
        stop([int(p) for p in pid.split(",")], float(stall_ms), float(every_ms), int(count), float(delay_s), after)
    elif len(sys.argv) >= 4 and sys.argv[1] == "report":
        stalls = report(sys.argv[2], sys.argv[3])
        if not stalls:
            sys.exit("stalls.py: no stall fell inside the measured window")
        summary = {
            "stalls": len(stalls),
            "stall_ms": statistics.median(s["stall_ms"] for s in stalls),
            "worst_ms_median": statistics.median(s["worst_ms"] for s in stalls),
            "worst_ms_max": max(s["worst_ms"] for s in stalls),
            "quiet_ms_median": statistics.median(s["quiet_ms"] for s in stalls),
            "quiet_ms_max": max(s["quiet_ms"] for s in stalls),
            "drain_ms_median": statistics.median(s["drain_ms"] for s in stalls),
            "drain_ms_max": max(s["drain_ms"] for s in stalls),
        }
        if "--json" in sys.argv:
            print(json.dumps(summary))
        else:
            for s in stalls:
                print(f"stall {s['stall_ms']:6.2f} ms  worst {s['worst_ms']:7.2f} ms  quiet {s['quiet_ms']:6.1f} ms after  "
                      f"last slow reply {s['drain_ms']:7.2f} ms after")
            print(json.dumps(summary))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
