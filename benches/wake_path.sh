#!/usr/bin/env bash
# A request's path inside the cache servers, wake-up to reply, from kernel tracepoints:
# weft memcached and memcached -t 1 side by side, alternating, at one rate and connection
# count (by default 1,000 connections at 12,300 req/s, a quarter of memcached's peak there,
# where each request is its own wake-up). Each round starts one server on CPU 0 (SCHED_FIFO,
# as `scale.sh` with ISOLATE=fifo), the C open-loop generator on CPU 1, records REC_S seconds
# of tracepoints on both CPUs once the load has run PRE_S seconds, stops both, and hands the
# trace to benches/wake_path.py (segments from the server's switch-in to its first reply).
#
#   benches/wake_path.sh [ROUNDS]      (env: CONNS=1000 QPS=12300 PRE_S=4 REC_S=2 OUT=docs/bench)
#
# Prints, per round and server, the path's segments (count, p50, mean) and the generator's
# p50 / p90 / p99 for the same run; writes it all to OUT/wake-path-STAMP.txt. Every
# tracepoint a path crosses adds its own cost to the segment it ends (from the switch-in to
# the reply weft's io_uring path crosses six, memcached's system calls five, each about 1 µs
# on the development VM), so the totals carry that difference.
# Needs perf, memcached, cc, python3 and a release build (target/release/weft).
set -euo pipefail
cd "$(dirname "$0")/.."
WEFT=${WEFT:-target/release/weft}
# shellcheck source=benches/bench_common.sh
. benches/bench_common.sh
need "apt-get install -y memcached linux-perf gcc python3" memcached perf cc python3

ROUNDS=${1:-3}
CONNS=${CONNS:-1000}
QPS=${QPS:-12300}
PRE_S=${PRE_S:-4}
REC_S=${REC_S:-2}
OUT=${OUT:-docs/bench}
EVENTS=sched:sched_switch,net:net_dev_queue,io_uring:io_uring_complete,io_uring:io_uring_local_work_run,io_uring:io_uring_submit_req,syscalls:sys_enter_io_uring_enter,syscalls:sys_exit_io_uring_enter,syscalls:sys_exit_epoll_wait,syscalls:sys_enter_read,syscalls:sys_exit_read,syscalls:sys_enter_sendmsg
ulimit -n "$(ulimit -Hn)"

work=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"; true' EXIT
cc -O2 -o "$work/openloop" benches/openloop/openloop.c -lpthread -lm
stamp=$(date -u +%Y-%m-%d-%H%M)
record="$OUT/wake-path-$stamp.txt"
{
  echo "# benches/wake_path.sh $ROUNDS (CONNS=$CONNS QPS=$QPS PRE_S=$PRE_S REC_S=$REC_S), $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(uname -r)"
} | tee "$record"

port=$((31000 + RANDOM % 2000))
# run NAME: one server's round.
run() {
  local name=$1 comm
  port=$((port + 1))
  case $name in
  weft)
    comm=weft-memcached
    taskset -c 0 chrt -f 10 "$WEFT" memcached -u root -p "$port" -l 127.0.0.1 -t 1 -c 20000 -m 1024 -b 16384 >"$work/server.log" 2>&1 &
    ;;
  memcached)
    comm=mc-worker
    taskset -c 0 chrt -f 10 memcached -u root -p "$port" -l 127.0.0.1 -t 1 -c 20000 -m 1024 -b 16384 >"$work/server.log" 2>&1 &
    ;;
  esac
  pid=$!
  for _ in $(seq 50); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
  done
  local duration=$((PRE_S + REC_S + 2))
  taskset -c 1 chrt -f 10 "$work/openloop" --server "127.0.0.1:$port" --connections "$CONNS" --qps "$QPS" \
    --duration "$duration" --warmup 1 --spin-us 0 --value-size 32 --keys 10000 --update-ratio 0.03 >"$work/load.json" &
  local lp=$!
  sleep "$((PRE_S + 1))"
  perf record -q -a -k CLOCK_MONOTONIC -e "$EVENTS" -o "$work/trace.data" -- sleep "$REC_S" 2>/dev/null
  wait "$lp"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  pid=
  perf script -i "$work/trace.data" --ns -F cpu,tid,time,event,trace 2>/dev/null >"$work/trace.txt"
  python3 benches/wake_path.py "$work/trace.txt" --comm "$comm" --label "$name"
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(f\"  generator: {j['actual_qps']} req/s, p50 {j['p50_us']} p90 {j['p90_us']} p99 {j['p99_us']} µs\")" "$work/load.json"
  rm -f "$work/trace.data" "$work/trace.txt"
}

for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) -eq 1 ]; then order="weft memcached"; else order="memcached weft"; fi
  for name in $order; do
    echo "## round $r, $name"
    run "$name"
  done
done 2>&1 | tee -a "$record"
echo "record: $record"
