#!/usr/bin/env bash
# Simulated cache-line and TLB misses a request, weft's cache against memcached.
#
# What it answers: how many distinct cold lines and pages each server touches to serve one
# request when thousands of connections take turns, and how much code it runs to do it,
# counted exactly (a simulation, so the same every run) where the machine's own figures move
# by ±10 % between runs and it has no performance counters.
#
# How: each server runs under valgrind's callgrind with its cache simulation, openloop
# (benches/openloop/openloop.c) offers QPS requests a second over CONNS connections (97 % gets
# of 10,000 preloaded keys), and callgrind counts only during the WINDOW_S seconds after the
# connections are open. Each server runs twice:
#   lines  L1d 32 KiB and a last level of 512 KiB (this host's L2), 64-byte lines;
#   pages  the same L1d and a last level of TLB_ENTRIES (512) 4 KiB "lines", 8-way: a TLB,
#          so its misses are page walks.
# Counts are per request (requests = openloop's rate x the window). Reads and writes are
# separate: a write miss is a line fetched to be written (a cold stack frame, say). The lines
# model also prints the code side: misses of a 32 KiB, 8-way instruction cache, and the code
# lines a request runs (distinct 64-byte lines of instructions executed at least 0.3 times a
# request over the window, from callgrind's per-instruction counts): the lines a request
# fetches again once the kernel's work in between has evicted them (on this host about 2 ns
# of user time a line, docs/notes/scale.md, "What a code line costs here: a probe").
#
# What it does not model: prefetches (valgrind drops them, so a line weft asks for ahead
# counts as a miss here although the hardware overlaps it), the kernel, and io_uring: weft
# runs with `--io epoll`, because valgrind 3.19 holds its global lock across the blocking
# `io_uring_enter` and the process stops. Its address-space table also caps the connections
# (each fiber stack is two mappings; 15,360 connections exceed VG_N_SEGMENTS), so use about a
# thousand, with the simulated caches sized so that a thousand connections overflow them as
# 15,360 overflow the real ones.
#
# Usage: benches/cachesim.sh [CONNS] [QPS] [WINDOW_S]    (defaults 1000 1000 20)
# Env:   WEFT=target/release/weft, MEMCACHED=memcached, SERVERS="weft memcached", CPU=0,
#        LOAD_CPU=1, MODELS="lines pages", TLB_ENTRIES=512 (a power of two, 8 or more:
#        valgrind wants a power-of-two number of 8-way sets).
# Needs: valgrind, memcached, cc. Takes about 2 minutes a server and cache model.
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/bench_common.sh

CONNS=${1:-1000}
QPS=${2:-1000}
WINDOW_S=${3:-20}
WEFT=${WEFT:-target/release/weft}
MEMCACHED=${MEMCACHED:-memcached}
SERVERS=${SERVERS:-weft memcached}
MODELS=${MODELS:-lines pages}
TLB_ENTRIES=${TLB_ENTRIES:-512}
[[ $TLB_ENTRIES =~ ^[0-9]+$ ]] && ((TLB_ENTRIES >= 8 && (TLB_ENTRIES & (TLB_ENTRIES - 1)) == 0)) || {
    echo "cachesim.sh: TLB_ENTRIES must be a power of two, 8 or more (got '$TLB_ENTRIES')" >&2
    exit 2
}
for model in $MODELS; do
    case $model in
    lines | pages) ;;
    *)
        echo "cachesim.sh: unknown model '$model' in MODELS (lines, pages)" >&2
        exit 2
        ;;
    esac
done
CPU=${CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
need "apt-get install -y valgrind memcached" valgrind callgrind_control callgrind_annotate \
    "$MEMCACHED" cc taskset ss

ulimit -n "$(ulimit -Hn)"
# valgrind keeps a few descriptors at the top for itself and lets the client set no other
# hard limit than what is left; memcached sets both limits to -c, so -c must be exactly that.
vg_fd_limit=$(($(ulimit -Hn) - 12))
work=$(mktemp -d)
server_pid=
load_pid=
cleanup() {
    [ -n "$load_pid" ] && kill "$load_pid" 2>/dev/null
    [ -n "$server_pid" ] && kill -9 "$server_pid" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
cc -O2 -o "$work/openloop" benches/openloop/openloop.c -lpthread -lm

# measure NAME MODEL LL: one run; prints one line of per-request figures.
measure() {
    local name=$1 model=$2 ll=$3 port out
    port=$((30000 + RANDOM % 5000))
    out="$work/$name-$model.out"
    local vg=(valgrind --tool=callgrind --cache-sim=yes --I1=32768,8,64 --D1=32768,8,64
        "--LL=$ll" --instr-atstart=no "--callgrind-out-file=$out")
    # Per-instruction counts only where they are read: the lines model's code lines.
    if [ "$model" = lines ]; then
        vg+=(--dump-instr=yes)
    fi
    local tuned=(-o no_lru_maintainer,no_lru_crawler)
    case $name in
    weft)
        taskset -c "$CPU" "${vg[@]}" "$WEFT" memcached --io epoll -u root -t 1 -p "$port" \
            -l 127.0.0.1 -m 1024 -c "$vg_fd_limit" "${tuned[@]}" 2>"$work/vg.log" &
        ;;
    memcached)
        taskset -c "$CPU" "${vg[@]}" "$MEMCACHED" -u root -t 1 -p "$port" -l 127.0.0.1 -U 0 \
            -m 1024 -c "$vg_fd_limit" "${tuned[@]}" 2>"$work/vg.log" &
        ;;
    esac
    server_pid=$!
    local i
    for i in $(seq 1 100); do
        ss -tln "( sport = :$port )" | grep -q LISTEN && break
        sleep 0.2
    done
    ss -tln "( sport = :$port )" | grep -q LISTEN || {
        echo "$name did not listen under valgrind:" >&2
        cat "$work/vg.log" >&2
        exit 1
    }
    # Open the connections, let them settle, then count for exactly the window.
    local settle_s=15
    taskset -c "$LOAD_CPU" "$work/openloop" --server "127.0.0.1:$port" --connections "$CONNS" \
        --qps "$QPS" --duration $((settle_s + WINDOW_S + 5)) --warmup 1 >"$work/load.json" &
    load_pid=$!
    sleep "$settle_s"
    local open
    open=$(ss -tnH state established "( sport = :$port )" | wc -l)
    [ "$open" -ge "$CONNS" ] || {
        echo "$name: only $open of $CONNS connections open after ${settle_s} s" >&2
        exit 1
    }
    callgrind_control -z "$server_pid" >/dev/null 2>&1
    callgrind_control -i on "$server_pid" >/dev/null 2>&1
    local t0 t1
    t0=$(date +%s.%N)
    sleep "$WINDOW_S"
    callgrind_control -d "$server_pid" >/dev/null 2>&1
    t1=$(date +%s.%N)
    callgrind_control -i off "$server_pid" >/dev/null 2>&1
    wait "$load_pid"
    load_pid=
    kill -9 "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=
    python3 - "$out.1" "$work/load.json" "$t0" "$t1" "$name" "$model" <<'PY'
import collections, json, sys
path, load, t0, t1, name, model = sys.argv[1:]
events = totals = None
# Executions of each instruction address (its own Ir; a cost line after `calls=` is the
# call's inclusive cost and is skipped). Positions are `instr line`, each absolute, `+n`/`-n`
# from the previous cost line's, or `*` for the same.
runs = collections.defaultdict(int)
prev = [0, 0]
after_call = False
def sub(tok, last):
    if tok == '*':
        return last
    if tok[0] in '+-':
        return last + (1 if tok[0] == '+' else -1) * int(tok[1:], 0)
    return int(tok, 0)
for line in open(path):
    c = line[0]
    if c.isdigit() or c in '+-*':
        parts = line.split()
        prev = [sub(parts[0], prev[0]), sub(parts[1], prev[1])]
        if after_call:
            after_call = False
        elif len(parts) > 2:
            runs[prev[0]] += int(parts[2])
    elif line.startswith('calls='):
        after_call = True
    elif line.startswith('events:'):
        events = line.split()[1:]
    elif line.startswith('totals:') or line.startswith('summary:'):
        totals = [int(x) for x in line.split()[1:]]
d = dict(zip(events, totals))
q = json.load(open(load))['actual_qps'] * (float(t1) - float(t0))
per = lambda k: d.get(k, 0) / q
if model == 'lines':
    line_runs = collections.defaultdict(int)
    for addr, n in runs.items():
        line_runs[addr >> 6] = max(line_runs[addr >> 6], n)
    code_lines = sum(1 for n in line_runs.values() if n >= 0.3 * q)
    print(f"{name:9} lines  instructions {per('Ir'):7.0f}  code lines {code_lines:4d}  I1 misses {per('I1mr'):5.1f}"
          f"  L1d misses r {per('D1mr'):5.1f} w {per('D1mw'):5.1f}"
          f"  L2 misses r {per('DLmr'):5.1f} w {per('DLmw'):5.1f}  ({q:.0f} requests)")
else:
    print(f"{name:9} pages  page walks r {per('DLmr'):5.2f} w {per('DLmw'):5.2f}"
          f"  total {per('DLmr') + per('DLmw'):5.2f}  ({q:.0f} requests)")
PY
}

echo "# $CONNS connections, $QPS req/s, ${WINDOW_S} s counted, $TLB_ENTRIES TLB entries; per request, simulated (valgrind $(valgrind --version | cut -d- -f2))"
for model in $MODELS; do
    case $model in
    lines) ll=524288,8,64 ;;
    pages) ll=$((TLB_ENTRIES * 4096)),8,4096 ;;
    esac
    for name in $SERVERS; do
        measure "$name" "$model" "$ll"
    done
done
