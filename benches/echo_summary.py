#!/usr/bin/env python3
"""Summarises benches/servers.sh echo output (docs/bench/servers-echo-*.jsonl).

Each round ran the echo benchmark once per backend, one after the other (uring, epoll, tokio
in the script; any order and any subset is accepted: a round ends when a backend repeats).
A round's ratios (uring / tokio, epoll / tokio, in requests per second) are formed only when
every run of the round saw one host placement, probed before and after (see
targets_summary.py); the summary then gives them per placement.
"""
import json
import sys
from collections import defaultdict

from targets_summary import placement, probes, spread


def rounds_of(recs):
    """Splits the records into rounds: a new round starts when a backend comes again."""
    rounds, current = [], {}
    for r in recs:
        if r["backend"] in current:
            rounds.append(current)
            current = {}
        current[r["backend"]] = r
    if current:
        rounds.append(current)
    return rounds


def main(path):
    with open(path) as f:
        recs = [json.loads(line) for line in f if line.startswith("{")]
    by_mode = defaultdict(list)  # (backend, placement) -> ratios to tokio
    for n, rnd in enumerate(rounds_of(recs), 1):
        line = ", ".join(
            f'{b} {r["requests_per_sec"] / 1e3:.1f}k at {r["server_cpu_us_per_request"]:.2f} us '
            f"({probes(r)})"
            for b, r in rnd.items()
        )
        places = {placement(r) for r in rnd.values()}
        tokio = rnd.get("tokio")
        if tokio is None or len(places) != 1 or "mixed" in places:
            print(f"round {n} [no ratio: {'no tokio run' if tokio is None else 'mixed placement'}]: {line}")
            continue
        mode = places.pop()
        ratios = []
        for b, r in rnd.items():
            if b != "tokio":
                ratio = r["requests_per_sec"] / tokio["requests_per_sec"]
                by_mode[(b, mode)].append(ratio)
                ratios.append(f"{b}/tokio {ratio:.2f}x")
        print(f"round {n} [{mode}] {', '.join(ratios)}: {line}")
    print()
    for (backend, mode), ratios in sorted(by_mode.items()):
        print(f"{backend:5} / tokio {mode:5} {spread(ratios)}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs/bench/servers-echo.jsonl")
