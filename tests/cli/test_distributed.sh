#!/usr/bin/env bash
# test_distributed.sh — the strategies at several world sizes, in-process (threads engine) and
# under mpirun (mpi engine): with the same global batch every strategy gives the single-rank
# fp32 loss at each of 20 steps; a checkpoint saved at world size 2 resumes at world size 4;
# the research policies give the same bits under mpirun as in-process; a failing rank ends an
# mpirun job quickly with a message naming it.
set -u
cd "$(dirname "$0")/../.."
. tests/cli/train_lib.sh
work=$(mktemp -d /tmp/ctrain-dist-XXXXXX)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mpirun_n() { local n=$1; shift; timeout 120 mpirun --oversubscribe -np "$n" "$@"; }

"$CTRAIN" prepare /usr/share/common-licenses/GPL-3 --out "$work/data" --tokenizer bytes \
    --val-fraction 0.1 > /dev/null 2>&1 || { fail "prepare"; finish; exit 1; }
tiny_ini "$work/base.ini" "$work/w1" "$work/data" 256
"$CTRAIN" train "$work/base.ini" --set data.batch_size=8 > /dev/null 2>&1 || fail "train world 1"

# Tolerance: ranks see the same sequences, so the only difference is the order in which the
# per-rank partial gradients are summed (f32, relative rounding 6e-8 per add); through 20 Adam
# steps that stays below 1e-6 relative in practice; 1e-4 leaves room while a wrong divide
# factor, a dropped rank or a wrong shard would move the loss by 1e-2 or more.
for s in ddp no_shard full_shard; do
    for n in 2 4; do
        b=$((8 / n))
        "$CTRAIN" train "$work/base.ini" --set data.batch_size=$b --set comm.plugin=threads \
            --set comm.world_size=$n --set strategy.plugin=$s --set run.out_dir="$work/${s}_$n" \
            > "$work/${s}_$n.log" 2>&1 || fail "train $s x $n: $(tail -3 "$work/${s}_$n.log")"
        compare_series "$work/${s}_$n" "$work/w1" loss 1e-4 "$s, threads engine, world $n equals world 1"
    done
    mpirun_n 2 "$CTRAIN" train "$work/base.ini" --set data.batch_size=4 --set comm.plugin=mpi \
        --set strategy.plugin=$s --set run.out_dir="$work/mpi_$s" > "$work/mpi_$s.log" 2>&1 \
        || fail "mpirun -np 2 $s: $(tail -3 "$work/mpi_$s.log")"
    compare_series "$work/mpi_$s" "$work/w1" loss 1e-4 "$s, mpirun -np 2, equals world 1"
done

# The research policies do their own arithmetic over the comm's point-to-point and all-to-all
# calls, so the engine must not matter: bf16_fp32acc and bf16_sr under mpirun -np 2 give the
# threads engine's N = 2 losses bit for bit (full_shard, 8 steps); so does fp16 (f16 wire, its loss
# scale and skip decisions agreed over the mpi engine).
for p in bf16_fp32acc bf16_sr fp16; do
    extra=()  # fp16 from 2^22: its first steps overflow f16 and are skipped on both ranks
    [ $p = fp16 ] && extra=(--set precision.init_scale=4194304 --set run.log_every=1)
    "$CTRAIN" train "$work/base.ini" --set run.steps=8 --set data.batch_size=4 \
        --set comm.plugin=threads --set comm.world_size=2 --set strategy.plugin=full_shard \
        --set precision.plugin=$p "${extra[@]}" --set run.out_dir="$work/thr_$p" \
        > "$work/thr_$p.log" 2>&1 || fail "threads $p: $(tail -3 "$work/thr_$p.log")"
    mpirun_n 2 "$CTRAIN" train "$work/base.ini" --set run.steps=8 --set data.batch_size=4 \
        --set comm.plugin=mpi --set strategy.plugin=full_shard --set precision.plugin=$p \
        "${extra[@]}" --set run.out_dir="$work/mpi_$p" > "$work/mpi_$p.log" 2>&1 \
        || fail "mpirun -np 2 $p: $(tail -3 "$work/mpi_$p.log")"
    compare_series "$work/mpi_$p" "$work/thr_$p" loss 0 "$p: mpirun -np 2 equals threads N = 2 bit for bit"
done
skips=$(python3 -c 'import json,sys; print(sum(json.loads(l).get("skipped_steps", 0) for l in open(sys.argv[1])))' \
    "$work/mpi_fp16/metrics.jsonl" 2> /dev/null)
compare_series "$work/mpi_fp16" "$work/thr_fp16" loss_scale 0 \
    "fp16: mpirun -np 2 takes the threads engine's scale and skip decisions (${skips:-?} skipped)"
[ "${skips:-0}" -gt 0 ] && ok "fp16 under mpirun: overflowed steps were skipped ($skips of 8)" \
    || fail "fp16 under mpirun: no step was skipped from 2^22 (skipped_steps ${skips:-missing})"

# bf16_sr's two paths in whole runs at N = 4: the threads engine's stochastic rounding in one
# pass (path = auto, ABI 1.5) and the plugin's own ring over send/recv give the same losses bit
# for bit (full_shard: reduce-scatter; no_shard: all-reduce).
for st in full_shard no_shard; do
    for path in auto send_recv; do
        "$CTRAIN" train "$work/base.ini" --set run.steps=8 --set data.batch_size=2 \
            --set comm.plugin=threads --set comm.world_size=4 --set strategy.plugin=$st \
            --set precision.plugin=bf16_sr --set precision.path=$path \
            --set run.out_dir="$work/sr_${st}_$path" > "$work/sr_${st}_$path.log" 2>&1 \
            || fail "bf16_sr path $path with $st: $(tail -3 "$work/sr_${st}_$path.log")"
    done
    compare_series "$work/sr_${st}_auto" "$work/sr_${st}_send_recv" loss 0 \
        "bf16_sr with $st at N = 4: the engine's path equals the send/recv ring bit for bit"
done

# Resharding: full_shard saved at world 2 after 10 of 20 steps, resumed at world 4 (same global
# batch): continues as the straight world-2 run within the same fp32 tolerance.
"$CTRAIN" train "$work/base.ini" --set data.batch_size=4 --set comm.plugin=threads \
    --set comm.world_size=2 --set strategy.plugin=full_shard --set run.out_dir="$work/reshard" \
    --stop-after 10 > /dev/null 2>&1 || fail "reshard: first half"
"$CTRAIN" train "$work/base.ini" --set data.batch_size=2 --set comm.plugin=threads \
    --set comm.world_size=4 --set strategy.plugin=full_shard --set run.out_dir="$work/reshard" \
    --resume > "$work/reshard.log" 2>&1 || fail "reshard: resume at world 4: $(tail -3 "$work/reshard.log")"
compare_series "$work/reshard" "$work/full_shard_2" loss 1e-4 "save at world 2, resume at world 4"

# bf16_fp32acc with `result = f32` (the hooks hand back f32 sums, ABI 1.2): full_shard and
# no_shard train with it and agree with each other (the same f32 sums, post-divided in f32);
# the default `result = bf16` stays what it was; ddp, which reduces buckets in place, refuses it.
for st in full_shard no_shard; do
    "$CTRAIN" train "$work/base.ini" --set data.batch_size=2 --set comm.plugin=threads \
        --set comm.world_size=4 --set strategy.plugin=$st --set precision.plugin=bf16_fp32acc \
        --set precision.result=f32 --set run.out_dir="$work/acc32_$st" > "$work/acc32_$st.log" 2>&1 \
        || fail "bf16_fp32acc result=f32 with $st: $(tail -3 "$work/acc32_$st.log")"
done
compare_series "$work/acc32_no_shard" "$work/acc32_full_shard" loss 0 \
    "bf16_fp32acc result=f32: no_shard and full_shard give the same losses"
"$CTRAIN" train "$work/base.ini" --set data.batch_size=2 --set comm.plugin=threads \
    --set comm.world_size=4 --set strategy.plugin=full_shard --set precision.plugin=bf16_fp32acc \
    --set run.out_dir="$work/acc16" > /dev/null 2>&1 || fail "bf16_fp32acc result=bf16"
if [ -s "$work/acc16/metrics.jsonl" ] && ! diff -q <(metric_series "$work/acc32_full_shard" loss) \
        <(metric_series "$work/acc16" loss) > /dev/null; then
    ok "result=f32 changes the losses (the f32 sums are not rounded to bf16 before the divide)"
else
    fail "result=f32 gave the bf16 result's losses bit for bit: the f32 sums were rounded"
fi
if "$CTRAIN" train "$work/base.ini" --set comm.plugin=threads --set comm.world_size=2 \
    --set strategy.plugin=ddp --set precision.plugin=bf16_fp32acc --set precision.result=f32 \
    --set run.out_dir="$work/acc32_ddp" > "$work/acc32_ddp.log" 2>&1; then
    fail "ddp accepted a policy that hands back f32 sums"
elif grep -q "strategy ddp: the precision plugin hands back its sums in f32" "$work/acc32_ddp.log"; then
    pass; echo "ok ddp refuses a policy that hands back f32 sums, saying why"
else
    fail "ddp with result=f32: $(tail -3 "$work/acc32_ddp.log")"
fi

# A failing rank: rank 1 is given a shard whose tokens are beyond vocab_size (no meta.ini: its
# first window refuses it, as windows are checked when read); rank 0 must stop with a message
# naming rank 1, long before the 120 s timeout.
python3 - "$work/bad.bin" <<'PY'
import struct, sys
toks = [300] * 5000
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)))
    f.write(struct.pack("<%dH" % len(toks), *toks))
PY
start=$(date +%s)
mpirun_n 1 "$CTRAIN" train "$work/base.ini" --set comm.plugin=mpi --set run.out_dir="$work/f" : \
    -np 1 "$CTRAIN" train "$work/base.ini" --set comm.plugin=mpi --set run.out_dir="$work/f" \
    --set data.train="$work/bad.bin" > "$work/fail.log" 2>&1
rc=$?; took=$(( $(date +%s) - start ))
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -lt 60 ] && grep -q "token 300" "$work/fail.log"; then
    pass; echo "ok failing rank ends the job in ${took}s (exit $rc)"
else
    fail "failing rank: exit $rc after ${took}s: $(grep -i -m3 'rank\|error' "$work/fail.log")"
fi
finish
