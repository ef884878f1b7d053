#!/usr/bin/env bash
# weft http vs nginx *past saturation*: errors and replies when the offered rate exceeds what
# the server can serve (issue 5's "fewer errors than nginx once both are past saturation").
#
# On a 2-core machine one load core cannot push a whole server core past saturation with
# short-lived connections (the client saturates first: docs/BENCHMARKS.md, "HTTP server").
# So the servers get less CPU instead: both run pinned to CPU 0 inside one cgroup limited to
# QUOTA_PCT % of a core (CFS quota, 10 ms period, so the stalls are short), and the load,
# `weft load http --rate R` (one request per connection, Zipf names over the file set, 10 s
# client timeout), runs on CPU 1 where it has a whole core.
#
# Servers: weft http (its defaults), nginx as the thesis ran it (1 worker, sendfile on,
# access_log off, default listen backlog 511) and the same nginx with `backlog=4096` (weft's
# listen backlog), so that a difference that is only the backlog shows as such.
# Rounds alternate the servers; output: docs/bench/http-past-saturation.txt.
#
# Needs root (cgroups), nginx, and the cgroup cpu controller (v1 or v2).
# Usage: benches/http-past-saturation.sh        RATES="4000 8000 12000" QUOTA_PCT=30 ROUNDS=3
set -euo pipefail

cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
cargo build --release -q -p weft-cli --bin weft
WEFT=$(realpath "${CARGO_TARGET_DIR:-target}/release/weft")
OUT=docs/bench/http-past-saturation.txt
RATES=${RATES:-"4000 8000 12000 16000"}
QUOTA_PCT=${QUOTA_PCT:-30}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$NGINX" ] || { echo "nginx is not installed (apt-get install nginx)"; exit 1; }

WORK=$(mktemp -d)
FILESET=${FILESET:-/tmp/weft-bench-http-0.05-1}
"$WEFT" fileset --out "$FILESET" --scale 0.05 --seed 1 >/dev/null

# One cgroup for both servers: v1 (cpu controller mounted on its own) or v2 (cpu.max).
if [ -d /sys/fs/cgroup/cpu ] && [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
    CG=/sys/fs/cgroup/cpu/weft-past-saturation-$$
    mkdir "$CG"
    echo 10000 >"$CG/cpu.cfs_period_us"
    echo $((QUOTA_PCT * 100)) >"$CG/cpu.cfs_quota_us"
elif grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    CG=/sys/fs/cgroup/weft-past-saturation-$$
    mkdir "$CG"
    echo "$((QUOTA_PCT * 100)) 10000" >"$CG/cpu.max"
else
    echo "no cgroup cpu controller here: cannot limit the servers' CPU"; exit 1
fi

PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    sleep 0.5
    rmdir "$CG" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
nginx_conf() { # $1 = dir, $2 = port, $3 = extra listen parameters
    mkdir -p "$1"
    cat >"$1/nginx.conf" <<EOF
daemon off; master_process off; worker_processes 1; pid $1/nginx.pid;
error_log $1/error.log; worker_rlimit_nofile 20000;
events { worker_connections 20000; }
http {
  access_log off; sendfile on; tcp_nopush on; keepalive_timeout 75;
  types { text/html html; image/jpeg jpg; } default_type application/octet-stream;
  client_body_temp_path $1/body; proxy_temp_path $1/proxy; fastcgi_temp_path $1/fastcgi;
  uwsgi_temp_path $1/uwsgi; scgi_temp_path $1/scgi;
  server { listen 127.0.0.1:$2$3; root $FILESET; }
}
EOF
}

declare -A PORT PID
start() { # $1 = name, rest = command
    local name=$1; shift
    taskset -c 0 "$@" 2>"$WORK/$name.stderr" &
    PID[$name]=$!; PIDS+=($!)
    echo "${PID[$name]}" >"$CG/cgroup.procs"
}
PORT[nginx]=$(free_port); nginx_conf "$WORK/nginx" "${PORT[nginx]}" ""
start nginx "$NGINX" -e "$WORK/nginx/error.log" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf"
PORT[nginx-4096]=$(free_port); nginx_conf "$WORK/nginx-4096" "${PORT[nginx-4096]}" " backlog=4096"
start nginx-4096 "$NGINX" -e "$WORK/nginx-4096/error.log" -p "$WORK/nginx-4096" -c "$WORK/nginx-4096/nginx.conf"
PORT[weft]=$(free_port)
start weft "$WEFT" http --root "$FILESET" --listen "127.0.0.1:${PORT[weft]}"
sleep 1
for s in nginx nginx-4096 weft; do
    kill -0 "${PID[$s]}" 2>/dev/null || { echo "$s did not start:"; cat "$WORK/$s.stderr"; exit 1; }
done

{
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD), benches/http-past-saturation.sh: servers on CPU 0 limited to ${QUOTA_PCT} % of it, weft load http --rate R --duration $DURATION on CPU 1"
echo "round rate server replies_per_sec errors(timeout refused reset bad_status fd_unavailable other) total_errors p99_ms generator_saturated"
for rate in $RATES; do
    for round in $(seq 1 "$ROUNDS"); do
        for s in nginx nginx-4096 weft; do
            json=$(taskset -c 1 "$WEFT" load http --server "127.0.0.1:${PORT[$s]}" --fileset "$FILESET" \
                --rate "$rate" --duration "$DURATION" --json 2>/dev/null)
            python3 -c "
import json, sys
d = json.loads(sys.argv[1]); e = d['errors']
kinds = ('timeout', 'refused', 'reset', 'bad_status', 'fd_unavailable', 'other')
print('$round', '$rate', '$s', round(d['replies_per_sec']), ' '.join(str(e.get(k, 0)) for k in kinds),
      sum(e.values()), round(d['latency_us']['p99'] / 1000, 1), d.get('generator_saturated', ''))" "$json"
            sleep 2 # let the previous run's connections drain
        done
    done
done
} | tee "$OUT"
