#!/usr/bin/env bash
# Item 4's HTTP half: keep-alive requests for one 4 KiB file, measured with an independent
# client (wrk, one thread, 50 connections), against `weft http` with its defaults and nginx
# with one worker at its best static-file settings (sendfile, tcp_nopush, open_file_cache:
# benches/bench_common.sh's template, the settings of crates/weft-load/src/nginx.rs). Each server is pinned
# to CPU 0 and wrk to CPU 1; neither is capped.
#
# Each round runs both servers once, the first one alternating by round (with WEFT_BASE, a
# second weft binary, the build before a change, runs as `base` too, the three rotating by
# round, and the summary adds weft over base). Prints one line per
# run (req/s, wrk's p99, the server's busy share), then weft's req/s over nginx's and nginx's
# CPU a request (busy over req/s) over weft's, each paired by round, as min–median–max
# (benches/keepalive_summary.py, which also pools records: keepalive_summary.py RECORD...).
#
# Usage: benches/http_keepalive.sh [ROUNDS]   (default 4)
# Environment: WEFT (the weft binary; default target/release/weft), WEFT_BASE (none),
# SECONDS_PER_RUN (5), CONNECTIONS (50).
set -euo pipefail

cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
rounds=${1:-4}
WEFT=${WEFT:-${CARGO_TARGET_DIR:-target}/release/weft}
secs=${SECONDS_PER_RUN:-5}
conns=${CONNECTIONS:-50}
servers=(weft nginx)
if [ -n "${WEFT_BASE:-}" ]; then
    if [ ! -x "$WEFT_BASE" ]; then
        echo "WEFT_BASE must name an executable weft binary, not '$WEFT_BASE'" >&2
        exit 2
    fi
    servers=(weft base nginx)
fi
source benches/bench_common.sh
need "apt-get install nginx wrk util-linux" nginx wrk taskset

file_root
port=${PORT:-22700}
cpu_ticks() { awk 'BEGIN {s = 0} {s += $14 + $15} END {print s}' "$@"; }

# run SERVER ROUND: one wrk run; sets `line`. Not in a subshell, so that the EXIT trap sees
# the server's `pid`.
run() {
    local server=$1 r=$2 out rps p99 c0 c1 procs
    port=$((port + 1))
    if [ "$server" = weft ]; then
        taskset -c 0 "$WEFT" http --root "$work/www" --listen "127.0.0.1:$port" &
    elif [ "$server" = base ]; then
        taskset -c 0 "$WEFT_BASE" http --root "$work/www" --listen "127.0.0.1:$port" &
    else
        nginx_conf "$port" "$work" >"$work/nginx.conf"
        taskset -c 0 nginx -c "$work/nginx.conf" &
    fi
    pid=$!
    for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
    # nginx serves from its worker, a child of the master (forked after it listens).
    sleep 0.3
    procs=("/proc/$pid/stat")
    for child in $(pgrep -P "$pid" || true); do procs+=("/proc/$child/stat"); done
    c0=$(cpu_ticks "${procs[@]}")
    out=$(taskset -c 1 wrk -t1 -c"$conns" -d"${secs}s" --latency "http://127.0.0.1:$port/4k.bin")
    c1=$(cpu_ticks "${procs[@]}")
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    pid=
    rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
    p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
    if [ -z "$rps" ] || grep -q 'Non-2xx\|Socket errors' <<<"$out"; then
        echo "wrk failed or saw errors against $server:" >&2
        echo "$out" >&2
        exit 1
    fi
    line="round $r server $server req/s $rps p99 $p99 busy $(awk -v d=$((c1 - c0)) -v s="$secs" 'BEGIN {printf "%.2f", d / 100 / s}')"
}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD), wrk -t1 -c$conns -d${secs}s --latency, 4 KiB file, $rounds rounds"
lines=()
for r in $(seq "$rounds"); do
    n=${#servers[@]}
    order=()
    for i in $(seq 0 $((n - 1))); do order+=("${servers[$(((i + r - 1) % n))]}"); done
    for s in "${order[@]}"; do
        run "$s" "$r"
        echo "$line"
        lines+=("$line")
    done
done
printf '%s\n' "${lines[@]}" | python3 benches/keepalive_summary.py
