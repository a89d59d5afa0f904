#!/usr/bin/env bash
# Side by side: the OSU micro-benchmarks 7.2, the same unmodified sources built twice by
# tools/osu.sh, natively against Open MPI (ompi) and against rbtl's MPI standard ABI
# (abi: the release libmpi_abi.so, compiled against the MPI Forum's reference mpi.h),
# run alternately on this node and across two simulated nodes (tools/nodes.sh); and
# rbtl's own `osu` (osu: the same benchmarks straight on rbtl::msg) beside OSU's on the
# ABI wherever it has the benchmark, which shows what the ABI layer costs. Prints, per
# benchmark, rank count and size, each system's median over the rounds and the ratios
# abi/ompi and abi/osu (latency: lower is better; bandwidth: higher is better), then the
# goals checked on this run's figures. As compare.sh does, each run is checked against
# the cache line between cores 0 and 1 before and after (every rank of every system
# runs on those two cores, on one node and across the simulated nodes alike): it starts
# once the host has placed the two vCPUs near each other (waiting up to a minute; near
# is under 80 ns and under twice the lowest time seen in the run), and a run of two
# ranks runs again (up to 3 times, or NEAR_TRIES) if they were moved apart meanwhile,
# and is not counted if they were apart on every try (with PLACEMENT=any every run
# counts, wherever the host places them); longer runs of more ranks than cores are
# noted, not repeated. The goals:
#   point-to-point latency at 1-64 B at most 0.8x Open MPI's (sm on one node, tcp
#   across), bandwidth at 1-4 MiB at least 1.0x; one-sided latency at most 1.0x (every
#   size); osu_allreduce, osu_bcast and osu_barrier at most 1.0x at 2, 4 and 8 ranks.
#   OSU's other blocking collectives (osu_allgather, osu_alltoall, osu_gather,
#   osu_scatter, osu_reduce, osu_reduce_scatter) have their ratios printed, no goal.
#
#   benches/compare/osu-abi.sh [-w WHERE] [-g PARTS] [-r ROUNDS] [-m MIN_SIZE] [-M MAX_SIZE]
#       [-i ITERATIONS] [-n RANKS] [-C COLL_MAX]
#     WHERE: any of "node nodes" (default both; "nodes" needs root and mpich)
#     PARTS: any of "pt2pt onesided coll coll-other" (default all; coll-other: the
#       blocking collectives without a goal, at the same rank counts)
#     ROUNDS: runs of each system per benchmark, alternating, the order reversed each
#       round (default 3; the median per size is shown)
#     MIN_SIZE, MAX_SIZE: smallest and largest size of the point-to-point and one-sided
#       benchmarks (default 1 B and 4 MiB; they run OSU's default iterations; shorter
#       ranges make shorter runs, which the host's placement moves less often)
#     ITERATIONS: timed iterations per size of the collectives, after a tenth as
#       many warm-up, sizes up to COLL_MAX (default 1000, OSU's own for small sizes:
#       with 100 the figures vary by half between runs); the same for both systems
#     RANKS: the collectives' rank counts, 2 or more (default "2 4 8")
#     COLL_MAX: the collectives' largest size (default 65536; the goals are checked
#       on every size run)
#
# One node: Open MPI's ob1 over vader (its shared memory), rbtl over sm (mpiexec); two
# ranks are pinned to cores 0 and 1 (mpirun --bind-to core, mpiexec --bind-to core;
# osu pins its own); more ranks than cores are bound by neither launcher: there rbtl's
# ranks bind themselves round-robin during MPI_Init (msg_bind_to = auto), Open MPI's
# run unbound, as it leaves oversubscribed ranks. Across nodes: each node runs on its
# own share of the cores, as real nodes have processors of their own (tools/nodes.sh
# up --own-cpus: one core each on two), one rank on each node for point-to-point and
# one-sided (tcp), ranks filling each node in turn for the collectives (tcp across,
# shared memory within); rbtl under MPICH's hydra, Open MPI under its mpirun with
# --bind-to none (the node's share confines its ranks) and its one-sided over messages
# (osc pt2pt), both through tools/nodes-ssh. Where a node's ranks outnumber its cores,
# rbtl's ranks yield when idle (msg_yield_when_idle = auto sees it) and Open MPI's are
# told to (mpi_yield_when_idle 1: its mpirun, given the nodes' slots, does not set it
# there, and its ranks then spin, each collective a time slice). Needs make, gcc,
# openmpi-bin and libopenmpi-dev (installed when missing, as root); across nodes root
# and mpich (bash tools/packages.sh install host nodes). Nothing else should run
# meanwhile: two cores serve every rank.
set -euo pipefail
cd "$(dirname "$0")/../.."
. benches/compare/common.sh
WHERE="node nodes"
PARTS="pt2pt onesided coll coll-other"
ROUNDS=3
MIN=1
MAX=4194304
COLL_ITER=1000
COLL_RANKS="2 4 8"
COLL_MAX=65536
read_options 2,58 "w:WHERE g:PARTS r:ROUNDS m:MIN M:MAX i:COLL_ITER n:COLL_RANKS C:COLL_MAX" "$@"
die() { echo "osu-abi.sh: $*" >&2; exit 1; }
for w in $WHERE; do [[ $w == node || $w == nodes ]] || die "-w: '$w' is neither node nor nodes"; done
for g in $PARTS; do
    [[ $g =~ ^(pt2pt|onesided|coll|coll-other)$ ]] ||
        die "-g: '$g' is not one of pt2pt onesided coll coll-other"
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "-r $ROUNDS: give the runs per system, 1 or more"
[[ $MAX =~ ^[1-9][0-9]*$ ]] || die "-M $MAX: give the largest size in bytes"
[[ $MIN =~ ^[1-9][0-9]*$ && $MIN -le $MAX ]] || die "-m $MIN: give the smallest size in bytes, at most -M"
[[ $COLL_ITER =~ ^[1-9][0-9]*$ ]] || die "-i $COLL_ITER: give the collectives' iterations, 1 or more"
[[ $COLL_MAX =~ ^[1-9][0-9]*$ ]] || die "-C $COLL_MAX: give the collectives' largest size in bytes"
for n in $COLL_RANKS; do
    [[ $n =~ ^[1-9][0-9]*$ && $n -ge 2 ]] || die "-n: '$n' is not a rank count of 2 or more"
done
if [[ " $WHERE " == *" nodes "* ]]; then
    [[ $EUID -eq 0 ]] || die "across nodes needs root (simulated nodes); -w node runs on this node only"
    command -v mpiexec.mpich >/dev/null || die "mpiexec.mpich is missing (bash tools/packages.sh install host nodes)"
fi
for t in make gcc column timeout; do command -v "$t" >/dev/null || die "$t is missing"; done

# Open MPI, installed when missing (as ../shared/anchors/build.sh does).
OMPI_PKGS="openmpi-bin libopenmpi-dev"
if ! command -v mpicc.openmpi >/dev/null || ! command -v mpirun.openmpi >/dev/null; then
    [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null ||
        die "Open MPI is missing: apt-get install -y --no-install-recommends $OMPI_PKGS"
    echo "# installing $OMPI_PKGS" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $OMPI_PKGS >/dev/null ||
        { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $OMPI_PKGS >/dev/null; } ||
        die "cannot install $OMPI_PKGS"
fi

OUT=target/compare/osu-abi
rm -rf "$OUT"
mkdir -p "$OUT"
cargo build --release --quiet -p rbtl-abi
cargo build --release --quiet --bin osu
gcc -O2 -o "$OUT/cacheline" benches/compare/cacheline.c
ABI=$(bash tools/osu.sh abi target/release) || die "tools/osu.sh could not build OSU against the ABI"
OMPI=$(bash tools/osu.sh openmpi) || die "tools/osu.sh could not build OSU against Open MPI"

# Every launch has this many seconds, then it is killed.
LIMIT=900
CORES=$(nproc)
# The cores of each of the two simulated nodes (up --own-cpus).
NODE_CORES=$((CORES / 2 > 0 ? CORES / 2 : 1))
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TOOL=$PWD/tools/nodes.sh
SSH=$PWD/tools/nodes-ssh
CIDR=198.18.1.0/24
HYDRA=(mpiexec.mpich -iface rbtl-br0 -launcher ssh -launcher-exec "$SSH")
OMPI_NODE=(mpirun.openmpi --allow-run-as-root --oversubscribe --mca oob_tcp_if_include lo
    --mca pml ob1 --mca btl self,vader)
# osc pt2pt: Open MPI's default one-sided component (rdma) refuses accumulates over
# tcp (MPI_ERR_WIN at MPI_Win_allocate).
OMPI_NODES=(mpirun.openmpi --allow-run-as-root --mca plm_rsh_agent "$SSH" --bind-to none
    --mca pml ob1 --mca osc pt2pt --mca btl_tcp_if_include "$CIDR" --mca oob_tcp_if_include "$CIDR")

# The benchmarks of each group; the collectives also by rank count.
PT2PT="osu_latency osu_bw osu_bibw"
ONESIDED="osu_put_latency osu_get_latency osu_acc_latency osu_get_acc_latency osu_fop_latency
    osu_cas_latency osu_put_bw osu_get_bw osu_put_bibw"
COLL="osu_allreduce osu_bcast osu_barrier"
COLL_OTHER="osu_allgather osu_alltoall osu_gather osu_scatter osu_reduce osu_reduce_scatter"

# rbtl's osu's name for an OSU benchmark, when it has it.
osu_sub() {
    case $1 in
        osu_latency) echo latency ;; osu_bw) echo bw ;; osu_bibw) echo bibw ;;
        osu_put_latency) echo put-latency ;; osu_get_latency) echo get-latency ;;
        osu_put_bw) echo put-bw ;; osu_get_bw) echo get-bw ;;
        *) ;;
    esac
}
is_latency() { [[ $1 != *_bw && $1 != *_bibw ]]; }

# OSU's options for a benchmark: point-to-point and one-sided from MIN to MAX at OSU's
# iterations; collectives up to COLL_MAX at COLL_ITER.
osu_args() {
    local it=$COLL_ITER
    case $1 in
        osu_barrier) echo "-i $it -x $(((it + 9) / 10))" ;;
        osu_allreduce | osu_bcast | osu_allgather | osu_alltoall | osu_gather | osu_scatter | \
            osu_reduce | osu_reduce_scatter) echo "-m 1:$COLL_MAX -i $it -x $(((it + 9) / 10))" ;;
        *) echo "-m $MIN:$MAX" ;;
    esac
}

# The command of one run: where, system, benchmark, ranks; JSON file for osu.
command_for() {
    local where=$1 sys=$2 bench=$3 ranks=$4 json=$5 per bind=none
    per=$(((ranks + 1) / 2))
    [[ $ranks -le $CORES ]] && bind=core
    case $where.$sys in
        node.ompi) echo "${OMPI_NODE[*]} -np $ranks --bind-to $bind $OMPI/$bench $(osu_args "$bench")" ;;
        node.abi) echo "env RBTL_BTL_TCP_IF_INCLUDE=lo target/release/mpiexec -n $ranks --bind-to $bind $ABI/$bench $(osu_args "$bench")" ;;
        node.osu) echo "env RBTL_BTL_TCP_IF_INCLUDE=lo target/release/osu $(osu_sub "$bench") --min-size $MIN --max-size $MAX --json $json" ;;
        nodes.ompi)
            local btl=self,tcp yield=
            [[ $per -gt 1 ]] && btl=self,vader,tcp
            [[ $per -gt $NODE_CORES ]] && yield="--mca mpi_yield_when_idle 1"
            echo "${OMPI_NODES[*]} $yield --host rbtl-n1:$per,rbtl-n2:$per --map-by slot -np $ranks --mca btl $btl $OMPI/$bench $(osu_args "$bench")" ;;
        nodes.abi) echo "env RBTL_BTL_TCP_IF_INCLUDE=$CIDR ${HYDRA[*]} -hosts rbtl-n1,rbtl-n2 -n $ranks -ppn $per $ABI/$bench $(osu_args "$bench")" ;;
        nodes.osu) echo "env RBTL_BTL_TCP_IF_INCLUDE=$CIDR ${HYDRA[*]} -hosts rbtl-n1,rbtl-n2 -n $ranks -ppn $per target/release/osu $(osu_sub "$bench") --min-size $MIN --max-size $MAX --json $json" ;;
    esac
}

# One run; its rows ("size value", "- value" for a table without sizes) into $5. A run
# of at most as many ranks as cores that starts or ends with the vCPUs far apart is run
# again (TRIES tries), and not counted if far on every try.
run_one() {
    local where=$1 sys=$2 bench=$3 ranks=$4 rows=$5 json=$5.json log=$5.log before after try
    for try in $(seq "$TRIES"); do
        before=$(near_or_wait)
        if ! timeout -k 5 $LIMIT $(command_for "$where" "$sys" "$bench" "$ranks" "$json") >"$log" 2>&1; then
            echo "# $where $bench at $ranks ranks: $sys failed: $(grep -v '^#' "$log" | grep -v '^\s*$' | tail -1)"
            : >"$rows"
            return 0
        fi
        after=$(line_ns)
        is_far "$before" || is_far "$after" || break
        if [ "$ranks" -gt "$CORES" ]; then
            echo "# $where $bench at $ranks ranks, $sys: cores far apart (cache line $before then $after ns), kept"
            break
        fi
        echo "# $where $bench at $ranks ranks, $sys: cores far apart (cache line $before then $after ns), try $try of $TRIES"
        if [ "$try" -eq "$TRIES" ]; then
            : >"$rows"
            echo "# $where $bench at $ranks ranks, $sys: far on every try, not counted"
            return 0
        fi
    done
    if [[ $sys == osu ]]; then
        osu_json_rows "$json" >"$rows"
    else
        awk '/^#/ { next }
            NF >= 2 && $1 ~ /^[0-9]+$/ { print $1, $2; next }
            NF == 1 && $1 ~ /^[0-9.]+$/ { print "-", $1 }' "$log" >"$rows"
    fi
}

# The median per size of the rows files given, in the order of sizes first seen.
medians() {
    awk 'NF >= 2 && $2 > 0 { if (!($1 in n)) order[++k] = $1; v[$1, ++n[$1]] = $2 }
        END {
            for (i = 1; i <= k; i++) {
                s = order[i]; m = n[s]
                for (a = 1; a <= m; a++) x[a] = v[s, a]
                for (a = 1; a <= m; a++) for (b = a + 1; b <= m; b++) if (x[b] < x[a]) { t = x[a]; x[a] = x[b]; x[b] = t }
                print s, (m % 2 ? x[(m + 1) / 2] : (x[m / 2] + x[m / 2 + 1]) / 2)
            }
        }' "$@"
}

GOALS=()
# goal NAME TABLE LO HI BOUND max|min: checks abi/ompi (column 4 of TABLE) over sizes
# LO-HI ("-" rows count as every size) against BOUND, at most (max) or at least (min).
goal() {
    local name=$1 table=$2 lo=$3 hi=$4 bound=$5 kind=$6 line
    line=$(awk -v lo="$lo" -v hi="$hi" -v b="$bound" -v kind="$kind" -v name="$name" '
        NR > 1 && ($1 == "-" || ($1 >= lo && $1 <= hi)) && $4 != "-" {
            r = $4 + 0; n++
            if (n == 1 || (kind == "max" ? r > w : r < w)) { w = r; at = $1 }
        }
        END {
            if (n == 0) { printf "%s: no figures to compare", name; exit }
            met = kind == "max" ? w <= b : w >= b
            printf "%s: worst abi/ompi %.2f (at %s), goal %s %.2f: %s", name, w, at == "-" ? "its one figure" : at " B", kind == "max" ? "at most" : "at least", b, met ? "met" : "NOT met"
        }' "$table")
    echo "# goal $line"
    GOALS+=("$line")
}

# Runs one benchmark at one rank count on WHERE, every system ROUNDS times, and prints
# its table of medians with the ratios.
compare() {
    local where=$1 bench=$2 ranks=$3 systems=(ompi abi) order sys round base
    [[ $ranks -eq 2 && -n $(osu_sub "$bench") ]] && systems+=(osu)
    base=$OUT/$where.$bench.$ranks
    order=("${systems[@]}")
    for round in $(seq "$ROUNDS"); do
        for sys in "${order[@]}"; do run_one "$where" "$sys" "$bench" "$ranks" "$base.$sys.$round"; done
        mapfile -t order < <(printf '%s\n' "${order[@]}" | tac)
    done
    for sys in "${systems[@]}"; do
        medians $(seq -f "$base.$sys.%g" "$ROUNDS") >"$base.$sys"
    done
    local unit better
    if is_latency "$bench"; then unit=us better=lower; else unit=MB/s better=higher; fi
    echo
    echo "## $where: $bench, $ranks ranks ($unit, median of $ROUNDS; ratios: $better is better)"
    local header="size ompi abi abi/ompi"
    [[ ${#systems[@]} -eq 3 ]] && header+=" osu abi/osu"
    # Joined on size, in Open MPI's order of sizes (then any size only rbtl has).
    {
        echo "$header"
        # Each system's column by its file's place among the arguments (an empty file,
        # where no run was counted, has no first line to count).
        awk -v n="${#systems[@]}" '
            BEGIN { for (i = 1; i < ARGC; i++) column[ARGV[i]] = i }
            { f = column[FILENAME] }
            NF >= 2 { v[f, $1] = $2; if (!($1 in seen)) { seen[$1] = 1; sizes[++k] = $1 } }
            END {
                for (i = 1; i <= k; i++) {
                    s = sizes[i]
                    if (s == 0) continue
                    o = ((1, s) in v) ? v[1, s] : "-"; a = ((2, s) in v) ? v[2, s] : "-"
                    line = s " " o " " a " " ((o != "-" && a != "-") ? sprintf("%.2f", a / o) : "-")
                    if (n == 3) {
                        u = ((3, s) in v) ? v[3, s] : "-"
                        line = line " " u " " ((u != "-" && a != "-") ? sprintf("%.2f", a / u) : "-")
                    }
                    print line
                }
            }' $(printf "$base.%s " "${systems[@]}")
    } >"$base.table"
    column -t "$base.table"
    local kind
    case $bench in
        osu_latency) [[ $where == node ]] && kind="sm" || kind="tcp"
            goal "$where $bench ($kind) 1-64 B" "$base.table" 1 64 0.8 max ;;
        osu_bw) [[ $where == node ]] && kind="sm" || kind="tcp"
            goal "$where $bench ($kind) 1-4 MiB" "$base.table" 1048576 4194304 1.0 min ;;
        osu_allreduce | osu_bcast | osu_barrier)
            goal "$where $bench at $ranks ranks, every size" "$base.table" 0 1099511627776 1.0 max ;;
        *_latency) goal "$where $bench, every size" "$base.table" 0 1099511627776 1.0 max ;;
    esac
    if [[ ${#systems[@]} -eq 3 ]]; then
        # The ABI layer over rbtl::msg: latency as time added at 1-64 B, bandwidth as
        # the ratio at 1-4 MiB.
        awk -v lat="$(is_latency "$bench" && echo 1 || echo 0)" '
            NR > 1 && $2 != "-" && $3 != "-" && $5 != "-" {
                if (lat && $1 >= 1 && $1 <= 64) { d += $3 - $5; r += $3 / $5; n++ }
                if (!lat && $1 >= 1048576 && $1 <= 4194304) { r += $3 / $5; n++ }
            }
            END {
                if (n == 0) exit
                if (lat) printf "# the ABI layer over rbtl::msg, 1-64 B: %+.3f us a message on average (abi/osu %.2f)\n", d / n, r / n
                else printf "# the ABI layer over rbtl::msg, 1-4 MiB: abi/osu %.2f on average\n", r / n
            }' "$base.table"
    fi
}

echo "# $(stamp)"
echo "# Open MPI $(mpirun.openmpi --version 2>/dev/null | head -1 | awk '{ print $NF }'), OSU 7.2 from ../shared/external; rbtl-abi release"
echo "# ompi: $OMPI; abi: $ABI; osu: target/release/osu"
echo "# $("$OUT/cacheline") (one cache line between cores 0 and 1, one way; ~25-45 near, 63-160 far)"
if [ "${PLACEMENT:-near}" = any ]; then
    echo "# PLACEMENT=any: every run counts, wherever the host places the vCPUs"
else
    echo "# near is below $(seed_near) x 2 ns (the lowest seen first) and below $FAR_NS"
fi

run_where() {
    local where=$1 group bench ranks
    for group in $PARTS; do
        case $group in
            pt2pt) for bench in $PT2PT; do compare "$where" "$bench" 2; done ;;
            onesided) for bench in $ONESIDED; do compare "$where" "$bench" 2; done ;;
            coll) for bench in $COLL; do for ranks in $COLL_RANKS; do compare "$where" "$bench" "$ranks"; done; done ;;
            coll-other)
                for bench in $COLL_OTHER; do
                    for ranks in $COLL_RANKS; do compare "$where" "$bench" "$ranks"; done
                done ;;
        esac
    done
}

for where in $WHERE; do
    if [[ $where == nodes ]]; then
        bash "$TOOL" up 2 --own-cpus
        trap 'bash "$TOOL" down' EXIT
        trap 'exit 130' INT
        trap 'exit 143' TERM
        echo
        echo "# across nodes: rbtl-n1,rbtl-n2 on bridge rbtl-br0, $CIDR"
    fi
    run_where "$where"
done

echo
echo "## goals (abi/ompi, this run)"
printf '%s\n' "${GOALS[@]}"
echo "# ended $(stamp); $("$OUT/cacheline")"
