#!/usr/bin/env bash
# Runs the side-by-side comparisons of the issues' targets, one after the other, and keeps
# what each printed under docs/bench/, in files named with the run's UTC date and time
# (NAME-YYYY-MM-DD-HHMM.EXT, one STAMP per invocation), so a new run never overwrites the
# records older paragraphs of docs/BENCHMARKS.md quote. The NAMEs:
#   servers-memcached.txt  weft bench memcached (weft memcached vs memcached -t 1)
#   servers-memcached-capped.txt  the same with both servers capped at 40 % of their core (root)
#   servers-memory.txt     weft bench memory (RSS under -m 64)
#   servers-http.txt       weft bench http (weft http vs nginx, one worker)
#   servers-http-capped.txt  the same with both servers capped at 40 % of their core (root:
#                          a cgroup CPU quota), so that they, not the one load core, saturate
#   servers-echo.jsonl     weft bench echo at 1,000 connections: uring, epoll, tokio, alternating
#   servers-echo-summary.txt  their ratios to tokio per round, split by the host's vCPU placement
#   servers-echo-capped.jsonl  the same with the server capped at 70 % and at 40 % of its core (root)
#   servers-load.txt       weft bench load (the generators against wrk / memcaslap; their CPU)
#   servers-memcaslap.txt  the cache's peak by an independent generator (benches/memcaslap_peak.sh:
#                          memcaslap, 16 and 64 connections, one request outstanding each)
#   servers-pipelined.txt  the cache's pipelined peak (item 4: 16 connections, depth 4, capped;
#                          root): weft bench memcached with meta and classic gets, then the
#                          independent Python client (benches/pipelined_peak.sh)
#   targets.jsonl          cycle, yield, churn at 2 processors: best policies and tokio, alternating
#                          (cycle also with its rings placed on processors, --place-rings)
#   targets-summary.txt    their ratios per round, split by the host's vCPU placement
# Every server is pinned to CPU 0 and every load generator to CPU 1 by the commands
# themselves. Run it on a quiet machine; it takes about 28 minutes.
#
# Usage: benches/servers.sh [memcached|memcached-capped|memory|http|http-capped|echo|echo-capped|load|memcaslap|pipelined|targets ...]
#        (default: all but the capped parts and pipelined, which need root)
set -euo pipefail

cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
cargo build --release -q -p weft-cli --bin weft
WEFT=${CARGO_TARGET_DIR:-target}/release/weft
OUT=docs/bench
mkdir -p "$OUT"
STAMP=${STAMP:-$(date -u '+%Y-%m-%d-%H%M')}
# The record NAME.EXT of this run: docs/bench/NAME-STAMP.EXT.
rec() { echo "$OUT/${1%.*}-$STAMP.${1##*.}"; }
stamp() { echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD), $*"; }

run_memcached() {
    { stamp "weft bench memcached --runs 5"; "$WEFT" bench memcached --runs 5; } |
        tee "$(rec servers-memcached.txt)"
}
run_memcached_capped() {
    { stamp "weft bench memcached --server-cpu-pct 40 --runs 5"
      "$WEFT" bench memcached --server-cpu-pct 40 --runs 5; } |
        tee "$(rec servers-memcached-capped.txt)"
}
run_memory() {
    { stamp "weft bench memory"; "$WEFT" bench memory; } | tee "$(rec servers-memory.txt)"
}
run_http() {
    { stamp "weft bench http --repeat 3 --duration 5"; "$WEFT" bench http --repeat 3 --duration 5; } |
        tee "$(rec servers-http.txt)"
}
run_http_capped() {
    { stamp "weft bench http --server-cpu-pct 40 --repeat 3 --duration 5"
      "$WEFT" bench http --server-cpu-pct 40 --repeat 3 --duration 5; } |
        tee "$(rec servers-http-capped.txt)"
}
run_echo_capped() {
    : >"$(rec servers-echo-capped.jsonl)"
    for pct in 70 40; do
        for _ in 1 2 3; do
            for backend in uring epoll tokio; do
                "$WEFT" bench echo --backend "$backend" --connections 1000 --message-size 64 \
                    --duration 5 --server-cpu-pct "$pct" --json |
                    tee -a "$(rec servers-echo-capped.jsonl)"
            done
        done
    done
}
run_echo() {
    : >"$(rec servers-echo.jsonl)"
    for _ in 1 2 3 4 5; do
        for backend in uring epoll tokio; do
            "$WEFT" bench echo --backend "$backend" --connections 1000 --message-size 64 \
                --duration 5 --json | tee -a "$(rec servers-echo.jsonl)"
        done
    done
    python3 benches/echo_summary.py "$(rec servers-echo.jsonl)" | tee "$(rec servers-echo-summary.txt)"
}
run_load() {
    { stamp "weft bench load"; "$WEFT" bench load; } | tee "$(rec servers-load.txt)"
}
run_pipelined() {
    {
        for proto in meta classic; do
            stamp "weft bench memcached --connections 16 --depth 4 --runs 3 --server-cpu-pct 40 --protocol $proto"
            "$WEFT" bench memcached --connections 16 --depth 4 --runs 3 --server-cpu-pct 40 \
                --protocol "$proto"
        done
        benches/pipelined_peak.sh 4
    } | tee "$(rec servers-pipelined.txt)"
}
run_memcaslap() {
    benches/memcaslap_peak.sh 6 16 64 | tee "$(rec servers-memcaslap.txt)"
}
run_targets() {
    : >"$(rec targets.jsonl)"
    for _ in 1 2 3 4 5; do
        for bench in cycle yield churn; do
            for policy in lifo-stealing work-stealing ws-overflow-locked; do
                "$WEFT" bench sched "$bench" --scheduler "$policy" --processors 2 --duration 2 \
                    --json | tee -a "$(rec targets.jsonl)"
            done
            if [ "$bench" = cycle ]; then
                "$WEFT" bench sched cycle --place-rings --processors 2 --duration 2 --json |
                    tee -a "$(rec targets.jsonl)"
            fi
            "$WEFT" bench sched "$bench" --runtime tokio --processors 2 --duration 2 --json |
                tee -a "$(rec targets.jsonl)"
        done
    done
    python3 benches/targets_summary.py "$(rec targets.jsonl)" | tee "$(rec targets-summary.txt)"
}

which=("$@")
((${#which[@]})) || which=(memcached memory http echo load memcaslap targets)
for w in "${which[@]}"; do
    case $w in
    memcached | memory | http | echo | load | memcaslap | targets) "run_$w" ;;
    memcached-capped) run_memcached_capped ;;
    echo-capped) run_echo_capped ;;
    pipelined) run_pipelined ;;
    http-capped) run_http_capped ;;
    *)
        echo "unknown part '$w' (memcached memcached-capped memory http http-capped echo echo-capped load memcaslap pipelined targets)" >&2
        exit 2
        ;;
    esac
done
