#!/usr/bin/env bash
# rdma/guest.sh - run commands against a real kernel RDMA device (soft-RoCE,
# rdma_rxe) inside a throw-away qemu guest, on hosts whose kernel has no RDMA.
#
# The guest is Debian's own kernel plus a busybox initramfs; its user space is
# the host's /usr and /etc shared read-only over virtio-9p, so host-built
# binaries (cargo test binaries included) run in it unchanged.  Why it is done
# this way: rdma/README.md.  Usage: see usage() below or rdma/README.md.
# (Over 600 lines: building the guest, booting one or a pair and streaming their
# output share its helpers; split, each part would carry them again.)

set -euo pipefail

readonly PROG=${0##*/}
SCRIPT_PATH=$(readlink -f -- "${BASH_SOURCE[0]}")
readonly SCRIPT_PATH
readonly CACHE_DIR=${RBTL_GUEST_CACHE:-${HOME:-/root}/.cache/rbtl-rxe-guest}
readonly TIMEOUT=${RBTL_GUEST_TIMEOUT:-1200}
readonly GUEST_MEM=${RBTL_GUEST_MEM:-2048}

# Modules the guest loads, in this order of request; modprobe on the host
# expands each to its dependencies.  crc32/crc32c go first because rxe asks the
# crypto API for them and the guest has no working modprobe to autoload them.
readonly GUEST_MODULES=(crc32_generic crc32c_generic virtio_pci 9pnet_virtio 9p
    ib_core ib_uverbs rdma_rxe rdma_ucm dummy virtio_net)

# Host packages come from the project's package sets (tools/packages.sh).  The
# guest uses the host's /usr, so whatever the guest needs (iproute2's `rdma`,
# the rxe verbs provider, the test tools) is installed on the host.
readonly PACKAGES_TOOL=${SCRIPT_PATH%/*}/../tools/packages.sh

usage() {
    cat <<EOF
Usage: $PROG build [--force]
       $PROG run [--] COMMAND [ARGS...]
       $PROG pair [--] COMMAND [ARGS...]
       $PROG clean
       $PROG --help

Runs COMMAND in a qemu guest that has a soft-RoCE device rxe0 (on netdev
dummy0, 198.18.0.1/24; GID index 1 is RoCEv2 ::ffff:198.18.0.1).

  build   Build the guest (Debian kernel + busybox initramfs) into the cache,
          installing missing host packages with apt-get.  Skipped when the
          cache matches this script and the archive's current kernel;
          --force rebuilds anyway.
  run     Build if needed, boot the guest, run COMMAND with /usr/bin/bash -c
          in the caller's working directory, stream its output (stdout and
          stderr merged) to stdout, exit with its status.  One argument is
          taken as a shell command line; several are one command and its
          arguments.  COMMAND's stdin is /dev/null.  If the host has an
          active RDMA port itself, COMMAND runs on the host instead.
  pair    Like run, with two guests: nodes a (198.18.3.1, where COMMAND runs)
          and b (198.18.3.2), each with its own kernel and rxe0 on its eth0, the
          two NICs joined by a qemu socket network over the host's loopback.
          COMMAND reaches b with rdma/pair-exec.sh (hydra's -launcher-exec);
          it is told GUEST_PAIR_HOSTS, GUEST_PAIR_IFACE and GUEST_PAIR_EXEC
          (and the caller's GUEST_PAIR_* variables, as RBTL_* ones are).
  clean   Remove the cache.

Environment:
  RBTL_GUEST_CACHE    cache directory (default \$HOME/.cache/rbtl-rxe-guest)
  RBTL_GUEST_SHARE    directory shared read-write at the same path (default:
                      git top level of the current directory, else the
                      current directory); the working directory must be in it
  RBTL_GUEST_TIMEOUT  seconds before the guest is killed (default 1200)
  RBTL_GUEST_MEM      guest memory in MiB (default 2048)
  RBTL_GUEST_SMP      guest vCPUs (default: host CPUs, at most 4; 1 each for a pair)
  RBTL_GUEST_FORCE=1  use the guest even if the host has an RDMA device
  RBTL_GUEST_ENV      extra variable names to pass into the guest (RUST_*,
                      RBTL_* but these RBTL_GUEST_*, TERM, NO_COLOR and CI
                      are always passed)
  RBTL_GUEST_ACCEL    kvm or tcg (default: kvm only if kvm_intel/kvm_amd is loaded)
  RBTL_GUEST_KEEP=1   keep the run directory (console log) after success
EOF
}

note() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { note "error: $*"; exit 1; }

as_root() {
    if [[ $EUID -eq 0 ]]; then "$@"; else sudo "$@"; fi
}

# ---------------------------------------------------------------- packages

APT_UPDATED=0
# The package lists may be old (the archive keeps only the newest kernel), so
# refresh them once, only when the kernel cannot be resolved or downloaded.
apt_update_once() {
    [[ $APT_UPDATED -eq 1 ]] && return 0
    note "apt-get update"
    as_root apt-get update -qq >&2
    APT_UPDATED=1
}

# Install what is missing of the named package sets (never removing anything).
ensure_packages() {
    bash "$PACKAGES_TOOL" install "$@" >&2 || die "cannot install the package sets $*"
}

# --------------------------------------------------------------- the guest

# The kernel package that linux-image-amd64 currently depends on, e.g.
# "linux-image-6.1.0-41-amd64 6.1.158-1".
resolve_kernel_package() {
    apt-cache show --no-all-versions linux-image-amd64 2>/dev/null |
        sed -n 's/^Depends: \(linux-image-[^ ,]*\) *(= *\([^)]*\)).*/\1 \2/p' |
        head -n1
}

script_hash() { sha256sum "$SCRIPT_PATH" | cut -d' ' -f1; }

# True when the cache holds a complete guest built by this very script.
cache_usable() {
    [[ -f $CACHE_DIR/vmlinuz && -f $CACHE_DIR/initramfs.cpio.gz &&
        -f $CACHE_DIR/stamp ]] &&
        grep -qx "script=$(script_hash)" "$CACHE_DIR/stamp"
}

# build [--force]: build the guest unless the cache already matches this
# script and the archive's kernel.
cmd_build() {
    local force=0
    [[ ${1:-} == --force ]] && force=1
    ensure_packages guest-build guest-qemu verbs-tools

    local kpkg kver_pkg
    read -r kpkg kver_pkg < <(resolve_kernel_package) || true
    if [[ -z ${kpkg:-} ]]; then
        apt_update_once
        read -r kpkg kver_pkg < <(resolve_kernel_package) || true
        [[ -n ${kpkg:-} ]] || die "cannot resolve the kernel package of linux-image-amd64"
    fi
    if [[ $force -eq 0 ]] && cache_usable &&
        grep -qx "package=$kpkg $kver_pkg" "$CACHE_DIR/stamp"; then
        note "guest is up to date in $CACHE_DIR ($kpkg $kver_pkg)"
        return 0
    fi
    build_guest "$kpkg"
}

# Build the guest if the cache is missing or was made by another version of
# this script.  Does not look at the archive: a cached kernel stays good.
build_if_needed() {
    cache_usable && return 0
    note "guest not built yet (or stale): building into $CACHE_DIR"
    cmd_build
}

build_guest() {
    local kpkg=$1
    mkdir -p "$CACHE_DIR"
    # Serialise concurrent builds into the same cache.
    exec 9>"$CACHE_DIR/lock"
    flock 9

    local work
    work=$(mktemp -d "$CACHE_DIR/build.XXXXXX")
    # shellcheck disable=SC2064  # expand $work now
    trap "rm -rf -- '$work'" EXIT

    # apt-get download writes to the current directory; as root it would warn
    # that the sandbox user cannot write there.
    local apt_opts=()
    [[ $EUID -eq 0 ]] && apt_opts=(-o APT::Sandbox::User=root)
    note "downloading $kpkg"
    if ! (cd "$work" && apt-get "${apt_opts[@]}" download -qq "$kpkg" >&2); then
        # The archive keeps only the newest kernel: refresh and re-resolve.
        apt_update_once
        kpkg=$(resolve_kernel_package | cut -d' ' -f1)
        [[ -n $kpkg ]] || die "cannot resolve the kernel package of linux-image-amd64"
        (cd "$work" && apt-get "${apt_opts[@]}" download -qq "$kpkg" >&2)
    fi
    local deb
    deb=$(find "$work" -maxdepth 1 -name "${kpkg}_*.deb" | head -n1)
    [[ -n $deb ]] || die "apt-get download left no ${kpkg} .deb"
    local kver_pkg
    kver_pkg=$(dpkg-deb -f "$deb" Version)

    note "extracting $(basename "$deb")"
    local kroot=$work/kernel
    dpkg -x "$deb" "$kroot"
    local kver
    kver=$(basename "$(find "$kroot/lib/modules" -mindepth 1 -maxdepth 1 -type d | head -n1)")
    [[ -n $kver && -f $kroot/boot/vmlinuz-$kver ]] || die "no kernel image in $deb"
    depmod -b "$kroot" "$kver"

    make_initramfs "$kroot" "$kver" "$work/initramfs.cpio.gz"

    cp "$kroot/boot/vmlinuz-$kver" "$work/vmlinuz"
    mv -f "$work/vmlinuz" "$CACHE_DIR/vmlinuz"
    mv -f "$work/initramfs.cpio.gz" "$CACHE_DIR/initramfs.cpio.gz"
    mv -f "$work/modules.txt" "$CACHE_DIR/modules.txt"
    # The stamp goes last: a build cut short leaves no usable cache.
    printf 'script=%s\npackage=%s %s\nkernel=%s\n' \
        "$(script_hash)" "$kpkg" "$kver_pkg" "$kver" >"$CACHE_DIR/stamp"
    rm -rf -- "$work"
    trap - EXIT
    note "guest built: kernel $kver ($kpkg $kver_pkg) in $CACHE_DIR"
}

# Module files to load, in load order, dependencies first, each once.
module_load_order() {
    local kroot=$1 kver=$2 m
    local noconf=$kroot/no-modprobe.d
    mkdir -p "$noconf"   # ignore the host's /etc/modprobe.d
    for m in "${GUEST_MODULES[@]}"; do
        modprobe -d "$kroot" -S "$kver" -C "$noconf" --show-depends "$m" ||
            die "modprobe --show-depends $m failed for $kver"
    done | awk '$1 == "insmod" && !seen[$2]++ { print $2 }'
}

make_initramfs() {
    local kroot=$1 kver=$2 out=$3
    local root=$kroot/initramfs
    mkdir -p "$root"/{bb,modules,proc,sys,dev,usr,etc,run,tmp,root,rbtl-run,var/tmp}
    chmod 1777 "$root/tmp" "$root/var/tmp"

    # busybox lives in /bb so that /bin, /sbin, /lib, /lib64 can be the
    # merged-/usr links into the host's /usr, as on the host: scripts with
    # #!/bin/bash and the dynamic loader then work in the guest.
    local busybox a
    busybox=$(dpkg -L busybox-static | grep -m1 '/bin/busybox$')
    cp "$busybox" "$root/bb/busybox"
    for a in $("$root/bb/busybox" --list); do
        [[ $a == busybox ]] || ln -s busybox "$root/bb/$a"
    done
    for a in bin sbin lib lib64 lib32 libx32; do
        if [[ -L /$a ]]; then
            ln -s "$(readlink "/$a")" "$root/$a"
        elif [[ -e /$a ]]; then
            die "/$a is not a link into /usr: the guest needs a merged-/usr host"
        fi
    done

    # Modules, decompressed (busybox insmod may not read .xz/.zst), numbered
    # in load order.
    local i=0 src dst name
    : >"$kroot/../modules.txt"
    while read -r src; do
        name=$(basename "$src")
        name=${name%.xz}; name=${name%.zst}; name=${name%.gz}
        dst=$root/modules/$(printf '%02d' "$i")-$name
        case $src in
            *.xz) xz -dc "$src" >"$dst" ;;
            *.zst) zstd -qdc "$src" >"$dst" ;;
            *.gz) gzip -dc "$src" >"$dst" ;;
            *) cp "$src" "$dst" ;;
        esac
        echo "${name%.ko}" >>"$kroot/../modules.txt"
        i=$((i + 1))
    done < <(module_load_order "$kroot" "$kver")
    [[ $i -gt 0 ]] || die "no modules found for $kver"

    write_init >"$root/init"
    chmod 755 "$root/init"

    (cd "$root" && find . -print0 | LC_ALL=C sort -z |
        cpio --null -o -H newc --quiet) | gzip -6 >"$out"
}

# The guest's /init.  It runs under busybox; the caller's command runs with
# the host's bash.  Its messages go to the kernel console (the log file); a
# setup failure is also written to /rbtl-run/error for the host to show.
write_init() {
    cat <<'INIT'
#!/bb/sh
export PATH=/bb
fail() {
    echo "rbtl-guest: $*"
    echo "$*" >/rbtl-run/error 2>/dev/null
    poweroff -f
}

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t tmpfs -o mode=755 tmpfs /run

for m in /modules/*.ko; do
    insmod "$m" || echo "rbtl-guest: insmod $m failed" # fatal ones show below
done

p9() { mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,"$3" "$1" "$2"; }
p9 rbtlrun /rbtl-run rw || fail "cannot mount the run directory (9p)"
# The host's /usr and /etc will not change during a run: let the guest cache.
p9 usr /usr ro,cache=loose || fail "cannot mount /usr"
p9 etc /etc ro,cache=loose || fail "cannot mount /etc"
share=$(cat /rbtl-run/share)
{ mkdir -p "$share" && p9 project "$share" rw; } || fail "cannot mount $share"
# One of a pair (rdma/guest.sh pair): its node letter, its address on the NIC the
# two guests share, and the folder both see.
node=$(cat /rbtl-run/node 2>/dev/null)
if [ -n "$node" ]; then
    { mkdir -p /rbtl-pair && p9 pair /rbtl-pair rw; } || fail "cannot mount the pair's folder"
fi

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/bb
export HOME=/root USER=root LOGNAME=root SHELL=/usr/bin/bash
# Alone: rxe on a dummy netdev (rdma_cm route resolution fails on lo).  One of a
# pair: rxe on the virtio NIC that the two guests share.
ip link set lo up
if [ -n "$node" ]; then
    hostname "rbtl-guest-$node"
    netdev=eth0
    addr=$(cat /rbtl-run/addr)
else
    hostname rbtl-guest
    netdev=dummy0
    addr=198.18.0.1/24
fi
ip addr add "$addr" dev "$netdev" || fail "no $netdev"
ip link set "$netdev" up
rdma link add rxe0 type rxe netdev "$netdev" || fail "rdma link add rxe0 failed"
zero=0000:0000:0000:0000:0000:0000:0000:0000
n=0
while :; do
    gid=$(cat /sys/class/infiniband/rxe0/ports/1/gids/1 2>/dev/null)
    state=$(cat /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null)
    if [ -n "$gid" ] && [ "$gid" != "$zero" ] && [ "${state#*ACTIVE}" != "$state" ]; then
        break
    fi
    n=$((n + 1))
    [ $n -lt 300 ] || fail "rxe0 not active after 30 s (state '$state', gid1 '$gid')"
    usleep 100000
done
echo "rbtl-guest: rxe0 ready, gid1 $gid"

ulimit -l unlimited
stty -F /dev/ttyS1 raw -echo
echo "rbtl-guest: running the command"
/usr/bin/bash /rbtl-run/run.sh </dev/null >/dev/ttyS1 2>&1
status=$?
# stty sets the attributes with TCSADRAIN: the output is out of the UART
# before the status is written and the guest powers off.
stty -F /dev/ttyS1 raw -echo
echo "$status" >/rbtl-run/status
echo "rbtl-guest: command exited with $status"
poweroff -f
INIT
}

# ------------------------------------------------------------------- run

# A real RDMA device on the host with an active port: no guest needed.
host_has_rdma() {
    [[ ${RBTL_GUEST_FORCE:-0} == 1 ]] && return 1
    [[ -d /sys/class/infiniband && -n $(ls -A /sys/class/infiniband) ]] || return 1
    ensure_packages verbs-tools
    ibv_devinfo 2>/dev/null | grep -q PORT_ACTIVE
}

# The command line for bash -c: one argument is a shell command line as
# given; several are quoted so each stays one word.
command_line() {
    if [[ $# -eq 1 ]]; then
        printf '%s' "$1"
    else
        local a out=""
        for a in "$@"; do out+="${out:+ }$(printf '%q' "$a")"; done
        printf '%s' "$out"
    fi
}

project_dir() {
    if [[ -n ${RBTL_GUEST_SHARE:-} ]]; then
        readlink -f -- "$RBTL_GUEST_SHARE"
    else
        git rev-parse --show-toplevel 2>/dev/null || pwd -P
    fi
}

# The script the guest's bash runs: environment, working directory, command.
write_run_script() {
    local cwd=$1 cmdline=$2 name
    echo "# written by $PROG on the host"
    local names=(TERM NO_COLOR CI)
    # shellcheck disable=SC2207  # names never contain blanks
    # (not this script's own RBTL_GUEST_* settings: rbtl refuses RBTL_ names it
    # does not know)
    names+=($(compgen -v | grep -E '^(RUST_|RBTL_|GUEST_PAIR_)' | grep -v '^RBTL_GUEST_' || true))
    # shellcheck disable=SC2206
    names+=(${RBTL_GUEST_ENV:-})
    for name in "${names[@]}"; do
        [[ -v $name ]] && printf 'export %s=%q\n' "$name" "${!name}"
    done
    printf 'cd -- %q || exit 125\n' "$cwd"
    printf 'exec /usr/bin/bash -c %q\n' "$cmdline"
}

accel_args() {
    case ${RBTL_GUEST_ACCEL:-auto} in
        kvm) echo "-accel kvm -cpu host" ;;
        tcg) echo "-accel tcg,thread=multi -cpu max" ;;
        *)
            # /dev/kvm may be a software-only kvm_pvm that cannot boot a stock
            # kernel: trust KVM only when the hardware modules are loaded.
            if [[ -d /sys/module/kvm_intel || -d /sys/module/kvm_amd ]] &&
                [[ -w /dev/kvm ]]; then
                echo "-accel kvm -cpu host"
            else
                echo "-accel tcg,thread=multi -cpu max"
            fi ;;
    esac
}

# The shared project directory and the working directory inside it (SHARE, CWD).
check_share() {
    CWD=$(pwd -P)
    SHARE=$(project_dir)
    [[ $SHARE != / ]] || die "refusing to share / into the guest"
    case $SHARE in
        /usr | /usr/* | /etc | /etc/*) die "cannot share $SHARE: /usr and /etc are the host's, read-only" ;;
    esac
    case $CWD/ in
        "$SHARE"/*) ;;
        *) die "working directory $CWD is not inside the shared directory $SHARE (set RBTL_GUEST_SHARE)" ;;
    esac
}

# A guest's run directory (its console log, its command, its exit status).
new_run_dir() {
    local dir
    dir=$(mktemp -d "${TMPDIR:-/tmp}/rbtl-guest.XXXXXX")
    chmod 755 "$dir"
    printf '%s\n' "$SHARE" >"$dir/share"
    printf '%s' "$dir"
}

# QEMU_CMD: the qemu command line of a guest with run directory $1, whose command's
# output goes to the character device described by $2; more arguments (its NIC) follow.
qemu_command() {
    local dir=$1 cmdout=$2
    shift 2
    local smp=${RBTL_GUEST_SMP:-$(nproc)}
    [[ -n ${RBTL_GUEST_SMP:-} || $smp -le 4 ]] || smp=4
    # Two guests share the host's CPUs: one vCPU each unless told otherwise.
    [[ -n ${RBTL_GUEST_SMP:-} || -z $PAIR_DIR ]] || smp=1
    local accel
    read -r -a accel <<<"$(accel_args)"
    QEMU_CMD=(qemu-system-x86_64 -nodefaults -display none
        -no-reboot "${accel[@]}" -smp "$smp" -m "$GUEST_MEM"
        -kernel "$CACHE_DIR/vmlinuz" -initrd "$CACHE_DIR/initramfs.cpio.gz"
        -append "console=ttyS0 panic=-1 8250.nr_uarts=2"
        -serial "file:$dir/console.log"
        -chardev "$cmdout,id=cmdout"
        -serial chardev:cmdout "$@")
    local tag path opts
    for tag in usr etc project rbtlrun; do
        case $tag in
            usr) path=/usr opts=readonly=on ;;
            etc) path=/etc opts=readonly=on ;;
            project) path=$SHARE opts=readonly=off ;;
            rbtlrun) path=$dir opts=readonly=off ;;
        esac
        QEMU_CMD+=(-virtfs "local,path=$path,mount_tag=$tag,security_model=none,$opts,multidevs=remap")
    done
}

RUN_DIR=""
QEMU_PID=""
SLEEP_PID=""
CAT_PID=""
PEER_PID=""
cleanup_run() {
    local p
    for p in "$QEMU_PID" "$PEER_PID" "$SLEEP_PID" "$CAT_PID"; do
        if [[ -n $p ]]; then kill "$p" 2>/dev/null || true; fi
    done
}

# Let cat see the end of the output.  If qemu never opened the fifo, cat is
# still blocked opening it: a read-write open (which never blocks) and close
# releases it with an EOF.
finish_output() {
    local fd
    exec {fd}<>"$RUN_DIR/out.out"
    exec {fd}>&-
    wait "$CAT_PID" 2>/dev/null || true
    CAT_PID=""
}

# Start the guest of RUN_DIR (qemu_command's arguments after the first), its
# command's output streamed to our stdout.
start_streaming_guest() {
    # The command's output comes out of the guest's second serial port into a
    # fifo that cat copies to our stdout, so qemu never touches our stdin,
    # stdout or terminal settings.
    mkfifo "$RUN_DIR/out.in" "$RUN_DIR/out.out"
    cat "$RUN_DIR/out.out" &
    CAT_PID=$!
    trap 'cleanup_run' EXIT
    trap 'cleanup_run; note "interrupted; console log: $RUN_DIR/console.log"; exit 130' INT TERM
    qemu_command "$RUN_DIR" "pipe,path=$RUN_DIR/out" "$@"
    "${QEMU_CMD[@]}" </dev/null >"$RUN_DIR/qemu.out" 2>&1 &
    QEMU_PID=$!
}

# Wait for the streaming guest to power off, or for the time limit; then report
# and exit with its command's status.
finish_streaming_guest() {
    local t0=$1
    # Hang guard: whichever ends first, qemu or the sleep.
    sleep "$TIMEOUT" &
    SLEEP_PID=$!
    local first="" qemu_rc=0
    wait -n -p first "$QEMU_PID" "$SLEEP_PID" || qemu_rc=$?
    if [[ $first != "$QEMU_PID" ]]; then
        kill -KILL "$QEMU_PID" 2>/dev/null || true
        wait "$QEMU_PID" 2>/dev/null || true
        QEMU_PID=""
        SLEEP_PID=""
        finish_output
        stop_peer
        note "error: timed out after ${TIMEOUT}s (RBTL_GUEST_TIMEOUT); qemu killed; console log: $RUN_DIR/console.log"
        exit 124
    fi
    QEMU_PID=""
    kill "$SLEEP_PID" 2>/dev/null || true
    wait "$SLEEP_PID" 2>/dev/null || true
    SLEEP_PID=""
    finish_output
    stop_peer

    if [[ ! -s $RUN_DIR/status ]]; then
        [[ -s $RUN_DIR/error ]] && note "guest setup failed: $(cat "$RUN_DIR/error")"
        [[ -s $RUN_DIR/qemu.out ]] && note "qemu (exit $qemu_rc) said: $(cat "$RUN_DIR/qemu.out")"
        note "error: the guest reported no exit status after $((SECONDS - t0))s; console log: $RUN_DIR/console.log"
        exit 125
    fi
    local status peer_kept="" peer_logs=""
    status=$(cat "$RUN_DIR/status")
    if [[ -n $PEER_DIR ]]; then
        peer_kept=" (the other guest's: $PEER_DIR)"
        peer_logs=" (the other guest's: $PEER_DIR/console.log and $PEER_DIR/follower.log)"
    fi
    if [[ ${RBTL_GUEST_KEEP:-0} == 1 ]]; then
        note "guest run took $((SECONDS - t0))s; run directory kept: $RUN_DIR$peer_kept"
    elif [[ $status -ne 0 ]]; then
        note "command exited with $status; console log: $RUN_DIR/console.log$peer_logs"
    else
        rm -rf -- "$RUN_DIR" ${PEER_DIR:+"$PEER_DIR"} ${PAIR_DIR:+"$PAIR_DIR"}
    fi
    exit "$status"
}

# The second guest of a pair, once the first has ended: told to stop, given a few
# seconds to power off, then killed.
PEER_DIR=""
PAIR_DIR=""
stop_peer() {
    [[ -n $PEER_PID ]] || return 0
    : >"$PAIR_DIR/done"
    local i
    for ((i = 0; i < 100; i++)); do
        kill -0 "$PEER_PID" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$PEER_PID" 2>/dev/null || true
    wait "$PEER_PID" 2>/dev/null || true
    PEER_PID=""
}

cmd_run() {
    [[ ${1:-} == -- ]] && shift
    [[ $# -ge 1 ]] || die "run: no command given (see --help)"
    local cmdline
    cmdline=$(command_line "$@")

    if host_has_rdma; then
        note "the host has an active RDMA port: running on the host (RBTL_GUEST_FORCE=1 to use the guest)"
        exec /usr/bin/bash -c "$cmdline"
    fi

    ensure_packages guest-qemu verbs-tools
    build_if_needed
    check_share
    RUN_DIR=$(new_run_dir)
    write_run_script "$CWD" "$cmdline" >"$RUN_DIR/run.sh"
    local t0=$SECONDS
    start_streaming_guest -nic none
    finish_streaming_guest "$t0"
}

# A TCP port on the host's loopback that nothing listens on.
free_port() {
    local port i
    for ((i = 0; i < 50; i++)); do
        port=$((20000 + RANDOM % 30000))
        if ! ss -Htln "sport = :$port" | grep -q .; then
            printf '%s' "$port"
            return 0
        fi
    done
    die "no free TCP port found on 127.0.0.1"
}

# pair: two guests, nodes a (198.18.3.1) and b (198.18.3.2), their virtio NICs
# joined by a qemu socket network over the host's loopback, each with its own rxe.
# COMMAND runs on a; b runs rdma/pair-exec.sh's follower, which runs what a's
# `rdma/pair-exec.sh 198.18.3.2 CMD` (hydra's -launcher-exec) asks of it.
cmd_pair() {
    [[ ${1:-} == -- ]] && shift
    [[ $# -ge 1 ]] || die "pair: no command given (see --help)"
    local cmdline
    cmdline=$(command_line "$@")
    ensure_packages guest-qemu verbs-tools
    build_if_needed
    check_share
    local exec_script=${SCRIPT_PATH%/*}/pair-exec.sh
    case $exec_script in
        "$SHARE"/*) ;;
        *) die "$exec_script is not inside the shared directory $SHARE" ;;
    esac

    PAIR_DIR=$(mktemp -d "${TMPDIR:-/tmp}/rbtl-pair.XXXXXX")
    chmod 755 "$PAIR_DIR"
    RUN_DIR=$(new_run_dir)
    PEER_DIR=$(new_run_dir)
    echo a >"$RUN_DIR/node"
    echo 198.18.3.1/24 >"$RUN_DIR/addr"
    echo b >"$PEER_DIR/node"
    echo 198.18.3.2/24 >"$PEER_DIR/addr"
    # What a's command is told of the pair.
    local GUEST_PAIR_HOSTS=198.18.3.1,198.18.3.2 GUEST_PAIR_IFACE=eth0
    local GUEST_PAIR_EXEC=$exec_script GUEST_PAIR_DIR=/rbtl-pair
    write_run_script "$CWD" "$cmdline" >"$RUN_DIR/run.sh"
    printf 'exec /usr/bin/bash %q --follow /rbtl-pair\n' "$exec_script" >"$PEER_DIR/run.sh"

    local port t0=$SECONDS
    port=$(free_port)
    local pair_fs="local,path=$PAIR_DIR,mount_tag=pair,security_model=none,readonly=off,multidevs=remap"
    start_streaming_guest -virtfs "$pair_fs" \
        -netdev "socket,id=net0,listen=127.0.0.1:$port" \
        -device virtio-net-pci,netdev=net0,mac=52:54:00:18:03:01
    # b connects once a's qemu listens.
    local i
    for ((i = 0; i < 100; i++)); do
        ss -Htln "sport = :$port" | grep -q . && break
        kill -0 "$QEMU_PID" 2>/dev/null || break
        sleep 0.1
    done
    qemu_command "$PEER_DIR" "file,path=$PEER_DIR/follower.log" -virtfs "$pair_fs" \
        -netdev "socket,id=net0,connect=127.0.0.1:$port" \
        -device virtio-net-pci,netdev=net0,mac=52:54:00:18:03:02
    "${QEMU_CMD[@]}" </dev/null >"$PEER_DIR/qemu.out" 2>&1 &
    PEER_PID=$!
    finish_streaming_guest "$t0"
}

cmd_clean() {
    rm -rf -- "$CACHE_DIR"
    note "removed $CACHE_DIR"
}

main() {
    case ${1:-} in
        build) shift; cmd_build "$@" ;;
        run) shift; cmd_run "$@" ;;
        pair) shift; cmd_pair "$@" ;;
        clean) cmd_clean ;;
        -h | --help | help) usage ;;
        "") usage >&2; exit 2 ;;
        *) note "unknown subcommand '$1'"; usage >&2; exit 2 ;;
    esac
}

main "$@"
