#!/usr/bin/env bash
# test_blas.sh — ctrain never runs on a crippled BLAS: on a CPU with AVX-512 or AVX2, training's
# first log line names an OpenBLAS kernel of that class (ctrain restarts itself with
# OPENBLAS_CORETYPE when OpenBLAS's own choice is generic, as Debian 12's 0.3.21 does on
# current Xeons), a user's OPENBLAS_CORETYPE is kept as given, and both give the same losses
# within f32 reordering. Skipped, with a line saying why, on CPUs without AVX2.
set -u
cd "$(dirname "$0")/../.."
. tests/cli/train_lib.sh
work=$(mktemp -d /tmp/ctrain-blas-XXXXXX)
trap 'rm -rf "$work"' EXIT
unset OPENBLAS_CORETYPE CTRAIN_BLAS_REEXEC
if grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo; then
    good='SkylakeX|Cooperlake|SapphireRapids'
elif grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
    good='Haswell|Zen|SkylakeX|Cooperlake|SapphireRapids'
else
    ok "skipped: this CPU has neither AVX-512 nor AVX2 + FMA, so OpenBLAS's generic kernels are its right ones"
    finish; exit 0
fi
small_run_setup "$work" || { finish; exit 1; }
kernel() { sed -nE 's/.*BLAS: .*, kernel ([A-Za-z0-9]+) .*/\1/p' "$1" | head -1; }

"$CTRAIN" train "$work/t.ini" --set run.steps=4 --set run.out_dir="$work/auto" \
    > "$work/auto.log" 2>&1 || fail "train: $(tail -3 "$work/auto.log")"
k=$(kernel "$work/auto.log")
if [[ "$k" =~ ^($good)$ ]]; then
    ok "the first log line names OpenBLAS kernel $k, one this CPU's vector units deserve"
else
    fail "expected one of $good in the first log line, got '$k': $(grep -m2 '^mfu' "$work/auto.log")"
fi

OPENBLAS_CORETYPE=Prescott "$CTRAIN" train "$work/t.ini" --set run.steps=4 \
    --set run.out_dir="$work/user" > "$work/user.log" 2>&1 || fail "train: $(tail -3 "$work/user.log")"
k=$(kernel "$work/user.log")
if [ "$k" = Prescott ] && ! grep -q "ctrain set OPENBLAS_CORETYPE" "$work/user.log"; then
    ok "a user's OPENBLAS_CORETYPE=Prescott is kept (kernel $k)"
else
    fail "OPENBLAS_CORETYPE=Prescott gave kernel '$k': $(grep -m3 '^mfu' "$work/user.log")"
fi
# another kernel sums the products in another order: the losses agree to f32 reordering
compare_series "$work/auto" "$work/user" loss 1e-5 "losses with the chosen kernel and with Prescott"
finish
