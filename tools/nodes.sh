#!/usr/bin/env bash
# tools/nodes.sh - simulated nodes on this machine, to run jobs across "nodes"
# under MPICH's hydra, Open MPI and Slurm.  Each node is a network namespace
# (rbtl-nK, address 198.18.1.K/24 on interface rbtl0, a veth whose other end
# rbtl-vK sits on the bridge rbtl-br0 at 198.18.1.254) with a persistent UTS
# namespace of its own whose host name is the node's name.  Each node has a
# second interface, rbtl1 at 198.18.2.K/24, a veth whose other end rbtl-wK sits
# on the bridge rbtl-br1 (no address: a network of the nodes alone), for runs
# over two interfaces per node.  With --slurm, a
# Slurm cluster runs across them: munged with its own key, slurmctld in the
# root network namespace under the host name rbtl-ctl (the bridge's address),
# one slurmd per node.  All state (namespace files, Slurm's configuration,
# spool, logs, the munge key) lives in /run/rbtl-nodes, the nodes' names in
# marked lines of /etc/hosts; `down` removes them with everything else, also
# after a crashed run.  Needs root.
#
# The size of the file: one tool, every command sharing the same names and the
# same teardown; split, each part would repeat them.
set -euo pipefail

readonly PROG=${0##*/}
TOOLS_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
readonly TOOLS_DIR

readonly STATE=/run/rbtl-nodes
readonly LOCK=/run/lock/rbtl-nodes.lock
readonly BRIDGE=rbtl-br0
readonly NET=198.18.1
readonly CIDR=$NET.0/24
readonly BRIDGE_ADDR=$NET.254
readonly NODE_IF=rbtl0
readonly BRIDGE2=rbtl-br1
readonly NET2=198.18.2
readonly NODE_IF2=rbtl1
readonly CONTROLLER=rbtl-ctl
# The nodes' names in /etc/hosts, between these lines, while they are up.
readonly HOSTS=/etc/hosts
readonly HOSTS_BEGIN='# rbtl-nodes: the simulated nodes (tools/nodes.sh down removes these lines)'
readonly HOSTS_END='# rbtl-nodes: end'
readonly MAX_NODES=16
# Slurm's ports, away from its defaults (6817/6818) so that a Slurm of the
# machine's own is not disturbed.
readonly SLURMCTLD_PORT=17817
readonly SLURMD_PORT=17818
# Seconds a daemon has to come up, and processes to end after SIGTERM.
readonly READY_TIMEOUT=60
readonly TERM_GRACE=5

usage() {
    cat <<EOF
Usage: $PROG up N [--slurm] [--own-cpus]
                                bring up N simulated nodes (1 to $MAX_NODES), with a
                                Slurm cluster across them when --slurm is given;
                                with --own-cpus each node runs its processes on
                                its own share of this machine's processors (N
                                equal slices; one each, shared in turn, where
                                there are fewer processors than nodes), else
                                every node on all of them
       $PROG down               take down everything this tool makes (namespaces,
                                links, bridge, processes on the nodes, Slurm and
                                munge, $STATE); idempotent, also after a
                                crashed or interrupted run
       $PROG hold N [--slurm] [--own-cpus]
                                up, print "up", wait until standard input closes
                                (or SIGINT, SIGTERM, SIGHUP), then down: a
                                session that ends with its owner
       $PROG exec NODE CMD...   run CMD on NODE (its network and host name)
       $PROG ssh [OPTS] NODE CMD...
                                as ssh does: run the words CMD as one shell
                                command on NODE (name or address); the launcher
                                script tools/nodes-ssh is this command, for
                                hydra's -launcher-exec and Open MPI's
                                plm_rsh_agent
       $PROG mpiexec ARGS...    mpiexec.mpich across the nodes: adds -iface
                                $BRIDGE -launcher ssh -launcher-exec nodes-ssh,
                                and -hosts (every node) unless ARGS name hosts
       $PROG slurm CMD ARGS...  a Slurm client (srun, sinfo, squeue, scontrol)
                                against the cluster, from the controller's host
                                name
       $PROG status             what is up
       $PROG hosts [N]          the node names, comma-separated (the first N)

Nodes: rbtl-n1..rbtl-nN at $NET.1..$NET.N/24 ($NODE_IF), bridge $BRIDGE at
$BRIDGE_ADDR; and at $NET2.1..$NET2.N/24 ($NODE_IF2), bridge $BRIDGE2.
Runs over tcp between them: RBTL_BTL_TCP_IF_INCLUDE=$CIDR (add $NET2.0/24
for two interfaces per node).
EOF
}

note() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() {
    note "error: $*"
    exit 1
}

node_name() { printf 'rbtl-n%d' "$1"; }
node_addr() { printf '%s.%d' "$NET" "$1"; }
veth_name() { printf 'rbtl-v%d' "$1"; }
veth2_name() { printf 'rbtl-w%d' "$1"; }
uts_file() { printf '%s/uts/%s' "$STATE" "$1"; }

need_root() { [[ $EUID -eq 0 ]] || die "needs root (network namespaces, a bridge, Slurm's daemons)"; }

need_tools() {
    local t missing=()
    for t in "$@"; do command -v "$t" >/dev/null 2>&1 || missing+=("$t"); done
    [[ ${#missing[@]} -eq 0 ]] ||
        die "missing ${missing[*]}: install them with \`bash tools/packages.sh install nodes\`"
}

# ------------------------------------------------------------ the lock

LOCK_FD=
MADE=0
# One command at a time changes the nodes.  The lock file is removed when the
# nodes are down, so a waiter may get the lock of a removed file: it then
# takes the lock again, on the file now at $LOCK.
take_lock() {
    mkdir -p "$(dirname "$LOCK")"
    local fd
    while :; do
        # Known before it is locked: a signal that comes as `flock` returns finds
        # the descriptor that holds the lock (see up_undo).
        exec {fd}>>"$LOCK"
        LOCK_FD=$fd
        flock -w 120 "$fd" || die "another $PROG has held $LOCK for 2 minutes"
        if holds_lock_file; then
            return 0
        fi
        LOCK_FD=
        exec {fd}>&-
    done
}

# Whether $LOCK_FD is open on the file now at $LOCK.
holds_lock_file() {
    [[ -n $LOCK_FD && /proc/$BASHPID/fd/$LOCK_FD -ef $LOCK ]]
}

release_lock() {
    [[ -n $LOCK_FD ]] || return 0
    exec {LOCK_FD}>&-
    LOCK_FD=
}

# ------------------------------------------------------------ what is up

# The processors this process may run on, one per line.
allowed_cpus() {
    local list part c parts
    list=$(awk '/^Cpus_allowed_list:/ { print $2 }' /proc/self/status)
    IFS=, read -ra parts <<<"$list"
    for part in "${parts[@]}"; do
        for ((c = ${part%-*}; c <= ${part#*-}; c++)); do echo "$c"; done
    done
}

# Gives each of the N nodes its own share of the processors (up --own-cpus):
# node K gets the K-th of N equal slices, or where there are fewer processors
# than nodes, processor K-1 modulo their count; written to $STATE/cpus/NODE.
share_cpus() {
    local n=$1 k share first cpus
    mapfile -t cpus < <(allowed_cpus)
    [[ ${#cpus[@]} -ge 1 ]] || die "up: cannot read the processors this tool may run on"
    share=$((${#cpus[@]} / n))
    [[ $share -ge 1 ]] || share=1
    mkdir -m 0755 "$STATE/cpus"
    for ((k = 1; k <= n; k++)); do
        first=$(((k - 1) * share % ${#cpus[@]}))
        (IFS=, && echo "${cpus[*]:first:share}") >"$STATE/cpus/$(node_name "$k")"
    done
}

# CONFINE: the words that run a command on NODE's own processors, where it has
# them (up --own-cpus), else none.
set_confine() {
    CONFINE=()
    local f
    f="$STATE/cpus/$1"
    [[ ! -r $f ]] || CONFINE=(taskset -c "$(<"$f")")
}

# The node count of the nodes that are up (0 when down).
node_count() {
    [[ -r $STATE/nodes ]] && cat "$STATE/nodes" || echo 0
}

# Every network namespace this tool may have made, up or left by a crash.
our_netns() { ip netns list 2>/dev/null | awk '$1 ~ /^rbtl-n[0-9]+$/ { print $1 }'; }

is_up() {
    [[ -e $STATE ]] || [[ -n $(our_netns) ]] || ip link show "$BRIDGE" >/dev/null 2>&1 ||
        ip link show "$BRIDGE2" >/dev/null 2>&1
}

# The node named by a name or an address; fails for anything else.
resolve_node() {
    local want=${1#*@} n k
    n=$(node_count)
    for ((k = 1; k <= n; k++)); do
        if [[ $want == "$(node_name "$k")" || $want == "$(node_addr "$k")" ]]; then
            node_name "$k"
            return 0
        fi
    done
    if [[ $n -eq 0 ]]; then
        die "no simulated nodes are up: \`$PROG up N\` first"
    fi
    die "no simulated node '$1' (nodes: $(cmd_hosts))"
}

# ------------------------------------------------------------ up

cmd_up() {
    local n= slurm=0 own_cpus=0 a
    for a in "$@"; do
        case $a in
            --slurm) slurm=1 ;;
            --own-cpus) own_cpus=1 ;;
            *[!0-9]* | '') die "up: '$a' is neither a node count, --slurm nor --own-cpus" ;;
            *) n=$a ;;
        esac
    done
    [[ -n $n && $n -ge 1 && $n -le $MAX_NODES ]] || die "up: give a node count from 1 to $MAX_NODES"
    need_root
    need_tools ip nsenter unshare flock hostname sysctl
    [[ $slurm -eq 0 ]] || need_tools munged munge unmunge slurmctld slurmd srun sinfo runuser
    [[ $own_cpus -eq 0 ]] || need_tools taskset
    # From here, any failure or interruption undoes what this command made.
    MADE=0
    trap 'up_undo' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'exit 129' HUP
    take_lock
    if is_up; then
        local owner
        owner=$(cat "$STATE/owner" 2>/dev/null || echo "unknown (a crashed run?)")
        die "simulated nodes are up already (owner: $owner); \`$PROG down\` takes them down"
    fi
    MADE=1
    mkdir -m 0755 "$STATE" "$STATE/uts"
    printf 'pid %d, %s, since %s\n' "$$" "${SUDO_USER:-$(id -un)}" "$(date -u +%FT%TZ)" >"$STATE/owner"
    [[ -e /run/netns ]] || touch "$STATE/made-run-netns"
    echo "$n" >"$STATE/nodes"
    [[ $own_cpus -eq 0 ]] || share_cpus "$n"

    # IPv4 only: no IPv6 link-local addresses, router solicitations or duplicate
    # address probes on the bridge (the programs here use IPv4; Open MPI's tcp
    # would also try the link-local addresses).
    ip link add "$BRIDGE" type bridge
    no_ipv6 "$BRIDGE"
    ip addr add "$BRIDGE_ADDR/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    ip link add "$BRIDGE2" type bridge
    no_ipv6 "$BRIDGE2"
    ip link set "$BRIDGE2" up
    local k node
    for ((k = 1; k <= n; k++)); do
        node=$(node_name "$k")
        ip netns add "$node"
        nsenter --net="/run/netns/$node" -- sysctl -qw net.ipv6.conf.all.disable_ipv6=1 \
            net.ipv6.conf.default.disable_ipv6=1
        ip link add "$(veth_name "$k")" type veth peer name "$NODE_IF" netns "$node"
        no_ipv6 "$(veth_name "$k")"
        ip link set "$(veth_name "$k")" master "$BRIDGE" up
        ip -n "$node" addr add "$(node_addr "$k")/24" dev "$NODE_IF"
        ip link add "$(veth2_name "$k")" type veth peer name "$NODE_IF2" netns "$node"
        no_ipv6 "$(veth2_name "$k")"
        ip link set "$(veth2_name "$k")" master "$BRIDGE2" up
        ip -n "$node" addr add "$NET2.$k/24" dev "$NODE_IF2"
        ip -n "$node" link set lo up
        ip -n "$node" link set "$NODE_IF" up
        ip -n "$node" link set "$NODE_IF2" up
        make_uts "$node"
    done
    make_uts "$CONTROLLER"
    name_nodes "$n" ||
        note "the nodes' names are not in $HOSTS (it cannot be written): they do not resolve"
    [[ $slurm -eq 0 ]] || slurm_up "$n"
    # Done: the nodes stay up, and a signal from here no longer ends the command
    # with them up and a failing status (its caller takes them down, as after any
    # `up` that succeeded; `hold` sets its own traps next).
    trap - EXIT
    trap '' INT TERM HUP
    release_lock
    note "$n node(s) up: $(cmd_hosts) at $NET.1-$n, bridge $BRIDGE $BRIDGE_ADDR$([[ $slurm -eq 0 ]] || echo ", Slurm")"
}

# The exit of an `up` that did not finish: takes down what it made, and the
# lock file when nothing is up (only while holding the lock: a file removed
# under another holder would let a third take a new one).
up_undo() {
    trap '' INT TERM HUP
    if ! holds_lock_file; then
        [[ -z $LOCK_FD ]] || exec {LOCK_FD}>&-
        exec {LOCK_FD}>>"$LOCK" || return
    fi
    # (At once where this process holds it already, on this descriptor.)
    flock -n "$LOCK_FD" || return
    if [[ $MADE -eq 1 ]]; then
        teardown >/dev/null 2>&1
    fi
    is_up || rm -f "$LOCK"
}

# No IPv6 on interface $1 of the root network namespace (its setting goes
# with the interface).
no_ipv6() {
    local f=/proc/sys/net/ipv6/conf/$1/disable_ipv6
    [[ ! -e $f ]] || echo 1 >"$f"
}

# Name the $1 nodes and the controller in /etc/hosts, as a cluster's node
# names resolve (a program may look its own host name up, as mpi4py's
# test_dynproc does). Written in place (in a container the file is a mount),
# by one builtin: a signal's trap runs only once it is written whole.
name_nodes() {
    local k text
    text=$(hosts_without_ours) || return 1
    text+=$'\n'$HOSTS_BEGIN
    for ((k = 1; k <= $1; k++)); do
        text+=$'\n'"$(node_addr "$k") $(node_name "$k")"
    done
    text+=$'\n'"$BRIDGE_ADDR $CONTROLLER"$'\n'$HOSTS_END
    printf '%s\n' "$text" >"$HOSTS"
}

# Take the nodes' names out of /etc/hosts, if they are there.
unname_nodes() {
    grep -qxF -- "$HOSTS_BEGIN" "$HOSTS" 2>/dev/null || return 0
    local text
    text=$(hosts_without_ours) || return 1
    printf '%s\n' "$text" >"$HOSTS"
}

# /etc/hosts without the nodes' lines.
hosts_without_ours() {
    awk -v b="$HOSTS_BEGIN" -v e="$HOSTS_END" \
        '$0 == b { skip = 1; next } $0 == e { skip = 0; next } !skip' "$HOSTS"
}

# A persistent UTS namespace for host name $1, bound to its file.
make_uts() {
    local file
    file=$(uts_file "$1")
    touch "$file"
    unshare --uts="$file" hostname "$1"
}

# ------------------------------------------------------------ Slurm

slurm_conf() { printf '%s/slurm/slurm.conf' "$STATE"; }
munge_socket() { printf '%s/munge/munge.socket' "$STATE"; }

slurm_up() {
    local n=$1 s=$STATE/slurm m=$STATE/munge
    id munge >/dev/null 2>&1 || die "no munge user: install munge (\`bash tools/packages.sh install nodes\`)"
    # munged refuses a key others can read and folders others can write; its
    # socket's folder must be open to every user.
    mkdir -m 0755 "$m"
    chown munge:munge "$m"
    dd if=/dev/urandom of="$m/munge.key" bs=1024 count=1 status=none
    chown munge:munge "$m/munge.key"
    chmod 0400 "$m/munge.key"
    # Daemons must not inherit the lock (it would be held as long as they run).
    runuser -u munge -- munged --key-file="$m/munge.key" --socket="$(munge_socket)" \
        --pid-file="$m/munged.pid" --log-file="$m/munged.log" --seed-file="$m/munged.seed" \
        {LOCK_FD}>&-
    munge --socket="$(munge_socket)" -n | unmunge --socket="$(munge_socket)" >/dev/null ||
        die "munged does not answer on $(munge_socket) (log: $m/munged.log)"

    mkdir -p "$s/state" "$s/spool" "$s/log"
    cat >"$(slurm_conf)" <<EOF
# Written by tools/nodes.sh for the simulated nodes; removed by its \`down\`.
ClusterName=rbtl
SlurmctldHost=$CONTROLLER($BRIDGE_ADDR)
SlurmctldPort=$SLURMCTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$(munge_socket)
CredType=cred/munge
StateSaveLocation=$s/state
SlurmdSpoolDir=$s/spool/%n
SlurmctldPidFile=$s/slurmctld.pid
SlurmdPidFile=$s/slurmd-%n.pid
SlurmctldLogFile=$s/log/slurmctld.log
SlurmdLogFile=$s/log/slurmd-%n.log
# No cgroups: processes are tracked through /proc, tasks are not bound (they
# run on slurmd's processors: every one of the machine, or the node's own
# share with --own-cpus).
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdTimeout=30
# Each node declares 2 CPUs, whatever the machine has (config_overrides), so
# that \`srun -N 2 -n 4\` places 2 tasks on each; more per node with --overcommit.
SlurmdParameters=config_overrides
NodeName=rbtl-n[1-$n] NodeAddr=$NET.[1-$n] CPUs=2 State=UNKNOWN
PartitionName=rbtl Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
    nsenter --uts="$(uts_file "$CONTROLLER")" -- slurmctld -f "$(slurm_conf)" {LOCK_FD}>&-
    local k node
    for ((k = 1; k <= n; k++)); do
        node=$(node_name "$k")
        # nsenter, not `ip netns exec`: the latter remounts /sys, where slurmd
        # then finds no cgroup filesystem.
        set_confine "$node"
        "${CONFINE[@]}" nsenter --net="/run/netns/$node" --uts="$(uts_file "$node")" -- \
            slurmd -f "$(slurm_conf)" -N "$node" {LOCK_FD}>&-
    done
    local deadline=$((SECONDS + READY_TIMEOUT)) idle
    while :; do
        idle=$(slurm_client sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l) || idle=0
        [[ $idle -eq $n ]] && break
        ((SECONDS < deadline)) ||
            die "Slurm: $idle of $n nodes idle after ${READY_TIMEOUT}s (logs in $s/log)"
        sleep 0.5
    done
}

# Runs a Slurm client as a user on the controller's host would.
slurm_client() {
    SLURM_CONF=$(slurm_conf) nsenter --uts="$(uts_file "$CONTROLLER")" -- "$@"
}

cmd_slurm() {
    [[ $# -ge 1 ]] || die "slurm: name a Slurm client (srun, sinfo, squeue, scontrol)"
    [[ -r $(slurm_conf) ]] || die "no Slurm cluster is up: \`$PROG up N --slurm\` first"
    case $1 in
        srun | sinfo | squeue | scontrol | scancel | sbatch | salloc | sacct) ;;
        *) die "slurm: '$1' is not a Slurm client" ;;
    esac
    SLURM_CONF=$(slurm_conf) exec nsenter --uts="$(uts_file "$CONTROLLER")" -- "$@"
}

# ------------------------------------------------------------ down

cmd_down() {
    need_root
    take_lock
    # Once begun, the teardown finishes (each of its waits is bounded).
    trap '' INT TERM HUP
    teardown
    rm -f "$LOCK"
    release_lock
}

# The processes whose file $2 under /proc/PID/ns is the namespace bound at $1.
pids_in_ns() {
    local p
    for p in /proc/[0-9]*; do
        # -ef: the same device and inode, which for namespaces is the same one.
        [[ $p/ns/$2 -ef $1 ]] && echo "${p#/proc/}"
    done
    return 0
}

# Every process this tool or the jobs on its nodes started: those in the
# nodes' network namespaces, those under its host names (slurmctld, srun),
# and munged (its pid file, checked against its command line).
our_pids() {
    local ns f pid
    for ns in $(our_netns); do ip netns pids "$ns" 2>/dev/null || true; done
    for f in "$STATE"/uts/*; do
        [[ -e $f ]] && mountpoint -q "$f" && pids_in_ns "$f" uts
    done
    pid=$(cat "$STATE/munge/munged.pid" 2>/dev/null) || pid=
    if [[ -n $pid ]] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$STATE/munge/"; then
        echo "$pid"
    fi
    return 0
}

# Ends every process of ours: SIGTERM, then SIGKILL to what is left after
# $TERM_GRACE seconds.  Never this shell or its ancestors.
end_processes() {
    local keep=" $$ $BASHPID " p pids
    p=$PPID
    while [[ $p -gt 1 ]]; do
        keep+="$p "
        p=$(awk '{ print $4 }' "/proc/$p/stat" 2>/dev/null) || break
    done
    pids=()
    for p in $(our_pids | sort -un); do
        [[ $keep == *" $p "* ]] || pids+=("$p")
    done
    [[ ${#pids[@]} -gt 0 ]] || return 0
    kill -TERM "${pids[@]}" 2>/dev/null || true
    local deadline=$((SECONDS + TERM_GRACE)) alive
    while :; do
        alive=()
        for p in "${pids[@]}"; do [[ -e /proc/$p ]] && alive+=("$p"); done
        [[ ${#alive[@]} -eq 0 ]] && return 0
        ((SECONDS < deadline)) || break
        sleep 0.2
    done
    note "killing ${#alive[@]} process(es) still running after SIGTERM: ${alive[*]}"
    kill -KILL "${alive[@]}" 2>/dev/null || true
    sleep 0.2
}

# Everything of ours, whatever state it is in: every step tolerates what is
# already gone.
teardown() {
    end_processes
    # Processes started meanwhile by the ones just ended (slurmstepd, a proxy).
    end_processes
    local f ns link
    for f in "$STATE"/uts/*; do
        [[ -e $f ]] || continue
        mountpoint -q "$f" && umount "$f" 2>/dev/null
        rm -f "$f"
    done
    for ns in $(our_netns); do ip netns del "$ns" 2>/dev/null || note "cannot delete namespace $ns"; done
    for link in $(ip -o link show 2>/dev/null | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' |
        grep -E '^rbtl-([vw][0-9]+|br[01])$'); do
        # A veth goes with its namespace's end: it may be gone by now.
        ip link del "$link" 2>/dev/null || ! ip link show "$link" >/dev/null 2>&1 ||
            note "cannot delete link $link"
    done
    # /run/netns, when `up` made it and nothing else uses it now.
    if [[ -e $STATE/made-run-netns && -d /run/netns ]] && [[ -z $(ls -A /run/netns) ]]; then
        mountpoint -q /run/netns && umount /run/netns 2>/dev/null
        rmdir /run/netns 2>/dev/null || true
    fi
    unname_nodes || note "cannot take the nodes' names out of $HOSTS"
    remove_spawn_files
    rm -rf -- "$STATE"
    return 0
}

# The files Slurm's pmi2 plugin leaves in /tmp, one per spawn while the nodes were
# up: slurmstepd writes each spawn's command lines to /tmp/PID.XXXXXX for
# `srun --multi-prog` and never removes it (its source says so). Only files of that
# name, made since `up`, holding multi-prog lines ("N  cmd" or "N-M  cmd") and
# nothing else.
remove_spawn_files() {
    [[ -e $STATE/owner ]] || return 0
    local f line='^[0-9]+(-[0-9]+)?  [^ ]'
    while IFS= read -r -d '' f; do
        grep -qE "$line" "$f" && ! grep -qvE "$line" "$f" && rm -f -- "$f"
    done < <(find /tmp -maxdepth 1 -type f -newer "$STATE/owner" -regextype posix-extended \
        -regex '/tmp/[0-9]+\.[A-Za-z0-9]{6}' -print0 2>/dev/null)
    return 0
}

# ------------------------------------------------------------ hold

cmd_hold() {
    cmd_up "$@"
    trap 'cmd_down' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'exit 129' HUP
    echo up
    # Until the owner closes our standard input (or dies, which closes it).
    while read -r _; do :; done
}

# ------------------------------------------------------------ entering a node

cmd_exec() {
    [[ $# -ge 2 ]] || die "exec: give a node and a command"
    local node
    node=$(resolve_node "$1")
    shift
    set_confine "$node"
    exec "${CONFINE[@]}" nsenter --net="/run/netns/$node" --uts="$(uts_file "$node")" -- "$@"
}

# ssh's calling convention: options, [user@]host, then the words of one
# command line for the remote shell.
cmd_ssh() {
    while [[ $# -gt 0 && $1 == -* ]]; do
        case $1 in
            -[bcDeEFiIJlLmoOpQRSwW]) shift 2 ;;
            *) shift ;;
        esac
    done
    [[ $# -ge 2 ]] || die "ssh: give a node and a command"
    local node
    node=$(resolve_node "$1")
    shift
    set_confine "$node"
    exec "${CONFINE[@]}" nsenter --net="/run/netns/$node" --uts="$(uts_file "$node")" -- sh -c "$*"
}

cmd_mpiexec() {
    need_tools mpiexec.mpich
    local n a hosts=1
    n=$(node_count)
    [[ $n -ge 1 ]] || die "no simulated nodes are up: \`$PROG up N\` first"
    for a in "$@"; do
        case $a in -host | -hosts | -f | -hostfile | -machinefile | -machine) hosts=0 ;; esac
    done
    local extra=()
    [[ $hosts -eq 0 ]] || extra=(-hosts "$(cmd_hosts)")
    # -iface: hydra's proxies on the nodes reach it through the bridge (without
    # it they try the machine's own address and hang).
    exec mpiexec.mpich -iface "$BRIDGE" -launcher ssh -launcher-exec "$TOOLS_DIR/nodes-ssh" \
        "${extra[@]}" "$@"
}

# ------------------------------------------------------------ reports

cmd_hosts() {
    local n k out=()
    n=${1:-$(node_count)}
    [[ $n =~ ^[0-9]+$ ]] || die "hosts: '$n' is not a count"
    [[ $n -le $(node_count) ]] || die "hosts: only $(node_count) node(s) are up"
    for ((k = 1; k <= n; k++)); do out+=("$(node_name "$k")"); done
    local IFS=,
    echo "${out[*]}"
}

cmd_status() {
    local n k node
    n=$(node_count)
    if ! is_up; then
        echo "down"
        return 0
    fi
    echo "owner: $(cat "$STATE/owner" 2>/dev/null || echo 'unknown (a crashed run? `down` cleans it)')"
    echo "bridges: $BRIDGE $BRIDGE_ADDR/24, $BRIDGE2 (no address)"
    for ((k = 1; k <= n; k++)); do
        node=$(node_name "$k")
        printf '%s: %s on %s, %s.%d on %s, %s process(es), processors %s\n' "$node" \
            "$(node_addr "$k")" "$NODE_IF" "$NET2" "$k" "$NODE_IF2" \
            "$(ip netns pids "$node" 2>/dev/null | wc -l)" \
            "$(cat "$STATE/cpus/$node" 2>/dev/null || echo all)"
    done
    if [[ -r $(slurm_conf) ]]; then
        echo "slurm: SLURM_CONF=$(slurm_conf)"
        slurm_client sinfo -N -o '%N %T' 2>&1 | sed 's/^/  /'
    fi
}

case ${1:-} in
    up) shift; cmd_up "$@" ;;
    down) shift; cmd_down ;;
    hold) shift; cmd_hold "$@" ;;
    exec) shift; cmd_exec "$@" ;;
    ssh) shift; cmd_ssh "$@" ;;
    mpiexec) shift; cmd_mpiexec "$@" ;;
    slurm) shift; cmd_slurm "$@" ;;
    status) cmd_status ;;
    hosts) shift; cmd_hosts "$@" ;;
    -h | --help | help) usage ;;
    *) usage >&2; exit 2 ;;
esac
