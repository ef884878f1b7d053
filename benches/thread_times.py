#!/usr/bin/env python3
"""Samples how long every thread of some processes, their children and PID 1 has run, every 10 ms.

Why not `perf record -e sched:sched_switch`: on this VM a switch *out of* PID 1's threads is
never recorded, nor (on CPU 1) a switch out of the idle task, so a trace of switches charges
whoever ran after them to the task switched in before (docs/notes/scale.md, "What held the
CPUs"). The kernel's own per-thread run time (`/proc/PID/task/TID/schedstat`, first field, ns)
has no such gap.

Output: one line `# TID PID COMM` per sampled thread, then one line per sample:
`CLOCK_MONOTONIC_NS run_ns cpu run_ns cpu ...` in the order of the `#` lines (cpu: the CPU the
thread last ran on; -1 -1 once a thread is gone). Threads are listed once, at the start.

Usage: benches/thread_times.py OUT SECONDS PID... (run it at a real-time priority, e.g.
`chrt -f 20`, so that it samples on time while the benchmark keeps both CPUs busy)
"""
import os
import sys
import time

INTERVAL_S = 0.01


def threads(pid):
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return []


def children(pid):
    """Direct child processes of pid (nginx's workers under its master)."""
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    s = f.read()
                if int(s[s.rfind(b")") + 2 :].split()[1]) == pid:
                    kids.append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return kids


def comm(pid, tid):
    try:
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            return f.read().strip().replace(" ", "_")
    except OSError:
        return "?"


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__.split("\n\n")[-1])
    out, seconds, pids = sys.argv[1], float(sys.argv[2]), [int(p) for p in sys.argv[3:]]
    pids = [1] + [q for p in pids for q in [p] + children(p)]
    tasks = [(tid, pid, comm(pid, tid)) for pid in dict.fromkeys(pids) for tid in threads(pid)]
    files = []
    for tid, pid, _ in tasks:
        base = f"/proc/{pid}/task/{tid}"
        files.append((open(base + "/schedstat", "rb", buffering=0), open(base + "/stat", "rb", buffering=0)))
    rows = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        vals = [str(time.clock_gettime_ns(time.CLOCK_MONOTONIC))]
        for sched, stat in files:
            try:
                sched.seek(0)
                run = sched.read().split()[0].decode()
                stat.seek(0)
                s = stat.read()
                # Field 39 (processor) counted after the parenthesised command name.
                cpu = s[s.rfind(b")") + 2 :].split()[36].decode()
            except (OSError, IndexError):
                run, cpu = "-1", "-1"
            vals += [run, cpu]
        rows.append(" ".join(vals))
        time.sleep(INTERVAL_S)
    with open(out, "w") as f:
        for tid, pid, name in tasks:
            f.write(f"# {tid} {pid} {name}\n")
        f.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
