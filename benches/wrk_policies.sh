#!/usr/bin/env bash
# Issue 20's own cross-check, with independent clients: keep-alive requests for one 4 KiB
# file over 1,000 connections (wrk -t1 -c1000, and ab -k -c1000), against nginx at its best
# static-file settings (benches/bench_common.sh's template: one worker, sendfile, tcp_nopush,
# open_file_cache) and `weft http` with its defaults, the epoll backend and the core
# scheduling policies (every policy with ALL=1). The issue's first measurement of this found
# weft's p99 at 0.5–1.2 s against nginx's 9–23 ms, and 26 ms to 1.44 s by policy.
#
# Each run starts its server afresh (as the issue did), pinned to CPU 0, with the client on
# CPU 1; a round runs every server once, in an order rotated by round. wrk reports p50, p99,
# p99.9, p99.99 and its longest request through a Lua `done` hook; ab (default weft and nginx
# only) its p50, p99 and longest request. One line a run, then the summary of
# benches/wrk_policies_summary.py: each weft setting's p99, p99.9 and longest over nginx's in
# the same round, as min–median–max.
#
# Usage: benches/wrk_policies.sh [ROUNDS]   (default 3)
# Environment: WEFT (the weft binary; default target/release/weft), SECONDS_PER_RUN (5),
# CONNECTIONS (1000), SETTINGS (weft's settings, space-separated: `default`, `epoll` or a
# policy name; default "default epoll work-stealing global-fifo lifo-stealing relaxed-fifo"),
# ALL=1 (every policy instead), AB_REQUESTS (200000; 0: no ab runs).
set -euo pipefail

cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
rounds=${1:-3}
WEFT=${WEFT:-${CARGO_TARGET_DIR:-target}/release/weft}
secs=${SECONDS_PER_RUN:-5}
conns=${CONNECTIONS:-1000}
ab_requests=${AB_REQUESTS:-200000}
source benches/bench_common.sh
need "apt-get install nginx wrk apache2-utils util-linux" nginx wrk ab taskset

# Every scheduling policy weft ships (weft::sched::names(); a test holds the two lists equal).
policies=(work-stealing relaxed-fifo lifo-stealing global-fifo hybrid-stochastic hybrid-switch
    hybrid-reverse ws-nearest ws-overflow-locked ws-overflow-lockfree ws-overflow-sharded ws-grow
    ws-request)

# weft_args SETTING: the `weft http` flags of a setting; exits 2 on one it does not know.
weft_args() {
    case $1 in
    default) return ;;
    epoll) echo "--io epoll" && return ;;
    esac
    local p
    for p in "${policies[@]}"; do
        [ "$p" = "$1" ] && echo "--scheduler $1" && return
    done
    echo "unknown setting '$1' (default, epoll or a scheduling policy: ${policies[*]})" >&2
    exit 2
}

if [ "${ALL:-0}" = 1 ]; then
    settings=(default epoll "${policies[@]}")
else
    read -r -a settings <<<"${SETTINGS:-default epoll work-stealing global-fifo lifo-stealing relaxed-fifo}"
fi
for s in "${settings[@]}"; do weft_args "$s" >/dev/null; done

ulimit -n "$(ulimit -Hn)"
file_root
port=${PORT:-22900}
cat >"$work/pct.lua" <<'LUA'
done = function(summary, latency, requests)
  local errors = summary.errors.connect + summary.errors.read + summary.errors.write
    + summary.errors.status + summary.errors.timeout
  io.write(string.format("PCT %.0f %d %d %d %d %d %d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50),
    latency:percentile(99), latency:percentile(99.9), latency:percentile(99.99),
    latency.max, errors))
end
LUA

# start SERVER SETTING: a fresh server on the next port, pinned to CPU 0; sets `pid`.
start() {
    port=$((port + 1))
    if [ "$1" = weft ]; then
        # shellcheck disable=SC2046
        taskset -c 0 "$WEFT" http --root "$work/www" --listen "127.0.0.1:$port" \
            $(weft_args "$2") >/dev/null &
    else
        nginx_conf "$port" "$work" >"$work/nginx.conf"
        taskset -c 0 nginx -c "$work/nginx.conf" &
    fi
    pid=$!
    for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
    sleep 0.3
}

stop() {
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    pid=
}

# wrk_run ROUND SERVER SETTING: one wrk run on a fresh server; sets `line`. Not in a
# subshell, so that the EXIT trap sees the server's `pid`.
wrk_run() {
    local out f
    start "$2" "$3"
    out=$(taskset -c 1 wrk -t1 -c"$conns" -d"${secs}s" -s "$work/pct.lua" "http://127.0.0.1:$port/4k.bin")
    stop
    read -r -a f <<<"$(grep '^PCT ' <<<"$out")" || true
    if [ ${#f[@]} -ne 8 ]; then
        echo "wrk printed no figures against $2 $3:" >&2
        echo "$out" >&2
        exit 1
    fi
    line="round $1 server $2 setting $3 client wrk req/s ${f[1]} p50_us ${f[2]} p99_us ${f[3]} p999_us ${f[4]} p9999_us ${f[5]} max_us ${f[6]} errors ${f[7]}"
}

# ab_run ROUND SERVER: one ab -k run on a fresh server (its defaults); sets `line`.
ab_run() {
    local out rps p50 p99 max failed
    start "$2" default
    out=$(taskset -c 1 ab -q -k -c "$conns" -n "$ab_requests" "http://127.0.0.1:$port/4k.bin" 2>&1) || true
    stop
    rps=$(awk '/^Requests per second/ {printf "%.0f", $4}' <<<"$out")
    p50=$(awk '$1 == "50%" {print $2 * 1000}' <<<"$out")
    p99=$(awk '$1 == "99%" {print $2 * 1000}' <<<"$out")
    max=$(awk '$1 == "100%" {print $2 * 1000}' <<<"$out")
    failed=$(awk '/^Failed requests/ {print $3}' <<<"$out")
    if [ -z "$rps" ] || [ -z "$max" ]; then
        echo "ab printed no figures against $2:" >&2
        echo "$out" >&2
        exit 1
    fi
    line="round $1 server $2 setting default client ab req/s $rps p50_us $p50 p99_us $p99 max_us $max errors ${failed:-0}"
}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD), wrk -t1 -c$conns -d${secs}s and ab -k -c$conns -n $ab_requests, 4 KiB file, $rounds rounds, a fresh server a run"
lines=()
runs=("nginx default")
for s in "${settings[@]}"; do runs+=("weft $s"); done
for r in $(seq "$rounds"); do
    n=${#runs[@]}
    for i in $(seq 0 $((n - 1))); do
        read -r server setting <<<"${runs[$(((i + r - 1) % n))]}"
        wrk_run "$r" "$server" "$setting"
        echo "$line"
        lines+=("$line")
    done
    if [ "$ab_requests" -gt 0 ]; then
        if ((r % 2)); then order=(weft nginx); else order=(nginx weft); fi
        for server in "${order[@]}"; do
            ab_run "$r" "$server"
            echo "$line"
            lines+=("$line")
        done
    fi
done
printf '%s\n' "${lines[@]}" | python3 benches/wrk_policies_summary.py
