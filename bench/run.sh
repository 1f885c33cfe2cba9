#!/usr/bin/env bash
# bench/run.sh — CPU training throughput, fp32 + AdamW, B=4, T=256, on (a) L=4 C=256 H=4
# V=50257 and (b) GPT-2 124M: tokens/s and the MFU exactly as `ctrain train` computes and prints
# it (read from its metrics.jsonl: FLOPs per token 6 N + 12 L T C given by the model, over the
# cpu device's measured BLAS peak; docs/benchmarks.md), plus the fraction of this CPU's nominal
# arithmetic peak (bench/nominal_peak.py: an estimate, it says how). Reports; never gates.
# Usage: bench/run.sh [small|gpt2|all] (default all). Env: STEPS (default 6), BUILD.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
which=${1:-all}
steps=${STEPS:-6}
work=$(mktemp -d /tmp/ctrain-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
cc -O2 -o "$work/peak" bench/peak.c $(pkg-config --cflags --libs openblas)
# the best of three measurements: a one-off disturbance lowers one of them, not all
peak=$(for i in 1 2 3; do "$work/peak"; done | awk '{if ($2 > m) m = $2} END {print m}')
echo "reference: sgemm 2048^3 on OpenBLAS's own threads: $peak GFLOP/s (best of 3 x 6)"
nominal=$(python3 bench/nominal_peak.py)
nominal_gf=${nominal%%|*}
echo "nominal fp32 peak (estimate): ${nominal#*|} = $nominal_gf GFLOP/s"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 bench/make_random_shard.py "$work/train.bin" 50257 400000

run_shape() {  # label L C H
    local label=$1 L=$2 C=$3 H=$4
    cat > "$work/$label.ini" <<INI
[run]
name = $label
out_dir = $work/$label
steps = $steps
log_every = 1
[data]
train = $work/train.bin
batch_size = 4
seq_len = 256
[model]
plugin = gpt
n_layer = $L
n_head = $H
d_model = $C
vocab_size = 50257
seq_len = 256
tie_embeddings = true
[precision]
plugin = fp32
[strategy]
plugin = ddp
[optim]
lr = 1e-4
INI
    "$BUILD/ctrain" train "$work/$label.ini" > "$work/$label.log"
    # training's own header: FLOPs per token, the peak and how it was found, the BLAS (+warning)
    grep "^mfu: " "$work/$label.log" | sed "s/^/$label: /"
    # after 2 warm-up steps, the step of median tokens/s, with the mfu training logged for it
    python3 - "$work/$label/metrics.jsonl" "$L" "$C" "$nominal_gf" "$label" <<'PY'
import json, sys
path, L, C, nominal, label = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
rows = [json.loads(l) for l in open(path)]
fpt, peak = rows[0]["flops_per_token"], rows[0]["peak_tflops"] * 1e3
rest = sorted(rows[2:], key=lambda r: r["tokens_per_s"])
mid = rest[len(rest) // 2]
gflops = mid["model_tflops"] * 1e3
print(f"{label}: L={L} C={C} {fpt / 1e6:.2f} MFLOP/token, step {mid['step']}: "
      f"{mid['tokens_per_s']:.0f} tok/s, {gflops:.1f} GFLOP/s, MFU {100 * mid['mfu']:.1f}% "
      f"(of the measured BLAS peak {peak:.1f} GFLOP/s), {100 * gflops / nominal:.1f}% of the "
      f"nominal peak")
PY
}
[ "$which" = all ] || [ "$which" = small ] && run_shape small 4 256 4
[ "$which" = all ] || [ "$which" = gpt2 ] && run_shape gpt2 12 768 12
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
exit 0
