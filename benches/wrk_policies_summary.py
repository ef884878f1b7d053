#!/usr/bin/env python3
"""Issue 20's cross-check at 1,000 keep-alive connections: each weft setting's tail over
nginx's, paired by round.

`benches/wrk_policies.sh` runs nginx and `weft http` under several settings (the defaults,
the epoll backend, scheduling policies) once each per round with wrk, and nginx and weft's
defaults with ab, and prints one line a run:

  round R server S setting T client C req/s N p50_us A p99_us B [p999_us C p9999_us D] max_us E errors F

This reads those lines (from stdin, or from the records given: docs/bench/wrk-policies-*.txt,
whose `#` lines are headers) and prints, for each client and weft setting, its p99, p99.9
(wrk only) and longest request over nginx's in the same round, and its req/s over nginx's,
as min-median-max over the rounds, with how many rounds had weft's p99 at or under nginx's
and its p99.9 within twice nginx's (the issue's item 3 bars), and the medians of both
servers' p99 in ms. Several records are pooled (their rounds paired within each record).

  benches/wrk_policies_summary.py [RECORD...] [--json]

A line that is neither a header, empty, a summary line nor a run line, a run twice in a
round, or a round with weft but without nginx for that client, is an error naming the file
and line or round (exit 1).
"""
import json
import re
import statistics
import sys

FIELD = r"([\d.]+)"
RUN = re.compile(
    r"^round (\d+) server (weft|nginx) setting (\S+) client (wrk|ab) req/s " + FIELD
    + r" p50_us " + FIELD + r" p99_us " + FIELD
    + r"(?: p999_us " + FIELD + r" p9999_us " + FIELD + r")? max_us " + FIELD
    + r" errors (\d+)\s*$")
# The table this script prints, which a record keeps after its run lines.
SUMMARY = re.compile(r"^(\||wrk |ab |nginx )")


class Unreadable(Exception):
    pass


def runs(lines, name):
    """The record's runs: {(round, client): {(server, setting): figures}}."""
    found = {}
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#") or SUMMARY.match(line):
            continue
        m = RUN.match(line)
        if not m:
            raise Unreadable(f"{name}:{number}: not a run line: {line.rstrip()!r}")
        r, server, setting, client = int(m.group(1)), m.group(2), m.group(3), m.group(4)
        if m.group(8) is None and client == "wrk":
            raise Unreadable(f"{name}:{number}: a wrk line needs p999_us and p9999_us")
        figures = {
            "rps": float(m.group(5)),
            "p50": float(m.group(6)),
            "p99": float(m.group(7)),
            "p999": float(m.group(8)) if m.group(8) else None,
            "max": float(m.group(10)),
            "errors": int(m.group(11)),
        }
        if figures["rps"] <= 0 or figures["p99"] <= 0 or figures["max"] <= 0:
            raise Unreadable(f"{name}:{number}: req/s, p99 and the longest must be positive")
        key = (server, setting if server == "weft" else "default")
        if key in found.setdefault((r, client), {}):
            raise Unreadable(f"{name}:{number}: round {r} has {client} on {key[0]} {key[1]} twice")
        found[(r, client)][key] = figures
    if not found:
        raise Unreadable(f"{name}: no run lines")
    for (r, client), servers in sorted(found.items()):
        if ("nginx", "default") not in servers:
            raise Unreadable(f"{name}: round {r} has {client} runs of weft but none of nginx")
    return found


def spread(values):
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def summarise(records):
    """Pairs each weft run with nginx's of its round and client, pooled over `records`."""
    pairs = {}
    for found in records:
        for (_, client), servers in found.items():
            nginx = servers[("nginx", "default")]
            for (server, setting), weft in servers.items():
                if server != "weft":
                    continue
                pairs.setdefault((client, setting), []).append((weft, nginx))
    rows = []
    for (client, setting), paired in sorted(pairs.items()):
        row = {
            "client": client,
            "setting": setting,
            "rounds": len(paired),
            "p99_ratio": spread([w["p99"] / n["p99"] for w, n in paired]),
            "max_ratio": spread([w["max"] / n["max"] for w, n in paired]),
            "rps_ratio": spread([w["rps"] / n["rps"] for w, n in paired]),
            "p99_at_or_under": sum(w["p99"] <= n["p99"] for w, n in paired),
            "weft_p99_ms": statistics.median(w["p99"] for w, _ in paired) / 1000,
            "nginx_p99_ms": statistics.median(n["p99"] for _, n in paired) / 1000,
            "errors": sum(w["errors"] for w, _ in paired),
            "nginx_errors": sum(n["errors"] for _, n in paired),
        }
        if client == "wrk":
            row["p999_ratio"] = spread([w["p999"] / n["p999"] for w, n in paired])
            row["p999_within_2x"] = sum(w["p999"] <= 2 * n["p999"] for w, n in paired)
        rows.append(row)
    return rows


def text(rows):
    def s(d):
        return f"{d['min']:.2f}-{d['median']:.2f}-{d['max']:.2f}"

    out = [
        "| client | weft setting | rounds | p99 / nginx's | at or under | p99.9 / nginx's | "
        "within 2x | longest / nginx's | req/s / nginx's | p99 ms, weft / nginx | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        p999 = s(r["p999_ratio"]) if "p999_ratio" in r else "-"
        within = f"{r['p999_within_2x']} of {r['rounds']}" if "p999_within_2x" in r else "-"
        out.append(
            f"| {r['client']} | {r['setting']} | {r['rounds']} | {s(r['p99_ratio'])} | "
            f"{r['p99_at_or_under']} of {r['rounds']} | {p999} | {within} | "
            f"{s(r['max_ratio'])} | {s(r['rps_ratio'])} | "
            f"{r['weft_p99_ms']:.1f} / {r['nginx_p99_ms']:.1f} | "
            f"{r['errors']} / {r['nginx_errors']} |")
    return "\n".join(out)


def main(argv):
    as_json = "--json" in argv
    paths = [a for a in argv if a != "--json"]
    try:
        if paths:
            records = []
            for path in paths:
                try:
                    with open(path, encoding="utf-8") as f:
                        lines = f.read().splitlines()
                except OSError as e:
                    raise Unreadable(f"cannot read {path}: {e.strerror}") from e
                records.append(runs(lines, path))
        else:
            records = [runs(sys.stdin.read().splitlines(), "stdin")]
    except Unreadable as e:
        print(f"wrk_policies_summary.py: {e}", file=sys.stderr)
        return 1
    rows = summarise(records)
    print(json.dumps({"rows": rows}, indent=1) if as_json else text(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
