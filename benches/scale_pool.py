#!/usr/bin/env python3
"""Item 3 of the scale issue judged over many rounds: pools the rounds of several
`benches/scale.sh all` records and prints, per point, weft's p99 and p999 over the peer's
paired by round.

Why: one round's p99 at 1,000-15,360 connections moves by 2x and more on this VM (a
millisecond episode in a 5 s window decides it), so three or six rounds cannot tell servers
within 20 % of each other apart. The fractions of the peer's peak are the same in every
record, but the peaks (and so the rates) differ from run to run; points are matched by
protocol, connection count and fraction.

A round pairs the weft server and the peer that ran back to back in it (scale.sh alternates
them). Only records taken with ISOLATE=fifo are used, unless --all. The generator column is
the busiest round's: at 0.9 or more the load core, not the server, sets the tail. Each point
also gets the exact sign test of its rounds (how many had the lower p99, ties left out, and
the two-sided p of a split that uneven from a fair coin): item 3 asks for every point, so
with nine points a protocol read a p under 0.05 / 9 (about 0.006) as a point that leans
beyond chance, and compare it with the same column for the peer's second run (`--server
peer-2`).

After the table, one line per protocol takes the 25 % and 50 % points together: the median
of every round's p99 ratio, how many rounds were at or under, and the server's CPU over the
peer's (the figures the notes quote for item 3).

`--server peer-2` pools the A/A control of records taken with PEER_TWICE=1: the peer's second
run of each round (memcached-2, nginx-2) over its first, which is what the machine alone makes
of one server against itself; read weft's table against it.

Both are paired with the same run of the peer, so a lucky run of it makes both look worse at
once. `--against peer-2` pairs the server with the peer's second run instead, and `--ranks`
counts, at the 25 % and 50 % points, how often each of the three runs of a round (weft, the
peer, its second run) had the strictly lowest and highest p99: a gap that is the reference run's
luck does not survive either.

Records since 2026-11-27 carry the host's steal time on both CPUs over each run's window
(`server_cpu_steal_ms`, `load_cpu_steal_ms`, in 10 ms ticks): the time this VM's vCPU had
work and the host ran something else. The steal column counts the rounds where either run
had any; `--max-steal-ms N` keeps only the rounds where neither run had more than N ms of it
on the two CPUs together (and so drops rounds from records without the fields). Records
since then also carry the guest's idle poll (`guest_halt_poll_ns`, scale.sh's HALT_POLL_NS);
the pool warns when its rounds ran at different settings. The poll acts only under the
cpuidle-haltpoll driver, which the guest's kernel picks at boot: records since 2026-11-30
05:00 carry the driver (`cpuidle_driver`) and a null poll when it is not haltpoll, and the
pool counts a record's poll as in effect only then. Older records do not say; the boot of
2026-11-29 14:16 UTC had no cpuidle driver at all, so the tables from 2026-11-29 15:12 to
2026-11-30 03:53 that say 200000 ran with the guest halting at once (docs/notes/scale.md).

`--significance` asks whether weft's rounds differ from the peer's by more than chance, at
the 25 % and 50 % points of records taken with PEER_TWICE=1. If weft served like the peer,
the three runs of a round (weft, the peer, its second run) would be exchangeable: weft's rank
among them (1 for the lowest p99) would be 1, 2 or 3 with equal odds, a mean of 2 with a
standard error of sqrt(2/3 / rounds). It prints that mean rank for each of the three with the
two-sided p of its distance from 2 (normal approximation), and three exact sign tests: weft's
p99 against the peer's second run, the peer's first run against its second (the control's
own split: the same binary twice, so any lean it shows is the machine's and the order's, and
weft's split is read against it), and weft's busy CPU against the peer's first run (its own
time, and, in records since 2026-11-30 23:00, CPU 0's busy time whoever ran), then the body
of the distribution: weft's p50 and p90 over the peer's, each beside the peer's first run
over its second (a shift there is every request's, not a few unlucky ones'). Records
before 2026-11-27 23:00 ran the three in the order peer-2, peer, weft and its reverse, so the
peer's first run was always in the middle of its round and weft and the second run at the
ends: there the second run is the fair one to hold weft against. Later records rotate the
order, so each takes each place equally often.

`--significance` then gives each point's mean ranks on their own (all three fractions): item 3
asks for every point, and with nine points a p under about 0.006 is beyond chance for one.
Each point's line ends with two sign tests against the peer's second run: weft's and the
peer's first run's. The three ranks of a round sum to 6, so a point where the peer's first run
is lucky shows weft behind it by as much; the second run tells the two apart (at the cache's
1,000 connections / 50 % over 42 tables, weft 2.20 and the peer 1.80, and against the second
run weft under in 75 of 172 rounds, the peer's first run in 97: docs/notes/scale.md,
forty-second session).

`--against NAME` pairs the server with another server of the same rounds instead of the peer:
a variant with the defaults it ran beside (`--server "weft:--idle-poll-us,50" --against
weft`, records taken with scale.sh's VARIANTS). The summary then adds exact sign tests of
the server's p99 and busy CPU against that server's, round by round. `--significance` and
`--ranks` rank the server given by `--server` (weft by default, also for the peer's second
run) among the round's three runs.

`--per-record` reads item 3 by its letter, one record (one table) at a time: a record meets it
when at every point it has, the median of its rounds' p99 ratios is at most 1 and the median
of their p999 ratios at most 2 (once over the 25 % and 50 % points, once over all three). It
prints, per protocol, in how many records the server met it, and in how many of those taken
with PEER_TWICE=1 the peer's second run met it against its first: the same binary twice,
so how often the machine lets any server meet the letter in one table.

Usage: benches/scale_pool.py RECORD.jsonl... [--server weft|peer-2|NAME] [--all]
       [--max-steal-ms N] [--against peer|peer-2|NAME] [--ranks] [--significance]
       [--per-record]
"""
import argparse
import json
import math
import statistics
import sys

PEERS = {"mc": "memcached", "http": "nginx"}


def rounds(path, server, everything, against="peer"):
    """(point, weft row, peer row) for every round of one record, in the order they ran; the
    peer row is its second run's with `against="peer-2"`, and that of the server named
    `against` when it is neither "peer" nor "peer-2"."""
    rows = [json.loads(line) for line in open(path) if line.strip()]
    # A record has no fraction field; a point's rate is the fraction of the peak measured
    # just before it (offered 400000), in the order scale.sh runs them: 25, 50, 75 %.
    peak = {}
    mine, theirs = {}, {}
    for r in rows:
        if not everything and r.get("isolate") != "fifo":
            continue
        # Only openloop's plain rounds (records before 2026-11-26 do not name the generator):
        # a `stalls` round stops its server on purpose and a traced one pays for its trace.
        if r.get("generator", "openloop") != "openloop":
            continue
        key = (r["proto"], r["connections"])
        if r["offered_qps"] >= 400000:
            peak[key] = r["actual_qps"]
            continue
        if key not in peak:
            continue
        fraction = round(100 * r["offered_qps"] / int(peak[key]))
        point = (r["proto"], r["connections"], fraction)
        if r["server"] == reference(r["proto"], server):
            mine.setdefault(point, []).append(r)
        elif r["server"] == reference(r["proto"], against):
            theirs.setdefault(point, []).append(r)
    for point in mine:
        for a, b in zip(mine[point], theirs.get(point, [])):
            yield point, a, b


def reference(proto, name):
    """The server a name given on the command line stands for in a record of `proto`: the
    peer ("peer"), its second run ("peer-2"), or the server of that name."""
    if name == "peer":
        return PEERS.get(proto, "")
    if name == "peer-2":
        return PEERS.get(proto, "") + "-2"
    return name


def labels(against):
    """How the output names the run a server is paired with: ("peer", "the peer") for the
    peer's runs, the server's own name twice otherwise."""
    return ("peer", "the peer") if against in ("peer", "peer-2") else (against, against)


def ranked(server):
    """The server `--significance` and `--ranks` rank among a round's three runs: the one given
    by `--server`, except the peer's second run, which is one of the three already."""
    seconds = {"peer-2"} | {peer + "-2" for peer in PEERS.values()}
    return "weft" if server in seconds else server


def idle_poll(record):
    """The guest's idle poll a record ran at, as text: the cpuidle driver when the record names
    one other than haltpoll (the poll did nothing), else its guest_halt_poll_ns."""
    driver = record.get("cpuidle_driver")
    if driver is not None and driver != "haltpoll":
        return f"cpuidle driver {driver}, no idle poll"
    poll = record.get("guest_halt_poll_ns")
    return "guest_halt_poll_ns unrecorded" if poll is None else f"guest_halt_poll_ns {poll}"


def steal_ms(row):
    """The host's steal over a run's window on both CPUs, or None in an older record."""
    parts = [row.get("server_cpu_steal_ms"), row.get("load_cpu_steal_ms")]
    if any(p is None for p in parts):
        return None
    return sum(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records", nargs="+")
    ap.add_argument("--server", default="weft")
    ap.add_argument("--all", action="store_true", help="use records taken without ISOLATE=fifo too")
    ap.add_argument("--max-steal-ms", type=int, metavar="N",
                    help="only rounds where neither run had more than N ms of steal time on the two CPUs")
    ap.add_argument("--against", default="peer", metavar="peer|peer-2|NAME",
                    help="the run each round is paired with: the peer's (default), its second run "
                         "(peer-2, PEER_TWICE=1), or another server's of the same rounds by name")
    ap.add_argument("--ranks", action="store_true",
                    help="also count how often the server (--server), the peer and its second run had a round's "
                         "lowest and highest p99")
    ap.add_argument("--significance", action="store_true",
                    help="also test whether the server's (--server) p99 and CPU differ from the peer's by more "
                         "than chance")
    ap.add_argument("--per-record", action="store_true",
                    help="also judge item 3's letter record by record (every point's median p99 ratio at most 1, "
                         "p999 at most 2), for the server and for the peer's second run against its first")
    args = ap.parse_args()
    if args.against == "peer-2" and args.server == "peer-2":
        sys.exit("scale_pool.py: --against peer-2 needs a server other than peer-2")
    if args.against == args.server:
        sys.exit(f"scale_pool.py: --against {args.against} pairs {args.server} with itself")
    pooled = {}
    for path in args.records:
        for point, a, b in rounds(path, args.server, args.all, args.against):
            if args.max_steal_ms is not None and not all(
                    steal_ms(r) is not None and steal_ms(r) <= args.max_steal_ms for r in (a, b)):
                continue
            pooled.setdefault(point, []).append((a, b))
    if not pooled:
        sys.exit("scale_pool.py: no paired rounds in these records")
    # The guest's idle poll changes the host's steal and so the tails (HALT_POLL_NS of
    # scale.sh): rounds taken at different settings do not belong in one pool.
    polls = {idle_poll(r) for pairs in pooled.values() for pair in pairs for r in pair}
    if len(polls) > 1:
        shown = ", ".join(sorted(polls))
        print(f"scale_pool.py: warning: these rounds ran at different guest idle polls ({shown})",
              file=sys.stderr)
    other, the_other = labels(args.against)
    print(f"| protocol | connections | % of peer peak | rounds | {args.server} p99 / {other}'s, paired (min–med–max) "
          f"| rounds at or under | p999 / {other}'s (med) | rounds over 2× | rounds {the_other} is over 2× "
          "| rounds under / over (sign test p) | generator busy (max) | rounds with steal |")
    print("|---|---:|---:|---:|---|---:|---:|---:|---:|---|---:|---:|")
    for point in sorted(pooled):
        pairs = pooled[point]
        p99 = sorted(a["p99_us"] / b["p99_us"] for a, b in pairs if b.get("p99_us"))
        p999 = sorted(a["p999_us"] / b["p999_us"] for a, b in pairs if b.get("p999_us"))
        if not p99:
            continue
        gens = [r.get("generator_busy") or 0 for pair in pairs for r in pair]
        gen = max(gens)
        bound = " (generator-bound)" if gen >= 0.9 else ""
        steals = [(steal_ms(a), steal_ms(b)) for a, b in pairs]
        known = [s for s in steals if None not in s]
        stolen = f"{sum(max(s) > 0 for s in known)} of {len(known)}" if known else "–"
        # Per point, the exact sign test of the rounds' p99s (ties left out): whether this
        # point leans one way beyond what a fair coin gives.
        under, over = sum(x < 1 for x in p99), sum(x > 1 for x in p99)
        sign = f"{under} / {over} (p {shown_p(sign_test_p(under, under + over))})"
        print(f"| {point[0]} | {point[1]} | {point[2]} % | {len(p99)} | "
              f"{p99[0]:.2f}–{statistics.median(p99):.2f}–{p99[-1]:.2f} | "
              f"{sum(x <= 1 for x in p99)} of {len(p99)} | {statistics.median(p999):.2f} | "
              f"{sum(x > 2 for x in p999)} of {len(p999)} | {sum(x < 0.5 for x in p999)} of {len(p999)} | "
              f"{sign} | {gen:.2f}{bound} | {stolen} |")
    summarize(pooled, args.server, args.against)
    if args.ranks:
        print_ranks(args.records, args.all, ranked(args.server))
    if args.significance:
        print_significance(args.records, args.all, ranked(args.server))
    if args.per_record:
        print_per_record(args.records, args.all, args.server)


def letter_met(pairs_by_point):
    """Whether one record meets item 3's letter: (over its 25 % and 50 % points, over all its
    points), each point judged by the medians of its rounds' p99 and p999 ratios."""
    def met(point):
        pairs = pairs_by_point[point]
        p99 = [a["p99_us"] / b["p99_us"] for a, b in pairs if b.get("p99_us")]
        p999 = [a["p999_us"] / b["p999_us"] for a, b in pairs if b.get("p999_us")]
        return bool(p99) and statistics.median(p99) <= 1 and (not p999 or statistics.median(p999) <= 2)
    low = [point for point in pairs_by_point if point[2] in (25, 50)]
    # A record without a 25 % or 50 % point says nothing of them (not met by default).
    return bool(low) and all(met(point) for point in low), all(met(point) for point in pairs_by_point)


def print_per_record(paths, everything, server="weft"):
    """Item 3 by its letter, one record at a time, for the server and, in records taken with
    PEER_TWICE=1, for the peer's second run against its first (the A/A control)."""
    counts = {}
    for path in paths:
        mine, control = {}, {}
        for point, a, b in rounds(path, server, everything):
            mine.setdefault(point, []).append((a, b))
        for point, a, b in rounds(path, "peer-2", everything):
            control.setdefault(point, []).append((a, b))
        for proto in sorted({point[0] for point in mine}):
            ours = {p: v for p, v in mine.items() if p[0] == proto}
            # Only tables of the whole sweep: a record of one connection count says less.
            if len({p[1] for p in ours}) < 2:
                continue
            c = counts.setdefault(proto, {"n": 0, "low": 0, "all": 0, "cn": 0, "clow": 0, "call": 0})
            low, whole = letter_met(ours)
            c["n"] += 1
            c["low"] += low
            c["all"] += whole
            theirs = {p: v for p, v in control.items() if p[0] == proto}
            if theirs.keys() == ours.keys():
                low, whole = letter_met(theirs)
                c["cn"] += 1
                c["clow"] += low
                c["call"] += whole
    for proto, c in sorted(counts.items()):
        peer = PEERS.get(proto, "the peer")
        print(f"\n{proto}, item 3's letter one table at a time: {server} met it at every 25 % and 50 % point in "
              f"{c['low']} of {c['n']} records, at every point in {c['all']}; {peer}'s second run against "
              f"its first in {c['clow']} and {c['call']} of {c['cn']}")


def print_ranks(paths, everything, server="weft"):
    """Per protocol, at the 25 % and 50 % points: in how many rounds each of `server`, the peer
    and the peer's second run had the lowest and the highest p99 of the three."""
    names = (server, "peer", "peer-2")
    counts = {}
    for path in paths:
        by_point = {}
        for against in ("peer", "peer-2"):
            for point, a, b in rounds(path, server, everything, against):
                by_point.setdefault((point, against), []).append((a, b))
        for (point, against), pairs in by_point.items():
            if against != "peer" or point[2] not in (25, 50):
                continue
            seconds = by_point.get((point, "peer-2"), [])
            for (w, p), (_, p2) in zip(pairs, seconds):
                p99 = dict(zip(names, (w["p99_us"], p["p99_us"], p2["p99_us"])))
                c = counts.setdefault(point[0], {n: [0, 0, 0] for n in names})
                c[names[0]][2] += 1
                for n, v in p99.items():
                    others = [x for m, x in p99.items() if m != n]
                    c[n][0] += all(v < x for x in others)
                    c[n][1] += all(v > x for x in others)
    for proto, c in sorted(counts.items()):
        total = c[names[0]][2]
        shown = ", ".join(f"{n} {lo} and {hi}" for n, (lo, hi, _) in c.items())
        print(f"\n{proto}, the 25 % and 50 % points, {total} rounds of three runs: strictly lowest and "
              f"highest p99 (ties count for nobody): {shown}")


def point_triples(paths, everything, server="weft"):
    """Per point (protocol, connections, fraction), the rounds that have all three runs:
    (`server`, the peer, the peer's second run) rows."""
    out = {}
    for path in paths:
        firsts, seconds = {}, {}
        for point, a, b in rounds(path, server, everything, "peer"):
            firsts.setdefault(point, []).append((a, b))
        for point, _, b in rounds(path, server, everything, "peer-2"):
            seconds.setdefault(point, []).append(b)
        for point, pairs in firsts.items():
            for (w, p), p2 in zip(pairs, seconds.get(point, [])):
                out.setdefault(point, []).append((w, p, p2))
    return out


def by_protocol(point_rows):
    """`point_triples`' rounds at the 25 % and 50 % points, per protocol."""
    out = {}
    for point, rows in sorted(point_rows.items()):
        if point[2] in (25, 50):
            out.setdefault(point[0], []).extend(rows)
    return out


def mean_ranks(rows, server="weft"):
    """Each of a round's three runs' mean rank of p99 (1 lowest) over `rows`, shown with the
    two-sided p of its distance from 2, and the standard error of one under the null that the
    three are alike."""
    sums = [0.0, 0.0, 0.0]
    for triple in rows:
        for i, r in enumerate(ranks_of([x["p99_us"] for x in triple])):
            sums[i] += r
    n = len(rows)
    se = math.sqrt(2 / 3 / n)
    names = (server, "the peer", "its second run")
    shown = "; ".join(f"{name} {total / n:.2f} (p {shown_p(two_sided_normal_p((total / n - 2) / se))})"
                      for name, total in zip(names, sums))
    return shown, se


def second_run_splits(rows):
    """Over (`server`, peer, peer-2) rounds, ties left out: in how many of how many rounds the
    server's p99 was under the peer's second run's, and the same for the peer's first run
    (the control: one binary, one command line, so its split is what the machine and the
    order alone make)."""
    mine = [(w["p99_us"], p2["p99_us"]) for w, _, p2 in rows if w["p99_us"] != p2["p99_us"]]
    control = [(p["p99_us"], p2["p99_us"]) for _, p, p2 in rows if p["p99_us"] != p2["p99_us"]]
    return (sum(a < b for a, b in mine), len(mine)), (sum(a < b for a, b in control), len(control))


def point_rank_line(point, rows, server="weft"):
    """`--significance`'s line for one point: each run's mean rank among its round's three,
    and the server's and the peer's first run's sign tests against the peer's second run (a
    point where the peer's first run is lucky leans against the server by as much, and the
    second run shows it)."""
    shown, _ = mean_ranks(rows, server)
    (under, n), (first, m) = second_run_splits(rows)
    return (f"{point[0]} {point[1]} {point[2]} %, {len(rows)} rounds: mean rank {shown}; under the "
            f"second run's p99: {server} in {under} of {n} (p {shown_p(sign_test_p(under, n))}), "
            f"the peer in {first} of {m} (p {shown_p(sign_test_p(first, m))})")


def ranks_of(values):
    """Each value's rank among `values`, 1 for the lowest; ties share their mean rank."""
    return [1 + sum(x < v for x in values) + (sum(x == v for x in values) - 1) / 2 for v in values]


def two_sided_normal_p(z):
    """P(|Z| >= |z|) for a standard normal Z."""
    return math.erfc(abs(z) / math.sqrt(2))


def sign_test_p(wins, n):
    """Exact two-sided sign test: the chance of a split at least as uneven as `wins` of `n`
    when each is a fair coin."""
    if n == 0:
        return 1.0
    k = min(wins, n - wins)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def shown_p(p):
    """A p-value as printed: three decimals, or "< 0.001"."""
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def significance_lines(proto, rows, server="weft"):
    """The lines `--significance` prints for one protocol's (`server`, peer, peer-2) rounds."""
    n = len(rows)
    shown, se = mean_ranks(rows, server)
    lines = [f"{proto}, the 25 % and 50 % points, {n} rounds of three runs: mean rank of p99 (1 lowest, "
             f"2 ± {se:.3f} if the three are alike): {shown}"]
    (under, n_mine), (first, n_control) = second_run_splits(rows)
    lines.append(f"{proto}: {server}'s p99 under the peer's second run's in {under} of {n_mine} rounds "
                 f"(ties left out; sign test p {shown_p(sign_test_p(under, n_mine))})")
    # The same test between the peer's two runs (one binary, one command line): how uneven
    # the machine and the order alone make a split here, to read weft's against.
    lines.append(f"{proto}: the peer's p99 under its second run's in {first} of {n_control} rounds "
                 f"(ties left out; sign test p {shown_p(sign_test_p(first, n_control))}): the "
                 f"control's own split")
    def split(field, first, second):
        """Rounds where run `first` of the triple has the larger `field` than run `second`,
        and the rounds with both present and unequal."""
        pairs = [(t[first].get(field), t[second].get(field)) for t in rows]
        pairs = [(a, b) for a, b in pairs if a and b and a != b]
        return sum(a > b for a, b in pairs), len(pairs)

    def over_in(field, says):
        """The sign test of `field` (weft's round against the peer's), as the line `says`."""
        over, n = split(field, 0, 1)
        if n:
            lines.append(f"{proto}: {says} in {over} of {n} rounds "
                         f"(sign test p {shown_p(sign_test_p(over, n))})")

    over_in("server_busy", f"{server}'s busy CPU over the peer's")
    # CPU 0's own busy time, whoever ran (records since 2026-11-30 23:00): a server's own time
    # leaves out the softirqs that run while its CPU is otherwise idle, so this is the fairer
    # count of the work a server costs its CPU.
    over_in("server_cpu0_busy", f"CPU 0 busier with {server} than with the peer")
    # The body of the distribution beside its tail: a server whose p50 and p90 sit over the
    # peer's round after round, while the peer's two runs split evenly, is slower in every
    # request, not unlucky in a few (docs/notes/scale.md, the fifty-ninth session).
    for field, name in (("p50_us", "p50"), ("p90_us", "p90")):
        over, n = split(field, 0, 1)
        first, m = split(field, 1, 2)
        if n:
            lines.append(f"{proto}: {server}'s {name} over the peer's in {over} of {n} rounds "
                         f"(ties left out; sign test p {shown_p(sign_test_p(over, n))}); the "
                         f"peer's over its second run's in {first} of {m} "
                         f"(p {shown_p(sign_test_p(first, m))})")
    return lines


def print_significance(paths, everything, server="weft"):
    """`--significance`: see the module docs."""
    by_point = point_triples(paths, everything, server)
    found = by_protocol(by_point)
    if not found:
        print("\nscale_pool.py: --significance needs records taken with PEER_TWICE=1", file=sys.stderr)
        return
    for proto, rows in sorted(found.items()):
        print()
        print("\n".join(significance_lines(proto, rows, server)))
        # Item 3 asks for every point: each point's ranks on its own (with nine points, a p
        # under about 0.006 is beyond chance for one of them).
        for point in sorted(p for p in by_point if p[0] == proto):
            print(point_rank_line(point, by_point[point], server))


def summarize(pooled, server, against="peer"):
    """The 25 % and 50 % points together, per protocol: the line the notes quote for item 3
    (the 75 % points are mostly generator-bound on this VM). Against a named server (a
    variant against the defaults) also the sign tests of p99 and busy CPU, round by round."""
    other, the_other = labels(against)
    whose, the_whose = f"{other}'s", f"{the_other}'s"
    for proto in sorted({point[0] for point in pooled}):
        pairs = [pair for point, ps in pooled.items() if point[0] == proto and point[2] in (25, 50) for pair in ps]
        p99 = sorted(a["p99_us"] / b["p99_us"] for a, b in pairs if b.get("p99_us"))
        p999 = [a["p999_us"] / b["p999_us"] for a, b in pairs if b.get("p999_us")]
        busy = sorted(a["server_busy"] / b["server_busy"] for a, b in pairs
                      if a.get("server_busy") and b.get("server_busy"))
        if not p99:
            continue
        cpu = f"; busy over {the_whose} {busy[0]:.2f}–{statistics.median(busy):.2f}–{busy[-1]:.2f}" if busy else ""
        print(f"\n{proto}, the 25 % and 50 % points together: {server} p99 / {whose} {statistics.median(p99):.2f} "
              f"({sum(x <= 1 for x in p99)} of {len(p99)} rounds at or under), p999 over 2× in "
              f"{sum(x > 2 for x in p999)}{cpu}")
        if against in ("peer", "peer-2"):
            continue
        under = sum(x < 1 for x in p99)
        untied = sum(x != 1 for x in p99)
        over = sum(x > 1 for x in busy)
        busy_untied = sum(x != 1 for x in busy)
        print(f"{proto}: {server}'s p99 under {whose} in {under} of {untied} rounds (ties left out; sign "
              f"test p {shown_p(sign_test_p(under, untied))}); its busy CPU over in {over} of "
              f"{busy_untied} (sign test p {shown_p(sign_test_p(over, busy_untied))})")


if __name__ == "__main__":
    main()
