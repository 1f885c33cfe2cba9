#!/usr/bin/env bash
# test_f16.sh — f16 compute end to end on the CPU (precision pure_f16: f16 params, activations
# and gradients emulated as the model emulates bf16, f16 wire, f32 master): a tiny model trains
# 20 steps on ddp, no_shard and full_shard (threads engine, N = 2) with finite losses close to
# fp32's and different from pure_bf16's; full_shard equals no_shard bit for bit; a run stopped
# at step 10 and resumed equals the straight run bit for bit; the start-up line says f16 takes
# the OpenBLAS path; sampling from the run decodes in f16 (cache = recompute); check-plugin
# passes for pure_f16 and fp16; fp16 (GradScaler's loss scale) at scale 1 is pure_f16, skips
# and backs off from an overflowing scale, and resumes bit for bit.
set -u
cd "$(dirname "$0")/../.."
. tests/cli/train_lib.sh
work=$(mktemp -d /tmp/ctrain-f16-XXXXXX)
trap 'rm -rf "$work"' EXIT

"$CTRAIN" prepare /usr/share/common-licenses/GPL-3 --out "$work/data" --tokenizer bytes \
    --val-fraction 0.1 > /dev/null 2>&1 || { fail "prepare"; finish; exit 1; }
tiny_ini "$work/base.ini" "$work/fp32" "$work/data" 256
two=(--set comm.plugin=threads --set comm.world_size=2 --set data.batch_size=2)
# train NAME [--set ...]: a run in $work/NAME, its log in $work/NAME.log
train() {
    local name=$1; shift
    "$CTRAIN" train "$work/base.ini" --set run.out_dir="$work/$name" "$@" > "$work/$name.log" 2>&1 \
        || fail "train $name: $(tail -3 "$work/$name.log")"
}
finite() { # finite RUN: every logged loss is a finite number
    python3 - "$1/metrics.jsonl" <<'PY'
import json, math, sys
v = [d["loss"] for d in map(json.loads, open(sys.argv[1])) if "loss" in d]
sys.exit(0 if len(v) == 20 and all(math.isfinite(x) for x in v) else 1)
PY
}

train fp32 "${two[@]}" --set strategy.plugin=ddp
train bf16_ddp "${two[@]}" --set strategy.plugin=ddp --set precision.plugin=pure_bf16
# Tolerance against fp32: f16 rounds operands, activations, gradients and every partial sum of
# the wire to 11 significant bits (unit roundoff 2^-11 = 4.9e-4), so the losses drift from
# fp32's by a few 1e-5 (measured here: under 1e-4 over the 20 steps; pure_bf16, 8 bits, 2e-4).
# 2e-3 leaves room for that drift while a wrong cast (bf16 bits read as f16, or a dropped
# rounding to the wrong format) moves the loss by far more or makes it NaN.
for s in ddp no_shard full_shard; do
    train f16_$s "${two[@]}" --set strategy.plugin=$s --set precision.plugin=pure_f16
    finite "$work/f16_$s" && ok "pure_f16 $s: 20 finite losses" || fail "pure_f16 $s: a loss is not finite"
    compare_series "$work/f16_$s" "$work/fp32" loss 2e-3 "pure_f16 $s, N = 2, close to fp32"
done
if ! cmp -s <(metric_series "$work/f16_ddp" loss) <(metric_series "$work/bf16_ddp" loss); then
    ok "pure_f16 and pure_bf16 give different losses (ddp)"
else
    fail "pure_f16 gives pure_bf16's losses: f16 is not what runs"
fi
# no_shard and full_shard gather the same f16 params, reduce the same f16 gradients on the same
# ring and update the same f32 master: the same arithmetic, the same bits.
compare_series "$work/f16_full_shard" "$work/f16_no_shard" loss 0 "pure_f16: full_shard equals no_shard bit for bit"
grep -q "cpu f16: OpenBLAS" "$work/f16_ddp.log" && ok "the start-up line says f16 takes the OpenBLAS path" \
    || fail "no 'cpu f16: OpenBLAS' start-up line"

# Resume: stopped after 10 steps (checkpoint: f32 master, AdamW state), resumed to 20, equals
# the straight run bit for bit.
"$CTRAIN" train "$work/base.ini" "${two[@]}" --set strategy.plugin=full_shard \
    --set precision.plugin=pure_f16 --set run.out_dir="$work/resume" --stop-after 10 \
    > "$work/resume1.log" 2>&1 || fail "resume: first half: $(tail -3 "$work/resume1.log")"
"$CTRAIN" train "$work/base.ini" "${two[@]}" --set strategy.plugin=full_shard \
    --set precision.plugin=pure_f16 --set run.out_dir="$work/resume" --resume \
    > "$work/resume2.log" 2>&1 || fail "resume: second half: $(tail -3 "$work/resume2.log")"
compare_series "$work/resume" "$work/f16_full_shard" loss 0 "pure_f16 full_shard: stop at 10, resume, bit for bit"

# The checkpoint holds the f32 master and AdamW state, as fp32's and pure_bf16's: the same size.
sz() { stat -c %s "$1"/checkpoints/step_00000020/rank_00000.bin 2>/dev/null; }
[ -n "$(sz "$work/f16_ddp")" ] && [ "$(sz "$work/f16_ddp")" = "$(sz "$work/fp32")" ] \
    && [ "$(sz "$work/f16_ddp")" = "$(sz "$work/bf16_ddp")" ] \
    && ok "pure_f16's checkpoint is fp32's size ($(sz "$work/f16_ddp") bytes a rank): f32 master" \
    || fail "checkpoint sizes: pure_f16 $(sz "$work/f16_ddp"), fp32 $(sz "$work/fp32"), pure_bf16 $(sz "$work/bf16_ddp")"

# grad_accum_dtype = f32 (f32 local gradient, cast to f16 for the wire) trains as well
train f16_acc32 "${two[@]}" --set strategy.plugin=no_shard --set precision.plugin=pure_f16 \
    --set precision.grad_accum_dtype=f32
compare_series "$work/f16_acc32" "$work/fp32" loss 2e-3 "pure_f16 grad_accum_dtype = f32 close to fp32"

# Generation from an f16 run decodes in f16 (prepare_decode with the policy's f16): greedy text
# with the key/value cache equals recomputing with forward(), past the 32-token context.
a=$("$CTRAIN" sample "$work/f16_ddp" --prompt "Pack my" --greedy --tokens 48 2> "$work/s1.err")
b=$("$CTRAIN" sample "$work/f16_ddp" --prompt "Pack my" --greedy --tokens 48 --no-cache 2> "$work/s2.err")
[ -n "$a" ] && [ "$a" = "$b" ] && grep -q "cpu f16" "$work/s1.err" \
    && ok "pure_f16 run: greedy sampling with the KV cache equals recompute, in f16" \
    || fail "pure_f16 sampling: '$a' vs '$b' ($(tail -2 "$work/s1.err"))"

# fp16 = pure_f16's dtypes + GradScaler's loss scale (precision_kit.h's ct_pkit_scaler, as
# scaled_amp): with the scale held at 1 (init_scale 1, growth never) it is pure_f16 bit for bit;
# from a first scale of 2^22 (the gradients of this model overflow f16 above about 2^17) the first steps overflow f16, are skipped on both ranks and
# halve the scale until the gradients fit, then the run trains; stopped after a skip and
# resumed, the losses and scales equal the straight run's bit for bit.
train fp16_one "${two[@]}" --set strategy.plugin=full_shard --set precision.plugin=fp16 \
    --set precision.init_scale=1 --set precision.growth_interval=1000000
compare_series "$work/fp16_one" "$work/f16_full_shard" loss 0 "fp16 at scale 1 equals pure_f16 bit for bit"
train fp16_big "${two[@]}" --set strategy.plugin=full_shard --set precision.plugin=fp16 \
    --set precision.init_scale=4194304 --set run.log_every=1
python3 - "$work/fp16_big/metrics.jsonl" <<'PY' && ok "fp16 from 2^22: overflowed steps skipped, the scale halves per skip, then 20 finite losses" \
    || fail "fp16 from 2^22: $(cat "$work/fp16_big.why" 2>/dev/null)"
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
scales = [d["loss_scale"] for d in rows]; skips = [d["skipped_steps"] for d in rows]
why = []
if len(rows) != 20 or not all(math.isfinite(d["loss"]) for d in rows): why.append("not 20 finite losses")
if sum(skips) < 1: why.append("no step was skipped")
for a, b, k in zip(scales, scales[1:], skips):
    if k and b != a / 2: why.append(f"after a skip the scale went {a} -> {b}")
if skips[-1] != 0: why.append("still skipping at step 20")
if why: print("; ".join(why)); sys.exit(1)
PY
"$CTRAIN" train "$work/base.ini" "${two[@]}" --set strategy.plugin=full_shard \
    --set precision.plugin=fp16 --set precision.init_scale=4194304 --set run.log_every=1 \
    --set run.out_dir="$work/fp16_resume" --stop-after 10 > "$work/fp16_r1.log" 2>&1 \
    || fail "fp16 resume: first half: $(tail -3 "$work/fp16_r1.log")"
"$CTRAIN" train "$work/base.ini" "${two[@]}" --set strategy.plugin=full_shard \
    --set precision.plugin=fp16 --set precision.init_scale=4194304 --set run.log_every=1 \
    --set run.out_dir="$work/fp16_resume" --resume > "$work/fp16_r2.log" 2>&1 \
    || fail "fp16 resume: second half: $(tail -3 "$work/fp16_r2.log")"
compare_series "$work/fp16_resume" "$work/fp16_big" loss 0 "fp16 full_shard: stop at 10, resume, bit for bit"
compare_series "$work/fp16_resume" "$work/fp16_big" loss_scale 0 "fp16 full_shard: the scale resumes with the run"
# A skipped step is not an update: AdamW's first update after k skipped steps is its step 1,
# as in torch (GradScaler's skipped optimizer.step() never advances Adam's count), so with weight
# decay 0 every weight that has a gradient moves by lr (bias-corrected m/sqrt(v) = +-1); counted
# as step k+1 it would move by about half of that (betas 0.9/0.95, k = 5).
k=$(python3 -c 'import json,sys
n=0
for l in open(sys.argv[1]):
    if json.loads(l)["skipped_steps"]: n += 1
    else: break
print(n)' "$work/fp16_big/metrics.jsonl")
adam=("${two[@]}" --set strategy.plugin=full_shard --set precision.plugin=fp16
      --set precision.init_scale=4194304 --set optim.lr=1e-3 --set optim.warmup=0
      --set optim.schedule=constant --set optim.min_lr=1e-3 --set optim.weight_decay=0
      --set optim.grad_clip=0)
train adam_k "${adam[@]}" --set run.steps="$k"
train adam_k1 "${adam[@]}" --set run.steps=$((k + 1))
for s in k k1; do
    "$CTRAIN" export "$work/adam_$s" --format safetensors --target ctrain \
        --out "$work/adam_$s.safetensors" > "$work/export_$s.log" 2>&1 \
        || fail "export adam_$s: $(tail -2 "$work/export_$s.log")"
done
python3 - "$work/adam_k.safetensors/model.safetensors" "$work/adam_k1.safetensors/model.safetensors" 1e-3 <<'PY' \
    > "$work/adam.why" && ok "fp16: the first update after $k skipped steps is AdamW's step 1 ($(cat "$work/adam.why"))" \
    || fail "fp16: first update after $k skips: $(cat "$work/adam.why")"
import array, json, struct, sys
def load(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; head = json.loads(b[8:8 + n])
    out = {}
    for name, t in head.items():
        if name == "__metadata__": continue
        assert t["dtype"] == "F32", t["dtype"]
        a = array.array("f"); s, e = t["data_offsets"]; a.frombytes(b[8 + n + s:8 + n + e]); out[name] = a
    return out
a, b, lr = load(sys.argv[1]), load(sys.argv[2]), float(sys.argv[3])
ratios = sorted(abs(y - x) / lr for k in a for x, y in zip(a[k], b[k]) if y != x)
med = ratios[len(ratios) // 2] if ratios else 0
print(f"median |dw|/lr {med:.4f} over {len(ratios)} weights that moved")
sys.exit(0 if ratios and abs(med - 1) < 0.01 else 1)
PY

out=$(timeout 300 "$CTRAIN" check-plugin "$(dirname "$CTRAIN")/plugins/precision_fp16.so" 2>&1) \
    && ok "check-plugin fp16: $(echo "$out" | tail -1)" || fail "check-plugin fp16: $(echo "$out" | grep FAIL | head -3)"

out=$(timeout 300 "$CTRAIN" check-plugin "$(dirname "$CTRAIN")/plugins/precision_pure_f16.so" 2>&1) \
    && ok "check-plugin pure_f16: $(echo "$out" | tail -1)" || fail "check-plugin pure_f16: $(echo "$out" | grep FAIL | head -3)"
finish
