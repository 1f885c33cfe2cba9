#!/usr/bin/env bash
# seed-whatif.sh — the replays behind docs/seed-experiments.md: `ctrain what-if --rows` of a
# checkpoint of the V = 50,000, C = 768 model (ini/experiments/logit-growth/realistic-sp50k.ini)
# at the report's global batches, world sizes and tokens per rank, every order and policy the
# page tabulates, with AdamW's view at the report's learning rates. Not for: training (the
# checkpoint is made by scripts/realistic-model.sh) or the tables (docs/seed-experiments.md
# says how each figure is read off these files).
#
# Usage: scripts/seed-whatif.sh CHECKPOINT OUT_DIR [exp1|exp2|both]
#   exp1: global batch 256 x 2048 tokens = 524,288 (2048 sequences of the model's 256 tokens)
#         at N = 32 (4 nodes: 16,384 tokens per rank) and 128 (16 nodes: 4,096), plus 64 and
#         256 for the fit; lr 3e-4
#   exp2: 512 x 2048 = 1,048,576 tokens (4096 sequences) at N = 256 (32 nodes: 4,096 per rank),
#         plus 32, 64 and 128; lr 2e-4
# Each writes OUT_DIR/expK.txt; ~1-2 hours each on a shared 2-core machine (the forward of the
# batch is most of it; what-if prints its own timings). ROWS (default 1024) and SEED (1)
# choose the sample; CTRAIN the binary (default build/ctrain).
set -euo pipefail
ck=${1:?usage: scripts/seed-whatif.sh CHECKPOINT OUT_DIR [exp1|exp2|both]}
out=${2:?usage: scripts/seed-whatif.sh CHECKPOINT OUT_DIR [exp1|exp2|both]}
which=${3:-both}
ctrain=${CTRAIN:-build/ctrain}
rows=${ROWS:-1024}
seed=${SEED:-1}
mkdir -p "$out"
common=(--algo nccl,ring,dbtree,nvls,nvls_tree --gpu a100 --gpus-per-node 8
        --policies pure_bf16,bf16_fp32acc,bf16_sr,amp --rows "$rows" --sample-seed "$seed")
if [ "$which" = exp1 ] || [ "$which" = both ]; then
    "$ctrain" what-if "$ck" --global-batch 2048 --world-sizes 32,64,128,256 --lr 3e-4 \
        "${common[@]}" > "$out/exp1.txt"
fi
if [ "$which" = exp2 ] || [ "$which" = both ]; then
    "$ctrain" what-if "$ck" --global-batch 4096 --world-sizes 32,64,128,256 --lr 2e-4 \
        "${common[@]}" > "$out/exp2.txt"
fi
