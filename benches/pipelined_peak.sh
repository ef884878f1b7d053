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
source benches/cache_servers.sh
need "apt-get install memcached util-linux python3" memcached taskset python3
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

# run SERVER PROTOCOL ROUND: one client run; sets `line`. Not called in a subshell, so that the
# EXIT trap sees the server's `pid`.
run() {
    local server=$1 proto=$2 r=$3 out
    start_cache "$server"
    echo "$pid" >"$group/cgroup.procs"
    out=$(taskset -c 1 python3 benches/pipelined_client.py --server "127.0.0.1:$port" \
        --connections "$conns" --depth "$depth" --seconds "$secs" --protocol "$proto" \
        --server-pid "$pid")
    stop_cache
    line=$(python3 -c '
import json, sys
d = json.loads(sys.argv[1])
print("round %s protocol %s server %s req/s %d busy %.2f requests/write %.2f misses %d" % (
    sys.argv[2], d["protocol"], sys.argv[3], d["req_per_s"], d["server_busy"],
    d["requests_per_write"], d["misses"]))' "$out" "$r" "$server")
}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD), benches/pipelined_client.py, $conns connections, depth $depth, servers capped at $cap %, ${secs}s, $rounds rounds"
alternate "$rounds" classic meta
summarize
