#!/usr/bin/env bash
# rdma/pair-exec.sh - run a command on the other guest of a pair (rdma/guest.sh
# pair), in the manner of ssh: hydra's `-launcher ssh -launcher-exec` for the pair.
#
#   pair-exec.sh [-x] HOST COMMAND...   run COMMAND on HOST (joined by spaces and
#                                       given to bash -c, as ssh does), its output
#                                       (stdout and stderr merged) here, its status
#                                       ours
#   pair-exec.sh --follow DIR           the other guest's side: run what is asked
#                                       in DIR until DIR/done appears
#
# The two guests share no shell channel, only a folder of the host's (9p, DIR), so a
# request is a folder there: `cmd` and `cwd`, then the follower's `taken`, `out`,
# `pid` and `status`; a `kill` file asks the follower to end the command's process
# group (sent when this side is interrupted).  HOST is this guest itself (its host
# name or one of its addresses) or the other one; there are only two.
#
# Environment: GUEST_PAIR_DIR (default /rbtl-pair), GUEST_PAIR_TIMEOUT (seconds a
# request may take, default 1200).
set -uo pipefail

readonly PROG=${0##*/}
note() { printf '%s: %s\n' "$PROG" "$*" >&2; }

# The follower: poll DIR for requests, run each in its own process group.
follow() {
    local dir=$1 req pid
    [[ -d $dir ]] || { note "no folder $dir"; exit 2; }
    note "following requests in $dir on $(hostname)"
    declare -A running=()
    while [[ ! -e $dir/done ]]; do
        for req in "$dir"/req.*; do
            [[ -f $req/ready ]] || continue
            mkdir "$req/taken" 2>/dev/null || continue
            setsid /usr/bin/bash -c '
                cd -- "$(cat "$1/cwd")" || exit 125
                /usr/bin/bash -c "$(cat "$1/cmd")" </dev/null >"$1/out" 2>&1
                rc=$?
                echo "$rc" >"$1/status.tmp" && mv "$1/status.tmp" "$1/status"' \
                follower "$req" &
            running[$req]=$!
            echo "$!" >"$req/pid"
        done
        for req in "${!running[@]}"; do
            pid=${running[$req]}
            if ! kill -0 "$pid" 2>/dev/null; then
                wait "$pid" 2>/dev/null
                unset "running[$req]"
            elif [[ -e $req/kill ]]; then
                kill -TERM -- "-$pid" 2>/dev/null
            fi
        done
        sleep 0.05
    done
    for pid in "${running[@]}"; do kill -KILL -- "-$pid" 2>/dev/null; done
    note "done"
}

# Whether HOST names this guest.
is_self() {
    local host=$1 a
    [[ $host == "$(hostname)" || $host == localhost || $host == 127.0.0.1 ]] && return 0
    for a in $(hostname -I 2>/dev/null) $(ip -4 -o addr show 2>/dev/null | awk '{sub("/.*", "", $4); print $4}'); do
        [[ $host == "$a" ]] && return 0
    done
    return 1
}

# Ask the follower to run COMMAND; stream its output; exit with its status.
request() {
    local dir=${GUEST_PAIR_DIR:-/rbtl-pair} timeout=${GUEST_PAIR_TIMEOUT:-1200}
    local id req
    id=$(date +%s%N)-$$
    req=$dir/req.$id
    mkdir "$req" || { note "cannot write to $dir"; exit 255; }
    printf '%s' "$*" >"$req/cmd"
    pwd -P >"$req/cwd"
    : >"$req/ready"
    trap ': >"$req/kill"; exit 130' INT TERM HUP
    local shown=0 size deadline=$((SECONDS + timeout))
    while :; do
        local finished=0
        [[ -s $req/status ]] && finished=1
        if [[ -f $req/out ]]; then
            size=$(stat -c %s "$req/out")
            if ((size > shown)); then
                tail -c "+$((shown + 1))" "$req/out" | head -c "$((size - shown))"
                shown=$size
            fi
        fi
        if ((finished)); then
            exit "$(cat "$req/status")"
        fi
        if ((SECONDS > deadline)); then
            : >"$req/kill"
            note "the command on the other guest took over ${timeout}s (GUEST_PAIR_TIMEOUT): asked it to stop"
            exit 124
        fi
        if [[ -e $dir/done ]]; then
            note "the other guest is stopping"
            exit 255
        fi
        sleep 0.05
    done
}

main() {
    if [[ ${1:-} == --follow ]]; then
        follow "${2:?--follow needs a folder}"
        return
    fi
    # ssh's options that hydra passes (-x: no X11 forwarding) mean nothing here.
    while [[ ${1:-} == -* ]]; do shift; done
    local host=${1:?usage: $PROG [-x] HOST COMMAND...}
    shift
    [[ $# -ge 1 ]] || { note "no command for $host"; exit 255; }
    if is_self "$host"; then
        exec /usr/bin/bash -c "$*"
    fi
    request "$@"
}

main "$@"
