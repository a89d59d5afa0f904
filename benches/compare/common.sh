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
# at or above FAR_NS the vCPUs are "far".
line_ns() { "$OUT/cacheline" | awk '{ print int($2) }'; }
FAR_NS=80
# The same, once the vCPUs are near (waiting up to a minute for the host to move them
# back).
near_or_wait() {
    local ns
    for _ in $(seq 30); do
        ns=$(line_ns)
        [ "$ns" -lt "$FAR_NS" ] && break
        sleep 2
    done
    echo "$ns"
}

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
