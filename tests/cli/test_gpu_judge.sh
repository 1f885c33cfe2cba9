#!/usr/bin/env bash
# test_gpu_judge.sh — the verdicts and time caps of tests/gpu/run.sh (tests/gpu/judge.sh),
# checked here because the GPU machine is rarely lent: a crashed comparison program is a FAIL
# even when an earlier program passed, a summary with failures is a FAIL, each FAIL line is
# printed once, a timeout is named, and a step's cap leaves the later steps their share.
# Not for: the comparison programs themselves (run.sh --cpu runs them).
source "$(dirname "$0")/lib.sh"
source "$ROOT/tests/gpu/judge.sh"

# expect NAME WANT_RC WANT_TEXT RC LOG: gpu_judge's status and output
expect() {
    local name=$1 want_rc=$2 want=$3 out rc
    out=$(gpu_judge prog "$4" "$5" 30)
    rc=$?
    if [ "$rc" -ne "$want_rc" ]; then ct_fail "$name" "status $rc, expected $want_rc; output: $out"; return; fi
    if ! grep -qF -- "$want" <<<"$out"; then ct_fail "$name" "output lacks \"$want\": $out"; return; fi
    ct_pass "$name"
}

printf 'ok a\nok b\n2 passed, 0 failed\n' >"$CT_TMP/good.log"
expect judge_passes_a_clean_program 0 "ok prog: 2 passed, 0 failed" 0 "$CT_TMP/good.log"

# The old run.sh appended every program to one log and read its last summary line: a program
# that crashed before printing its own was reported with the previous program's "passed".
printf 'ok c\n' >"$CT_TMP/crash.log"
expect judge_fails_a_crash_without_summary 1 "FAIL prog: crashed (exit 139 = signal 11); no summary line" \
    139 "$CT_TMP/crash.log"

printf 'ok a\nFAIL b: x\n1 passed, 1 failed\n' >"$CT_TMP/fail0.log"
expect judge_fails_exit0_with_failures 1 "FAIL prog: exit 0 but 1 passed, 1 failed" 0 "$CT_TMP/fail0.log"

printf 'ok a\n' >"$CT_TMP/slow.log"
expect judge_names_a_timeout 1 "killed after 30 s (timeout)" 124 "$CT_TMP/slow.log"

printf 'FAIL x: one\nFAIL x: one\nFAIL y: two\n0 passed, 2 failed\n' >"$CT_TMP/dup.log"
out=$(gpu_judge prog 1 "$CT_TMP/dup.log" 30)
n1=$(grep -c 'FAIL x: one' <<<"$out")
n2=$(grep -c 'FAIL y: two' <<<"$out")
if [ "$n1" -eq 1 ] && [ "$n2" -eq 1 ]; then ct_pass judge_prints_each_fail_once
else ct_fail judge_prints_each_fail_once "FAIL x printed $n1 times, FAIL y $n2 times (expected 1, 1): $out"; fi

# gpu_cap WANT LEFT RESERVE
check_cap() {
    local got
    got=$(gpu_cap "$1" "$2" "$3")
    if [ "$got" = "$4" ]; then ct_pass "cap_${1}_${2}_${3}_is_$4"
    else ct_fail "cap_${1}_${2}_${3}_is_$4" "expected $4, got $got"; fi
}
check_cap 90 400 100 90   # plenty left: what the step wants
check_cap 90 150 100 50   # cut so that 100 s stay for the later steps
check_cap 90 105 100 0    # under 10 s: not run
check_cap 90 50 100 0     # already inside the reserve
ct_summary
