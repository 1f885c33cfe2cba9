# judge.sh — sourced by tests/gpu/run.sh (and tests/cli/test_gpu_judge.sh): the verdict on one
# step from its exit status and its OWN log's last "N passed, N failed" line, and the time
# budget of the steps. Not for: running anything itself. Bash functions only; no side effects
# beyond stdout.

# gpu_judge NAME RC LOG [CAP_S]: prints "ok NAME: <summary line>" when RC is 0 and LOG's last
# summary line says 0 failed; else "FAIL NAME: <why>" followed by each distinct FAIL line of LOG
# (indented, in order, at most 20). 124/137 = killed by `timeout` at CAP_S. Returns 0 / 1.
gpu_judge() {
    local name=$1 rc=$2 log=$3 cap=${4:-} line why
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" 2>/dev/null | tail -1)
    if [ "$rc" -eq 0 ] && [ -n "$line" ] && [ "${line#* passed, }" = "0 failed" ]; then
        echo "ok $name: $line"
        return 0
    fi
    case $rc in
        0)   why="exit 0 but ${line:-no summary line} (see its log)" ;;
        124|137) why="killed after ${cap:-?} s (timeout); ${line:-no summary line}" ;;
        *)   if [ "$rc" -gt 128 ]; then
                 why="crashed (exit $rc = signal $((rc - 128))); ${line:-no summary line}"
             else
                 why="exit $rc; ${line:-no summary line}"
             fi ;;
    esac
    echo "FAIL $name: $why"
    grep -E '^FAIL' "$log" 2>/dev/null | awk '!seen[$0]++' | head -20 | sed 's/^/    /'
    return 1
}

# gpu_left DEADLINE: seconds left before DEADLINE (epoch seconds), never negative.
gpu_left() {
    local l=$(( $1 - $(date +%s) ))
    [ "$l" -gt 0 ] && echo "$l" || echo 0
}

# gpu_cap WANT LEFT RESERVE: the seconds a step may take: WANT, cut so that RESERVE seconds stay
# for the steps after it; 0 when less than 10 s would remain (then the caller skips the step).
gpu_cap() {
    local want=$1 left=$2 reserve=$3 c
    c=$(( left - reserve ))
    [ "$c" -gt "$want" ] && c=$want
    [ "$c" -lt 10 ] && c=0
    echo "$c"
}
