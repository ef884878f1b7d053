#!/usr/bin/env python3
"""Where a request's time goes inside a server between its wake-up and its reply, from kernel
tracepoints: the path benches/wake_path.sh records for weft's cache and memcached side by side.

Why: at a quarter and a half of the peak the cache's p50 and p90 sit a few per cent over
memcached's round after round (`scale_pool.py --significance`), with each request its own
wake-up. The client's latency cannot say which part of the server's path is longer; the
kernel's tracepoints on the server's CPU can, for both servers alike.

  benches/wake_path.py TRACE --comm PREFIX [--comm PREFIX...] [--cpu N] [--ack-len BYTES]
                       [--label NAME] [--json]

TRACE: the text of `perf script --ns -F cpu,tid,time,event,trace` (`-` for standard input)
over a recording with `sched:sched_switch` and `net:net_dev_queue` among its events. An
*episode* starts when CPU N (default 0) switches from idle (pid 0) to a thread whose command
starts with one of the PREFIXes (the server's serving threads: `weft-memcached`, `mc-worker`)
and ends at that CPU's first `net_dev_queue` with more than ACK-LEN bytes (default 66: a
loopback segment's headers with TCP timestamps) sent by a thread other than idle: the first
reply going out. Segments of ACK-LEN bytes or less are the client's ACKs, which loopback
sends from the server's context, and are left out. Within an episode each event's first
occurrence is kept; the episode's events in time order give its segments ("a -> b"). Prints,
per segment seen in at least a tenth of the episodes, the count, p50 and mean in
microseconds, and the episode's whole length (`total`), then what the server does after its
reply until it switches out (`reply -> asleep`, to the first switch away from a serving
thread, another reply's work included) and its whole stay on the CPU (`switch -> asleep`).
Each tracepoint a path crosses adds its own cost to the segment it ends, so compare paths
with like numbers of tracepoints, or the totals with that in mind.
"""
import argparse
import json
import re
import sys

LINE = re.compile(r"\s*(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s*(.*)")
LEN = re.compile(r"\blen=(\d+)")
NEXT_COMM = re.compile(r"next_comm=(.*?) next_pid=")
PREV_COMM = re.compile(r"prev_comm=(.*?) prev_pid=")
LAST = ("total", "reply -> asleep", "switch -> asleep")


def episodes(lines, prefixes, cpu=0, ack_len=66):
    """The episodes of a trace's lines: one dict each, event name -> seconds from its start,
    with `reply` for its end. Lines are taken in time order."""
    events = []
    for line in lines:
        m = LINE.match(line)
        if m and int(m.group(2)) == cpu:
            events.append((float(m.group(3)), int(m.group(1)), m.group(4), m.group(5)))
    events.sort(key=lambda e: e[0])
    found, current, replied = [], None, None
    for t, tid, name, rest in events:
        if name == "sched:sched_switch":
            nxt = NEXT_COMM.search(rest)
            prev = PREV_COMM.search(rest)
            if replied is not None and prev and prev.group(1).startswith(tuple(prefixes)):
                replied["asleep"] = t - replied_at
                replied = None
            if "prev_pid=0 " in rest and nxt and nxt.group(1).startswith(tuple(prefixes)):
                current, replied = {"switch": t}, None
            continue
        if current is None:
            continue
        short = name.split(":", 1)[-1]
        if name == "net:net_dev_queue":
            size = LEN.search(rest)
            if tid == 0 or not size or int(size.group(1)) <= ack_len:
                continue
            short = "reply"
        current.setdefault(short, t)
        if short == "reply":
            # `replied` stays open for its switch away (`asleep`), at `replied_at`'s offset.
            replied_at = current["switch"]
            replied = {k: v - replied_at for k, v in current.items()}
            found.append(replied)
            current = None
    return found


def segments(found):
    """Segment name -> (durations, start offsets), in seconds, over the episodes, plus
    `total`."""
    out = {}
    for ep in found:
        order = sorted(ep.items(), key=lambda kv: kv[1])
        for (a, ta), (b, tb) in zip(order, order[1:]):
            if b == "asleep":
                break
            durations, starts = out.setdefault(f"{a} -> {b}", ([], []))
            durations.append(tb - ta)
            starts.append(ta)
        out.setdefault("total", ([], []))[0].append(ep["reply"])
        if "asleep" in ep:
            out.setdefault("reply -> asleep", ([], []))[0].append(ep["asleep"] - ep["reply"])
            out.setdefault("switch -> asleep", ([], []))[0].append(ep["asleep"])
    return out


def summary(found):
    """Rows (segment, count, p50 µs, mean µs) for segments in a tenth of the episodes or more,
    in the path's order (by where in its episode a segment starts, on average), `total` last."""
    rows = []
    for name, (values, starts) in segments(found).items():
        if name != "total" and len(values) * 10 < len(found):
            continue
        # The path's segments by where they start; then the totals in a fixed order.
        at = sum(starts) / len(starts) if starts else LAST.index(name) + 1e9
        values = sorted(values)
        rows.append((at, name, len(values), values[len(values) // 2] * 1e6, sum(values) / len(values) * 1e6))
    rows.sort()
    return [row[1:] for row in rows]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--comm", action="append", required=True)
    ap.add_argument("--cpu", type=int, default=0)
    ap.add_argument("--ack-len", type=int, default=66)
    ap.add_argument("--label", default="")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    src = sys.stdin if args.trace == "-" else open(args.trace, encoding="utf-8", errors="replace")
    found = episodes(src, args.comm, args.cpu, args.ack_len)
    if not found:
        print(f"wake_path.py: no episode in {args.trace} (threads {', '.join(args.comm)} on CPU "
              f"{args.cpu}, woken from idle, then a segment over {args.ack_len} bytes)", file=sys.stderr)
        sys.exit(1)
    rows = summary(found)
    if args.json:
        print(json.dumps({"label": args.label, "episodes": len(found),
                          "segments": [{"segment": s, "count": n, "p50_us": round(p, 3), "mean_us": round(m, 3)}
                                       for s, n, p, m in rows]}))
        return
    label = f"{args.label}: " if args.label else ""
    print(f"{label}{len(found)} episodes (idle -> {'/'.join(args.comm)} on CPU {args.cpu} -> first reply)")
    for s, n, p, m in rows:
        print(f"  {s:55s} {n:7d}  p50 {p:6.2f} µs  mean {m:6.2f} µs")


if __name__ == "__main__":
    main()
