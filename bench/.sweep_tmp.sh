#!/usr/bin/env bash
# bench/bench_optimizers.sh — the loss after STEPS (default 1000) steps of one small GPT for
# each shipped optimizer on the same data (byte tokens of GPL-3 + Apache-2.0, the same seed,
# batches and schedule: warm-up 50, cosine to lr/10), each at its usual learning rate; prints
# one table row per optimizer: final train loss (mean of the last 50 steps), validation loss,
# seconds. Reports; never gates. Env: BUILD, STEPS, WORLD (default 1), STRATEGY (default ddp).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
STEPS=${STEPS:-1000}
WORLD=${WORLD:-1}
STRATEGY=${STRATEGY:-ddp}
ctrain=$PWD/$BUILD/ctrain
work=$(mktemp -d /tmp/ctrain-bench-optim-XXXXXX)
trap 'rm -rf "$work"' EXIT
"$ctrain" prepare --text /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0 \
    --out "$work/data" --tokenizer bytes --val-fraction 0.1 > /dev/null 2>&1
cat > "$work/base.ini" <<INI
[run]
name = optim
steps = $STEPS
seed = 7
log_every = 10
eval_every = $STEPS
eval_batches = 8
[data]
train = $work/data
val = $work/data
batch_size = 8
seq_len = 64
[model]
plugin = gpt
n_layer = 2
n_head = 4
d_model = 64
vocab_size = 256
seq_len = 64
[strategy]
plugin = $STRATEGY
[comm]
world_size = $WORLD
[optim]
warmup = 50
grad_clip = 1.0
INI
# optimizer | lr | weight decay | extra settings
rows=(
    "muon|1e-3|0.1|--set optimizer.muon.adjust_lr=match_rms_adamw"
)
printf '| optimizer | lr | weight_decay | settings | train loss (last 50 steps) | val loss | seconds |\n'
printf '|---|---|---|---|---|---|---|\n'
for row in "${rows[@]}"; do
    IFS='|' read -r o lr wd extra <<< "$row"
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    "$ctrain" train "$work/base.ini" --set optimizer.plugin=$o --set optim.lr=$lr \
        --set optim.min_lr=$(python3 -c "print($lr / 10)") --set optim.weight_decay=$wd $extra \
        --set run.out_dir="$work/$o" > "$work/$o.log" 2>&1 || { echo "| $o | failed: $(tail -1 "$work/$o.log") |"; continue; }
    t1=$(date +%s.%N)
    python3 - "$work/$o/metrics.jsonl" "$o" "$lr" "$wd" "${extra:--}" "$(python3 -c "print(round($t1 - $t0))")" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
train = [r["loss"] for r in rows if "loss" in r]
val = [r["val/loss"] for r in rows if "val/loss" in r]
tail = train[-5:]  # logged every 10 steps: the last 50
print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {sys.argv[5].replace('--set ', '')} | "
      f"{sum(tail) / len(tail):.4f} | {val[-1] if val else float('nan'):.4f} | {sys.argv[6]} |")
PY
done
