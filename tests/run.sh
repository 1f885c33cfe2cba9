#!/usr/bin/env bash
# Runs every test suite and prints one closing line "N passed, N failed" summed over them:
# the C unit tests (build/tests/unit_tests) and each tests/cli/test_*.sh script (each prints its own
# "N passed, N failed"). Exit status 0 only when nothing failed.
set -u
cd "$(dirname "$0")/.."
export BUILD="${BUILD:-build}"
total_pass=0; total_fail=0
run_suite() {  # name, command...
    local name=$1; shift
    echo "== $name"
    local out; out=$("$@" 2>&1); local rc=$?
    echo "$out" | grep -v '^ok ' | grep -v '^[0-9]* passed, [0-9]* failed$'
    local line; line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -1)
    if [ -z "$line" ]; then
        echo "FAIL $name: exited $rc without a summary line"; total_fail=$((total_fail + 1)); return
    fi
    local p f; p=${line%% passed*}; f=${line#*, }; f=${f%% failed*}
    echo "   $line"
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $name: exited $rc"; total_fail=$((total_fail + 1))
    fi
}
run_suite "unit" "$BUILD/tests/unit_tests"
for t in tests/cli/test_*.sh; do
    [ -e "$t" ] || continue
    run_suite "$(basename "$t" .sh)" bash "$t"
done
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
