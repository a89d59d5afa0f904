#!/usr/bin/env bash
# Side by side on this machine, in one run: rbtl's `osu` suite and, where installed,
# Open MPI (vader with and without cross-memory attach, pml ucx) and MPICH running
# pingpong.c, our own OSU-method MPI program built with the system's mpicc. Prints,
# per benchmark and size, every figure and rbtl's ratio to each peer (latency: ours /
# theirs, lower is better; bandwidth: ours / theirs, higher is better), plus the
# machine's cache-line floors. Every system runs ROUNDS times per benchmark (default
# 2), the order of the systems reversed each time, and keeps its best figure per size.
# Each run is checked against the cache line before and after: it starts once the host
# has placed the two vCPUs near each other (waiting up to a minute), and runs again (up
# to 3 times) if they were moved apart.
#
#   benches/compare/compare.sh [-t] [-m MODES] [-s MIN_SIZE] [-M MAX_SIZE] [-r ROUNDS]
#     MODES: any of "lat bw bibw put_lat get_lat" (default: all; with -t, "lat bw"),
#     MIN_SIZE (bytes, a power of two) default each program's first size, MAX_SIZE
#     default 4 MiB
#     -t: the tcp transport over loopback, sm excluded, against Open MPI's tcp, UCX's
#         tcp (through Open MPI's pml ucx, where present) and the raw-TCP floor
#         (tcp_floor.c); every system pinned to cores 0 and 1
#     -r: runs per system and benchmark (default 2; more narrow the host's swings)
#     -s: start at MIN_SIZE: with fewer sizes, more rounds fit in a few minutes (for
#         example `-t -m bw -s 1048576 -r 8`: the bandwidth targets' sizes only)
#
# Install the peers with:
#   apt-get install -y --no-install-recommends openmpi-bin libopenmpi-dev mpich libmpich-dev
# Nothing else should run meanwhile: two cores serve both ranks.
set -euo pipefail
cd "$(dirname "$0")/../.."
. benches/compare/common.sh
MODES=
MIN=
MAX=4194304
TCP=0
ROUNDS=2
read_options 2,26 "t=TCP m:MODES s:MIN M:MAX r:ROUNDS" "$@"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "-r $ROUNDS: give the runs per system, 1 or more" >&2; exit 2; }
[[ -z $MIN || $MIN =~ ^[1-9][0-9]*$ && $((MIN & (MIN - 1))) = 0 ]] ||
    { echo "-s $MIN: give the smallest size in bytes, a power of two" >&2; exit 2; }
# Each program's option for the smallest size, when one is given.
OSU_MIN=${MIN:+--min-size $MIN}
PP_MIN=${MIN:+-m $MIN}
if [ -z "$MODES" ]; then
    if [ $TCP = 1 ]; then MODES="lat bw"; else MODES="lat bw bibw put_lat get_lat"; fi
fi
OUT=target/compare
mkdir -p "$OUT"
cargo build --release --quiet --bin osu --bin rbtlrun
gcc -O2 -o "$OUT/cacheline" benches/compare/cacheline.c

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OMPI="mpirun.openmpi --allow-run-as-root --oversubscribe -np 2 --bind-to core --mca oob_tcp_if_include lo"
UCX_ANY="--mca pml_ucx_tls any --mca pml_ucx_devices any --mca osc_ucx_tls any --mca osc_ucx_devices any"
SYSTEMS=(rbtl)
if command -v mpicc.openmpi >/dev/null && command -v mpirun.openmpi >/dev/null; then
    mpicc.openmpi -O2 -o "$OUT/pingpong.openmpi" benches/compare/pingpong.c
    if [ $TCP = 1 ]; then
        SYSTEMS+=(ompi_tcp)
        ompi_info 2>/dev/null | grep -q "pml: ucx" && SYSTEMS+=(ucx_tcp)
    else
        SYSTEMS+=(ompi_vader ompi_vader_nocma)
        ompi_info 2>/dev/null | grep -q "pml: ucx" && SYSTEMS+=(ompi_ucx)
    fi
fi
if [ $TCP = 1 ]; then
    gcc -O2 -o "$OUT/tcp_floor" benches/compare/tcp_floor.c
    SYSTEMS+=(tcp_floor)
elif command -v mpicc.mpich >/dev/null && command -v mpiexec.mpich >/dev/null; then
    # The mpich package brings mpicc.mpich; its headers come with libmpich-dev.
    if mpicc.mpich -O2 -o "$OUT/pingpong.mpich" benches/compare/pingpong.c 2>"$OUT/mpich.log"; then
        SYSTEMS+=(mpich)
    else
        echo "# MPICH left out: mpicc.mpich cannot build pingpong.c (is libmpich-dev installed? $OUT/mpich.log)"
    fi
fi

# The command that runs one system in one mode.
command_for() {
    local sys=$1 mode=$2
    case $sys in
        rbtl)
            local sub
            case $mode in lat) sub=latency ;; put_lat) sub=put-latency ;; get_lat) sub=get-latency ;; *) sub=$mode ;; esac
            # Its JSON has 4 decimals (its table, as OSU's, 2).
            if [ $TCP = 1 ]; then
                echo "target/release/rbtlrun -n 2 --bind-to core target/release/osu $sub --btl tcp,self --param btl_tcp_if_include=lo $OSU_MIN --max-size $MAX --json $OUT/rbtl.$mode.json"
            else
                echo "target/release/osu $sub $OSU_MIN --max-size $MAX --json $OUT/rbtl.$mode.json"
            fi ;;
        ompi_tcp) echo "$OMPI --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo $OUT/pingpong.openmpi $mode $PP_MIN -M $MAX" ;;
        ucx_tcp) echo "$OMPI --mca pml ucx -x UCX_TLS=tcp,self -x UCX_NET_DEVICES=lo $UCX_ANY $OUT/pingpong.openmpi $mode $PP_MIN -M $MAX" ;;
        tcp_floor) echo "$OUT/tcp_floor $mode $PP_MIN -M $MAX" ;;
        ompi_vader) echo "$OMPI --mca pml ob1 --mca btl self,vader --mca btl_vader_single_copy_mechanism cma $OUT/pingpong.openmpi $mode $PP_MIN -M $MAX" ;;
        ompi_vader_nocma) echo "$OMPI --mca pml ob1 --mca btl self,vader --mca btl_vader_single_copy_mechanism none $OUT/pingpong.openmpi $mode $PP_MIN -M $MAX" ;;
        ompi_ucx) echo "$OMPI --mca pml ucx $UCX_ANY $OUT/pingpong.openmpi $mode $PP_MIN -M $MAX" ;;
        mpich) echo "mpiexec.mpich -n 2 -bind-to core $OUT/pingpong.mpich $mode $PP_MIN -M $MAX" ;;
    esac
}

echo "# $(stamp)"
echo "# $("$OUT/cacheline") (one cache line between cores 0 and 1, one way; ~25-45 near, 63-160 far)"
if [ "${PLACEMENT:-near}" = any ]; then
    echo "# PLACEMENT=any: every run counts, wherever the host places the vCPUs"
else
    echo "# near is below $(seed_near) x 2 ns (the lowest seen first) and below $FAR_NS"
fi
echo "# $("$OUT/cacheline" 2) (one line per direction, as transports use: the floor of their latency)"
echo "# $("$OUT/cacheline" 1 40) $("$OUT/cacheline" 2 40) (both again, each side computing about 40 ns between a message and its reply)"
echo "# $("$OUT/cacheline" 2 0 pause) $("$OUT/cacheline" 2 10 pause) (one line per direction, pausing between polls)"
echo "# $("$OUT/cacheline" 2 30) $("$OUT/cacheline" 2 30 prefetchw) (one line per direction, 30 ns of work before each reply, then also asking for the reply's line before the work)"
echo "# $("$OUT/cacheline" 1 0 tight) $("$OUT/cacheline" 1 0 fence) $("$OUT/cacheline" 2 0 tight) $("$OUT/cacheline" 2 0 fence) (polling with nothing but a load and a compare, then with a fence after each look)"
# One run of `sys` in `mode`, its rows ("size value") into $OUT/$sys.$mode.$pass.txt.
# The host may move the two vCPUs apart meanwhile (everything then slows 2-4x): a run
# that starts or ends far is run again (TRIES times), and not counted if far every time.
run_one() {
    local sys=$1 mode=$2 pass=$3 rows="$OUT/$1.$2.$3.txt"
    for try in $(seq "$TRIES"); do
        before=$(near_or_wait)
        if ! $(command_for "$sys" "$mode") 2>"$OUT/$sys.$mode.err" | grep -v '^#' >"$rows"; then
            echo "# $sys $mode failed: $(tail -1 "$OUT/$sys.$mode.err")"
        fi
        if [ "$sys" = rbtl ] && [ -s "$OUT/rbtl.$mode.json" ]; then
            osu_json_rows "$OUT/rbtl.$mode.json" >"$rows"
        fi
        after=$(line_ns)
        is_far "$before" || is_far "$after" || break
        echo "# $sys $mode: cores far apart (cache line $before then $after ns), try $try of $TRIES"
        if [ "$try" -eq "$TRIES" ]; then
            : >"$rows"
            echo "# $sys $mode: far on every try, not counted"
        fi
    done
}

for mode in $MODES; do
    # Every system runs ROUNDS times, the order reversed each time, and keeps its
    # best figure per size: the host also moves its copy bandwidth between phases
    # (large transfers 2x apart within minutes, for everyone), and one run each would
    # compare systems measured in different phases.
    order=("${SYSTEMS[@]}")
    for pass in $(seq "$ROUNDS"); do
        for sys in "${order[@]}"; do run_one "$sys" "$mode" "$pass"; done
        order=($(printf '%s\n' "${order[@]}" | tac))
    done
    case $mode in lat | put_lat | get_lat) better=min ;; *) better=max ;; esac
    for sys in "${SYSTEMS[@]}"; do
        best_per_size $better $(seq -f "$OUT/$sys.$mode.%g.txt" "$ROUNDS") >"$OUT/$sys.$mode.txt"
    done
    case $mode in lat | put_lat | get_lat) unit="us, ratio = rbtl/peer (lower is better)" ;; *) unit="MB/s, ratio = rbtl/peer (higher is better)" ;; esac
    echo
    echo "## $mode ($unit)"
    header="size"
    files=()
    for sys in "${SYSTEMS[@]}"; do
        header+=" $sys"
        [ "$sys" != rbtl ] && header+=" rbtl/$sys"
        files+=("$OUT/$sys.$mode.txt")
    done
    echo "$header"
    # Join the systems' rows on size, in rbtl's order of sizes.
    awk -v n="${#files[@]}" '
        FNR == 1 { f++ }
        NF >= 2 { v[f, $1] = $2; if (f == 1) sizes[++ns] = $1 }
        END {
            for (i = 1; i <= ns; i++) {
                s = sizes[i]; line = s " " v[1, s]
                for (k = 2; k <= n; k++) {
                    if ((k, s) in v && v[k, s] > 0) line = line sprintf(" %s %.2f", v[k, s], v[1, s] / v[k, s])
                    else line = line " - -"
                }
                print line
            }
        }' "${files[@]}" | column -t
    if [ $TCP = 1 ]; then
        # The targets of the tcp transport, checked on this run's figures: latency at
        # 0-64 B at most 0.8x Open MPI's, within 1.15x of the floor and below UCX's;
        # bandwidth at 1-4 MiB at least Open MPI's, 0.95x the floor, and UCX's.
        case $mode in
            lat) lo=0 hi=64 ;;
            bw) lo=1048576 hi=4194304 ;;
            *) continue ;;
        esac
        for sys in ompi_tcp ucx_tcp tcp_floor; do
            [ -s "$OUT/$sys.$mode.txt" ] || continue
            case $mode.$sys in
                lat.ompi_tcp) target=0.8 ;; lat.ucx_tcp) target=1.0 ;; lat.tcp_floor) target=1.15 ;;
                bw.ompi_tcp) target=1.0 ;; bw.ucx_tcp) target=1.0 ;; bw.tcp_floor) target=0.95 ;;
            esac
            awk -v lo=$lo -v hi=$hi -v sys=$sys -v target=$target -v mode=$mode '
                FNR == 1 { f++ }
                NF >= 2 && $1 >= lo && $1 <= hi && $2 > 0 { v[f, $1] = $2; if (f == 1) s[++n] = $1 }
                END {
                    worst = ""; count = 0
                    for (i = 1; i <= n; i++) {
                        if (!((2, s[i]) in v)) continue
                        r = v[1, s[i]] / v[2, s[i]]; count++
                        if (worst == "" || (mode == "lat" ? r > worst : r < worst)) worst = r
                    }
                    if (count == 0) exit
                    met = mode == "lat" ? worst <= target : worst >= target
                    printf "# target %s vs %s, %d-%d B: worst rbtl/%s %.2f, %s %.2f: %s\n", mode, sys, lo, hi, sys, worst, mode == "lat" ? "at most" : "at least", target, met ? "met" : "NOT met"
                }' "$OUT/rbtl.$mode.txt" "$OUT/$sys.$mode.txt"
        done
    fi
done
