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
for tool in memcaslap memcached taskset; do
    command -v "$tool" >/dev/null || {
        echo "$tool is not installed (apt-get install libmemcached-tools memcached util-linux)" >&2
        exit 2
    }
done
[ -x "$WEFT" ] || {
    echo "no weft binary at $WEFT (cargo build --release -p weft-cli)" >&2
    exit 2
}

port=${PORT:-22400}
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; true' EXIT
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# run SERVER CONNECTIONS ROUND: one memcaslap run; sets `line`. Not called in a subshell, so
# that the EXIT trap sees the server's `pid` and the port moves on from run to run.
run() {
    local server=$1 c=$2 r=$3 out c0 c1 ops tps
    port=$((port + 1))
    if [ "$server" = weft ]; then
        taskset -c 0 "$WEFT" memcached -t 1 -p "$port" -l 127.0.0.1 -m 1024 -u root &
    else
        taskset -c 0 memcached -t 1 -p "$port" -l 127.0.0.1 -m 1024 -u root &
    fi
    pid=$!
    for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
    c0=$(cpu_ticks "$pid")
    out=$(taskset -c 1 memcaslap -s "127.0.0.1:$port" -T 1 -c "$c" -t "${secs}s" -X 200 2>&1)
    c1=$(cpu_ticks "$pid")
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    pid=
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
lines=()
for r in $(seq "$rounds"); do
    for c in "${conns[@]}"; do
        if ((r % 2)); then order=(weft memcached); else order=(memcached weft); fi
        for s in "${order[@]}"; do
            run "$s" "$c" "$r"
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
    rps[(int(w[3]), w[5], int(w[1]))] = int(w[7])
    busy[w[5]].append(w[9])
for c in sorted({k[0] for k in rps}):
    r = sorted(rps[(c, "weft", n)] / rps[(c, "memcached", n)]
               for (cc, s, n) in rps if cc == c and s == "weft" and (c, "memcached", n) in rps)
    print(f"{c} connections: weft / memcached req/s {r[0]:.2f}-{statistics.median(r):.2f}-{r[-1]:.2f} over {len(r)} rounds")
for s, b in sorted(busy.items()):
    print("server busy, " + s + ": " + " ".join(b))
'
