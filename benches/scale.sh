#!/usr/bin/env bash
# The many-connection benchmark: weft's servers and their peers (memcached -t 1; nginx with one
# worker, sendfile, tcp_nopush, open_file_cache) at 1,000 / 4,000 / 15,360 persistent
# connections, open loop, at 25 / 50 / 75 % of the peer's peak at that connection count.
#
# The load comes from benches/openloop/openloop.c, an independent open-loop generator in C on
# epoll (weft's own generator runs on weft and saturates its core at 15,360 connections; see
# docs/notes/scale.md). Server on CPU 0, load on CPU 1. The peer's peak is measured first at
# each connection count (offered far above capacity; `actual_qps` is what came back inside the
# window); every point is repeated ROUNDS times, servers alternating.
#
# Usage: benches/scale.sh [all|mc|http|variants|generators|episodes|stalls]   (env: ROUNDS=2
#        DURATION=3 LONG_DURATION=20 WARMUP=2 CONNS="1000 4000 15360" WEFT=target/release/weft
#        WEFT_ARGS= MEMCACHED_ARGS= VARIANTS= PEER_TWICE= HALT_POLL_NS= OUT=docs/bench
#        MC_VALUE_BYTES=32 MC_KEYS=10000 MC_UPDATE_RATIO=0.03 GENERATORS="openloop weft-load")
#   all         mc and http with the defaults (io_uring, the servers' default policy)
#   variants    epoll and the core policies beside the defaults and the peer, at each CONNS:PERCENT
#               of VARIANT_POINTS (default "15360:50": 15,360 connections at 50 % of the peer's
#               peak; "1000:25 4000:50 15360:75" takes every connection count and rate once)
#               (PROTOS="mc http" by default; one of them alone, so that WEFT_ARGS can carry
#               cache flags such as `-o no_lru_maintainer,no_lru_crawler`)
#   generators  weft's own generator (`weft load memcached`) against openloop on the same server
#               at the last of CONNS and QPS=50000: memcached and weft, each with every
#               generator of GENERATORS (default "openloop weft-load"; weft-load:US adds `weft
#               load --idle-poll-us US`), the pairs of a round in round_order's order from a
#               random turn
#   episodes    one traced run per server at the last of CONNS (QPS=50000 mc, 38000 http):
#               benches/episodes.py lists the bursts of slow requests and which threads (server,
#               generator, PID 1) ran during each, from benches/thread_times.py samples
#               (traces in TRACES=/tmp/weft-episodes-DATE)
#   stalls      at the last of CONNS and 50 % of the peer's peak, each server stopped for STALL_MS=20
#               every EVERY_MS=500 through the window (SIGSTOP/SIGCONT, benches/stalls.py): the
#               same episode for every server at known times; per round the worst latency
#               around a stall and how long after it the first millisecond served within 1 ms
#               began (its backlog worked off), paired by round
#               (PROTOS="mc http" by default; PEER_TWICE=1 adds the peer's second run; the
#               order of a round as in `all`)
# Prints a table per protocol, then each other server's p99 and p999 over the peer's paired by
# round (servers of a round run back to back, the list started one server further on every
# two rounds and reversed every other round, counted across points, so that each server takes
# each place equally often, with ROUNDS=1 too; a point where the generator was 0.9 busy or
# more is marked generator-bound), and appends every point
# to $OUT/scale-DATE.jsonl, with the server's CPU over the window (server_busy) and the host's
# steal time on CPU 0 and CPU 1 over it (server_cpu_steal_ms, load_cpu_steal_ms: /proc/stat's
# 10 ms ticks, so 0 means under 10 ms), and CPU 0's own busy fraction over it, whoever ran
# (server_cpu0_busy: the idle and steal time /proc/stat counts taken out; the kernel's work a
# server causes while its CPU is otherwise idle, such as timer and network softirqs, is counted
# there and not in the server's own server_busy).
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-3}
# From 10,000 connections on, a window of LONG_DURATION seconds. This VM's control process
# (PID 1, nice -10) scans every process's descriptors about once a second; with the ~30,000
# descriptors of server and generator at 15,360 connections it holds one of the two CPUs for
# 15-50 ms each time, and nearly every request slower than 4 ms there falls in such a burst
# (docs/notes/scale.md, "The sandbox's descriptor scan"). A 3 s window catches 0-4 bursts, so
# p99 moved 2-4x between rounds; 20 s windows average over ~20 of them.
LONG_DURATION=${LONG_DURATION:-20}
# ISOLATE=fifo runs every server and the generator under SCHED_FIFO (chrt -f 10), the generator
# sleeping between arrivals (--spin-us 0) so the real-time throttle never stops it: the
# sandbox's control process then mostly gets only the CPUs' idle time. Off by default (the machine
# as users have it); the notes give both.
ISOLATE=${ISOLATE:-}
case $ISOLATE in "" | fifo) ;; *) echo "scale.sh: ISOLATE is empty or fifo" >&2; exit 2 ;; esac
WARMUP=${WARMUP:-2}
CONNS=${CONNS:-"1000 4000 15360"}
WEFT=${WEFT:-target/release/weft}
# Flags added to every weft server's command line (e.g. WEFT_ARGS="--idle-poll-us 0").
WEFT_ARGS=${WEFT_ARGS:-}
# More weft servers for `all`/`mc`/`http`, run beside the defaults at every point: one word
# each, `weft:` and its flags with commas for spaces (e.g. VARIANTS="weft:--keep-tick-us,0").
VARIANTS=${VARIANTS:-}
# PEER_TWICE=1 runs the peer a second time in every round of `all`/`mc`/`http`/`stalls`, as
# memcached-2 / nginx-2: its figures over the peer's, paired by round like weft's, are what
# this machine's drift and episodes alone make of two runs of one server (an A/A control),
# the floor any comparison of two servers here sits on.
PEER_TWICE=${PEER_TWICE:-}
case $PEER_TWICE in "" | 1) ;; *) echo "scale.sh: PEER_TWICE is empty or 1" >&2; exit 2 ;; esac
# TURN0=N starts the rounds' order at turn N of round_order (a repeat of a table's order);
# empty (the default): a random turn, so each point's rounds take different places in each
# table (first_turn).
TURN0=${TURN0:-}
case $TURN0 in "" | [0-9] | [0-9][0-9]) ;; *) echo "scale.sh: TURN0 is empty or a turn number (0-99)" >&2; exit 2 ;; esac
# The round under way (set around a round's points): its turn and the server's place in it.
round_turn=
round_place=
OUT=${OUT:-docs/bench}
# HALT_POLL_NS=N sets the guest's idle poll (the cpuidle-haltpoll driver's guest_halt_poll_ns:
# how long an idle vCPU polls for work before it halts) for the run, and puts the old value
# back at the end. With it at 0 every idle moment halts the vCPU, the host may give its core
# away, and the next wake-up waits for it (the steal columns); the kernel's default is 200000.
# The parameter only acts while cpuidle-haltpoll is the guest's cpuidle driver, which the
# guest's kernel decides at boot (a KVM hint or cpuidle_haltpoll.force=1): with another
# driver, or none, the file is there and writable and does nothing, so HALT_POLL_NS is refused
# then. Empty (the default): the machine as it is. Every record carries the cpuidle driver
# (cpuidle_driver) and the idle poll in effect (guest_halt_poll_ns; null when the driver is
# not haltpoll). CPUIDLE_DRIVER_FILE and HALT_POLL_FILE move the two sysfs files (for tests).
HALT_POLL_NS=${HALT_POLL_NS:-}
halt_poll=${HALT_POLL_FILE:-/sys/module/haltpoll/parameters/guest_halt_poll_ns}
cpuidle_driver_file=${CPUIDLE_DRIVER_FILE:-/sys/devices/system/cpu/cpuidle/current_driver}
cpuidle_driver=$(cat "$cpuidle_driver_file" 2>/dev/null || echo unknown)
case $HALT_POLL_NS in
"") ;;
*[!0-9]*) echo "scale.sh: HALT_POLL_NS is a whole number of ns" >&2; exit 2 ;;
*)
  [ "$cpuidle_driver" = haltpoll ] || {
    echo "scale.sh: HALT_POLL_NS needs the cpuidle-haltpoll driver, and this guest's cpuidle driver is '$cpuidle_driver' ($cpuidle_driver_file): guest_halt_poll_ns would do nothing. Run without HALT_POLL_NS (the guest then halts at once when idle; every record says so)" >&2
    exit 2
  }
  [ -w "$halt_poll" ] || { echo "scale.sh: HALT_POLL_NS needs the cpuidle-haltpoll driver ($halt_poll not writable)" >&2; exit 2; }
  ;;
esac
stamp=$(date +%Y-%m-%d-%H%M)
record="$OUT/scale-$stamp.jsonl"
work=$(mktemp -d)
chmod 755 "$work"
old_halt_poll=
# On the way out (an interrupt too) stop the server of the point under way; a generator
# started by it ends with its own window.
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"; if [ -n "$old_halt_poll" ]; then echo "$old_halt_poll" >"$halt_poll"; fi' EXIT
trap 'exit 130' INT TERM
if [ -n "$HALT_POLL_NS" ]; then
  old_halt_poll=$(cat "$halt_poll")
  echo "$HALT_POLL_NS" >"$halt_poll"
fi

for tool in memcached nginx cc; do
  command -v "$tool" >/dev/null || { echo "scale.sh: $tool is missing (apt-get install memcached nginx gcc)" >&2; exit 2; }
done
[ -x "$WEFT" ] || { echo "scale.sh: $WEFT missing: cargo build --release -p weft-cli" >&2; exit 2; }
ulimit -n "$(ulimit -Hn)"
[ "$(ulimit -n)" -ge 16000 ] || { echo "scale.sh: need ulimit -n >= 16000 (hard limit $(ulimit -Hn))" >&2; exit 2; }
cc -O2 -o "$work/openloop" benches/openloop/openloop.c -lpthread -lm

# Nothing else may be using the two CPUs: a stray busy process (a forgotten client loop, a
# build) on CPU 0 takes the server's idle time and moves every figure (once: 0.67 -> 0.80 of
# a core for the same server and load). One second of /proc/stat before anything starts.
busy_cpus=$(python3 - <<'PY'
import time
def read():
    out = {}
    for line in open("/proc/stat"):
        f = line.split()
        if f[0] in ("cpu0", "cpu1"):
            v = list(map(int, f[1:]))
            out[f[0]] = (sum(v), v[3] + v[4])
    return out
a = read(); time.sleep(1); b = read()
for cpu in sorted(b):
    total = b[cpu][0] - a[cpu][0]
    busy = 1 - (b[cpu][1] - a[cpu][1]) / total if total else 0.0
    if busy > 0.1:
        print(f"{cpu} {busy:.2f}")
PY
)
if [ -n "$busy_cpus" ]; then
  echo "# warning: busy before the benchmark started (CPU, fraction): $(echo $busy_cpus); the busiest processes:" >&2
  ps -eo pid,psr,pcpu,etime,comm --sort=-pcpu | head -6 | sed 's/^/#   /' >&2
fi

# The static file; nginx's configuration comes from benches/bench_common.sh.
source benches/bench_common.sh
mkdir -p "$work/www"
head -c 4096 /dev/urandom >"$work/www/4k.bin"

# weft_flags NAME -> the flags a weft server's name carries: "weft --io epoll" or
# "weft:--io,epoll" -> "--io epoll".
weft_flags() {
  local flags=${1#weft}
  flags=${flags#:}
  echo "${flags//,/ }"
}

# server_cmd PROTO NAME PORT -> the command line
server_cmd() {
  local proto=$1 name=$2 port=$3
  case "$proto/$name" in
  mc/memcached | mc/memcached-2) echo "memcached -u root -p $port -l 127.0.0.1 -t 1 -c 20000 -m 1024 -b 16384 ${MEMCACHED_ARGS:-}" ;;
  mc/weft*) echo "$WEFT memcached -u root -p $port -l 127.0.0.1 -t 1 -c 20000 -m 1024 -b 16384 $(weft_flags "$name") $WEFT_ARGS" ;;
  http/nginx | http/nginx-2)
    nginx_conf "$port" "$work" >"$work/nginx-$port.conf"
    echo "nginx -c $work/nginx-$port.conf"
    ;;
  http/weft*) echo "$WEFT http --root $work/www --listen 127.0.0.1:$port $(weft_flags "$name") $WEFT_ARGS" ;;
  esac
}

# CPU ticks of a server: the process and its children (nginx's worker).
cpu_ticks() {
  local sum=0 p
  for p in $1 $(pgrep -P "$1" || true); do
    sum=$((sum + $(awk '{print $14+$15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
  done
  echo "$sum"
}

# steal_ticks CPU: the time the host ran something else while this vCPU had work (the
# eighth figure of its /proc/stat line, in 10 ms ticks).
steal_ticks() {
  awk -v c="cpu$1" '$1 == c {print $9}' /proc/stat
}

# idle_ticks CPU -> that CPU's idle and I/O-wait ticks so far (/proc/stat, 10 ms units).
idle_ticks() {
  awk -v c="cpu$1" '$1 == c {print $5 + $6}' /proc/stat
}

# window_busy PID PORT CONNS FILE: once CONNS connections to PORT are established, waits out the
# warm-up and writes the server's busy fraction over the measured window to FILE (set-up and
# drain left out, so it reads as CPU per request).
window_busy() {
  local pid=$1 port=$2 conns=$3 file=$4 c0 c1 t0 t1 s00 s01 s10 s11 i0 i1
  for _ in $(seq 1200); do
    [ "$(ss -tnH state established "( sport = :$port )" 2>/dev/null | wc -l)" -ge "$conns" ] && break
    sleep 0.05
  done
  sleep "$WARMUP"
  c0=$(cpu_ticks "$pid")
  s00=$(steal_ticks 0) s10=$(steal_ticks 1) i0=$(idle_ticks 0)
  t0=$(date +%s.%N)
  sleep "$DURATION"
  c1=$(cpu_ticks "$pid")
  s01=$(steal_ticks 0) s11=$(steal_ticks 1) i1=$(idle_ticks 0)
  t1=$(date +%s.%N)
  python3 -c "t=$t1-$t0; print(round(($c1-$c0)/100/t,3), ($s01-$s00)*10, ($s11-$s10)*10, round(max(0.0, 1-($i1-$i0+$s01-$s00)/100/t),3))" >"$file"
}

port=30000
# mc_workload GENERATOR -> the memcached workload's flags in GENERATOR's spelling (openloop,
# or weft-load for `weft load memcached`): values of MC_VALUE_BYTES (32, openloop's default),
# MC_KEYS keys, MC_UPDATE_RATIO sets. Both generators get the same requests: until 2026-11-30
# `weft load` sent its own default, 200-byte values, against openloop's 32.
mc_workload() {
  local bytes=${MC_VALUE_BYTES:-32} keys=${MC_KEYS:-10000} sets=${MC_UPDATE_RATIO:-0.03}
  case $1 in
  openloop) echo "--value-size $bytes --keys $keys --update-ratio $sets" ;;
  weft-load*) echo "--value-size fixed:$bytes --keys $keys --update-ratio $sets" ;;
  esac
}

# point PROTO NAME CONNS QPS [GENERATOR] -> one JSON object on stdout (and in the record).
# GENERATOR: openloop (default), weft-load (weft's own, memcached protocol only), weft-load:US
# (the same with --idle-poll-us US) or trace:FILE (openloop writing every request to FILE,
# thread run times in FILE.threads).
point() {
  local proto=$1 name=$2 conns=$3 qps=$4 generator=${5:-openloop}
  local DURATION=$DURATION
  [ "$conns" -ge 10000 ] && DURATION=$LONG_DURATION
  local rt=() spin=()
  [ "$ISOLATE" = fifo ] && rt=(chrt -f 10) && spin=(--spin-us 0)
  port=$((port + 1))
  local cmd
  cmd=$(server_cmd "$proto" "$name" "$port")
  # shellcheck disable=SC2086
  taskset -c 0 "${rt[@]}" $cmd >"$work/server.log" 2>&1 &
  local pid=$!
  for _ in $(seq 50); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
  done
  local extra=()
  [ "$proto" = http ] && extra=(--proto http --path /4k.bin)
  # shellcheck disable=SC2207
  [ "$proto" = mc ] && extra=($(mc_workload openloop))
  local out busy_pid
  rm -f "$work/busy"
  window_busy "$pid" "$port" "$conns" "$work/busy" &
  busy_pid=$!
  case $generator in
  openloop)
    out=$(taskset -c 1 "${rt[@]}" "$work/openloop" --server "127.0.0.1:$port" --connections "$conns" \
      --qps "$qps" --duration "$DURATION" --warmup "$WARMUP" "${spin[@]}" "${extra[@]}" || echo '{}')
    ;;
  trace:*)
    # Every thread's run time (server, generator, PID 1) sampled beside the trace, from when
    # the generator's worker thread exists (its connections are open) to past the window.
    local file=${generator#trace:} gen_pid
    taskset -c 1 "${rt[@]}" "$work/openloop" --server "127.0.0.1:$port" --connections "$conns" \
      --qps "$qps" --duration "$DURATION" --warmup "$WARMUP" --trace "$file" "${spin[@]}" "${extra[@]}" \
      >"$work/trace.json" &
    gen_pid=$!
    for _ in $(seq 1200); do
      [ "$(ls "/proc/$gen_pid/task" 2>/dev/null | wc -l)" -ge 2 ] && break
      sleep 0.05
    done
    # On the load's CPU: what the sampler costs falls on the generator (its send lag shows it),
    # not on the server whose latency structure is being traced.
    taskset -c 1 chrt -f 20 python3 benches/thread_times.py --until-gone "$gen_pid" "$file.threads" "$(python3 -c "print($WARMUP + $DURATION + 60)")" \
      "$pid" "$gen_pid" || true
    wait "$gen_pid" || true
    out=$(cat "$work/trace.json")
    [ -n "$out" ] || out='{}'
    ;;
  stall:*)
    # openloop tracing every request; once its connections are open, the server stopped for
    # STALL_MS every EVERY_MS until the generator exits (stalls outside the window, in the
    # warm-up or the drain, are left out of the report).
    local file=${generator#stall:} gen_pid stop_pid
    taskset -c 1 "${rt[@]}" "$work/openloop" --server "127.0.0.1:$port" --connections "$conns" \
      --qps "$qps" --duration "$DURATION" --warmup "$WARMUP" --trace "$file" "${spin[@]}" "${extra[@]}" \
      >"$work/trace.json" &
    gen_pid=$!
    # Started now, so that its own start-up falls in the connection set-up; it waits for the
    # generator to hold a descriptor per connection. nginx serves from its worker: stop the
    # process and its children.
    taskset -c 1 python3 benches/stalls.py stop "$(echo "$pid" $(pgrep -P "$pid" || true) | tr ' ' ,)" \
      "$STALL_MS" "$EVERY_MS" 0 1 \
      --after-fds "$gen_pid" "$conns" >"$file.stalls" &
    stop_pid=$!
    wait "$gen_pid" || true
    wait "$stop_pid" || true
    out=$(python3 -c "import json,subprocess,sys
d = json.load(open(sys.argv[1]))
r = subprocess.run(['python3', 'benches/stalls.py', 'report', sys.argv[2], sys.argv[2] + '.stalls', '--json'], capture_output=True, text=True)
if r.returncode == 0:
    d.update(json.loads(r.stdout))
print(json.dumps(d))" "$work/trace.json" "$file" 2>/dev/null || echo '{}')
    ;;
  weft-load | weft-load:*)
    # The same figures under openloop's names, so the table reads both.
    local poll=()
    [ "$generator" != weft-load ] && poll=(--idle-poll-us "${generator#weft-load:}")
    # shellcheck disable=SC2046
    out=$(taskset -c 1 "${rt[@]}" "$WEFT" load memcached --server "127.0.0.1:$port" --connections "$conns" \
      --qps "$qps" --duration "$DURATION" --warmup "$WARMUP" "${spin[@]}" "${poll[@]}" $(mc_workload weft-load) --json |
      python3 -c "import json,sys; d=json.load(sys.stdin); l=d['latency_us']; g=d.get('generator_send_lag_us') or {}; print(json.dumps(dict(proto='mc', connections=$conns, offered_qps=$qps, actual_qps=d['actual_qps'], p50_us=l['p50'], p99_us=l['p99'], p999_us=l['p999'], send_lag_p99_us=g.get('p99'), timeouts=d['timeouts'], errors=d['errors'], generator_busy=d.get('generator_utilisation'), generator_cpu_us_per_request=d.get('generator_cpu_us_per_request'), generator_sleeps_per_request=d.get('generator_sleeps_per_request'), generator_idle_poll_us=d.get('generator_idle_poll_us'))))" ||
      echo '{}')
    ;;
  esac
  # A generator that failed leaves no window to measure.
  [ "$out" = '{}' ] && kill "$busy_pid" 2>/dev/null
  wait "$busy_pid" 2>/dev/null || true
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  local busy=None steal0=None steal1=None cpu0=None halt=None gen_name=${generator%%:*}
  # A trace's or a stop's file is not the generator's name; weft-load's idle poll is.
  case $generator in weft-load:*) gen_name=$generator ;; esac
  # The idle poll in effect: only the haltpoll driver reads guest_halt_poll_ns.
  [ "$cpuidle_driver" = haltpoll ] && [ -r "$halt_poll" ] && halt=$(cat "$halt_poll")
  [ -s "$work/busy" ] && read -r busy steal0 steal1 cpu0 <"$work/busy"
  out=$(python3 -c "import json,sys; d=json.loads(sys.argv[1]); d.update(server='$name', generator='$gen_name', server_busy=$busy, server_cpu0_busy=$cpu0, server_cpu_steal_ms=$steal0, load_cpu_steal_ms=$steal1, guest_halt_poll_ns=$halt, cpuidle_driver='$cpuidle_driver', stamp='$stamp', isolate='$ISOLATE', duration=$DURATION, turn=${round_turn:-None}, place=${round_place:-None}); print(json.dumps(d))" "$out")
  echo "$out" >>"$record"
  echo "$out"
}

# round_order TURN NAME... -> the names in the order round TURN runs them: the list started
# TURN / 2 places further on (wrapping), reversed when TURN is odd.
round_order() {
  local turn=$1
  shift
  local names=("$@")
  local n=${#names[@]}
  local start=$(((turn / 2) % n))
  local order=("${names[@]:start}" "${names[@]:0:start}")
  if [ $((turn % 2)) -eq 1 ]; then
    local i
    for ((i = n - 1; i >= 0; i--)); do printf '%s ' "${order[i]}"; done
  else
    printf '%s ' "${order[@]}"
  fi
  echo
}

# first_turn NAME... -> the turn a table's first round takes: TURN0 when set, else one of the
# 2 x servers turns after which round_order repeats, at random. A point has ROUNDS rounds
# (4 of 3 servers cannot share the places out), so a table started at turn 0 gave each point
# the same places in every table: weft never in the middle at 1,000 connections and 50 % in
# 38 tables, memcached there half the time (docs/notes/scale.md, forty-first session). Every
# point records its round's turn and the server's place in it.
first_turn() {
  if [ -n "$TURN0" ]; then
    echo "$TURN0"
  else
    echo $((RANDOM % (2 * $#)))
  fi
}

# one_round TURN PROTO CONNS QPS FRACTION PEAK NAME... : one round of a point, every server
# once, in round_order's order for TURN, each row appended to the table with the point's
# fraction, the peer's peak, the round's turn and the server's place in it. Names may hold
# spaces ("weft --io epoll"): the order is taken over their indices.
one_round() {
  local turn=$1 proto=$2 conns=$3 qps=$4 frac=$5 peak=$6
  shift 6
  local names=("$@") i
  round_turn=$turn round_place=0
  # shellcheck disable=SC2046
  for i in $(round_order "$turn" $(seq 0 $((${#names[@]} - 1)))); do
    point "$proto" "${names[$i]}" "$conns" "$qps" | python3 -c "import json,sys; d=json.load(sys.stdin); d.update(fraction=$frac, peer_peak=$peak); print(json.dumps(d))" >>"$work/table.jsonl"
    round_place=$((round_place + 1))
  done
  round_turn= round_place=
}

# generator_round TURN CONNS QPS : one round of `generators`: memcached and weft each loaded
# by every generator of GENERATORS (default openloop and `weft load`; weft-load:US is `weft
# load --idle-poll-us US`), the pairs in round_order's order for TURN, each row named
# "SERVER / GENERATOR" with the round's turn and the pair's place in it.
generator_round() {
  local turn=$1 conns=$2 qps=$3 i server gen pairs=()
  for server in memcached weft; do
    for gen in ${GENERATORS:-openloop weft-load}; do pairs+=("$server $gen"); done
  done
  round_turn=$turn round_place=0
  # shellcheck disable=SC2046
  for i in $(round_order "$turn" $(seq 0 $((${#pairs[@]} - 1)))); do
    # shellcheck disable=SC2086
    set -- ${pairs[$i]}
    point mc "$1" "$conns" "$qps" "$2" | python3 -c "import json,sys; d=json.load(sys.stdin); d.update(fraction=0, peer_peak=0, server=d['server'] + ' / ' + d['generator']); print(json.dumps(d))" >>"$work/table.jsonl"
    round_place=$((round_place + 1))
  done
  round_turn= round_place=
}

# sweep PROTO PEER "NAMES..." : peak of the peer, then 25/50/75 % for every server
sweep() {
  local proto=$1 peer=$2 names=$3
  # Rounds counted across every point: each round starts the list one server further on
  # (every two rounds) and every other one runs it in the opposite order, so each server
  # takes each place in a round equally often (over 2 x servers rounds), and what one run
  # leaves behind for the next, or a drift within a round, falls on each server alike, also
  # with ROUNDS=1 (where the order then changes point by point). Before 2026-11-27 23:00 the
  # list was only reversed, so the middle server of three was always in the middle: the
  # peer's first run, whose rank among a round's three runs then strayed from chance's
  # (docs/notes/scale.md, "An eleventh tuned cache table").
  local turn
  # shellcheck disable=SC2086
  turn=$(first_turn $names)
  for conns in $CONNS; do
    local peak peak_point
    peak_point=$(point "$proto" "$peer" "$conns" 400000)
    peak=$(python3 -c "import json,sys; print(int(json.loads(sys.argv[1])['actual_qps']))" "$peak_point")
    echo "# $proto: $peer peak at $conns connections: $peak req/s" >&2
    # One generator core against one server core: when the generator is the busier of the two,
    # the "peak" is partly the generator's, and points near it queue in the generator too.
    # (Only measurable when it sleeps between arrivals, ISOLATE=fifo; otherwise it polls.)
    [ "$ISOLATE" = fifo ] && python3 -c "import json,sys; d=json.loads(sys.argv[1]); g=d.get('generator_busy') or 0; s=d.get('server_busy') or 0
if g >= 0.9 and g >= s: print(f'# warning: the generator was busy {g:.2f} of its CPU (the server {s:.2f}): this peak is partly the generator\'s; see the generator busy column', file=sys.stderr)" "$peak_point"
    for frac in 25 50 75; do
      local qps=$((peak * frac / 100))
      for _ in $(seq "$ROUNDS"); do
        # shellcheck disable=SC2086
        one_round "$turn" "$proto" "$conns" "$qps" "$frac" "$peak" $names
        turn=$((turn + 1))
      done
    done
  done
}

# variants_sweep PROTO : the `variants` mode for one protocol: at each CONNS:PERCENT of
# VARIANT_POINTS (default "15360:50"; "1000:25 4000:50 15360:75" takes each connection count
# and each rate once), ROUNDS rounds of the peer and weft with each backend and core policy,
# at PERCENT of the peer's peak at CONNS (measured once per connection count).
variants_sweep() {
  local proto=$1 peer=memcached points=${VARIANT_POINTS:-15360:50} point_spec conns frac qps turn
  [ "$proto" = http ] && peer=nginx
  local -A peaks=()
  local names=("$peer" weft "weft --io epoll" "weft --scheduler work-stealing"
    "weft --scheduler relaxed-fifo" "weft --scheduler lifo-stealing" "weft --scheduler global-fifo")
  # As in `sweep`: round_order from a random turn. Until 2026-11-30 every other round was
  # only reversed, so the middle one of the seven (`--scheduler relaxed-fifo`) ran fourth in
  # every round and the others each took the same two places in every table.
  turn=$(first_turn "${names[@]}")
  for point_spec in $points; do
    if ! [[ $point_spec =~ ^[0-9]+:[0-9]+$ ]]; then
      echo "scale.sh: VARIANT_POINTS takes CONNS:PERCENT words (e.g. 1000:25), not '$point_spec'" >&2
      exit 2
    fi
  done
  for point_spec in $points; do
    conns=${point_spec%%:*} frac=${point_spec##*:}
    if [ -z "${peaks[$conns]:-}" ]; then
      peaks[$conns]=$(point "$proto" "$peer" "$conns" 400000 | python3 -c "import json,sys; print(int(json.load(sys.stdin)['actual_qps']))")
      echo "# $proto: $peer peak at $conns connections: ${peaks[$conns]} req/s" >&2
    fi
    qps=$((peaks[$conns] * frac / 100))
    for _ in $(seq "$ROUNDS"); do
      one_round "$turn" "$proto" "$conns" "$qps" "$frac" "${peaks[$conns]}" "${names[@]}"
      turn=$((turn + 1))
    done
  done
}

table() {
  python3 - "$work/table.jsonl" <<'EOF'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
keys = sorted({(r['proto'], r['connections'], r['fraction']) for r in rows})
servers = []
for r in rows:
    if r['server'] not in servers:
        servers.append(r['server'])
def spread(vals):
    vals = sorted(vals)
    return f"{vals[0]/1000:.1f}–{statistics.median(vals)/1000:.1f}–{vals[-1]/1000:.1f}"
print("| protocol | connections | % of peer peak (req/s) | server | p50 ms | p99 ms (min–med–max) | p999 ms (min–med–max) | actual req/s | server busy in the window | generator busy (med) | generator send lag p99 ms (med) | generator read wait p99 ms (med) | pure ACKs a request, generator / server (med) |")
print("|---|---:|---|---|---:|---|---|---:|---:|---:|---:|---:|---:|")
for p, c, f in keys:
    for s in servers:
        rs = [r for r in rows if (r['proto'], r['connections'], r['fraction'], r['server']) == (p, c, f, s)]
        if not rs:
            continue
        rate = f"{f} % ({int(rs[0]['offered_qps'])})" if f else f"{int(rs[0]['offered_qps'])}"
        lags = [r['send_lag_p99_us'] for r in rs if r.get('send_lag_p99_us') is not None]
        lag = f"{statistics.median(lags)/1000:.2f}" if lags else "–"
        busies = [r['server_busy'] for r in rs if r.get('server_busy') is not None]
        busy = f"{statistics.median(busies):.2f}" if busies else "–"
        # Without ISOLATE=fifo the generator polls between close arrivals: busy means nothing.
        gens = [r['generator_busy'] for r in rs if r.get('generator_busy') is not None and r.get('isolate') == 'fifo']
        gen = f"{statistics.median(gens):.2f}" if gens else "–"
        waits = [r['read_wait_p99_us'] for r in rs if r.get('read_wait_p99_us') is not None]
        wait = f"{statistics.median(waits)/1000:.2f}" if waits else "–"
        # Loopback runs a segment's TCP input on the sender's core: the generator's pure ACKs
        # are work on its core that the server's replies do not cost the server's.
        acks = [(r['generator_pure_acks_per_request'], r['server_pure_acks_per_request']) for r in rs
                if r.get('generator_pure_acks_per_request') is not None and r.get('server_pure_acks_per_request') is not None]
        ack = (f"{statistics.median(a for a, _ in acks):.2f} / {statistics.median(b for _, b in acks):.2f}"
               if acks else "–")
        print(f"| {p} | {c} | {rate} | {s} | {statistics.median(r['p50_us'] for r in rs)/1000:.2f} | "
              f"{spread([r['p99_us'] for r in rs])} | {spread([r['p999_us'] for r in rs])} | "
              f"{int(statistics.median(r['actual_qps'] for r in rs))} | {busy} | {gen} | {lag} | {wait} | {ack} |")
# Paired by round: the servers of one round ran back to back, so the ratio of their p99s
# within a round cancels most of the drift between rounds that the medians above carry.
peers = {'mc': 'memcached', 'http': 'nginx'}
pairs = []
for p, c, f in keys:
    at = [r for r in rows if (r['proto'], r['connections'], r['fraction']) == (p, c, f)]
    peer = [r for r in at if r['server'] == peers.get(p)]
    for s in servers:
        if s == peers.get(p):
            continue
        mine = [r for r in at if r['server'] == s]
        ratios = [m['p99_us'] / q['p99_us'] for m, q in zip(mine, peer) if q.get('p99_us')]
        tails = sorted(m['p999_us'] / q['p999_us'] for m, q in zip(mine, peer) if q.get('p999_us'))
        # The generator's busiest round at this point (either server): at 0.9 or more it
        # queues requests itself, and the ratio measures it as much as the servers.
        gens = [r['generator_busy'] for r in mine + peer if r.get('generator_busy') is not None and r.get('isolate') == 'fifo']
        if ratios:
            pairs.append((p, c, f, s, sorted(ratios), tails, max(gens) if gens else None))
if pairs:
    print()
    print("| protocol | connections | % of peer peak | server | p99 / peer's p99, same round (min–med–max) | rounds at or under the peer | p999 / peer's (med) | rounds with p999 over 2× the peer's | generator busy (max) |")
    print("|---|---:|---|---|---|---:|---:|---:|---:|")
    for p, c, f, s, r, t, g in pairs:
        under = sum(1 for x in r if x <= 1.0)
        tail = f"{statistics.median(t):.2f}" if t else "–"
        over = f"{sum(1 for x in t if x > 2)} of {len(t)}" if t else "–"
        gen = "–" if g is None else (f"{g:.2f} (generator-bound)" if g >= 0.9 else f"{g:.2f}")
        print(f"| {p} | {c} | {f} % | {s} | {r[0]:.2f}–{statistics.median(r):.2f}–{r[-1]:.2f} | {under} of {len(r)} | {tail} | {over} | {gen} |")
EOF
}

mkdir -p "$OUT"
case "$what" in
all | mc | http)
  again_mc="" again_http=""
  [ -n "$PEER_TWICE" ] && again_mc=memcached-2 again_http=nginx-2
  [ "$what" != http ] && sweep mc memcached "$again_mc memcached weft $VARIANTS"
  [ "$what" != mc ] && sweep http nginx "$again_http nginx weft $VARIANTS"
  ;;
variants)
  for proto in ${PROTOS:-mc http}; do
    variants_sweep "$proto"
  done
  ;;
stalls)
  STALL_MS=${STALL_MS:-20}
  EVERY_MS=${EVERY_MS:-500}
  conns=${CONNS##* }
  traces=${TRACES:-/tmp/weft-stalls-$stamp} # large: not in the record directory
  mkdir -p "$traces"
  for proto in ${PROTOS:-mc http}; do
    peer=memcached
    [ "$proto" = http ] && peer=nginx
    peak=$(point "$proto" "$peer" "$conns" 400000 | python3 -c "import json,sys; print(int(json.load(sys.stdin)['actual_qps']))")
    qps=$((peak / 2))
    names=("$peer" weft)
    [ -n "$PEER_TWICE" ] && names+=("$peer-2")
    turn=$(first_turn "${names[@]}")
    for r in $(seq "$ROUNDS"); do
      # As in `sweep`: each server takes each place of a round equally often.
      round_turn=$turn round_place=0
      for name in $(round_order "$turn" "${names[@]}"); do
        point "$proto" "$name" "$conns" "$qps" "stall:$traces/$proto-$name-$r" |
          python3 -c "import json,sys; d=json.load(sys.stdin); d.update(fraction=50, peer_peak=$peak); print(json.dumps(d))" >>"$work/table.jsonl"
        round_place=$((round_place + 1))
      done
      turn=$((turn + 1))
      round_turn= round_place=
    done
  done
  python3 - "$work/table.jsonl" "$STALL_MS" "$EVERY_MS" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
peers = {'mc': 'memcached', 'http': 'nginx'}
print(f"Stalls of {sys.argv[2]} ms every {sys.argv[3]} ms inside the window; per round the medians over its stalls.")
print("| protocol | connections | server | rounds | p99 ms (med) | p999 ms (med) | worst around a stall, ms (min–med–max) | quiet after, ms (min–med–max) | quiet after / peer's, same round (min–med–max; rounds at or under) | p999 / peer's, same round (min–med–max) |")
print("|---|---:|---|---:|---:|---:|---|---|---|---|")
def spread(v):
    v = sorted(v)
    return f"{v[0]:.1f}–{statistics.median(v):.1f}–{v[-1]:.1f}" if v else "–"
for proto in ('mc', 'http'):
    at = [r for r in rows if r['proto'] == proto and 'worst_ms_median' in r]
    peer = [r for r in at if r['server'] == peers[proto]]
    for name in dict.fromkeys(r['server'] for r in at):
        rs = [r for r in at if r['server'] == name]
        ratio = [m['p999_us'] / q['p999_us'] for m, q in zip(rs, peer) if q.get('p999_us')]
        # The first quiet millisecond after a stall (benches/stalls.py): the backlog worked off.
        drains = [m['quiet_ms_median'] / q['quiet_ms_median'] for m, q in zip(rs, peer) if q.get('quiet_ms_median')]
        drain = f"{spread(drains)}; {sum(1 for x in drains if x <= 1.0)} of {len(drains)}" if drains else "–"
        mine = name == peers[proto]
        print(f"| {proto} | {rs[0]['connections']} | {name} | {len(rs)} | {statistics.median(r['p99_us'] for r in rs)/1000:.2f} | "
              f"{statistics.median(r['p999_us'] for r in rs)/1000:.2f} | {spread([r['worst_ms_median'] for r in rs])} | "
              f"{spread([r['quiet_ms_median'] for r in rs])} | {'–' if mine else drain} | {'–' if mine else spread(ratio)} |")
EOF
  ;;
generators)
  qps=${QPS:-50000}
  conns=${CONNS##* }
  # As in `sweep`: round_order from a random turn (until 2026-11-30 every round ran the four
  # pairs in one order, memcached with openloop first and weft with `weft load` last).
  turn=$(first_turn 0 1 2 3)
  for _ in $(seq "$ROUNDS"); do
    generator_round "$turn" "$conns" "$qps"
    turn=$((turn + 1))
  done
  ;;
episodes)
  traces=${TRACES:-/tmp/weft-episodes-$stamp}   # large: not in the record directory
  conns=${CONNS##* }
  mkdir -p "$traces"
  for spec in "mc memcached ${QPS:-50000}" "mc weft ${QPS:-50000}" "http nginx ${HTTP_QPS:-38000}" "http weft ${HTTP_QPS:-38000}"; do
    set -- $spec
    file="$traces/$1-$2.trace"
    point "$1" "$2" "$conns" "$3" "trace:$file" | python3 -c "import json,sys; d=json.load(sys.stdin); d.update(fraction=0, peer_peak=0); print(json.dumps(d))" >>"$work/table.jsonl"
    echo "== $1 / $2 at $3 req/s" >&2
    threads_arg=()
    [ -f "$file.threads" ] && threads_arg=(--threads "$file.threads")
    python3 benches/episodes.py "$file" "${threads_arg[@]}" >&2
  done
  ;;
*)
  echo "usage: benches/scale.sh [all|mc|http|variants|generators|episodes|stalls]" >&2
  exit 2
  ;;
esac
table
echo "raw points: $record" >&2
