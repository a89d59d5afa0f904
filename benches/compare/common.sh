# Shell functions of the comparison scripts, sourced by them from the repository's
# root; those that read OUT (their output folder) run once it is set.

# Reads the calling script's options ("$@" after the first two arguments) into its
# variables. $2 holds a word per option: "x:NAME" sets NAME to the value of -x,
# "x=NAME" sets NAME to 1 when -x is given. On an option it does not know, shows the
# script's lines $1 ("FIRST,LAST": its use) and exits with status 2.
read_options() {
    local help=$1 spec= word o
    local -A name=() flag=()
    for word in $2; do
        name[${word:0:1}]=${word:2}
        case $word in
            ?:*) spec+="${word:0:1}:" ;;
            *) spec+="${word:0:1}"; flag[${word:0:1}]=1 ;;
        esac
    done
    shift 2
    local OPTIND=1 OPTARG
    while getopts "$spec" o; do
        [ -n "${name[$o]:-}" ] || { sed -n "${help}p" "$0"; exit 2; }
        if [ -n "${flag[$o]:-}" ]; then
            printf -v "${name[$o]}" 1
        else
            printf -v "${name[$o]}" %s "$OPTARG"
        fi
    done
}

# The date and time (UTC) and the machine's load now.
stamp() { echo "$(date -u '+%Y-%m-%dT%H:%M:%SZ') $(uptime | sed 's/.*load/load/')"; }

# The one-way time of a cache line between cores 0 and 1 now (ns, by $OUT/cacheline);
# the lowest seen in this run is kept in $OUT/near_ns.
line_ns() {
    local ns low
    ns=$("$OUT/cacheline" | awk '{ print int($2) }')
    low=$(cat "$OUT/near_ns" 2>/dev/null || echo "$ns")
    [ "$ns" -lt "$low" ] && low=$ns
    echo "$low" >"$OUT/near_ns"
    echo "$ns"
}
# Whether the time $1 says the vCPUs are far apart: at or above FAR_NS, or twice the
# lowest seen in this run (hosts differ: near is 25-45 ns, apart 63-107 on one, about
# 160 on another). With PLACEMENT=any no time is far, and runs count wherever the host
# places the vCPUs, both systems alike, alternating (for hosts where two busy vCPUs
# stay near only for seconds).
FAR_NS=80
is_far() {
    [ "${PLACEMENT:-near}" != any ] &&
        { [ "$1" -ge "$FAR_NS" ] || [ "$1" -ge $((2 * $(cat "$OUT/near_ns"))) ]; }
}
# The lowest time first: readings a second apart until one below half of FAR_NS, at
# most 30 (one with PLACEMENT=any). Prints it.
seed_near() {
    local ns n=30
    [ "${PLACEMENT:-near}" = any ] && n=1
    for _ in $(seq $n); do
        ns=$(line_ns)
        [ "$ns" -lt $((FAR_NS / 2)) ] && break
        sleep 1
    done
    cat "$OUT/near_ns"
}
# The time now, once the vCPUs are near (waiting up to a minute for the host to move
# them back).
near_or_wait() {
    local ns
    for _ in $(seq 30); do
        ns=$(line_ns)
        is_far "$ns" || break
        sleep 2
    done
    echo "$ns"
}
# How often a run that starts or ends far apart is tried (NEAR_TRIES, default 3);
# one far on every try is not counted.
TRIES=${NEAR_TRIES:-3}

# The rows ("size value") of rbtl's osu JSON file $1. Its JSON has 4 decimals (its
# table, as OSU's, 2).
osu_json_rows() { sed -n 's/.*"size": \([0-9]*\), "value": \([0-9.]*\).*/\1 \2/p' "$1"; }

# The best figure per size ($1: min or max) of the rows files given after it, in the
# order of sizes first seen.
best_per_size() {
    awk -v better="$1" '
        NF >= 2 && $2 > 0 {
            if (!($1 in v)) { order[++n] = $1; v[$1] = $2 }
            else if ((better == "min") == ($2 < v[$1])) v[$1] = $2
        }
        END { for (i = 1; i <= n; i++) print order[i], v[order[i]] }' "${@:2}"
}
