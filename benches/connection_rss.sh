#!/usr/bin/env bash
# What thousands of connections cost in memory: the resident set (VmRSS) of `weft memcached
# -t 1` and `memcached -t 1`, each pinned to CPU 0, with CONNECTIONS persistent connections
# open and served at 2,000 req/s by benches/openloop (CPU 1), read 3 s after the last
# connection is up; and before any connection, for the server's fixed part. Rounds alternate
# which server goes first. Both servers run `-c 20000 -m 1024 -b 16384`.
#
# Prints one line per run, then per server the RSS with the connections open and its growth
# over the empty server per connection, as min–median–max over the rounds.
#
# Usage: benches/connection_rss.sh [ROUNDS] [CONNECTIONS]   (defaults: 3 rounds, 15360)
# Environment: WEFT (the weft binary; default target/release/weft).
set -euo pipefail

cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
rounds=${1:-3}
conns=${2:-15360}
WEFT=${WEFT:-${CARGO_TARGET_DIR:-target}/release/weft}
source benches/cache_servers.sh
need "apt-get install memcached gcc iproute2 util-linux" memcached cc ss taskset
ulimit -n 20000
work=$(mktemp -d)
port=${PORT:-22600}
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"; true' EXIT
cc -O2 -o "$work/openloop" benches/openloop/openloop.c -lpthread -lm

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

# run SERVER VARIANT ROUND: sets `line`.
run() {
    local server=$1 r=$3 empty loaded
    port=$((port + 1))
    if [ "$server" = weft ]; then
        taskset -c 0 "$WEFT" memcached -t 1 -p "$port" -l 127.0.0.1 -c 20000 -m 1024 -b 16384 -u root &
    else
        taskset -c 0 memcached -t 1 -p "$port" -l 127.0.0.1 -c 20000 -m 1024 -b 16384 -u root &
    fi
    pid=$!
    for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
    empty=$(rss_kib "$pid")
    taskset -c 1 "$work/openloop" --server "127.0.0.1:$port" --connections "$conns" \
        --qps 2000 --duration 8 --warmup 1 >/dev/null &
    local load=$!
    for _ in $(seq 1200); do
        [ "$(ss -tnH state established "( sport = :$port )" | wc -l)" -ge "$conns" ] && break
        sleep 0.05
    done
    sleep 3
    loaded=$(rss_kib "$pid")
    wait "$load"
    stop_cache
    line=$(awk -v r="$r" -v s="$server" -v c="$conns" -v e="$empty" -v l="$loaded" 'BEGIN {
        printf "round %d rss %d server %s empty_kib %d loaded_kib %d per_connection_bytes %.0f\n",
            r, c, s, e, l, (l - e) * 1024 / c }')
}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD), $conns connections at 2,000 req/s, $rounds rounds"
alternate "$rounds" "$conns"
printf '%s\n' "${lines[@]}" | python3 -c '
import collections, statistics, sys
by = collections.defaultdict(list)
for line in sys.stdin:
    w = line.split()
    by[w[5]].append((int(w[9]) / 1024, float(w[11])))
for s, v in sorted(by.items()):
    mib = sorted(x[0] for x in v)
    per = sorted(x[1] for x in v)
    print(f"{s}: RSS {mib[0]:.1f}-{statistics.median(mib):.1f}-{mib[-1]:.1f} MiB with the connections open, "
          f"{per[0]:.0f}-{statistics.median(per):.0f}-{per[-1]:.0f} bytes a connection")
'
