#!/usr/bin/env bash
# train_compare.sh — 20 training steps of ctrain with [device] type = DUT (cuda) against
# type = cpu, same INI, seed and data (a learnable bigram-chain shard, V=512, losses ce + zloss),
# fp32, amp and fp16: the per-step loss of the DUT run must stay within 1e-3 (fp32) / 5e-3 (amp,
# fp16) relative of the cpu run's and the run must learn (last < first). On the CPU alone, amp
# and fp32 runs of this INI differ by < 1e-4 over the 20 steps; the margins are for the GPU's f32
# sum order and bf16 (f16) rounding flips (model_vs_cpu.c), which Adam's normalised steps carry
# on. fp16 (GradScaler's loss scale, f16 compute and wire) starts at a scale of 2^10, below what
# overflows this model's f16 gradients, so neither run skips a step and their loss_scale series
# must be equal (a skip on one device only would show there first).
# Prints "ok NAME ..." / "FAIL NAME ..." and "N passed, N failed". Called by tests/gpu/run.sh.
# Not for: speed (run.sh's benchmark). Usage: train_compare.sh BUILD WORKDIR [DUT=cuda]
#   DUT=cpu: a dry run of this script anywhere (cpu against cpu).
set -u
BUILD=$1 WORK=$2 DUT=${3:-cuda}
mkdir -p "$WORK"
passed=0 failed=0
python3 - "$WORK/train.bin" <<'PY' || { echo "FAIL train_data: cannot write the shard"; echo "0 passed, 1 failed"; exit 1; }
import random, struct, sys
rng = random.Random(7); V = 512; n = 400000
nxt = [rng.randrange(V) for _ in range(V)]
toks, t = [], 0
for _ in range(n):
    t = nxt[t] if rng.random() < 0.8 else rng.randrange(V)
    toks.append(t)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", *([20240520, 1, n] + [0] * 253)))
    f.write(struct.pack("<%dH" % n, *toks))
PY
for prec in fp32 amp fp16; do
    ok=1
    for role in ref dut; do
        dev=$([ $role = ref ] && echo cpu || echo "$DUT")
        tag=$prec-$dev-$role
        cat >"$WORK/$tag.ini" <<INI
[run]
name = $tag
out_dir = $WORK/$tag
steps = 20
seed = 1234
log_every = 1
[data]
train = $WORK/train.bin
batch_size = 8
seq_len = 64
[model]
plugin = gpt
n_layer = 2
n_head = 4
d_model = 128
vocab_size = 512
seq_len = 64
[loss]
plugins = ce, zloss
[precision]
plugin = $prec
[strategy]
plugin = ddp
[device]
type = $dev
[precision.fp16]
init_scale = 1024
[optim]
lr = 3e-3
warmup = 5
INI
        if ! "$BUILD/ctrain" train "$WORK/$tag.ini" >"$WORK/$tag.log" 2>&1; then
            echo "FAIL train_20_steps_${prec}_${DUT}_vs_cpu: ctrain train ($dev) failed:"
            tail -5 "$WORK/$tag.log" | sed 's/^/    /'
            ok=0
        fi
    done
    if [ $ok -eq 1 ]; then
        python3 - "$WORK/$prec-cpu-ref/metrics.jsonl" "$WORK/$prec-$DUT-dut/metrics.jsonl" \
            "$prec" "$DUT" <<'PY' || ok=0
import json, sys
def losses(p):
    try:
        rows = [json.loads(l) for l in open(p)]
    except (OSError, ValueError) as e:
        print(f"  {p}: {e}")
        return []
    return [(r["step"], r["loss"], r.get("loss/zloss", 0.0), r.get("loss_scale"),
             r.get("skipped_steps", 0)) for r in rows if "loss" in r]
a, b, prec, dut = losses(sys.argv[1]), losses(sys.argv[2]), sys.argv[3], sys.argv[4]
tol = 1e-3 if prec == "fp32" else 5e-3
worst = max(abs(y[1] - x[1]) / abs(x[1]) for x, y in zip(a, b)) if a and len(a) == len(b) else 1e9
learns = len(b) > 1 and b[-1][1] < b[0][1]
ok = len(a) == 20 and len(b) == 20 and worst <= tol and learns
if prec == "fp16":  # the same loss scales, and no step skipped on either device
    same = [x[3] for x in a] == [y[3] for y in b] and None not in [x[3] for x in a]
    skips = sum(x[4] for x in a) + sum(y[4] for y in b)
    print(f"  fp16: loss_scale series {'equal' if same else 'DIFFER'}, {skips} skipped steps")
    ok = ok and same and skips == 0
if a and b:
    print(("ok" if ok else "FAIL") + f" train_20_steps_{prec}_{dut}_vs_cpu: {len(b)} steps, loss "
          f"{a[0][1]:.4f} -> {a[-1][1]:.4f} (cpu) vs {b[0][1]:.4f} -> {b[-1][1]:.4f} ({dut}), "
          f"worst rel diff {worst:.2e} (tol {tol:.0e}); zloss term {a[-1][2]:.3e} vs {b[-1][2]:.3e}")
    for x, y in zip(a, b):
        print(f"  step {x[0]:2d}  cpu {x[1]:.6f}  {dut} {y[1]:.6f}")
else:
    print(f"FAIL train_20_steps_{prec}_{dut}_vs_cpu: no losses ({len(a)} cpu rows, {len(b)} {dut} rows)")
sys.exit(0 if ok else 1)
PY
    fi
    [ $ok -eq 1 ] && passed=$((passed + 1)) || failed=$((failed + 1))
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
