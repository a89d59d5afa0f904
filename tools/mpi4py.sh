#!/usr/bin/env bash
# tools/mpi4py.sh - builds mpi4py (its source package from PyPI, unmodified) against
# rbtl's MPI standard ABI and runs its test suite, one test module per job, under
# this mpiexec:
#
#   tools/mpi4py.sh PROFILE_DIR [RANKS...]     (RANKS: 1 2 3 by default)
#   tools/mpi4py.sh PROFILE_DIR --nodes        (4 ranks across 2 simulated nodes)
#
# With --nodes (root; the nodes set of tools/packages.sh), every module runs as 4
# ranks, 2 a node, across two simulated nodes, each on its own share of the
# processors (tools/nodes.sh up 2 --slurm --own-cpus, taken down on exit), under
# MPICH's hydra and then under Slurm (srun --mpi=pmi2), over tcp between the nodes;
# Slurm's srun runs with SLURM_OVERLAP=1 and SLURM_OVERCOMMIT=1, which it hands the
# job steps it starts for spawns (test_spawn): they share the processors of the
# steps running, and may hold more processes than the job has processors. MODULES
# (test_spawn, ...; all when unset) runs only those modules.
#
# PROFILE_DIR is a cargo profile folder holding mpicc, mpiexec, rbtlrun and
# libmpi_abi.so (`cargo build -p rbtl-abi [--release]`). mpi4py is built with that
# mpicc against the MPI Forum's reference mpi.h (../shared/external/mpi-abi), into a
# virtual environment under target/mpi4py (python3-venv and python3-dev; the
# network, for pip), with numpy, whose arrays mpi4py's tests send beside Python's
# own. Prints one line per module and rank count; exits 1 if any module failed or
# ran past its time limit.
#
# Two tests are left out: test_mpiapi's testSymbolCoverage counts MPI_Status_c2f and
# MPI_Status_f2c as missing, which mpi4py built for the ABI defines itself; and
# test_util_pool's TestThreadPool.test_terminate, which calls no MPI and races Python
# threads against each other (whether a task starts before the pool is terminated),
# as CPython's own thread-pool terminate test did (python/cpython#113205).
# The reference header declares MPI 4.2 and no MPI_Abi_get_fortran_info, which
# mpi4py's fallbacks name: a one-line header declaring it is included first.
set -euo pipefail

readonly PROG=${0##*/}
ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
readonly ROOT VERSION=4.1.2 NUMPY=2.4.6 LIMIT=300
readonly REFERENCE_INCDIR=$ROOT/../shared/external/mpi-abi

die() {
    printf '%s: error: %s\n' "$PROG" "$*" >&2
    exit 1
}

[[ $# -ge 1 ]] || { sed -n '2,24p' "$0" >&2; exit 2; }
PROFILE=$(cd -- "$1" 2>/dev/null && pwd) || die "no profile folder '$1'"
shift
NODES=0
if [[ ${1:-} == --nodes ]]; then
    NODES=1
    RANKS=(hydra slurm)
else
    RANKS=("$@")
    [[ ${#RANKS[@]} -gt 0 ]] || RANKS=(1 2 3)
fi
for f in mpicc mpiexec libmpi_abi.so; do
    [[ -e $PROFILE/$f ]] || die "no $f in $PROFILE (cargo build -p rbtl-abi)"
done
[[ -r $REFERENCE_INCDIR/mpi.h ]] || die "no reference header at $REFERENCE_INCDIR/mpi.h"

WORK=${CARGO_TARGET_DIR:-$ROOT/target}/mpi4py
mkdir -p -- "$WORK"
cd -- "$WORK"
if [[ ! -x venv/bin/python ]]; then
    python3 -m venv venv || die "python3 -m venv failed (apt-get install python3-venv)"
fi
# shellcheck disable=SC1091
. venv/bin/activate
python -c "import numpy" 2>/dev/null || pip install --quiet "numpy==$NUMPY" ||
    die "installing numpy $NUMPY failed"
SDIST=dl/mpi4py-$VERSION.tar.gz
[[ -r $SDIST ]] || pip download --quiet "mpi4py==$VERSION" --no-deps --no-binary :all: -d dl
[[ -d mpi4py-$VERSION ]] || tar xzf "$SDIST"
printf '#include <mpi.h>\nint MPI_Abi_get_fortran_info(MPI_Info *info);\n' >shim.h
# The module links libmpi_abi.so by the rpath mpicc gives: a rebuilt library needs
# no new build, a new compiler command or header does (the inputs' stamp).
export MPICC_INCDIR=$REFERENCE_INCDIR
stamp="$VERSION $("$PROFILE/mpicc" -show) $(sha256sum "$REFERENCE_INCDIR/mpi.h" shim.h | cut -c1-64)"
if [[ $(cat stamp 2>/dev/null) != "$stamp" ]] || ! python -c 'import mpi4py' 2>/dev/null; then
    rm -f stamp
    MPICC=$PROFILE/mpicc MPI4PY_BUILD_MPIABI=1 CFLAGS="-O2 -include $WORK/shim.h" \
        pip install --quiet --force-reinstall --no-deps "$SDIST" >build.log 2>&1 ||
        die "building mpi4py failed: $WORK/build.log"
    printf '%s' "$stamp" >stamp
fi

cd "mpi4py-$VERSION"
if [[ $NODES -eq 1 ]]; then
    bash "$ROOT/tools/nodes.sh" up 2 --slurm --own-cpus || die "the simulated nodes did not come up"
    trap 'bash "$ROOT/tools/nodes.sh" down >/dev/null 2>&1 || true' EXIT
fi
# JOB: the command that runs CMD... as one module's job under RUN (a rank count on
# this node, hydra or slurm across the nodes); WHO: how its line names that.
job() {
    local run=$1
    shift
    case $run in
        hydra)
            JOB=(mpiexec.mpich -iface rbtl-br0 -launcher ssh -launcher-exec
                "$ROOT/tools/nodes-ssh" -hosts rbtl-n1,rbtl-n2 -n 4 -ppn 2
                -genv RBTL_BTL_TCP_IF_INCLUDE 198.18.1.0/24 "$@")
            WHO="4 ranks, hydra" ;;
        slurm)
            JOB=(env SLURM_OVERLAP=1 SLURM_OVERCOMMIT=1 RBTL_BTL_TCP_IF_INCLUDE=198.18.1.0/24
                bash "$ROOT/tools/nodes.sh" slurm srun -N 2 -n 4 --ntasks-per-node 2
                --mpi=pmi2 --time=6 --export=ALL,RBTL_BTL_TCP_IF_INCLUDE=198.18.1.0/24 "$@")
            WHO="4 ranks, Slurm" ;;
        *)
            JOB=("$PROFILE/mpiexec" -n "$run" "$@")
            WHO="$run ranks" ;;
    esac
}
failed=0
for n in "${RANKS[@]}"; do
    mkdir -p -- "$WORK/logs-$n"
    for t in test/test_*.py; do
        m=$(basename -- "$t" .py)
        [[ -z ${MODULES:-} || " $MODULES " == *" $m "* ]] || continue
        log=$WORK/logs-$n/$m.log
        rc=0
        job "$n" "$WORK/venv/bin/python" test/main.py --no-builddir -x testSymbolCoverage \
            -x TestThreadPool.test_terminate "$m"
        timeout "$LIMIT" "${JOB[@]}" >"$log" 2>&1 || rc=$?
        printf '%s %-24s rc=%-3d %s\n' "$WHO" "$m" "$rc" "$(grep -E '^(OK|FAILED)' "$log" | tail -1)"
        [[ $rc -eq 0 ]] || failed=1
    done
done
exit "$failed"
