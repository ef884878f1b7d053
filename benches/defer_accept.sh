#!/usr/bin/env bash
# `weft http --defer-accept` on the thesis's web workload: sessions of three requests, each
# session a new connection, started on a Poisson schedule (httperf's shape, `weft load http
# --rate R --requests-per-session 3`), names drawn Zipf from the thesis's file set (`weft
# fileset`, served from the page cache), 10 s client timeout.
#
# Servers: `weft http` with its default `--defer-accept 1` (TCP_DEFER_ACCEPT: a connection is
# handed over once its first request is in) and with `--defer-accept 0`, and nginx at its best
# static-file settings (benches/bench_common.sh's template) with and without `listen ...
# deferred` (the same socket option). Each run starts its server afresh, pinned to CPU 0, with
# the load on CPU 1; a round runs every server once at a rate, in an order rotated by round.
# With QUOTA_PCT the servers run in a cgroup limited to that % of their core (10 ms period),
# so that the one load core can take them past saturation.
#
# One line a run: replies/s, errors, p50 / p99 / p99.9 in ms, the server's CPU (user +
# system, its processes and their children, from /proc, over the measured window) a reply in
# µs, and the share of its core the load used (near 1, the load, not the server, set the
# latency: `weft load http` costs about 60 µs a request here, so one core offers ~15,000 req/s
# at most); then benches/defer_accept_summary.py's min–median–max by rate and server, and
# `--defer-accept 0` over the default by round.
#
# The setting `valid60` runs WEFT with `--open-file-cache-valid-ms 60000`, the window nginx's
# `open_file_cache` serves a file unchecked in (weft's default checks every request).
#
# To A/B a change, WEFT_BASE names a second `weft` binary (the build before it) and the
# setting `base` runs it with the defaults; the summary then gives defer1 (WEFT) over base.
#
# Needs root for QUOTA_PCT; short connections leave TIME-WAIT sockets, so run with
# `sysctl -w net.ipv4.tcp_max_tw_buckets=10000` (docs/BENCHMARKS.md) or the runs run out of
# ports.
# Usage: benches/defer_accept.sh [ROUNDS]   (default 3)
# Environment: WEFT (default target/release/weft), RATES (requests/s, default "6000 12000
# 16000"), DURATION (5 s measured, after 1 s of warm-up), SCALE (file-set scale, 0.1),
# CLOSE (server, the default: the last request of a session carries `Connection: close`;
# client: httperf's sessions, the client closes after the last reply, `--client-closes`),
# QUOTA_PCT (0: the whole core), SETTINGS (default "defer1 defer0 nginx nginx-deferred"; also
# base, with WEFT_BASE, and valid60).
set -euo pipefail

cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
rounds=${1:-3}
WEFT=${WEFT:-${CARGO_TARGET_DIR:-target}/release/weft}
rates=${RATES:-"6000 12000 16000"}
secs=${DURATION:-5}
warmup=1
scale=${SCALE:-0.1}
quota=${QUOTA_PCT:-0}
close=${CLOSE:-server}
case $close in
server) close_flag=() ;;
client) close_flag=(--client-closes) ;;
*)
    echo "CLOSE must be server or client, not '$close'" >&2
    exit 2
    ;;
esac
read -r -a settings <<<"${SETTINGS:-defer1 defer0 nginx nginx-deferred}"
for s in "${settings[@]}"; do
    case $s in
    defer1 | defer0 | nginx | nginx-deferred | valid60) ;;
    base)
        if [ ! -x "${WEFT_BASE:-}" ]; then
            echo "setting 'base' needs WEFT_BASE, an executable weft binary" >&2
            exit 2
        fi
        ;;
    *)
        echo "unknown setting '$s' (defer1, defer0, nginx, nginx-deferred, valid60 or base)" >&2
        exit 2
        ;;
    esac
done
case $quota in
'' | *[!0-9]*)
    echo "QUOTA_PCT must be a whole number of percent (0: no limit), not '$quota'" >&2
    exit 2
    ;;
esac

source benches/bench_common.sh
need "apt-get install nginx util-linux" nginx taskset

ulimit -n "$(ulimit -Hn)"
file_root
fileset=${FILESET:-${TMPDIR:-/tmp}/weft-bench-http-$scale-1}
"$WEFT" fileset --out "$fileset" --scale "$scale" --seed 1 >/dev/null
chmod -R a+rX "$fileset"
rmdir "$work/www" 2>/dev/null || rm -rf "$work/www"
ln -s "$fileset" "$work/www"

# quota_group PCT: a new cgroup (v1 or v2) limiting its processes to PCT % of one core (10 ms
# period), its directory in `cg`.
quota_group() {
    if [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then # cgroup v1
        cg=/sys/fs/cgroup/cpu/weft-defer-accept-$$
        mkdir "$cg"
        echo 10000 >"$cg/cpu.cfs_period_us"
        echo $(($1 * 100)) >"$cg/cpu.cfs_quota_us"
    elif grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then # v2
        cg=/sys/fs/cgroup/weft-defer-accept-$$
        mkdir "$cg"
        echo "$(($1 * 100)) 10000" >"$cg/cpu.max"
    else
        echo "QUOTA_PCT needs a cgroup cpu controller (v1 or v2) and root" >&2
        exit 2
    fi
}

# in_quota COMMAND... &: becomes COMMAND (exec: `$!` is the server), inside `cg` (if set) from
# its first instruction, so that every process it forks (nginx's worker) is limited too;
# moving the PID in after `&` let nginx's worker start outside the limit. Only in the
# background: it replaces the shell that runs it.
in_quota() {
    if [ -n "$cg" ]; then
        exec sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' in_quota "$cg" "$@"
    fi
    exec "$@"
}

# outside_quota PID: the PIDs among PID and its children that are not in `cg`'s cgroup.
outside_quota() {
    local s f
    for s in /proc/[0-9]*/stat; do
        read -r -a f <"$s" 2>/dev/null || continue
        if [ "${f[0]}" = "$1" ] || [ "${f[3]}" = "$1" ]; then
            grep -qxF "${f[0]}" "$cg/cgroup.procs" || echo "${f[0]}"
        fi
    done
}

cg=
if [ "$quota" != 0 ]; then
    quota_group "$quota"
    trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; sleep 0.3; rmdir "$cg" 2>/dev/null; rm -rf "$work"; true' EXIT
fi

port=${PORT:-23100}
# start SETTING: a fresh server on the next port, pinned to CPU 0 (in the cgroup if any);
# sets `pid`.
start() {
    port=$((port + 1))
    case $1 in
    defer1 | defer0)
        in_quota taskset -c 0 "$WEFT" http --root "$work/www" --listen "127.0.0.1:$port" \
            --defer-accept "${1#defer}" >/dev/null 2>>"$work/weft.log" &
        ;;
    valid60)
        in_quota taskset -c 0 "$WEFT" http --root "$work/www" --listen "127.0.0.1:$port" \
            --open-file-cache-valid-ms 60000 >/dev/null 2>>"$work/weft.log" &
        ;;
    base)
        in_quota taskset -c 0 "$WEFT_BASE" http --root "$work/www" --listen "127.0.0.1:$port" \
            >/dev/null 2>>"$work/weft.log" &
        ;;
    nginx*)
        local extra=""
        [ "$1" = nginx-deferred ] && extra=" deferred"
        nginx_conf "$port" "$work" | sed "s/backlog=16384;/backlog=16384$extra;/" >"$work/nginx.conf"
        in_quota taskset -c 0 nginx -e "$work/nginx-error.log" -c "$work/nginx.conf" >/dev/null 2>&1 &
        ;;
    esac
    pid=$!
    for _ in $(seq 50); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            local out
            out=$([ -z "$cg" ] || outside_quota "$pid")
            [ -z "$out" ] && return
            echo "$1: process $out runs outside the CPU limit" >&2
            exit 1
        fi
        sleep 0.1
    done
    echo "$1 did not start on port $port" >&2
    exit 1
}

# cpu_ticks PID: user + system clock ticks of PID and its children (nginx's worker), from
# /proc/*/stat (field 4 the parent, 14 and 15 user and system; no name here has spaces).
cpu_ticks() {
    local total=0 f s
    for s in /proc/[0-9]*/stat; do
        read -r -a f <"$s" 2>/dev/null || continue
        if [ "${f[0]}" = "$1" ] || [ "${f[3]}" = "$1" ]; then
            total=$((total + f[13] + f[14]))
        fi
    done
    echo "$total"
}
hz=$(getconf CLK_TCK)

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD), benches/defer_accept.sh $rounds: file set scale $scale, weft load http --rate R --requests-per-session 3 ${close_flag[*]} --duration $secs on CPU 1, servers on CPU 0$([ "$quota" != 0 ] && echo " limited to $quota % of it")"
echo "round rate server replies_per_sec errors p50_ms p99_ms p999_ms cpu_us_per_reply load_busy"
n=${#settings[@]}
for rate in $rates; do
    for round in $(seq 1 "$rounds"); do
        for i in $(seq 0 $((n - 1))); do
            s=${settings[$(((i + round - 1) % n))]}
            start "$s"
            taskset -c 1 "$WEFT" load http --server "127.0.0.1:$port" --fileset "$fileset" \
                --rate "$rate" --requests-per-session 3 "${close_flag[@]}" --duration "$secs" \
                --warmup "$warmup" --json >"$work/load.json" 2>/dev/null &
            load=$!
            sleep "$warmup"
            before=$(cpu_ticks "$pid")
            wait "$load"
            after=$(cpu_ticks "$pid")
            kill "$pid" && wait "$pid" 2>/dev/null || true
            pid=
            python3 - "$round" "$rate" "$s" "$((after - before))" "$hz" "$work/load.json" <<'PY'
import json, sys
rnd, rate, server, ticks, hz, path = sys.argv[1:]
d = json.load(open(path))
replies = max(d["replies"], 1)
lat = d["latency_us"]
cpu = int(ticks) / int(hz) * 1e6 / replies
print(rnd, rate, server, round(d["replies_per_sec"]), d["errors_total"],
      round(lat["p50"] / 1000, 2), round(lat["p99"] / 1000, 2), round(lat["p999"] / 1000, 2),
      round(cpu, 1), round(d["generator_utilisation"], 2))
PY
            sleep 1 # let the run's connections close
        done
    done
done | tee "$work/runs.txt"
python3 benches/defer_accept_summary.py "$work/runs.txt"
