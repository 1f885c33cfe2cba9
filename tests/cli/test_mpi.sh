#!/usr/bin/env bash
# The mpi comm plugin under mpirun: builds tests/mpi/mpi_check.c (it dlopens comm_mpi.so; no
# MPI link needed), runs it with 2 and 3 ranks (sums, bf16 rounding every combine, copies,
# requests) and once with a rank that aborts. Prints one line per check and "N passed, N failed".
# Not for: the threads engine (unit tests). Runs as root too (OMPI_ALLOW_RUN_AS_ROOT).
set -u
cd "$(dirname "$0")/../.."
BUILD="${BUILD:-build}"
plugin="$BUILD/plugins/comm_mpi.so"
bin="$BUILD/tests/mpi_check"
pass=0; fail=0

if ! command -v mpirun >/dev/null || [ ! -f "$plugin" ]; then
    echo "FAIL mpi: mpirun or $plugin missing ---> apt-get install openmpi-bin libopenmpi-dev; make"
    echo "0 passed, 1 failed"; exit 1
fi
mkdir -p "$(dirname "$bin")"
# under `make asan`/`ubsan` the plugins are instrumented: so is the program that loads them
san=${SANITIZER:+-fsanitize=$SANITIZER}
if ! ${CC:-cc} -std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra -Werror -Isdk/include $san \
        tests/mpi/mpi_check.c -o "$bin" -ldl; then
    echo "FAIL mpi: cannot build tests/mpi/mpi_check.c"; echo "0 passed, 1 failed"; exit 1
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none  # containers forbid CMA
export OMPI_MCA_mpi_yield_when_idle=1

# run NAME NP MODE EXPECT_RANKS: count ok/FAIL lines; every rank in EXPECT_RANKS must end.
run() {
    local name=$1 np=$2 mode=$3 ranks=$4 out
    out=$(timeout 120 mpirun --oversubscribe -np "$np" "$bin" "$mode" "$plugin" 2>&1)
    # nothing at all printed: mpirun's own start-up failed (seen once in ~20 runs on a loaded
    # machine); the program never ran, so that is not a verdict on the plugin: start it again
    [ -z "$out" ] && out=$(timeout 120 mpirun --oversubscribe -np "$np" "$bin" "$mode" "$plugin" 2>&1)
    local ok bad
    ok=$(printf '%s\n' "$out" | grep -c '^ok ')
    bad=$(printf '%s\n' "$out" | grep -c '^FAIL')
    printf '%s\n' "$out" | grep -E '^(ok|FAIL) ' | sed -E "s/^(ok|FAIL) /\1 [$name] /"
    for r in $ranks; do
        if ! printf '%s\n' "$out" | grep -q "^end rank $r\$"; then
            echo "FAIL [$name] rank $r did not finish; output:"; printf '%s\n' "$out" | tail -15
            bad=$((bad + 1))
        fi
    done
    pass=$((pass + ok)); fail=$((fail + bad))
}

run np2 2 basic "0 1"
run np3 3 basic "0 1 2"
run abort 2 abort "0 1"   # mpirun reports the unfinalized exit: its status is not checked
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
