#!/usr/bin/env python3
"""Summarises benches/servers.sh targets output (docs/bench/targets.jsonl).

Rounds are the script's five passes; within a round each benchmark ran under three weft
policies and tokio, one after the other. Every record carries core_round_trip_ns, the
cache-line round trip between CPUs 0 and 1 taken just before it (and core_round_trip_after_ns,
just after it; a run whose two probes disagree counts as mixed): on the 2-vCPU VM it is ~60 ns
when the host runs both vCPUs in one core complex ("near") and ~330 ns when it does not
("far"). A round's ratio (best weft policy / tokio) is only formed when all of its records
of that benchmark saw the same placement. cycle also runs once per round with its rings
placed on processors (`--place-rings`, variant `many-placed`): its ratio is given apart from the
best policy's under the default placement.
"""
import json
import statistics
import sys
from collections import defaultdict

FAR_NS = 150.0  # between the two modes seen on this VM


def placement(rec):
    """near, far, or mixed when the probes before and after the run disagree."""
    probes = [rec.get(k) for k in ("core_round_trip_ns", "core_round_trip_after_ns")]
    probes = [ns for ns in probes if ns is not None]
    if not probes:
        return "unknown"
    kinds = {"far" if ns > FAR_NS else "near" for ns in probes}
    return kinds.pop() if len(kinds) == 1 else "mixed"


def probes(rec):
    """The probes as text: before, or before/after."""
    ns = [rec.get(k) for k in ("core_round_trip_ns", "core_round_trip_after_ns")]
    return "/".join(f"{v:.0f}" for v in ns if v is not None) + " ns"


def name(rec):
    """The scheduler, marked when the run placed its rings or spawned migratable fibers."""
    variant = rec.get("variant", "")
    marks = [m for m in ("placed", "migratable") if variant.endswith("-" + m)]
    return "+".join([rec["scheduler"], *marks])


def spread(ratios):
    """The rounds' count and their ratios' min, median and max, as printed by both summaries."""
    return (
        f"rounds {len(ratios)}: min {min(ratios):.2f}x "
        f"median {statistics.median(ratios):.2f}x max {max(ratios):.2f}x"
    )


def main(path):
    with open(path) as f:
        recs = [json.loads(line) for line in f if line.startswith("{")]
    rounds = defaultdict(list)  # (benchmark, round) -> records
    seen = defaultdict(int)
    for r in recs:
        key = (r["benchmark"], name(r))
        rounds[(r["benchmark"], seen[key])].append(r)
        seen[key] += 1
    by_mode = defaultdict(list)  # (benchmark, placement) -> [(ratio, best, policy, tokio)]
    for (bench, rnd), rs in sorted(rounds.items()):
        places = {placement(r) for r in rs}
        weft = [r for r in rs if r["runtime"] == "weft" and name(r) == r["scheduler"]]
        placed = [r for r in rs if r["runtime"] == "weft" and name(r).endswith("+placed")]
        tokio = [r for r in rs if r["runtime"] == "tokio"]
        if not weft or not tokio:
            continue
        best = max(weft, key=lambda r: r["ops_per_sec"])
        t = tokio[0]["ops_per_sec"]
        line = ", ".join(f'{name(r)} {r["ops_per_sec"] / 1e6:.1f} ({probes(r)})' for r in rs)
        if len(places) == 1 and "mixed" not in places:
            mode = places.pop()
            ratio = best["ops_per_sec"] / t
            by_mode[(bench, mode, "best policy")].append(ratio)
            text = f"best/tokio {ratio:.2f}x"
            if placed:
                placed_ratio = placed[0]["ops_per_sec"] / t
                by_mode[(bench, mode, "rings placed")].append(placed_ratio)
                text += f", placed/tokio {placed_ratio:.2f}x"
            print(f"{bench:6} round {rnd + 1} [{mode}] {text}: {line}")
        else:
            print(f"{bench:6} round {rnd + 1} [mixed placement, no ratio]: {line}")
    print()
    for (bench, mode, kind), ratios in sorted(by_mode.items()):
        print(f"{bench:6} {mode:5} {kind:12} weft / tokio {spread(ratios)}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs/bench/targets.jsonl")
