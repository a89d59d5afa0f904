#!/usr/bin/env bash
# MPI_Comm_spawn side by side on this node: spawn_time.c (the parents spawn CHILDREN
# processes, meet them in a barrier over the intercommunicator and disconnect) built
# against rbtl's MPI standard ABI (the release libmpi_abi.so, the MPI Forum's
# reference mpi.h) and against MPICH's own library, both launched by MPICH's hydra
# (mpiexec.mpich), and against Open MPI under its mpirun. The systems run in turn,
# RUNS times, the order reversed each time; prints, per parent count, each system's
# median and best spawn in milliseconds over every round but each run's first (which
# loads the program), and rbtl's ratio to each of the others (lower is better). A
# run that fails or takes over 120 s is said and left out.
#
#   benches/compare/spawn.sh [-r ROUNDS] [-R RUNS] [-n CHILDREN] [-p PARENTS]
#     ROUNDS: spawns per run (default 11); RUNS: runs per system (default 3);
#     CHILDREN: processes each spawn starts (default 2); PARENTS: parent counts
#     (default "1 2")
#
# Needs mpich, openmpi-bin and libopenmpi-dev; MPICH's column needs libmpich-dev too
# (mpicc.mpich's header), else it is left out. Nothing else should run meanwhile: two
# cores serve every process.
set -euo pipefail
cd "$(dirname "$0")/../.."
. benches/compare/common.sh
ROUNDS=11
RUNS=3
CHILDREN=2
PARENTS="1 2"
read_options 12,15 "r:ROUNDS R:RUNS n:CHILDREN p:PARENTS" "$@"

die() { echo "spawn.sh: $*" >&2; exit 1; }
for tool in mpiexec.mpich mpicc.openmpi mpirun.openmpi; do
    command -v "$tool" >/dev/null || die "$tool is missing (mpich, openmpi-bin, libopenmpi-dev)"
done
OUT=target/compare/spawn
mkdir -p "$OUT"
cargo build --release --quiet -p rbtl-abi
SRC=benches/compare/spawn_time.c
target/release/mpicc -O2 -I ../shared/external/mpi-abi -o "$OUT/rbtl" "$SRC"
mpicc.openmpi -O2 -o "$OUT/ompi" "$SRC"
SYSTEMS=(rbtl mpich ompi)
if ! mpicc.mpich -O2 -o "$OUT/mpich" "$SRC" 2>/dev/null; then
    echo "# MPICH left out: mpicc.mpich cannot build (apt-get install libmpich-dev)"
    SYSTEMS=(rbtl ompi)
fi
OUT=$(cd "$OUT" && pwd)

# The command that runs system $1's program with $2 parents.
command_of() {
    case $1 in
        rbtl | mpich) echo "mpiexec.mpich -n $2 $OUT/$1 $ROUNDS $CHILDREN" ;;
        ompi) echo "mpirun.openmpi --allow-run-as-root --oversubscribe -np $2 $OUT/ompi $ROUNDS $CHILDREN" ;;
    esac
}
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

echo "# $(stamp)"
echo "# $CHILDREN children a spawn, $ROUNDS spawns a run (the first left out), $RUNS runs a system"
printf "%-8s %-7s %10s %10s\n" parents system median_ms best_ms
for p in $PARENTS; do
    order=("${SYSTEMS[@]}")
    declare -A times=()
    for _ in $(seq "$RUNS"); do
        for sys in "${order[@]}"; do
            # shellcheck disable=SC2046
            if ! rows=$(timeout 120 $(command_of "$sys" "$p") 2>"$OUT/$sys.err"); then
                echo "# $sys at $p parents failed or hung (left out): $(tail -1 "$OUT/$sys.err")"
                continue
            fi
            times[$sys]+=$(awk '$1 > 0 { print $2 }' <<<"$rows")$'\n'
        done
        mapfile -t order < <(printf '%s\n' "${order[@]}" | tac)
    done
    ratios=
    for sys in "${SYSTEMS[@]}"; do
        [ -n "${times[$sys]:-}" ] || { printf "%-8s %-7s %10s\n" "$p" "$sys" none; continue; }
        med=$(grep . <<<"${times[$sys]}" | median)
        best=$(grep . <<<"${times[$sys]}" | sort -n | head -1)
        printf "%-8s %-7s %10.2f %10.2f\n" "$p" "$sys" "$med" "$best"
        [ "$sys" = rbtl ] && ours=$med && continue
        ratios+=$(awk -v s="$sys" -v r="$ours" -v m="$med" 'BEGIN { printf " rbtl/%s %.2f", s, r / m }')
    done
    echo "$p parents:$ratios (medians)"
    unset times
done
