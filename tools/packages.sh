#!/usr/bin/env bash
# tools/packages.sh - the Debian packages the project installs, in named sets,
# and the one decision made for each set: take it from the machine's own
# suites, or, where that would remove something the machine has, take the
# whole set from <codename>-backports (apt's target release) through a private
# sources list.  The same decision installs (`install`) or is only simulated
# with `apt-get install -s` (`check`), so that what a fresh machine will do can
# be tried on any machine, against a record of the machine as it was shipped.
set -euo pipefail

readonly PROG=${0##*/}
TOOLS_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
readonly TOOLS_DIR
# The package state of this project's kind of machine as shipped (Debian 12),
# less its prose; `record-shipped` on a new machine
# writes it again.
readonly SHIPPED_STATUS=$TOOLS_DIR/shipped-dpkg-status

# The sets, in the order .ci/run installs them.
readonly SET_ORDER=(host nodes guest-build guest-qemu verbs-tools)
declare -A SETS=(
    # Building and testing the workspace: mpich (the osu suite under
    # mpiexec.mpich), hwloc (the launcher's topology feature), verbs headers
    # and libclang (rdma-sys's build), python3-venv and python3-dev (mpi4py
    # built against the MPI ABI, tools/mpi4py.sh).
    [host]="mpich libhwloc-dev libudev-dev pkg-config libibverbs-dev librdmacm-dev libclang-dev python3-venv python3-dev"
    # Simulated nodes (tools/nodes.sh, tests/nodes): network, UTS and mount
    # namespaces, veth links on a bridge, and a Slurm cluster with its own
    # munge key across them.
    [nodes]="iproute2 util-linux procps slurmctld slurmd slurm-client munge"
    # Building the soft-RoCE guest: its initramfs and the kernel modules.
    [guest-build]="busybox-static kmod cpio xz-utils zstd"
    # Running the guest.
    [guest-qemu]="qemu-system-x86"
    # What runs inside the guest from the host's /usr: `rdma`, the rxe verbs
    # provider, the reference tools.
    [verbs-tools]="iproute2 libibverbs1 librdmacm1 ibverbs-providers ibverbs-utils rdmacm-utils perftest"
)
readonly -A SETS

usage() {
    cat <<EOF
Usage: $PROG install SET...       install what is missing of each set
       $PROG check [--status FILE] [SET...]
                                  simulate the install decision of each set (all
                                  by default) against a dpkg status file: by
                                  default the machine as shipped ($(basename "$SHIPPED_STATUS"));
                                  fails with apt's own message when a set cannot
                                  be installed without removing packages
       $PROG list                 the sets and their packages
       $PROG record-shipped       print this machine's dpkg status, trimmed, for
                                  $(basename "$SHIPPED_STATUS") (run on a new machine)

Sets: ${SET_ORDER[*]}
EOF
}

note() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { note "error: $*"; exit 1; }

as_root() {
    if [[ $EUID -eq 0 ]]; then "$@"; else sudo "$@"; fi
}

set_packages() {
    [[ -n ${SETS[$1]+x} ]] || die "unknown set '$1' (sets: ${SET_ORDER[*]})"
    printf '%s\n' ${SETS[$1]}
}

# The packages of $2... that the dpkg status file $1 does not list as installed.
missing_in() {
    local status=$1
    shift
    local installed
    installed=$(awk '/^Package:/ { p = $2 } /^Status: install ok installed/ { print p }' "$status")
    local p
    for p in "$@"; do
        grep -qxF -- "$p" <<<"$installed" || printf '%s\n' "$p"
    done
}

# ------------------------------------------------------------ apt's views

LISTS_UPDATED=0
# The package lists may be old (security updates replace packages), so they are
# refreshed once, only when a decision or an install fails.
update_lists_once() {
    [[ $LISTS_UPDATED -eq 1 ]] && return 1
    LISTS_UPDATED=1
    note "apt-get update"
    as_root apt-get update -qq >&2
}

BPO_DIR=
BPO_APT=()
# A private apt configuration that sees the machine's sources plus
# <codename>-backports of the same mirror; the machine's own sources stay as
# they are.  Sets BPO_APT to the apt-get options that select it.
backports_view() {
    [[ -n $BPO_DIR ]] && return 0
    local codename uri
    codename=$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release)
    # shellcheck disable=SC2016  # $(...) here is apt's format syntax
    uri=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE)' 2>/dev/null |
        awk -v s="$codename" '$2 == s { print $1; exit }')
    [[ -n $codename && -n $uri ]] || {
        note "no $codename suite among the machine's sources: no backports to try"
        return 1
    }
    BPO_DIR=$(mktemp -d)
    chmod 755 "$BPO_DIR"   # apt's download sandbox user must reach the lists
    mkdir -p "$BPO_DIR/parts" "$BPO_DIR/lists/partial"
    cp /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list "$BPO_DIR/parts/" 2>/dev/null || true
    [[ -f /etc/apt/sources.list ]] && cp /etc/apt/sources.list "$BPO_DIR/parts/main.list"
    local keyring=/usr/share/keyrings/debian-archive-keyring.gpg signed=
    [[ -f $keyring ]] && signed="[signed-by=$keyring] "
    printf 'deb %s%s %s-backports main\n' "$signed" "$uri" "$codename" >"$BPO_DIR/parts/backports.list"
    cp -r /var/lib/apt/lists/. "$BPO_DIR/lists/" 2>/dev/null || true
    rm -f "$BPO_DIR/lists/lock"
    BPO_APT=(-o "Dir::Etc::sourcelist=$BPO_DIR/none" -o "Dir::Etc::sourceparts=$BPO_DIR/parts"
        -o "Dir::State::lists=$BPO_DIR/lists" -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=
        -t "$codename-backports")
    note "reading $codename-backports"
    as_root apt-get "${BPO_APT[@]:0:10}" update -qq >&2 || {
        note "apt-get update of $codename-backports failed"
        return 1
    }
}

cleanup() { [[ -z $BPO_DIR ]] || rm -rf -- "$BPO_DIR"; }
trap cleanup EXIT

# ------------------------------------------------------------ the decision

DECISION=()      # apt-get options of the view that resolved
DECISION_NAME=   # "the machine's suites" or "<codename>-backports"
APT_OUTPUT=      # apt's words for the last simulation

# simulate STATUS-OPTIONS... -- PACKAGES...: apt-get install -s with the view
# in DECISION; true when apt resolves without removing anything.
simulate() {
    local opts=()
    while [[ $1 != -- ]]; do opts+=("$1"); shift; done
    shift
    APT_OUTPUT=$(apt-get "${DECISION[@]}" "${opts[@]}" install -s \
        --no-install-recommends --no-remove "$@" 2>&1)
}

# decide STATUS-OPTIONS... -- PACKAGES...: sets DECISION and DECISION_NAME to
# the first view in which the packages resolve; prints apt's messages of every
# view tried and fails when none does.
decide() {
    local failures=
    DECISION=()
    DECISION_NAME="the machine's suites"
    if simulate "$@"; then return 0; fi
    failures+="--- from the machine's suites:"$'\n'"$(grep -E '^(E|W): ' <<<"$APT_OUTPUT" || echo "$APT_OUTPUT")"$'\n'
    if backports_view; then
        DECISION=("${BPO_APT[@]}")
        DECISION_NAME=${BPO_APT[-1]}
        if simulate "$@"; then return 0; fi
        failures+="--- from $DECISION_NAME:"$'\n'"$(grep -E '^(E|W): ' <<<"$APT_OUTPUT" || echo "$APT_OUTPUT")"$'\n'
    fi
    printf '%s' "$failures" >&2
    return 1
}

# One line of apt's simulation: "N upgraded, M newly installed, 0 to remove ...".
summary() { grep -E '^[0-9]+ upgraded' <<<"$APT_OUTPUT" || true; }

cmd_install() {
    [[ $# -gt 0 ]] || die "install: name at least one set"
    local set missing
    for set in "$@"; do
        mapfile -t missing < <(missing_in /var/lib/dpkg/status $(set_packages "$set"))
        [[ ${#missing[@]} -eq 0 ]] && continue
        if ! decide -- "${missing[@]}"; then
            update_lists_once || die "set $set: cannot install ${missing[*]} without removing packages"
            decide -- "${missing[@]}" || die "set $set: cannot install ${missing[*]} without removing packages"
        fi
        note "installing ($set, from $DECISION_NAME): ${missing[*]}"
        local cmd=(env DEBIAN_FRONTEND=noninteractive apt-get "${DECISION[@]}" install -y -qq
            --no-install-recommends --no-remove "${missing[@]}")
        if ! as_root "${cmd[@]}" >&2; then
            # Lists older than the archive name files it no longer has.
            update_lists_once || die "set $set: apt-get install failed"
            as_root "${cmd[@]}" >&2 || die "set $set: apt-get install failed"
        fi
    done
}

cmd_check() {
    local status=$SHIPPED_STATUS
    if [[ ${1:-} == --status ]]; then
        [[ $# -ge 2 ]] || die "check: --status needs a file"
        status=$2
        shift 2
    fi
    [[ -r $status ]] || die "check: cannot read $status"
    status=$(realpath -- "$status")   # apt takes a relative path as under its own state folder
    local sets=("$@")
    [[ ${#sets[@]} -gt 0 ]] || sets=("${SET_ORDER[@]}")
    local set missing failed=0
    for set in "${sets[@]}"; do
        mapfile -t missing < <(missing_in "$status" $(set_packages "$set"))
        if [[ ${#missing[@]} -eq 0 ]]; then
            printf '%-12s installed already\n' "$set:"
            continue
        fi
        if decide -o "Dir::State::status=$status" -- "${missing[@]}"; then
            printf '%-12s from %s: %s\n' "$set:" "$DECISION_NAME" "$(summary)"
        else
            printf '%-12s CANNOT BE INSTALLED without removing packages (apt above)\n' "$set:"
            failed=1
        fi
    done
    [[ $failed -eq 0 ]] || die "check against $status: a set does not resolve"
    note "every set resolves against $status"
}

cmd_record_shipped() {
    # Everything but the prose and the configuration-file lists: apt tells two
    # records of one version apart by a hash over most of the other fields.
    awk 'BEGIN { split("Description Conffiles Homepage Maintainer Original-Maintainer Config-Version", f, " "); for (i in f) drop[f[i]] = 1 }
        /^$/ { print; k = 1; next }
        /^[ \t]/ { if (k) print; next }
        { name = $1; sub(/:$/, "", name); k = !(name in drop); if (k) print }' /var/lib/dpkg/status
}

case ${1:-} in
    install) shift; cmd_install "$@" ;;
    check) shift; cmd_check "$@" ;;
    list) for s in "${SET_ORDER[@]}"; do printf '%-12s %s\n' "$s:" "${SETS[$s]}"; done ;;
    record-shipped) cmd_record_shipped ;;
    -h | --help | help) usage ;;
    *) usage >&2; exit 2 ;;
esac
