#!/usr/bin/env python3
"""Issue 20's item 4, HTTP half: weft http's keep-alive lead over nginx, paired by round.

`benches/http_keepalive.sh` runs weft http and nginx once each per round (wrk -t1 -c50, one
4 KiB file) and prints one line a run:

  round R server S req/s N p99 P busy B

(S is weft, nginx, or base: a second weft binary, the build before a change, given by
WEFT_BASE; with base in every round the summary adds weft's req/s over base's and weft's CPU a
request over base's.)

This reads those lines (from stdin, or from the records given: docs/bench/http-keepalive-*.txt,
whose `#` lines are headers; records from before 2026-11-28 13:30 have no busy column and
are refused) and prints, paired by round within each record, weft's req/s over
nginx's and nginx's CPU a request (busy over req/s) over weft's, as min-median-max, with how
many rounds reached the item's 1.1x. A server under 1.0 busy was not the bottleneck (wrk was),
so its req/s understates it; its CPU a request does not, which is why both are printed.

  benches/keepalive_summary.py [RECORD...] [--json]

With one input (stdin or one record) it prints that input's two lines; with several, one
table row a record and the pooled rounds. A line that is neither a header, empty nor a run
line, or a round without both servers, is an error naming the file and line (exit 1).
"""
import json
import re
import statistics
import sys

RUN = re.compile(
    r"^round (\d+) server (weft|nginx|base) req/s ([\d.]+) p99 (\S+) busy ([\d.]+)\s*$")
# The lines the script itself prints after its runs (a record keeps them).
SUMMARY = re.compile(r"^(weft / nginx req/s|nginx / weft CPU a request|weft / base (req/s|CPU a request)) ")
# weft http's own start-up line, which some records kept.
LISTENING = re.compile(r"^listening on ")
TARGET = 1.1


class Unreadable(Exception):
    pass


def rounds(lines, name):
    """The record's rounds: {round: {server: (req/s, busy)}}, each round with both servers."""
    found = {}
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#") or SUMMARY.match(line) or LISTENING.match(line):
            continue
        m = RUN.match(line)
        if not m:
            raise Unreadable(f"{name}:{number}: not a run line: {line.rstrip()!r}")
        r, server, rps, busy = int(m.group(1)), m.group(2), float(m.group(3)), float(m.group(5))
        if rps <= 0 or busy <= 0:
            raise Unreadable(f"{name}:{number}: req/s and busy must be positive")
        if server in found.setdefault(r, {}):
            raise Unreadable(f"{name}:{number}: round {r} has {server} twice")
        found[r][server] = (rps, busy)
    if not found:
        raise Unreadable(f"{name}: no run lines")
    for r, servers in sorted(found.items()):
        if "weft" not in servers or "nginx" not in servers:
            raise Unreadable(f"{name}: round {r} has only {', '.join(servers)}")
    return found


def base_pairs(found):
    """(weft req/s over base's, weft's CPU a request over base's) for each round, or None
    unless every round ran base."""
    if not all("base" in servers for servers in found.values()):
        return None
    out = []
    for r in sorted(found):
        (w_rps, w_busy), (b_rps, b_busy) = found[r]["weft"], found[r]["base"]
        out.append((w_rps / b_rps, (w_busy / w_rps) / (b_busy / b_rps)))
    return out


def pairs(found):
    """(weft req/s over nginx's, nginx's CPU a request over weft's) for each round."""
    out = []
    for r in sorted(found):
        (w_rps, w_busy), (n_rps, n_busy) = found[r]["weft"], found[r]["nginx"]
        out.append((w_rps / n_rps, (n_busy / n_rps) / (w_busy / w_rps)))
    return out


def spread(values):
    v = sorted(values)
    return {"min": v[0], "median": statistics.median(v), "max": v[-1]}


def text(s):
    return f"{s['min']:.2f}-{s['median']:.2f}-{s['max']:.2f}"


def summary(name, p):
    rps = [a for a, _ in p]
    return {
        "record": name,
        "rounds": len(p),
        "rps_ratio": spread(rps),
        "cpu_ratio": spread([c for _, c in p]),
        "rounds_at_target": sum(a >= TARGET for a in rps),
    }


def main(argv):
    as_json = "--json" in argv
    paths = [a for a in argv if a != "--json"]
    if any(a.startswith("-") for a in paths) or (not paths and sys.stdin.isatty()):
        print(__doc__.strip(), file=sys.stdout)
        return 2
    inputs = []
    bases = []
    try:
        if paths:
            for path in paths:
                try:
                    with open(path, encoding="utf-8") as f:
                        lines = f.readlines()
                except OSError as e:
                    raise Unreadable(f"cannot read {path}: {e.strerror}")
                found = rounds(lines, path)
                inputs.append((path, pairs(found)))
                bases.append(base_pairs(found))
        else:
            found = rounds(sys.stdin.readlines(), "stdin")
            inputs.append(("stdin", pairs(found)))
            bases.append(base_pairs(found))
    except Unreadable as e:
        print(f"keepalive_summary.py: {e}", file=sys.stderr)
        return 1
    records = [summary(name, p) for name, p in inputs]
    pooled = summary("pooled", [x for _, p in inputs for x in p])
    if as_json:
        print(json.dumps({"records": records, "pooled": pooled}, indent=1))
        return 0
    if len(records) == 1:
        s = records[0]
        print(f"weft / nginx req/s {text(s['rps_ratio'])} over {s['rounds']} rounds")
        print(f"nginx / weft CPU a request {text(s['cpu_ratio'])} over {s['rounds']} rounds")
        if bases[0]:
            b = bases[0]
            print(f"weft / base req/s {text(spread([a for a, _ in b]))} over {len(b)} rounds")
            print(f"weft / base CPU a request {text(spread([c for _, c in b]))} "
                  f"over {len(b)} rounds")
        return 0
    print("| record | rounds | weft / nginx req/s | nginx / weft CPU a request | rounds at 1.1x or more |")
    print("|---|---:|---|---|---:|")
    for s in records + [pooled]:
        print(f"| {s['record']} | {s['rounds']} | {text(s['rps_ratio'])} | "
              f"{text(s['cpu_ratio'])} | {s['rounds_at_target']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
