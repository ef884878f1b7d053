#!/usr/bin/env python3
"""Summary of benches/defer_accept.sh's runs.

Input: the script's lines, `round rate server replies_per_sec errors p50_ms p99_ms p999_ms
cpu_us_per_reply load_busy` (lines starting with `#` and the header are skipped). Output, by rate: each
server's replies/s, errors, p99, p99.9, CPU a reply and the load's busy share as min–median–max over its runs; then
`--defer-accept 0` (defer0) over the default (defer1) and nginx without `deferred` over nginx
with it, weft over nginx, weft over an earlier build (base), and weft with nginx's
open-file cache window (valid60) over weft's default and over nginx, by round, for p99, p99.9 and CPU a reply, as min–median–max with the count of rounds
the first is at or under the second.

Usage: defer_accept_summary.py RUNS.txt
"""

import statistics
import sys
from collections import defaultdict

FIELDS = ("replies_per_sec", "errors", "p50_ms", "p99_ms", "p999_ms", "cpu_us_per_reply", "load_busy")
PAIRS = (
    ("defer0", "defer1"),
    ("nginx", "nginx-deferred"),
    ("defer1", "nginx"),
    ("defer1", "base"),
    ("valid60", "defer1"),
    ("valid60", "nginx"),
)


def parse(lines):
    """Runs as dicts; raises ValueError naming the line that is not a run."""
    runs = []
    for number, line in enumerate(lines, 1):
        words = line.split()
        if not words or words[0].startswith("#") or words[0] == "round":
            continue
        if len(words) != 3 + len(FIELDS):
            raise ValueError(f"line {number}: {len(words)} fields, expected {3 + len(FIELDS)}: {line.strip()}")
        run = {"round": int(words[0]), "rate": int(words[1]), "server": words[2]}
        for name, word in zip(FIELDS, words[3:]):
            run[name] = float(word)
        runs.append(run)
    return runs


def spread(values):
    """min–median–max, each to the precision that keeps it readable."""
    def show(v):
        return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"
    return "–".join(show(v) for v in (min(values), statistics.median(values), max(values)))


def summary(runs):
    """The report's lines."""
    out = []
    by_rate = defaultdict(lambda: defaultdict(list))
    for run in runs:
        by_rate[run["rate"]][run["server"]].append(run)
    for rate in sorted(by_rate):
        servers = by_rate[rate]
        out.append(f"rate {rate} req/s")
        for server in sorted(servers):
            rs = servers[server]
            out.append(
                f"  {server:15} replies/s {spread([r['replies_per_sec'] for r in rs])}"
                f"  errors {spread([r['errors'] for r in rs])}"
                f"  p99 {spread([r['p99_ms'] for r in rs])} ms"
                f"  p99.9 {spread([r['p999_ms'] for r in rs])} ms"
                f"  CPU a reply {spread([r['cpu_us_per_reply'] for r in rs])} µs"
                f"  load busy {spread([r['load_busy'] for r in rs])}"
            )
        for first, second in PAIRS:
            a = {r["round"]: r for r in servers.get(first, [])}
            b = {r["round"]: r for r in servers.get(second, [])}
            rounds = sorted(set(a) & set(b))
            if not rounds:
                continue
            parts = []
            for field, label in (("p99_ms", "p99"), ("p999_ms", "p99.9"), ("cpu_us_per_reply", "CPU")):
                ratios = [a[r][field] / b[r][field] for r in rounds if b[r][field] > 0]
                if not ratios:
                    continue
                under = sum(1 for x in ratios if x <= 1)
                parts.append(f"{label} {spread(ratios)} ({under} of {len(ratios)} at or under)")
            out.append(f"  {first} / {second}: " + ", ".join(parts))
    return out


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    try:
        with open(argv[1]) as f:
            runs = parse(f)
    except (OSError, ValueError) as e:
        print(f"defer_accept_summary: {e}", file=sys.stderr)
        return 1
    if not runs:
        print("defer_accept_summary: no runs in the input", file=sys.stderr)
        return 1
    print("\n".join(summary(runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
