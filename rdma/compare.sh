#!/usr/bin/env bash
# The openib transport against raw verbs on the same device, in one run, at small
# sizes: `osu latency` against perftest's ib_send_lat, `osu put-latency` against
# ib_write_lat, `osu get-latency` against ib_read_lat. Each pair is measured
# alternately REPS times; the medians are compared, and the best runs (interference
# from the host only ever slows a run down, so the lowest figure of each side is the
# least disturbed one). On a host without an RDMA device everything runs inside the
# soft-RoCE guest (rdma/guest.sh).
#
#   rdma/compare.sh [--pair] [--cpc oob|rdma_cm] [--iterations N] [--reps N]
#
# --pair: across two nodes, the two guests of `rdma/guest.sh pair` (each its own kernel
# and rxe, joined by a qemu socket network): perftest's server on the other guest, osu
# under hydra with one rank on each. A message there takes milliseconds under emulation,
# so the defaults drop to 30 iterations and 3 runs.
#
# Compare ratios measured in one run, never absolute figures: the guest emulates its
# CPU, so every figure there is several times slower than on hardware, and noisy.
# ib_send_lat, ib_write_lat and ib_read_lat report what OSU reports for latency and
# get-latency (half a send round trip; a read's full round trip). ib_write_lat is
# half of a write ping-pong, while a put with flush waits for the write's
# acknowledgement, a full round trip: that pair compares unlike quantities. So
# put-latency is also compared with twice ib_write_lat's figure (a whole round trip),
# and with the same operation in raw verbs: ib_write_bw with one write in flight and
# every completion polled (-t 1 -Q 1), whose message rate gives the time of one write
# from post to completion.
set -euo pipefail
cd "$(dirname "$0")/.."

CPC=oob
ITERS=
REPS=
PAIR=0
SIZES=(8 64)
while [ $# -gt 0 ]; do
    case $1 in
        --pair) PAIR=1; shift ;;
        --cpc) CPC=$2; shift 2 ;;
        --iterations) ITERS=$2; shift 2 ;;
        --reps) REPS=$2; shift 2 ;;
        --inside) INSIDE=1; shift ;;
        -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
        *) echo "compare.sh: unknown option $1" >&2; exit 2 ;;
    esac
done

if [ $PAIR = 1 ]; then
    ITERS=${ITERS:-30} REPS=${REPS:-3} SKIP=2
else
    ITERS=${ITERS:-20000} REPS=${REPS:-7} SKIP=100
fi
if [ -z "${INSIDE:-}" ]; then
    cargo build --release --features openib --bin osu --quiet
    if [ $PAIR = 1 ]; then
        exec rdma/guest.sh pair "$0" --inside --pair --cpc "$CPC" --iterations "$ITERS" --reps "$REPS"
    fi
    exec rdma/guest.sh run "$0" --inside --cpc "$CPC" --iterations "$ITERS" --reps "$REPS"
fi

DEV=$(ls /sys/class/infiniband | head -1)
ADDR=198.18.0.1
ip -4 -o addr show | grep -q " $ADDR/" || ADDR=$(ip -4 -o addr show scope global | awk '{sub("/.*","",$4); print $4; exit}')
GID=1 # the RoCEv2 IPv4 GID on rxe
PEER=${GUEST_PAIR_HOSTS:-}; PEER=${PEER#*,} # the other guest of a pair

# Run a perftest tool as server and client, talking over the server's IP address; the
# client's output. One guest: both on its device, each bound to a core as osu binds its
# ranks. A pair: the server on the other guest.
perftest_pair() {
    local tool=$1
    shift
    if [ $PAIR = 1 ]; then
        "$GUEST_PAIR_EXEC" "$PEER" "$tool -d $DEV -x $GID -F $*" >/dev/null 2>&1 &
        local server=$!
        sleep 2
        "$tool" -d "$DEV" -x "$GID" -F "$@" "$PEER" 2>/dev/null
    else
        taskset -c 0 "$tool" -d "$DEV" -x "$GID" -F "$@" >/dev/null 2>&1 &
        local server=$!
        sleep 1
        taskset -c 1 "$tool" -d "$DEV" -x "$GID" -F "$@" "$ADDR" 2>/dev/null
    fi
    wait $server || true
}

# perftest's average latency (t_avg, usec) for one size.
perftest() {
    local tool=$1 size=$2
    perftest_pair "$tool" -s "$size" -n "$ITERS" |
        awk -v s="$size" '$1 == s && NF >= 6 { print $6 }'
}

# The time (usec) of one RDMA write from post to completion: ib_write_bw with one
# write in flight, every completion polled; 1 / its message rate (Mpps).
write_one() {
    local size=$1
    perftest_pair ib_write_bw -s "$size" -n "$ITERS" -t 1 -Q 1 |
        awk -v s="$size" '$1 == s && NF >= 5 && $5 > 0 { printf "%.2f\n", 1 / $5 }'
}

# osu's figure for one size (a pair: under hydra, one rank on each guest).
osu() {
    local bench=$1 size=$2 launch=()
    if [ $PAIR = 1 ]; then
        launch=(mpiexec.mpich -hosts "$GUEST_PAIR_HOSTS" -n 2 -ppn 1 -iface "$GUEST_PAIR_IFACE"
            -launcher ssh -launcher-exec "$GUEST_PAIR_EXEC")
    fi
    "${launch[@]}" target/release/osu "$bench" --btl self,openib --cpc "$CPC" \
        --min-size "$size" --max-size "$size" --iterations "$ITERS" --skip "$SKIP" |
        awk -v s="$size" '$1 == s { print $2 }'
}

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
best() { sort -g | head -1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }

where="$DEV"
[ $PAIR = 1 ] && where="$DEV, across two guests"
printf '# openib (%s) against raw verbs on %s: %d alternating runs of %d iterations each;\n' \
    "$CPC" "$where" "$REPS" "$ITERS"
printf '# the medians, and the best (lowest) run of each side: interference only slows a run\n'
printf '%-34s %5s %9s %9s %6s %9s %9s %6s\n' "ours / perftest" size "ours" "verbs" ratio \
    "ours" "verbs" ratio
printf '%-34s %5s %9s %9s %6s %9s %9s %6s\n' "" "" "median" "median" "" "best" "best" ""
for size in "${SIZES[@]}"; do
    for pair in "latency ib_send_lat" "put-latency ib_write_lat" \
        "put-latency ib_write_bw-t1" "get-latency ib_read_lat"; do
        set -- $pair
        ours=() theirs=()
        for _ in $(seq "$REPS"); do
            ours+=("$(osu "$1" "$size")")
            if [ "$2" = ib_write_bw-t1 ]; then
                theirs+=("$(write_one "$size")")
            else
                theirs+=("$(perftest "$2" "$size")")
            fi
        done
        o=$(printf '%s\n' "${ours[@]}" | median)
        t=$(printf '%s\n' "${theirs[@]}" | median)
        ob=$(printf '%s\n' "${ours[@]}" | best)
        tb=$(printf '%s\n' "${theirs[@]}" | best)
        printf '%-34s %5d %9s %9s %6s %9s %9s %6s\n' "osu $1 / $2" "$size" "$o" "$t" \
            "$(ratio "$o" "$t")" "$ob" "$tb" "$(ratio "$ob" "$tb")"
        if [ "$2" = ib_write_lat ]; then
            # ib_write_lat reports half a round trip; a put with flush takes a whole one.
            t2=$(awk -v t="$t" 'BEGIN { printf "%.2f", 2 * t }')
            tb2=$(awk -v t="$tb" 'BEGIN { printf "%.2f", 2 * t }')
            printf '%-34s %5d %9s %9s %6s %9s %9s %6s\n' "osu $1 / 2 x $2" "$size" "$o" "$t2" \
                "$(ratio "$o" "$t2")" "$ob" "$tb2" "$(ratio "$ob" "$tb2")"
        fi
    done
done
