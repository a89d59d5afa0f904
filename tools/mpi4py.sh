#!/usr/bin/env bash
# tools/mpi4py.sh - builds mpi4py (its source package from PyPI, unmodified) against
# rbtl's MPI standard ABI and runs its test suite, one test module per job, under
# this mpiexec:
#
#   tools/mpi4py.sh PROFILE_DIR [RANKS...]     (RANKS: 1 2 3 by default)
#
# PROFILE_DIR is a cargo profile folder holding mpicc, mpiexec, rbtlrun and
# libmpi_abi.so (`cargo build -p rbtl-abi [--release]`). mpi4py is built with that
# mpicc against the MPI Forum's reference mpi.h (../shared/external/mpi-abi), into a
# virtual environment under target/mpi4py (python3-venv and python3-dev; the
# network, for pip). Prints one line per module and rank count; exits 1 if any
# module failed or ran past its time limit.
#
# One test is left out: test_mpiapi's testSymbolCoverage counts MPI_Status_c2f and
# MPI_Status_f2c as missing, which mpi4py built for the ABI defines itself.
# The reference header declares MPI 4.2 and no MPI_Abi_get_fortran_info, which
# mpi4py's fallbacks name: a one-line header declaring it is included first.
set -euo pipefail

readonly PROG=${0##*/}
ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
readonly ROOT VERSION=4.1.2 LIMIT=300
readonly REFERENCE_INCDIR=$ROOT/../shared/external/mpi-abi

die() {
    printf '%s: error: %s\n' "$PROG" "$*" >&2
    exit 1
}

[[ $# -ge 1 ]] || { sed -n '2,13p' "$0" >&2; exit 2; }
PROFILE=$(cd -- "$1" 2>/dev/null && pwd) || die "no profile folder '$1'"
shift
RANKS=("$@")
[[ ${#RANKS[@]} -gt 0 ]] || RANKS=(1 2 3)
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
failed=0
for n in "${RANKS[@]}"; do
    mkdir -p -- "$WORK/logs-$n"
    for t in test/test_*.py; do
        m=$(basename -- "$t" .py)
        log=$WORK/logs-$n/$m.log
        rc=0
        timeout "$LIMIT" "$PROFILE/mpiexec" -n "$n" python test/main.py --no-builddir \
            -x testSymbolCoverage "$m" >"$log" 2>&1 || rc=$?
        printf '%d ranks %-24s rc=%-3d %s\n' "$n" "$m" "$rc" "$(grep -E '^(OK|FAILED)' "$log" | tail -1)"
        [[ $rc -eq 0 ]] || failed=1
    done
done
exit "$failed"
