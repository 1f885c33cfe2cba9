#!/usr/bin/env bash
# test_faults.sh — what a run does when a rank fails, through the real binary and the test-only
# fault plugin (build/tests/plugins/loss_fault.so, tests/plugins/README.md): an error, a NaN
# loss, a hang and a crash on one rank of the threads engine (world 4) and of an mpirun -np 2
# job; [comm] algo and timeout_s reach the threads engine; the out_dir lock refuses a second
# run and leaves the first one whole. Every run is bounded by `timeout`, so a regression fails
# here instead of hanging the suite. Prints one line per check and "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. tests/cli/train_lib.sh
work=$(mktemp -d /tmp/ctrain-faults-XXXXXX)
trap 'rm -rf "$work"' EXIT
fault="$PWD/${BUILD:-build}/tests/plugins/loss_fault.so"
[ -f "$fault" ] || { fail "setup: $fault missing ---> make"; finish; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_mpi_yield_when_idle=1

ms() { echo $(( $(date +%s%N) / 1000000 )); }
ok() { pass; echo "ok $*"; }

"$CTRAIN" prepare /usr/share/common-licenses/GPL-3 --out "$work/data" --tokenizer bytes \
    --val-fraction 0.1 > /dev/null 2>&1 || { fail "prepare"; finish; exit 1; }
tiny_ini "$work/base.ini" "$work/unused" "$work/data" 256

# ---- 1. [comm] algo reaches the threads engine ------------------------------------------------
# pure_bf16 reduces in bf16, so the reduction order shows in the low bits: ring and tree must
# give different losses (17 significant digits) that stay within 1e-3 of each other (a bf16
# rounding is 2^-9 relative per add; the two orders differ by a few of them).
for a in ring tree; do
    timeout 60 "$CTRAIN" train "$work/base.ini" --set run.steps=6 --set data.batch_size=2 \
        --set comm.plugin=threads --set comm.world_size=4 --set strategy.plugin=full_shard \
        --set precision.plugin=pure_bf16 --set comm.algo=$a --set run.out_dir="$work/algo_$a" \
        > "$work/algo_$a.log" 2>&1 || fail "algo $a: $(tail -3 "$work/algo_$a.log")"
done
msg=$(python3 - "$work/algo_ring/metrics.jsonl" "$work/algo_tree/metrics.jsonl" <<'PY'
import json, sys
a, b = ([d["loss"] for d in map(json.loads, open(p))] for p in sys.argv[1:3])
if len(a) != 6 or len(b) != 6: print(f"want 6 steps each, got {len(a)} and {len(b)}"); sys.exit(1)
differ = sum(x != y for x, y in zip(a, b))
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
detail = f"step 6: ring {a[-1]!r} vs tree {b[-1]!r}; {differ} of 6 steps differ, max relative difference {worst:.3g}"
print(detail)
sys.exit(0 if differ > 0 and worst < 1e-3 else 1)
PY
) && ok "algo = tree and ring differ under pure_bf16, world 4, and stay close: $msg" \
  || fail "algo = tree vs ring (want some steps different, all within 1e-3): $msg"

# ---- 2. the threads engine (world 4, rank 2 fails at step 3, checkpoint every step) ------------
thr() { # NAME MODE [more --set ...]: sets rc, took (ms), log
    local name=$1 mode=$2; shift 2
    local t0; t0=$(ms)
    timeout 60 "$CTRAIN" train "$work/base.ini" --set run.steps=6 --set data.batch_size=2 \
        --set comm.plugin=threads --set comm.world_size=4 --set strategy.plugin=full_shard \
        --set loss.plugins="ce, $fault" --set loss.fault.mode=$mode --set loss.fault.rank=2 \
        --set loss.fault.step=3 --set run.checkpoint_every=1 --set run.out_dir="$work/$name" \
        "$@" > "$work/$name.out" 2> "$work/$name.err"
    rc=$?; took=$(( $(ms) - t0 )); log="$work/$name.err"
}
has() { grep -qF -- "$2" "$1"; }
ckpts() { ls "$work/$1/checkpoints" 2>/dev/null | tr '\n' ' '; }
# the checkpoint of step 2 exists and none of step 3 (not even a temporary one left complete)
ckpt_before_3() { [ -d "$work/$1/checkpoints/step_00000002" ] && ! ls -d "$work/$1"/checkpoints/step_00000003* > /dev/null 2>&1; }

# mode = none: the term adds 0 and no gradient, so the losses are those of a run without it
timeout 60 "$CTRAIN" train "$work/base.ini" --set run.steps=6 --set data.batch_size=2 \
    --set comm.plugin=threads --set comm.world_size=4 --set strategy.plugin=full_shard \
    --set run.out_dir="$work/plain" > "$work/plain.log" 2>&1 || fail "plain run: $(tail -3 "$work/plain.log")"
thr none none
if [ $rc -eq 0 ]; then
    compare_series "$work/none" "$work/plain" loss 0 "mode = none: the fault term leaves the loss bit for bit"
else
    fail "mode = none: exit $rc: $(tail -3 "$log")"
fi

thr error error
first=$(grep -m1 '^ctrain: ' "$log")
if [ $rc -eq 1 ] && [ $took -lt 20000 ] && [[ $first == "ctrain: rank 2: loss fault: injected error on rank 2 at step 3"* ]] && ckpt_before_3 error; then
    ok "threads, error on rank 2: exit 1 in ${took} ms, first message: $first"
else
    fail "threads, error on rank 2: exit $rc after ${took} ms, checkpoints: $(ckpts error); want the injected error first; stderr: $(cat "$log")"
fi

thr nan nan
if [ $rc -eq 1 ] && has "$log" "ctrain: rank 2: step 3, micro-batch 0: loss term 'fault' is nan" && ckpt_before_3 nan \
        && [ "$(metric_series "$work/nan" loss | wc -l)" -eq 2 ]; then
    ok "threads, NaN loss on rank 2: stops at step 3 naming the term; checkpoints $(ckpts nan); metrics end at step 2"
else
    fail "threads, NaN loss: exit $rc, checkpoints: $(ckpts nan), logged steps: $(metric_series "$work/nan" loss | wc -l); stderr: $(cat "$log")"
fi

# A hang: [comm] timeout_s = 2 must reach the engine (the default is 300 s), the cause is printed
# when found, and the hung rank is given up after the grace period (min(timeout_s, 10 s) = 2 s):
# the process ends after about 2 + 2 s. Bound: 2 * timeout_s + 4 s for start-up and a slow machine.
thr hang hang --set comm.timeout_s=2
cause=$(grep -n -m1 'rank 2 failed: did not reach' "$log" | cut -d: -f1)
gave_up=$(grep -n -m1 'ctrain: rank 2 did not stop within 2 s' "$log" | cut -d: -f1)
if [ $rc -eq 1 ] && [ $took -lt 8000 ] && has "$log" "within 2 s" && [ -n "$cause" ] && [ -n "$gave_up" ] \
        && [ "$cause" -lt "$gave_up" ] && ckpt_before_3 hang; then
    ok "threads, rank 2 hangs: ended in ${took} ms (timeout_s 2 + grace 2), cause then the rank that did not stop"
else
    fail "threads, hang: exit $rc after ${took} ms (want 1 within 8000 ms); stderr: $(cat "$log")"
fi

thr crash crash 2> /dev/null  # (not the shell's own "Segmentation fault" line)
if [ $rc -eq 139 ] && has "$log" "ctrain: rank 2 crashed: signal 11 (Segmentation fault)" && ckpt_before_3 crash; then
    ok "threads, rank 2 crashes: the process dies by SIGSEGV (exit 139), reported with the rank; checkpoints $(ckpts crash)"
elif [ $rc -ne 0 ] && grep -q "Sanitizer" "$log" && ckpt_before_3 crash; then
    ok "threads, rank 2 crashes: the sanitizer reports it (exit $rc); checkpoints $(ckpts crash)"
else
    fail "threads, crash: exit $rc (want 139), checkpoints: $(ckpts crash); stderr: $(cat "$log")"
fi

# ---- 3. mpirun -np 2 (comm mpi): rank 1 fails at step 3 ----------------------------------------
# Bound for a hang: comm mpi gives up on a collective after [comm] timeout_s (3 s here), the
# process that gave up exits 1 and mpirun then ends the job, the hung process included.
if command -v mpirun > /dev/null && [ -f "${BUILD:-build}/plugins/comm_mpi.so" ]; then
    mpi() { # NAME MODE: sets rc, took, log (stdout and stderr of the job)
        local name=$1 mode=$2 t0; t0=$(ms)
        timeout 90 mpirun --oversubscribe -np 2 "$CTRAIN" train "$work/base.ini" --set run.steps=6 \
            --set data.batch_size=4 --set comm.plugin=mpi --set loss.plugins="ce, $fault" \
            --set loss.fault.mode=$mode --set loss.fault.rank=1 --set loss.fault.step=3 \
            --set comm.timeout_s=3 --set run.checkpoint_every=1 --set run.out_dir="$work/$name" \
            > "$work/$name.log" 2>&1
        rc=$?; took=$(( $(ms) - t0 )); log="$work/$name.log"
    }
    mpi mpi_error error
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -lt 30000 ] \
            && has "$log" "ctrain: rank 1: loss fault: injected error on rank 1 at step 3" && ckpt_before_3 mpi_error; then
        ok "mpirun -np 2, error on rank 1: job ends in ${took} ms (exit $rc) naming rank 1 and the message"
    else
        fail "mpirun, error: exit $rc after ${took} ms; output: $(tail -20 "$log")"
    fi
    mpi mpi_nan nan
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -lt 30000 ] \
            && has "$log" "ctrain: rank 1: step 3, micro-batch 0: loss term 'fault' is nan" && ckpt_before_3 mpi_nan; then
        ok "mpirun -np 2, NaN loss on rank 1: job ends in ${took} ms naming the term and the step"
    else
        fail "mpirun, nan: exit $rc after ${took} ms; output: $(tail -20 "$log")"
    fi
    mpi mpi_hang hang
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -lt 30000 ] && has "$log" "did not complete within 3 s" \
            && ckpt_before_3 mpi_hang; then
        ok "mpirun -np 2, rank 1 hangs: job ends in ${took} ms ([comm] timeout_s 3, then mpirun ends the job)"
    else
        fail "mpirun, hang: exit $rc after ${took} ms (want an end within 30 s); output: $(tail -20 "$log")"
    fi
    mpi mpi_crash crash
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -lt 30000 ] && ckpt_before_3 mpi_crash \
            && { has "$log" "ctrain: rank 1 crashed: signal 11" || has "$log" "Sanitizer"; }; then
        ok "mpirun -np 2, rank 1 crashes: job ends in ${took} ms (exit $rc), rank 0 does not wait"
    else
        fail "mpirun, crash: exit $rc after ${took} ms; output: $(tail -20 "$log")"
    fi
else
    fail "mpirun or comm_mpi.so missing ---> apt-get install openmpi-bin libopenmpi-dev; make"
fi

# ---- 4. the out_dir lock ------------------------------------------------------------------------
# Run A (300 steps, about 4 s) holds OUT/.lock; run B into the same folder is refused at once,
# naming the folder and A's host and pid; A then completes with all 300 lines of metrics.jsonl
# and its own config.ini.
out="$work/locked"
"$CTRAIN" train "$work/base.ini" --set run.steps=300 --set run.out_dir="$out" > "$work/A.log" 2>&1 &
apid=$!
for _ in $(seq 200); do [ -s "$out/metrics.jsonl" ] && break; sleep 0.05; done
t0=$(ms)
timeout 30 "$CTRAIN" train "$work/base.ini" --set run.steps=5 --set run.out_dir="$out" > "$work/B.log" 2>&1
brc=$?; btook=$(( $(ms) - t0 ))
arunning=0; kill -0 $apid 2> /dev/null && arunning=1
want="[run] out_dir $out is in use by another run (host $(uname -n), pid $apid"
if [ $brc -eq 1 ] && [ $btook -lt 5000 ] && [ $arunning -eq 1 ] && has "$work/B.log" "$want"; then
    ok "a second run into a locked out_dir is refused in ${btook} ms: $(head -c 140 "$work/B.log")..."
else
    fail "second run: exit $brc after ${btook} ms, first still running: $arunning; want \"$want\"; got: $(cat "$work/B.log")"
fi
wait $apid; arc=$?
msg=$(python3 - "$out/metrics.jsonl" "$out/config.ini" <<'PY'
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1])]
cfg = open(sys.argv[2]).read()
print(f"{len(steps)} lines, steps {steps[0]}..{steps[-1]}")
sys.exit(0 if steps == list(range(1, 301)) and "steps = 300" in cfg.replace("  ", " ") else 1)
PY
) && [ $arc -eq 0 ] && ok "the first run is unharmed: exit 0, metrics.jsonl $msg" \
  || fail "first run after the refusal: exit $arc, metrics.jsonl $msg, config.ini: $(grep steps "$out/config.ini")"

# A lock file left by a killed run (kill -9: no clean-up) does not block the next run.
"$CTRAIN" train "$work/base.ini" --set run.steps=300 --set run.out_dir="$work/killed" > /dev/null 2>&1 &
kpid=$!
for _ in $(seq 200); do [ -s "$work/killed/metrics.jsonl" ] && break; sleep 0.05; done
kill -9 $kpid; wait $kpid 2> /dev/null
if has "$work/killed/.lock" "pid $kpid" \
        && timeout 30 "$CTRAIN" train "$work/base.ini" --set run.steps=3 --set run.out_dir="$work/killed" --force > "$work/C.log" 2>&1; then
    ok "a lock file left by a run killed with SIGKILL (pid $kpid) does not block the next run"
else
    fail "after kill -9: lock file: $(cat "$work/killed/.lock" 2>&1); next run: $(cat "$work/C.log")"
fi
# OUT/.lock is truncated when taken: a symbolic link there is refused, never followed.
mkdir -p "$work/linked"
echo "precious" > "$work/precious.txt"
ln -s "$work/precious.txt" "$work/linked/.lock"
timeout 30 "$CTRAIN" train "$work/base.ini" --set run.steps=3 --set run.out_dir="$work/linked" > "$work/D.log" 2>&1
drc=$?
if [ $drc -eq 1 ] && has "$work/D.log" "$work/linked/.lock" && has "$work/D.log" "symbolic link" \
        && [ "$(cat "$work/precious.txt")" = precious ]; then
    ok "a symbolic link as OUT/.lock is refused and its target left alone"
else
    fail "symlinked lock: exit $drc, target now \"$(cat "$work/precious.txt")\"; output: $(cat "$work/D.log")"
fi
finish
