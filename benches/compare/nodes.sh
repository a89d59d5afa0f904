#!/usr/bin/env bash
# Across simulated nodes (tools/nodes.sh: network namespaces on one bridge), in one
# run: rbtl's `osu latency` and `osu bw` over tcp between two nodes (one rank each,
# launched by MPICH's hydra) against Open MPI's tcp running pingpong.c, our OSU-method
# MPI program, on the same nodes, and against the floor under both (tcp_floor.c: raw
# TCP between the two nodes, busy-polled, no framing); and wire-up, `osu init` against init.c on Open MPI
# (MPI_Init plus a first alltoall, as one message to and from every rank), at 2, 4, 8
# and 16 ranks over 2 and 4 nodes, ranks filling each node in turn. Prints every figure
# side by side with rbtl's ratio to Open MPI.
#
#   benches/compare/nodes.sh [-m MODES] [-M MAX_SIZE] [-r RUNS] [-R RANKS]
#     MODES: any of "lat bw init" (default: all); MAX_SIZE default 4 MiB;
#     RUNS: runs of each init case (default 5; the median is shown);
#     RANKS: rank counts of init (default "2 4 8 16"; "2 4 8 16 32 64" gives the
#       scaling table, more ranks than cores)
#
# lat and bw: each system runs twice, in opposite orders, keeping its better figure
# per size. init: the runs alternate between the systems; the figure is the median
# over runs of the slowest rank's time (each rank: from the start of its main to its
# last message), with the TCP connections each process opened, its descriptors (all,
# and those opened since its main began: the others are the launcher's), and the wall
# time of the whole launch (launcher included). Needs root, mpich,
# openmpi-bin and libopenmpi-dev; nothing else should run meanwhile (every "node" is
# the same 2 cores).
set -euo pipefail
cd "$(dirname "$0")/../.."
. benches/compare/common.sh
MODES="lat bw init"
MAX=4194304
RUNS=5
RANK_COUNTS="2 4 8 16"
read_options 2,25 "m:MODES M:MAX r:RUNS R:RANK_COUNTS" "$@"
[[ $EUID -eq 0 ]] || { echo "nodes.sh: needs root (simulated nodes)" >&2; exit 1; }
for t in mpiexec.mpich mpirun.openmpi mpicc.openmpi; do
    command -v "$t" >/dev/null || { echo "nodes.sh: $t is missing (apt-get install mpich openmpi-bin libopenmpi-dev)" >&2; exit 1; }
done

OUT=target/compare/nodes
mkdir -p "$OUT"
cargo build --release --quiet --bin osu
mpicc.openmpi -O2 -o "$OUT/pingpong.openmpi" benches/compare/pingpong.c
mpicc.openmpi -O2 -o "$OUT/init.openmpi" benches/compare/init.c
gcc -O2 -o "$OUT/tcp_floor" benches/compare/tcp_floor.c

TOOL=$PWD/tools/nodes.sh
SSH=$PWD/tools/nodes-ssh
CIDR=198.18.1.0/24
# Every launch has this many seconds, then it is killed.
LIMIT=600
bash "$TOOL" up 4
trap 'bash "$TOOL" down' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

export RBTL_BTL_TCP_IF_INCLUDE=$CIDR
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
HYDRA=(mpiexec.mpich -iface rbtl-br0 -launcher ssh -launcher-exec "$SSH")
# --bind-to none: every "node" would bind its first rank to core 0, the same core.
OMPI=(mpirun.openmpi --allow-run-as-root --mca plm_rsh_agent "$SSH" --bind-to none
    --mca pml ob1 --mca btl_tcp_if_include "$CIDR" --mca oob_tcp_if_include "$CIDR")

# a,b,...: the first $1 nodes, each followed by $2 (":N" slots for Open MPI) if given.
hosts() {
    local k out=()
    for ((k = 1; k <= $1; k++)); do out+=("rbtl-n$k${2:-}"); done
    local IFS=,
    echo "${out[*]}"
}

echo "# $(stamp)"
echo "# nodes: $(hosts 4) on bridge rbtl-br0, $CIDR; rbtl launched by hydra, Open MPI by mpirun, both through tools/nodes-ssh"

# ------------------------------------------------------------ lat, bw

run_pingpong() {
    local sys=$1 mode=$2 pass=$3 rows="$OUT/$1.$2.$3.txt" sub
    case $mode in lat) sub=latency ;; *) sub=$mode ;; esac
    case $sys in
        rbtl)
            timeout -k 5 $LIMIT "${HYDRA[@]}" -hosts "$(hosts 2)" -n 2 -ppn 1 \
                target/release/osu "$sub" --max-size "$MAX" --json "$OUT/rbtl.$mode.json" \
                >"$OUT/rbtl.$mode.out" 2>"$OUT/rbtl.$mode.err" ||
                echo "# rbtl $mode failed: $(tail -1 "$OUT/rbtl.$mode.err")"
            grep -q "over tcp)" "$OUT/rbtl.$mode.out" ||
                echo "# rbtl $mode did not run over tcp: $(head -1 "$OUT/rbtl.$mode.out")"
            osu_json_rows "$OUT/rbtl.$mode.json" >"$rows" ;;
        ompi_tcp)
            timeout -k 5 $LIMIT "${OMPI[@]}" --host "$(hosts 2)" -np 2 --mca btl self,tcp \
                "$OUT/pingpong.openmpi" "$mode" -M "$MAX" 2>"$OUT/ompi.$mode.err" |
                grep -v '^#' >"$rows" || echo "# ompi_tcp $mode failed: $(tail -1 "$OUT/ompi.$mode.err")" ;;
        tcp_floor)
            # The listening end on the second node, the origin (which prints) on the first.
            timeout -k 5 $LIMIT "$SSH" rbtl-n2 "$PWD/$OUT/tcp_floor" "$mode" -M "$MAX" -l 7777 \
                >/dev/null 2>"$OUT/floor.$mode.err" &
            timeout -k 5 $LIMIT "$SSH" rbtl-n1 "$PWD/$OUT/tcp_floor" "$mode" -M "$MAX" -c 198.18.1.2:7777 \
                2>>"$OUT/floor.$mode.err" | grep -v '^#' >"$rows" ||
                echo "# tcp_floor $mode failed: $(tail -1 "$OUT/floor.$mode.err")"
            wait ;;
    esac
}

for mode in $MODES; do
    [[ $mode == init ]] && continue
    for pass in 1 2; do
        if [[ $pass == 1 ]]; then order=(rbtl ompi_tcp tcp_floor); else order=(tcp_floor ompi_tcp rbtl); fi
        for sys in "${order[@]}"; do run_pingpong "$sys" "$mode" "$pass"; done
    done
    case $mode in lat) better=min unit="us, ratio = rbtl/ompi (lower is better)" ;;
        *) better=max unit="MB/s, ratio = rbtl/ompi (higher is better)" ;; esac
    for sys in rbtl ompi_tcp tcp_floor; do
        best_per_size $better "$OUT/$sys.$mode.1.txt" "$OUT/$sys.$mode.2.txt" >"$OUT/$sys.$mode.txt"
    done
    echo
    echo "## $mode across 2 nodes, 1 rank each ($unit; floor = raw TCP, to_floor = rbtl/floor)"
    {
        echo "size rbtl ompi_tcp ratio floor to_floor"
        awk 'FNR == 1 { f++ }
            NF >= 2 { v[f, $1] = $2; if (f == 1) sizes[++n] = $1 }
            function of(k, s) { return ((k, s) in v && v[k, s] > 0) ? sprintf("%.2f", v[1, s] / v[k, s]) : "-" }
            END {
                for (i = 1; i <= n; i++) {
                    s = sizes[i]
                    o = (2, s) in v ? v[2, s] : "-"
                    r = (3, s) in v ? v[3, s] : "-"
                    printf "%s %s %s %s %s %s\n", s, v[1, s], o, of(2, s), r, of(3, s)
                }
            }' "$OUT/rbtl.$mode.txt" "$OUT/ompi_tcp.$mode.txt" "$OUT/tcp_floor.$mode.txt"
    } | column -t
done

# ------------------------------------------------------------ init

# One init run: "max_ms conns_max fds_max wall_s opened_max" from the report's lines.
init_once() {
    local sys=$1 nodes=$2 ranks=$3 per=$(($3 / $2)) t0 t1 out
    t0=$(date +%s.%N)
    case $sys in
        rbtl) out=$(timeout -k 5 $LIMIT "${HYDRA[@]}" -hosts "$(hosts "$nodes")" -n "$ranks" -ppn "$per" \
            target/release/osu init 2>"$OUT/init.err") || { echo "- - - - -"; return; } ;;
        ompi) out=$(timeout -k 5 $LIMIT "${OMPI[@]}" --host "$(hosts "$nodes" ":$per")" -np "$ranks" \
            --map-by slot --mca btl self,vader,tcp "$OUT/init.openmpi" 2>"$OUT/init.err") || { echo "- - - - -"; return; } ;;
    esac
    t1=$(date +%s.%N)
    awk -v t0="$t0" -v t1="$t1" '
        /^nprocs:/ { for (i = 1; i <= NF; i++) if ($i == "max:") ms = $(i + 1) }
        /^tcp connections/ { for (i = 1; i <= NF; i++) if ($i == "max") c = $(i + 1); sub(/,/, "", c) }
        /^file descriptors/ {
            for (i = 1; i <= NF; i++) if ($i == "max") { if (f == "") f = $(i + 1); else o = $(i + 1) }
            sub(/,/, "", f); sub(/,/, "", o); exit
        }
        END { printf "%s %s %s %.3f %s\n", ms, c, f, t1 - t0, o }' <<<"$out"
}

# The median of the numbers on standard input ("-" when there are none).
median() { sort -g | awk '{ v[++n] = $1 } END { if (n == 0) print "-"; else if (n % 2) print v[(n + 1) / 2]; else print (v[n / 2] + v[n / 2 + 1]) / 2 }'; }

if [[ " $MODES " == *" init "* ]]; then
    echo
    echo "## init: ms from the start of main until every pair has exchanged a message, slowest rank,"
    echo "## median of $RUNS runs (ratio = rbtl/ompi, lower is better); connections opened and"
    echo "## descriptors per process (most of any rank; _own: opened since main began, the"
    echo "## rest are the launcher's); wall = the whole launch in s"
    {
        echo "nodes ranks rbtl_ms ompi_ms ratio rbtl_conns ompi_conns rbtl_fds ompi_fds rbtl_own ompi_own rbtl_wall ompi_wall"
        for nodes in 2 4; do
            for ranks in $RANK_COUNTS; do
                [[ $ranks -ge $nodes ]] || continue
                : >"$OUT/init.rbtl" && : >"$OUT/init.ompi"
                for ((i = 0; i < RUNS; i++)); do
                    if ((i % 2)); then order=(ompi rbtl); else order=(rbtl ompi); fi
                    for sys in "${order[@]}"; do init_once "$sys" "$nodes" "$ranks" >>"$OUT/init.$sys"; done
                done
                col() { awk -v c="$2" '$c != "-" { print $c }' "$OUT/init.$1" | median; }
                r=$(col rbtl 1) o=$(col ompi 1)
                ratio=$(awk -v r="$r" -v o="$o" 'BEGIN { if (r == "-" || o == "-" || o == 0) print "-"; else printf "%.2f", r / o }')
                echo "$nodes $ranks $r $o $ratio $(col rbtl 2) $(col ompi 2) $(col rbtl 3) $(col ompi 3) $(col rbtl 5) $(col ompi 5) $(col rbtl 4) $(col ompi 4)"
            done
        done
    } | column -t
fi
