#!/usr/bin/env bash
# test_recompute.sh — [model] recompute end to end: 4 steps of a 2-layer GPT (threads pinned to 2)
# with recompute = blocks and = attention give the loss and grad norm of every step and the
# checkpoint (f32 master weights and AdamW's m and v, which hold every gradient bit) of
# recompute = none byte for byte: the plain GPT-2 shape, then rope + qk-norm + swiglu with
# dropout 0.1 and document masking, on one rank and on two (full_shard, threads engine); the
# model's start-up line counts fewer activation bytes kept (blocks < attention < none).
# The measured memory and time: bench/bench_recompute.sh, docs/benchmarks.md.
set -u
cd "$(dirname "$0")/../.."
. tests/cli/train_lib.sh
work=$(mktemp -d /tmp/ctrain-recompute-XXXXXX)
trap 'rm -rf "$work"' EXIT

python3 - "$work/docs.jsonl" <<'PY'
import json, sys
paras = [p for p in open('/usr/share/common-licenses/GPL-3').read().split('\n\n') if p.strip()]
with open(sys.argv[1], 'w') as f:
    for p in paras:
        f.write(json.dumps({'text': p}) + '\n')
PY
"$CTRAIN" prepare --text "$work/docs.jsonl" --jsonl-field text --out "$work/data" \
    --val-fraction 0.1 --quiet > /dev/null 2>&1 || { fail "prepare"; finish; exit 1; }
tiny_ini "$work/t.ini" "$work/unused" "$work/data" 257
sed -i -e 's/^steps = 20/steps = 4/' -e 's/^seq_len = 32/seq_len = 80/' "$work/t.ini"
printf '[device.cpu]\nthreads = 2\n' >> "$work/t.ini"
export CTRAIN_DEBUG=1 # the activation line of recompute = none is a debug line
train() {
    local name=$1; shift
    "$CTRAIN" train "$work/t.ini" --set run.out_dir="$work/$name" "$@" > "$work/$name.log" 2>&1 \
        || fail "train $name: $(tail -3 "$work/$name.log")"
}
variant_a=()
variant_b=(--set model.pos=rope --set model.qk_norm=true --set model.mlp=swiglu
           --set model.dropout=0.1 --set data.doc_mask=true)
two=(--set comm.plugin=threads --set comm.world_size=2 --set data.batch_size=2
     --set strategy.plugin=full_shard)
for v in a b a2 b2; do
    case $v in
        a) args=("${variant_a[@]}") ;; b) args=("${variant_b[@]}") ;;
        a2) args=("${variant_a[@]}" "${two[@]}") ;; b2) args=("${variant_b[@]}" "${two[@]}") ;;
    esac
    for mode in none blocks attention; do train ${v}_$mode "${args[@]}" --set model.recompute=$mode; done
    for mode in blocks attention; do
        compare_series "$work/${v}_$mode" "$work/${v}_none" loss 0 "variant $v: recompute = $mode, loss bit for bit"
        compare_series "$work/${v}_$mode" "$work/${v}_none" grad_norm 0 "variant $v: recompute = $mode, grad norm bit for bit"
        same=1
        for f in "$work/${v}_none"/checkpoints/step_00000004/rank_*.bin; do
            cmp -s "$f" "$work/${v}_$mode/checkpoints/step_00000004/$(basename "$f")" || same=0
        done
        [ -f "$f" ] && [ $same = 1 ] && ok "variant $v: recompute = $mode, checkpoint (weights, AdamW m and v) byte for byte" \
            || fail "variant $v: recompute = $mode: the step-4 checkpoint differs from recompute = none"
    done
done
kept() { sed -n 's/.*activations kept for backward: \([0-9.]*\) MiB.*/\1/p' "$work/$1.log" | head -1; }
python3 -c "import sys; n, b, a = map(float, sys.argv[1:]); sys.exit(0 if b < a < n else 1)" \
    "$(kept b_none)" "$(kept b_blocks)" "$(kept b_attention)" \
    && ok "activations kept: blocks $(kept b_blocks) < attention $(kept b_attention) < none $(kept b_none) MiB" \
    || fail "activations kept: none '$(kept b_none)', blocks '$(kept b_blocks)', attention '$(kept b_attention)'"
finish
