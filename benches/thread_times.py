#!/usr/bin/env python3
"""Samples how long every thread of some processes, their children and PID 1 has run, every 10 ms.

Why not `perf record -e sched:sched_switch`: on this VM a switch *out of* PID 1's threads is
never recorded, nor (on CPU 1) a switch out of the idle task, so a trace of switches charges
whoever ran after them to the task switched in before (docs/notes/scale.md, "What held the
CPUs"). The kernel's own per-thread run time (`/proc/PID/task/TID/schedstat`, first field, ns)
has no such gap.

Output: one line `# TID PID COMM` per sampled thread, then one line per sample:
`CLOCK_MONOTONIC_NS run_ns cpu run_ns cpu ...` in the order of the `#` lines (cpu: the CPU the
thread last ran on, read again only when its run time moved; -1 -1 once a thread is gone).
Threads are listed once, at the start.

Its own cost is part of what it measures, so a sample is kept cheap: one `pread` of each
thread's `schedstat` (about 0.8 us a thread here), and the expensive `stat` (about 4 us a
thread, for the CPU field) only for the threads that ran since the last sample. Reading both
for every thread took about 0.6 ms a sample for weft http's 70 threads (64 of them idle
blocking-pool helpers) at a real-time priority every 10 ms: a stall of that length on
whichever CPU it woke on, which made weft http's traced p90 twice nginx's (nginx has 2
threads); reading `stat` for all every tenth sample still showed as an episode every 103 ms.
Pin it to the load's CPU (`taskset -c 1`), so whatever it still costs falls on the
generator, whose send lag the trace records, and not on the server.

It stops after SECONDS, or as soon as the process named by `--until-gone` has exited (the
generator: then the measured window is over), and only then, at a normal priority, formats
and writes what it sampled. Writing a few MB at the real-time priority when SECONDS ran out
once fell 4.1-4.3 s into the window and stalled the load's CPU for up to 100 ms in every
traced run.

Usage: benches/thread_times.py [--until-gone PID] OUT SECONDS PID... (run it at a real-time
priority, e.g. `chrt -f 20`, so that it samples on time while the benchmark keeps both CPUs
busy)
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


def gone(pid):
    """Whether pid has exited (a zombie waiting for its parent counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            s = f.read()
        return s[s.rfind(b")") + 2 : s.rfind(b")") + 3] in (b"Z", b"X")
    except OSError:
        return True


def main():
    args = sys.argv[1:]
    until_gone = None
    if args[:1] == ["--until-gone"] and len(args) > 1:
        until_gone, args = int(args[1]), args[2:]
    if len(args) < 3:
        sys.exit(__doc__.split("\n\n")[-1])
    out, seconds, pids = args[0], float(args[1]), [int(p) for p in args[2:]]
    pids = [1] + [q for p in pids for q in [p] + children(p)]
    tasks = [(tid, pid, comm(pid, tid)) for pid in dict.fromkeys(pids) for tid in threads(pid)]
    files = []
    for tid, pid, _ in tasks:
        base = f"/proc/{pid}/task/{tid}"
        files.append((open(base + "/schedstat", "rb", buffering=0), open(base + "/stat", "rb", buffering=0)))
    rows = []
    runs = [None] * len(files)
    cpus = ["-1"] * len(files)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        vals = [str(time.clock_gettime_ns(time.CLOCK_MONOTONIC))]
        for i, (sched, stat) in enumerate(files):
            try:
                run = os.pread(sched.fileno(), 256, 0).split()[0].decode()
                if run != runs[i]:
                    runs[i] = run
                    s = os.pread(stat.fileno(), 4096, 0)
                    # Field 39 (processor) counted after the parenthesised command name.
                    cpus[i] = s[s.rfind(b")") + 2 :].split()[36].decode()
                cpu = cpus[i]
            except (OSError, IndexError):
                run, cpu = "-1", "-1"
            vals += [run, cpu]
        rows.append(vals)
        if until_gone is not None and gone(until_gone):
            break
        time.sleep(INTERVAL_S)
    # The window is over (or the time ran out): the rest need not preempt anyone.
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    with open(out, "w") as f:
        for tid, pid, name in tasks:
            f.write(f"# {tid} {pid} {name}\n")
        f.write("\n".join(" ".join(vals) for vals in rows) + "\n")


if __name__ == "__main__":
    main()
