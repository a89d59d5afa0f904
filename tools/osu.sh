#!/usr/bin/env bash
# tools/osu.sh - builds the OSU micro-benchmarks 7.2 from their read-only sources
# (../shared/external/osu-micro-benchmarks-7.2), unmodified and out of tree, into a
# folder under target/:
#
#   abi      against rbtl's MPI standard ABI: the `mpicc` of a cargo profile folder
#            (target/debug, target/release), compiling against the MPI Forum's
#            reference mpi.h (MPICC_INCDIR=../shared/external/mpi-abi) and linking
#            that folder's libmpi_abi.so (by rpath: a rebuilt library needs no rebuild
#            of the benchmarks);
#   openmpi  natively against Open MPI (mpicc.openmpi, mpicxx.openmpi).
#
# The folder holds src/ (a copy of the sources, generated files touched in autotools'
# order so that nothing regenerates), build/ (configure and make), bin/ (a link to
# every benchmark by name), build.log and a stamp of the inputs: when the stamp
# matches (same compiler command, same mpi.h, same sources, same script) and every
# benchmark is there, nothing is rebuilt. One build per folder at a time (a lock in
# the folder). Prints the bin/ folder on standard output.
set -euo pipefail

readonly PROG=${0##*/}
TOOLS_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
readonly TOOLS_DIR
ROOT=$(dirname -- "$TOOLS_DIR")
readonly ROOT
# The outside material, beside the checkout (read-only: copied, never changed).
EXTERNAL=$(cd -- "$ROOT/../shared/external" 2>/dev/null && pwd) ||
    { printf '%s: error: no folder %s\n' "$PROG" "$ROOT/../shared/external" >&2; exit 1; }
readonly EXTERNAL
readonly SOURCES=$EXTERNAL/osu-micro-benchmarks-7.2
readonly REFERENCE_INCDIR=$EXTERNAL/mpi-abi
# Seconds configure, and then make, may take; and to wait for another build of the
# same folder.
readonly CONFIGURE_LIMIT=300
readonly MAKE_LIMIT=900
readonly LOCK_WAIT=600

usage() {
    cat <<EOF
Usage: $PROG abi PROFILE_DIR [OUT_DIR]
           build against rbtl's libmpi_abi and the reference mpi.h: PROFILE_DIR is a
           cargo profile folder holding mpicc and libmpi_abi.so (\`cargo build -p
           rbtl-abi [--release]\`); OUT_DIR defaults to PROFILE_DIR/../osu/abi-PROFILE
       $PROG openmpi [OUT_DIR]
           build natively against Open MPI (mpicc.openmpi); OUT_DIR defaults to
           target/osu/openmpi

Prints OUT_DIR/bin, which holds every benchmark by name (osu_latency, osu_allreduce, ...).
EOF
}

note() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() {
    note "error: $*"
    exit 1
}

[[ $# -ge 1 ]] || { usage >&2; exit 2; }
KIND=$1
shift
case $KIND in
    abi)
        [[ $# -ge 1 && $# -le 2 ]] || { usage >&2; exit 2; }
        [[ -d $1 ]] || die "no profile folder '$1' (build it with \`cargo build -p rbtl-abi\`)"
        PROFILE=$(cd -- "$1" && pwd)
        [[ -x $PROFILE/mpicc ]] || die "no mpicc in $PROFILE (build it with \`cargo build -p rbtl-abi\`)"
        [[ -f $PROFILE/libmpi_abi.so ]] || die "no libmpi_abi.so in $PROFILE (build it with \`cargo build -p rbtl-abi\`)"
        [[ -r $REFERENCE_INCDIR/mpi.h ]] || die "no reference header at $REFERENCE_INCDIR/mpi.h"
        OUT=${2:-$(dirname -- "$PROFILE")/osu/abi-$(basename -- "$PROFILE")}
        # The reference header, and the library beside this mpicc.
        export MPICC_INCDIR=$REFERENCE_INCDIR
        unset MPICC_LIBDIR
        CC=$PROFILE/mpicc
        # OSU links with $(CXX): the C wrapper links its C objects as well.
        CXX=$PROFILE/mpicc
        SHOW=$("$CC" -show)
        INCDIR=$("$CC" -showme:incdir)
        ;;
    openmpi)
        [[ $# -le 1 ]] || { usage >&2; exit 2; }
        for t in mpicc.openmpi mpicxx.openmpi; do
            command -v "$t" >/dev/null ||
                die "$t is missing (apt-get install --no-install-recommends openmpi-bin libopenmpi-dev)"
        done
        OUT=${1:-${CARGO_TARGET_DIR:-$ROOT/target}/osu/openmpi}
        CC=$(command -v mpicc.openmpi)
        CXX=$(command -v mpicxx.openmpi)
        SHOW="$("$CC" --showme) / $("$CXX" --showme)"
        INCDIR=$("$CC" --showme:incdirs | awk '{ print $1 }')
        ;;
    -h | --help | help)
        usage
        exit 0
        ;;
    *)
        usage >&2
        exit 2
        ;;
esac
[[ -d $SOURCES && -r $SOURCES/configure ]] || die "no OSU sources at $SOURCES"
[[ -r $INCDIR/mpi.h ]] || die "no mpi.h in $INCDIR (the compiler's include folder)"
for t in make gcc flock timeout sha256sum; do
    command -v "$t" >/dev/null || die "$t is missing"
done

mkdir -p -- "$OUT"
OUT=$(cd -- "$OUT" && pwd)
readonly OUT STAMP=$OUT/stamp LOG=$OUT/build.log
# Only a folder of this tool's own is emptied: anything else must be empty.
if [[ ! -e $OUT/.osu-build ]]; then
    [[ -z $(ls -A -- "$OUT") ]] || die "$OUT is neither empty nor a build of $PROG"
    touch "$OUT/.osu-build"
fi

exec {lock}>>"$OUT/.lock"
flock -w "$LOCK_WAIT" "$lock" || die "another build of $OUT has held $OUT/.lock for ${LOCK_WAIT}s"

# Everything the build depends on, as text: a change of any of it rebuilds.
inputs() {
    echo "kind $KIND"
    echo "compiler $SHOW"
    echo "mpi.h $(sha256sum <"$INCDIR/mpi.h" | cut -d' ' -f1)"
    echo "sources $(cd -- "$SOURCES" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)"
    echo "script $(sha256sum <"${BASH_SOURCE[0]}" | cut -d' ' -f1)"
}
WANT=$(inputs)

# Whether the folder holds a complete build of these inputs: the stamp's inputs,
# then the benchmarks it lists, each present.
up_to_date() {
    [[ -r $STAMP ]] || return 1
    [[ $(sed '/^benchmarks$/,$d' "$STAMP") == "$WANT" ]] || return 1
    local name count=0
    while read -r name; do
        [[ -x $OUT/bin/$name ]] || return 1
        count=$((count + 1))
    done < <(sed '1,/^benchmarks$/d' "$STAMP")
    [[ $count -gt 0 ]]
}

if up_to_date; then
    note "up to date: $OUT"
    echo "$OUT/bin"
    exit 0
fi

# Runs the words after -- for at most $1 seconds, output to the log; on failure
# says which step failed and shows the log's end.
step() {
    local limit=$1 what=$2 rc=0
    shift 3
    echo "### $what: $*" >>"$LOG"
    timeout -k 10 "$limit" "$@" >>"$LOG" 2>&1 || rc=$?
    [[ $rc -eq 0 ]] && return 0
    [[ $rc -eq 124 || $rc -eq 137 ]] && note "$what did not finish within ${limit}s"
    note "$what failed (exit $rc); the end of $LOG$([[ $what != configure ]] || echo " (and $OUT/build/config.log)"):"
    tail -n 25 -- "$LOG" | sed 's/^/    /' >&2
    exit 1
}

note "building the OSU micro-benchmarks ($KIND) in $OUT"
rm -rf -- "$STAMP" "$OUT/src" "$OUT/build" "$OUT/bin"
: >"$LOG"
cp -r -- "$SOURCES" "$OUT/src"
# The sources are read-only; the copy is ours to remove later.
chmod -R u+w -- "$OUT/src"
# Generated files newer than what generates them, in autotools' order, all in the
# past (so that nothing made afterwards looks older): automake, autoconf and
# aclocal are never run.
t0=$(($(date +%s) - 100))
find "$OUT/src" -exec touch -h -d "@$t0" {} +
touch -d "@$((t0 + 1))" "$OUT/src/aclocal.m4"
touch -d "@$((t0 + 2))" "$OUT/src/configure"
find "$OUT/src" -name Makefile.in -exec touch -d "@$((t0 + 3))" {} +
mkdir "$OUT/build"
cd "$OUT/build"
step "$CONFIGURE_LIMIT" configure -- ../src/configure CC="$CC" CXX="$CXX"
step "$MAKE_LIMIT" make -- make -j"$(nproc)"

mkdir "$OUT/bin"
mapfile -t built < <(find "$OUT/build/c" -type f -perm -u+x -name 'osu_*' | sort)
[[ ${#built[@]} -gt 0 ]] || die "make built no benchmark (log: $LOG)"
names=()
for b in "${built[@]}"; do
    name=${b##*/}
    [[ ! -e $OUT/bin/$name ]] || die "two benchmarks named $name"
    # Relative to bin/: the folder may move.
    ln -s -- "../${b#"$OUT"/}" "$OUT/bin/$name"
    names+=("$name")
done
{
    echo "$WANT"
    echo benchmarks
    printf '%s\n' "${names[@]}"
} >"$STAMP"
note "built ${#names[@]} benchmarks in $OUT/bin"
echo "$OUT/bin"
