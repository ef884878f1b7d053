#!/usr/bin/env python3
"""Issue 20's item 4 (the cache's capped peak over memcached's) by the host it ran on.

Why: the item's ratio moves with the host more than with a build (1.24-1.41x with the vCPUs
near, 1.02-1.23x in a fast phase; docs/notes/scale.md): memcached makes about twelve times as
many system calls a request as weft, so the cheaper a system call the smaller weft's lead.
Since 2026-11-30 `weft bench memcached` prints a `host:` line before each invocation's table
(the CPUs' cache-line round trip and a `getppid`'s price on CPU 0). This reads the records'
invocations that have one and tells whether the ratio follows the price of a system call.

  benches/item4_hosts.py RECORD... [--json]

RECORD: the output of `weft bench memcached` (docs/bench/item4-*.txt; lines starting with `#`
are the record's header). Invocations without a host line are skipped and counted. Prints one
row an invocation, sorted by the system call's price: that price, the round trip, both peaks,
the peak's ratio and weft's CPU a request at the peak over memcached's; then Spearman's rank
correlation between the price and the peak's ratio, with a two-sided permutation p-value
(exact up to 8 invocations, else 20,000 shuffles with a fixed seed), and the ratios of the
cheaper and the dearer half (split at the median price) as min-median-max.
"""
import itertools
import json
import random
import re
import statistics
import sys

HOST = re.compile(r"^host: CPU 0 <-> CPU 1 cache-line round trip (\d+) ns; a system call on CPU 0 (\d+) ns")
PEAK = re.compile(r"^peak req/s \(closed loop[^)]*\)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x")
CPU = re.compile(r"^server CPU µs/request at peak\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x")
EXACT_UP_TO = 8
SHUFFLES = 20_000


def invocations(path):
    """The invocations of one record: (those with a host line, how many without one). An
    invocation's host line comes before its peak line, and its CPU line after it, so a host
    or peak line that finds the one before it already read starts the next invocation."""
    found, skipped = [], 0
    current = {}

    def close():
        nonlocal skipped
        if "weft_peak" in current:
            if "syscall_ns" in current:
                found.append(dict(current, record=path))
            else:
                skipped += 1

    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#"):
                continue
            m = HOST.match(line)
            if m:
                if current:
                    close()
                    current = {}
                current["round_trip_ns"] = int(m.group(1))
                current["syscall_ns"] = int(m.group(2))
                continue
            m = PEAK.match(line)
            if m:
                if "weft_peak" in current:
                    close()
                    current = {}
                current["weft_peak"] = float(m.group(1))
                current["memcached_peak"] = float(m.group(2))
                current["ratio"] = float(m.group(1)) / float(m.group(2))
                continue
            m = CPU.match(line)
            if m and "weft_peak" in current and "cpu_ratio" not in current:
                current["cpu_ratio"] = float(m.group(3))
    close()
    return found, skipped


def ranks(values):
    """Ranks from 1, ties given their mean rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def pearson(xs, ys):
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx == 0 or syy == 0:
        return 0.0
    return sxy / (sxx * syy) ** 0.5


def spearman(xs, ys):
    """Spearman's rho and its two-sided permutation p-value."""
    rx, ry = ranks(xs), ranks(ys)
    rho = pearson(rx, ry)
    n = len(xs)
    if n <= EXACT_UP_TO:
        shuffles = list(itertools.permutations(ry))
    else:
        rng = random.Random(20)
        shuffles = []
        for _ in range(SHUFFLES):
            s = ry[:]
            rng.shuffle(s)
            shuffles.append(s)
    as_far = sum(1 for s in shuffles if abs(pearson(rx, list(s))) >= abs(rho) - 1e-12)
    return rho, as_far / len(shuffles)


def spread(values):
    if not values:
        return "none"
    return f"{min(values):.2f}-{statistics.median(values):.2f}-{max(values):.2f} ({len(values)})"


def main():
    args = [a for a in sys.argv[1:] if a != "--json"]
    as_json = "--json" in sys.argv[1:]
    if not args or any(a in ("-h", "--help") for a in args):
        print(__doc__.strip())
        return 0 if args else 2
    rows, skipped = [], 0
    for path in args:
        try:
            found, s = invocations(path)
        except OSError as e:
            print(f"item4_hosts.py: cannot read {path}: {e.strerror}", file=sys.stderr)
            return 1
        rows += found
        skipped += s
    rows.sort(key=lambda r: (r["syscall_ns"], r["round_trip_ns"]))
    result = {"invocations": rows, "skipped_without_host": skipped}
    if len(rows) >= 3:
        rho, p = spearman([r["syscall_ns"] for r in rows], [r["ratio"] for r in rows])
        median_ns = statistics.median(r["syscall_ns"] for r in rows)
        cheap = [r["ratio"] for r in rows if r["syscall_ns"] <= median_ns]
        dear = [r["ratio"] for r in rows if r["syscall_ns"] > median_ns]
        result.update(spearman_rho=rho, spearman_p=p, median_syscall_ns=median_ns,
                      cheaper_half=cheap, dearer_half=dear)
    if as_json:
        print(json.dumps(result))
        return 0
    print(f"item 4 by host: {len(rows)} invocation(s) with a host line"
          f" ({skipped} without one skipped), sorted by a system call's price on CPU 0")
    print("| record | system call ns | round trip ns | weft req/s | memcached req/s | peak ratio | CPU a request, weft / memcached |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        cpu = f"{r['cpu_ratio']:.2f}" if "cpu_ratio" in r else "-"
        print(f"| {r['record']} | {r['syscall_ns']} | {r['round_trip_ns']} | {r['weft_peak']:.0f}"
              f" | {r['memcached_peak']:.0f} | {r['ratio']:.2f} | {cpu} |")
    if "spearman_rho" in result:
        print(f"Spearman's rho, system call's price against the peak ratio: {result['spearman_rho']:+.2f}"
              f" (two-sided permutation p {result['spearman_p']:.3f}, {len(rows)} invocations)")
        print(f"peak ratio with a system call at or under {result['median_syscall_ns']:g} ns:"
              f" {spread(result['cheaper_half'])}; over it: {spread(result['dearer_half'])}")
    else:
        print("fewer than three invocations: no correlation")
    return 0


if __name__ == "__main__":
    sys.exit(main())
