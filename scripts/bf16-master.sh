#!/usr/bin/env bash
# bf16-master.sh — the measurement behind docs/research-policies.md "bf16 master weights": a
# small GPT (ini/tiny.ini's, narrowed by MODEL: 2 layers, d 64, 2 heads; 4096 sub-word tokens
# of the default corpus, 16 x 64 tokens a step) trained STEPS steps (default 1000) with the same
# data and seed under four precision policies: amp (f32 master), bf16_master with update =
# kahan, sr and nearest; at the config's learning rate (3e-3 cosine to 3e-4) and at a small one
# (LR_SMALL, default 1e-4, constant after the warm-up), where round-to-nearest loses most
# updates. The four runs of a learning rate run at once (one thread each). Prints a Markdown
# table of train and val loss at several steps and each run's memory line. Run it under
# `nice -n 10` on a shared machine.
# Usage: scripts/bf16-master.sh [OUT_DIR]   (default runs/bf16-master; runs are reused when
# their metrics.jsonl is complete). Env: STEPS, STEPS_SMALL (the small-lr runs' steps, default
# STEPS), LR_SMALL, MODEL (--set arguments), BUILD.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=${1:-runs/bf16-master}
STEPS=${STEPS:-1000}
STEPS_SMALL=${STEPS_SMALL:-$STEPS}
LR_SMALL=${LR_SMALL:-1e-4}
if [ ! -s data/default/meta.ini ]; then
    mapfile -t texts < <(scripts/get-corpus.sh)
    "$BUILD/ctrain" prepare --text "${texts[@]}" --out data/default \
        --tokenizer sentencepiece --vocab-size 4096 --val-fraction 0.02
fi
mkdir -p "$OUT"
read -r -a model <<< "${MODEL:---set model.n_layer=2 --set model.d_model=64 --set model.n_head=2}"
common=(--set run.log_every=50 --set run.eval_every=250 --set run.checkpoint_every=0
        --set device.threads=1 "${model[@]}")
run() { # run NAME STEPS [--set ...]
    local name=$1 steps=$2; shift 2
    if [ -s "$OUT/$name/metrics.jsonl" ] &&
       grep -q "\"step\": *$steps[,}]" "$OUT/$name/metrics.jsonl"; then return; fi
    "$BUILD/ctrain" train ini/tiny.ini "${common[@]}" --set run.steps="$steps" \
        --set run.out_dir="$OUT/$name" --force "$@" > "$OUT/$name.log" 2>&1
}
small=(--set optim.lr="$LR_SMALL" --set optim.min_lr="$LR_SMALL" --set optim.schedule=constant)
for lr in base small; do
    extra=() steps=$STEPS
    [ $lr = small ] && extra=("${small[@]}") steps=$STEPS_SMALL
    run "$lr-amp" $steps --set precision.plugin=amp "${extra[@]}" &
    for u in kahan sr nearest; do
        run "$lr-$u" $steps --set precision.plugin=bf16_master \
            --set precision.bf16_master.update=$u "${extra[@]}" &
    done
    wait
done
python3 - "$OUT" "$STEPS" "$STEPS_SMALL" <<'PY'
import json, os, sys
out = sys.argv[1]
for lr, steps in (("base", int(sys.argv[2])), ("small", int(sys.argv[3]))):
    marks = sorted(set(s for s in (100, 250, 500, 750, 1000, steps) if s <= steps))
    print(f"\n### {'lr of ini/tiny.ini (3e-3 cosine to 3e-4)' if lr == 'base' else 'small lr (constant)'}, {steps} steps\n")
    print("| policy | " + " | ".join(f"train {s}" for s in marks) + " | " +
          " | ".join(f"val {s}" for s in marks if s % 250 == 0 or s == steps) + " |")
    print("|---" * (1 + len(marks) + len([s for s in marks if s % 250 == 0 or s == steps])) + "|")
    for pol in ("amp", "kahan", "sr", "nearest"):
        p = os.path.join(out, f"{lr}-{pol}", "metrics.jsonl")
        if not os.path.exists(p):
            continue
        rows = [json.loads(l) for l in open(p)]
        tr = {d["step"]: d["loss"] for d in rows if "loss" in d}
        va = {d["step"]: d["val/loss"] for d in rows if "val/loss" in d}
        name = "amp (f32 master)" if pol == "amp" else f"bf16_master {pol}"
        cells = [f"{tr[s]:.4f}" if s in tr else "-" for s in marks]
        cells += [f"{va[s]:.4f}" if s in va else "-" for s in marks if s % 250 == 0 or s == steps]
        print(f"| {name} | " + " | ".join(cells) + " |")
print()
for lr in ("base",):
    for pol in ("amp", "kahan", "sr", "nearest"):
        log = os.path.join(out, f"{lr}-{pol}.log")
        if os.path.exists(log):
            for l in open(log):
                if l.startswith("memory per rank"):
                    print(f"{pol}: {l.strip()}")
PY
