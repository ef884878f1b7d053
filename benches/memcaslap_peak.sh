#!/usr/bin/env bash
# The cache's closed-loop peak measured with an independent generator: memcaslap (from
# libmemcached-tools), one thread, against `weft memcached -t 1` and `memcached -t 1`, each
# pinned to CPU 0 with the load on CPU 1, not capped (memcaslap keeps either server's core
# busy, which this script checks and prints). It cross-checks `weft bench memcached`, whose
# generator is weft's own: memcaslap keeps one request outstanding per connection (no
# pipelining), 90 % gets and 10 % sets of 200-byte values, every get a hit.
#
# Each round runs both servers once per connection count, the first one alternating by round.
# Prints one line per run, then per connection count weft's req/s over memcached's, paired by
# round, as min–median–max.
#
# Usage: benches/memcaslap_peak.sh [ROUNDS] [CONNECTIONS...]   (defaults: 6 rounds, 16 and 64)
# Environment: WEFT (the weft binary; default target/release/weft), SECONDS_PER_RUN (6).
set -euo pipefail

cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
rounds=${1:-6}
shift || true
conns=("$@")
((${#conns[@]})) || conns=(16 64)
WEFT=${WEFT:-${CARGO_TARGET_DIR:-target}/release/weft}
secs=${SECONDS_PER_RUN:-6}
source benches/cache_servers.sh
need "apt-get install libmemcached-tools memcached util-linux" memcaslap memcached taskset

port=${PORT:-22400}
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; true' EXIT
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# run SERVER CONNECTIONS ROUND: one memcaslap run; sets `line`. Not called in a subshell, so
# that the EXIT trap sees the server's `pid` and the port moves on from run to run.
run() {
    local server=$1 c=$2 r=$3 out c0 c1 ops tps
    start_cache "$server"
    c0=$(cpu_ticks "$pid")
    out=$(taskset -c 1 memcaslap -s "127.0.0.1:$port" -T 1 -c "$c" -t "${secs}s" -X 200 2>&1)
    c1=$(cpu_ticks "$pid")
    stop_cache
    ops=$(grep -o 'Ops: [0-9]*' <<<"$out" | tail -1 | awk '{print $2}')
    tps=$(grep -o 'TPS: [0-9]*' <<<"$out" | tail -1 | awk '{print $2}')
    if [ -z "$ops" ] || [ "$ops" = 0 ]; then
        echo "memcaslap reported no operations against $server:" >&2
        echo "$out" >&2
        exit 1
    fi
    line=$(awk -v r="$r" -v c="$c" -v s="$server" -v t="$tps" -v d="$((c1 - c0))" -v o="$ops" \
        -v secs="$secs" 'BEGIN {
            printf "round %d connections %d server %s req/s %d busy %.2f cpu_us_per_request %.2f\n",
                r, c, s, t, d / 100 / secs, d * 10000 / o }')
}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD), memcaslap -T 1 -X 200 -t ${secs}s, $rounds rounds"
alternate "$rounds" "${conns[@]}"
summarize
