#!/usr/bin/env bash
# The servers under each candidate scheduling policy, side by side (docs/SCHEDULERS.md,
# "Server defaults"). One server per policy is started at once, all pinned to CPU 0 with one
# processor; the load runs on CPU 1 and visits the policies in turn, three rounds:
#   cache: weft load memcached --qps 0 --connections 32, 4 s: req/s, p50/p99 µs, server CPU µs/req
#   http:  wrk -t1 -c100 -d4s on one 4 KiB file, keep-alive and `Connection: close`
# Server CPU per request is utime + stime of the server (from /proc) over the run divided by the
# requests it answered. Output: docs/bench/server-policies.txt. Needs wrk. About 5 minutes.
#
# Usage: benches/server-policies.sh [POLICY ...]   (default: the five candidates below)
set -euo pipefail

cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
cargo build --release -q -p weft-cli --bin weft
WEFT=$(realpath "${CARGO_TARGET_DIR:-target}/release/weft")
OUT=docs/bench/server-policies.txt
POLICIES=("$@")
[ ${#POLICIES[@]} -gt 0 ] || POLICIES=(work-stealing ws-grow global-fifo lifo-stealing relaxed-fifo)
ROOT=$(mktemp -d)
head -c 4096 /dev/urandom >"$ROOT/f4k.bin"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$ROOT"; }
trap cleanup EXIT INT TERM

declare -A MC_PID MC_PORT HTTP_PID HTTP_PORT
port=$((23000 + RANDOM % 1000))
for p in "${POLICIES[@]}"; do
    port=$((port + 1)); MC_PORT[$p]=$port
    taskset -c 0 "$WEFT" memcached -p "$port" -l 127.0.0.1 -t 1 -U 0 -u root --scheduler "$p" \
        >/dev/null 2>&1 &
    MC_PID[$p]=$!; PIDS+=($!)
    port=$((port + 1)); HTTP_PORT[$p]=$port
    taskset -c 0 "$WEFT" http --root "$ROOT" --listen "127.0.0.1:$port" --scheduler "$p" 2>/dev/null &
    HTTP_PID[$p]=$!; PIDS+=($!)
done
sleep 1
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

{
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD), benches/server-policies.sh ${POLICIES[*]}"
echo "round policy cache_req_s cache_p50_us cache_p99_us cache_cpu_us_req | keepalive_req_s keepalive_p99 keepalive_cpu_us_req | close_req_s close_p99 close_cpu_us_req"
for round in 1 2 3; do
    for p in "${POLICIES[@]}"; do
        t0=$(ticks "${MC_PID[$p]}")
        json=$(taskset -c 1 "$WEFT" load memcached --server "127.0.0.1:${MC_PORT[$p]}" --qps 0 \
            --connections 32 --duration 4 --warmup 0.5 --json 2>/dev/null)
        t1=$(ticks "${MC_PID[$p]}")
        cache=$(python3 -c "
import json, sys
d = json.loads(sys.argv[1])
served = d['actual_qps'] * (d['duration_s'] + 0.5) + 10000  # + the preload
sat = ' (generator saturated)' if d['generator_saturated'] else ''
print(round(d['actual_qps']), d['latency_us']['p50'], d['latency_us']['p99'],
      round(($t1 - $t0) / $hz * 1e6 / served, 2), end=sat)" "$json")
        line="$round $p $cache |"
        for mode in keepalive close; do
            extra=()
            [ $mode = close ] && extra=(-H "Connection: close")
            t0=$(ticks "${HTTP_PID[$p]}")
            out=$(taskset -c 1 wrk -t1 -c100 -d4s --latency "${extra[@]}" \
                "http://127.0.0.1:${HTTP_PORT[$p]}/f4k.bin")
            t1=$(ticks "${HTTP_PID[$p]}")
            rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
            p99=$(echo "$out" | awk '$1 == "99%" {print $2}')
            total=$(echo "$out" | awk '/requests in/ {print $1}')
            cpu=$(python3 -c "print(round(($t1 - $t0) / $hz * 1e6 / $total, 2))")
            line="$line $rps $p99 $cpu"
            [ $mode = keepalive ] && line="$line |"
        done
        echo "$line"
    done
done
} | tee "$OUT"
