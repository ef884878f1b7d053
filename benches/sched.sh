#!/usr/bin/env bash
# Runs the scheduler micro-benchmarks for every weft policy and tokio, at 1 and 2 processors,
# each benchmark with many and with few fibers, and writes
#   docs/bench/sched.jsonl   one JSON record per line (`weft bench sched ... --json`)
#   docs/BENCHMARKS.md       the section "Scheduler micro-benchmarks", rendered from it
#
# Usage: benches/sched.sh            (from anywhere in the repository)
# Environment:
#   DURATION=2    seconds per timed point
#   REPEAT=1      runs per point; the tables show the median run
#   PROCESSORS="1 2"
#
# Runtimes alternate in the innermost loop, so a burst of load from elsewhere on the machine
# hits them alike. Expect about (policies + 1) x 30 x DURATION x REPEAT seconds.
set -euo pipefail

cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
DURATION=${DURATION:-2}
REPEAT=${REPEAT:-1}
PROCESSORS=${PROCESSORS:-"1 2"}
OUT=docs/bench/sched.jsonl
DOC=docs/BENCHMARKS.md
COMMAND="DURATION=$DURATION REPEAT=$REPEAT benches/sched.sh"

cargo build --release -q -p weft-cli --bin weft
weft() { cargo run --release -q -p weft-cli --bin weft -- "$@"; }

mapfile -t POLICIES < <(weft bench sched --list-schedulers)
echo "policies: ${POLICIES[*]} + tokio; processors: $PROCESSORS; $DURATION s per point, $REPEAT run(s) each" >&2

mkdir -p "$(dirname "$OUT")"
: >"$OUT"

# point BENCH PROCS FIBERS: one run on every runtime.
point() {
    local bench=$1 procs=$2 fibers=$3 policy
    for policy in "${POLICIES[@]}"; do
        weft bench sched "$bench" --runtime weft --scheduler "$policy" --processors "$procs" \
            --fibers "$fibers" --duration "$DURATION" --json >>"$OUT"
    done
    weft bench sched "$bench" --runtime tokio --processors "$procs" \
        --fibers "$fibers" --duration "$DURATION" --json >>"$OUT"
}

start=$(date +%s)
for ((run = 1; run <= REPEAT; run++)); do
    for procs in $PROCESSORS; do
        for bench in cycle yield churn locality-shared locality-noshare transfer; do
            for fibers in many few; do
                echo "run $run: $bench, $procs processor(s), $fibers fibers" >&2
                point "$bench" "$procs" "$fibers"
            done
        done
        echo "run $run: spawn-join, $procs processor(s)" >&2
        point spawn-join "$procs" many
    done
    echo "run $run: switch (always one processor)" >&2
    point switch 1 many
    echo "run $run: sleepers" >&2
    point sleepers 2 many
done
echo "done in $(($(date +%s) - start)) s; records in $OUT" >&2

# Render the section and put it in place of the old one (or at the end).
section=$(mktemp)
trap 'rm -f "$section"' EXIT
{
    echo "## Scheduler micro-benchmarks"
    echo
    echo "Produced by \`$COMMAND\` (records: \`$OUT\`). What each benchmark does and"
    echo "what one operation is: \`weft bench sched --help\` and \`crates/weft-bench/src/sched/\`."
    echo
    echo "- machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), kernel $(uname -r)"
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); $(rustc --version)"
    echo "- $DURATION s per point, median of $REPEAT run(s); *many* and *few* are the fiber presets"
    echo "  (\`--fibers many|few\`); tokio is \`new_multi_thread().worker_threads(procs)\`."
    grep -o '"core_round_trip_ns":[0-9.]*' "$OUT" | cut -d: -f2 | awk '
        { n++; if ($1 > 150) far++; if (n == 1 || $1 < min) min = $1; if ($1 > max) max = $1 }
        END { if (n) printf "- CPU 0 <-> CPU 1 cache-line round trip before each 2-processor point: %.0f-%.0f ns, %d of %d points in the far placement (> 150 ns: the host ran the vCPUs in different core complexes; see \"Scheduler micro-benchmarks: targets\")\n", min, max, far, n }'
    echo
    weft bench render "$OUT"
} >"$section"

if [[ ! -f $DOC ]]; then
    printf '# Benchmarks\n\nMeasured numbers, with the command that produced each table.\n' >"$DOC"
fi
awk -v section="$section" '
    function emit(  line) { while ((getline line < section) > 0) print line; close(section); done = 1 }
    /^## / { if (skipping) { skipping = 0; print "" } }
    /^## Scheduler micro-benchmarks$/ { emit(); skipping = 1; next }
    !skipping { print }
    END { if (!done) { print ""; emit() } }
' "$DOC" >"$DOC.new"
mv "$DOC.new" "$DOC"
echo "updated $DOC" >&2
