#!/usr/bin/env bash
# The cache's pipelined peak measured with an independent client: benches/pipelined_client.py
# (Python's standard library; 16 connections, 4 gets outstanding each, a read's answered gets
# replaced in one write) against `weft memcached -t 1` and `memcached -t 1`, each pinned to
# CPU 0 and held to CAP_PCT % of it by a cgroup CPU quota (10 ms period), the client on CPU 1.
# The cap keeps the Python client from being what saturates first; the script prints each
# server's busy share so that can be checked (it should be the cap). It cross-checks
# `weft bench memcached --depth 4 [--protocol meta] --server-cpu-pct ...`, whose generator is
# weft's own.
#
# Each round runs both servers once per protocol (classic `get`, meta `mg`), the first server
# alternating by round. Prints one line per run, then per protocol weft's req/s over
# memcached's, paired by round, as min–median–max.
#
# Usage: benches/pipelined_peak.sh [ROUNDS]   (default 4; needs root for the cgroup)
# Environment: WEFT (the weft binary; default target/release/weft), SECONDS_PER_RUN (5),
# CAP_PCT (20), CONNECTIONS (16), DEPTH (4).
set -euo pipefail

cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
rounds=${1:-4}
WEFT=${WEFT:-${CARGO_TARGET_DIR:-target}/release/weft}
secs=${SECONDS_PER_RUN:-5}
cap=${CAP_PCT:-20}
conns=${CONNECTIONS:-16}
depth=${DEPTH:-4}
for tool in memcached taskset python3; do
    command -v "$tool" >/dev/null || {
        echo "$tool is not installed (apt-get install memcached util-linux python3)" >&2
        exit 2
    }
done
[ -x "$WEFT" ] || {
    echo "no weft binary at $WEFT (cargo build --release -p weft-cli)" >&2
    exit 2
}
# A cgroup of our own, v1 (`cpu` controller) or v2 (`cpu.max`).
if [ -d /sys/fs/cgroup/cpu ] && [ ! -f /sys/fs/cgroup/cgroup.controllers ]; then
    group=/sys/fs/cgroup/cpu/weft-pipelined-peak
    mkdir -p "$group"
    echo 10000 >"$group/cpu.cfs_period_us"
    echo $((cap * 100)) >"$group/cpu.cfs_quota_us"
else
    group=/sys/fs/cgroup/weft-pipelined-peak
    mkdir -p "$group"
    echo "$((cap * 100)) 10000" >"$group/cpu.max"
fi

port=${PORT:-22500}
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rmdir "$group" 2>/dev/null; true' EXIT
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# run SERVER PROTOCOL ROUND: one client run; sets `line`. Not called in a subshell, so that the
# EXIT trap sees the server's `pid`.
run() {
    local server=$1 proto=$2 r=$3 out c0 c1 t0 t1
    port=$((port + 1))
    if [ "$server" = weft ]; then
        taskset -c 0 "$WEFT" memcached -t 1 -p "$port" -l 127.0.0.1 -m 1024 -u root &
    else
        taskset -c 0 memcached -t 1 -p "$port" -l 127.0.0.1 -m 1024 -u root &
    fi
    pid=$!
    echo "$pid" >"$group/cgroup.procs"
    for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
    out=$(taskset -c 1 python3 benches/pipelined_client.py --server "127.0.0.1:$port" \
        --connections "$conns" --depth "$depth" --seconds "$secs" --protocol "$proto" \
        --server-pid "$pid")
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    pid=
    line=$(python3 -c '
import json, sys
d = json.loads(sys.argv[1])
print("round %s protocol %s server %s req/s %d requests/write %.2f busy %.2f misses %d" % (
    sys.argv[2], d["protocol"], sys.argv[3], d["req_per_s"], d["requests_per_write"],
    d["server_busy"], d["misses"]))' "$out" "$r" "$server")
}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD), benches/pipelined_client.py, $conns connections, depth $depth, servers capped at $cap %, ${secs}s, $rounds rounds"
lines=()
for r in $(seq "$rounds"); do
    for proto in classic meta; do
        if ((r % 2)); then order=(weft memcached); else order=(memcached weft); fi
        for s in "${order[@]}"; do
            run "$s" "$proto" "$r"
            echo "$line"
            lines+=("$line")
        done
    done
done
printf '%s\n' "${lines[@]}" | python3 -c '
import collections, statistics, sys
rps, busy = {}, collections.defaultdict(list)
for line in sys.stdin:
    w = line.split()
    rps[(w[3], w[5], int(w[1]))] = int(w[7])
    busy[w[5]].append(w[11])
for p in ("classic", "meta"):
    r = sorted(rps[(p, "weft", n)] / rps[(p, "memcached", n)]
               for (pp, s, n) in rps if pp == p and s == "weft" and (p, "memcached", n) in rps)
    print(f"{p}: weft / memcached req/s {r[0]:.2f}-{statistics.median(r):.2f}-{r[-1]:.2f} over {len(r)} rounds")
for s, b in sorted(busy.items()):
    print("server busy, " + s + ": " + " ".join(b))
'
