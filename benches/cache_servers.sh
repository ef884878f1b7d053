# Sourced by the cache's peak scripts (benches/memcaslap_peak.sh, benches/pipelined_peak.sh):
# the checks before a run (`need`, from benches/bench_common.sh), and starting and stopping
# `weft memcached -t 1` or `memcached -t 1` on 127.0.0.1, pinned to CPU 0. The caller sets
# WEFT (the weft binary) and keeps the running server's PID in `pid` (for its EXIT trap);
# `port` moves on by one a start.

source benches/bench_common.sh

# start_cache weft|memcached: starts it on the next port, sets `pid`, and returns once it
# accepts connections (or after 5 s).
start_cache() {
    port=$((port + 1))
    if [ "$1" = weft ]; then
        taskset -c 0 "$WEFT" memcached -t 1 -p "$port" -l 127.0.0.1 -m 1024 -u root &
    else
        taskset -c 0 memcached -t 1 -p "$port" -l 127.0.0.1 -m 1024 -u root &
    fi
    pid=$!
    for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
}

# stop_cache: stops the server `start_cache` started and clears `pid`.
stop_cache() {
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    pid=
}

# alternate ROUNDS VARIANT...: for each round and variant, `run SERVER VARIANT ROUND` for both
# servers, the first alternating by round; prints each run's `line` and keeps it in `lines`.
# A line reads `round R <what> <variant> server S req/s N busy B ...`.
alternate() {
    local rounds=$1 r v s order
    shift
    lines=()
    for r in $(seq "$rounds"); do
        for v in "$@"; do
            if ((r % 2)); then order=(weft memcached); else order=(memcached weft); fi
            for s in "${order[@]}"; do
                run "$s" "$v" "$r"
                echo "$line"
                lines+=("$line")
            done
        done
    done
}

# summarize: from `lines`, weft's req/s over memcached's for each variant, paired by round, as
# min–median–max, then each server's busy shares.
summarize() {
    printf '%s\n' "${lines[@]}" | python3 -c '
import collections, statistics, sys
rps, busy, variants = {}, collections.defaultdict(list), {}
for line in sys.stdin:
    w = line.split()
    variants.setdefault(w[3], w[2])
    rps[(w[3], w[5], int(w[1]))] = int(w[7])
    busy[w[5]].append(w[9])
for v, what in variants.items():
    r = sorted(rps[(v, "weft", n)] / rps[(v, "memcached", n)]
               for (vv, s, n) in rps if vv == v and s == "weft" and (v, "memcached", n) in rps)
    print(f"{v} {what}: weft / memcached req/s {r[0]:.2f}-{statistics.median(r):.2f}-{r[-1]:.2f} over {len(r)} rounds")
for s, b in sorted(busy.items()):
    print("server busy, " + s + ": " + " ".join(b))
'
}
