#!/usr/bin/env bash
# Start-up of a one-node job at many ranks: `rbtlrun -n N true` against MPICH's hydra
# (`mpiexec.mpich -n N true`), the wall time of the whole job (every rank started,
# ended and reaped), for N from 100 to 3000 (oversubscribed: the ranks exit at once).
# Each N runs each launcher RUNS times, alternating; the median is shown, with
# rbtl's ratio to hydra and the time per rank.
#
#   benches/compare/launch.sh [-r RUNS] [-n "N ..."]
#
# Needs mpich; nothing else should run meanwhile.
set -euo pipefail
cd "$(dirname "$0")/../.."
. benches/compare/common.sh
RUNS=3
SIZES="100 250 500 1000 2000 3000"
read_options 2,10 "r:RUNS n:SIZES" "$@"
command -v mpiexec.mpich >/dev/null || { echo "launch.sh: mpiexec.mpich is missing (apt-get install mpich)" >&2; exit 1; }
cargo build --release --bin rbtlrun >&2
RBTLRUN=target/release/rbtlrun

# Seconds one command takes, to the millisecond.
seconds() {
    local t0 t1
    t0=$(date +%s%N)
    "$@" >/dev/null 2>&1 || { echo "launch.sh: $* failed" >&2; exit 1; }
    t1=$(date +%s%N)
    echo "scale=3; ($t1 - $t0) / 1000000000" | bc
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

printf "%6s %10s %10s %8s %12s\n" ranks "rbtlrun s" "hydra s" ratio "rbtl us/rank"
for n in $SIZES; do
    ours=() theirs=()
    for _ in $(seq "$RUNS"); do
        ours+=("$(seconds "$RBTLRUN" -n "$n" true)")
        theirs+=("$(seconds mpiexec.mpich -n "$n" true)")
    done
    o=$(printf "%s\n" "${ours[@]}" | median)
    t=$(printf "%s\n" "${theirs[@]}" | median)
    printf "%6d %10.3f %10.3f %8.2f %12.0f\n" "$n" "$o" "$t" \
        "$(echo "scale=3; $o / $t" | bc)" "$(echo "scale=1; $o * 1000000 / $n" | bc)"
done
