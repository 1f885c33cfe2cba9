#!/usr/bin/env bash
# test_doc_mask.sh — [data] doc_mask end to end: JSON Lines documents (the paragraphs of GPL-3)
# prepared with an end-of-text token (256) before each; a 2-layer GPT with doc_mask takes the
# separator from meta.ini (the same bits as [data] eot_token = 256 given), and its loss differs
# from doc_mask = false from the first step on; with lr = 0 the validation loss differs too
# (evaluation masks as training does); shards without a recorded separator, a separator outside
# the vocabulary, and a bad meta.ini value are refused with a message naming the key. The
# logits' equality with a document run alone and the gradients: tests/unit/test_gpt_train.c.
set -u
cd "$(dirname "$0")/../.."
. tests/cli/train_lib.sh
work=$(mktemp -d /tmp/ctrain-docmask-XXXXXX)
trap 'rm -rf "$work"' EXIT

python3 - "$work/docs.jsonl" <<'PY'
import json, sys
paras = [p for p in open('/usr/share/common-licenses/GPL-3').read().split('\n\n') if p.strip()]
with open(sys.argv[1], 'w') as f:
    for p in paras:
        f.write(json.dumps({'text': p}) + '\n')
PY
"$CTRAIN" prepare --text "$work/docs.jsonl" --jsonl-field text --out "$work/data" \
    --val-fraction 0.1 --quiet > "$work/prep.log" 2>&1 || { fail "prepare: $(tail -2 "$work/prep.log")"; finish; exit 1; }
grep -q '^eot_token = 256$' "$work/data/meta.ini" && ok "prepare records eot_token = 256 in meta.ini" \
    || fail "meta.ini lacks eot_token = 256"
tiny_ini "$work/t.ini" "$work/unused" "$work/data" 257
sed -i -e 's/^steps = 20/steps = 4/' "$work/t.ini"
printf '[device.cpu]\nthreads = 2\n' >> "$work/t.ini"
train() {
    local name=$1; shift
    "$CTRAIN" train "$work/t.ini" --set run.out_dir="$work/$name" "$@" > "$work/$name.log" 2>&1 \
        || fail "train $name: $(tail -3 "$work/$name.log")"
}

train plain
train masked --set data.doc_mask=true
train masked_key --set data.doc_mask=true --set data.eot_token=256
compare_series "$work/masked_key" "$work/masked" loss 0 "eot_token = 256 given equals meta.ini's, bit for bit"
first() { metric_series "$1" loss | head -1; }
[ -n "$(first "$work/masked")" ] && [ "$(first "$work/masked")" != "$(first "$work/plain")" ] \
    && ok "doc_mask changes the first step's loss ($(first "$work/masked") vs $(first "$work/plain"))" \
    || fail "doc_mask left the first step's loss at $(first "$work/plain")"
train other_sep --set data.doc_mask=true --set data.eot_token=32 # ' ' as the separator
[ "$(first "$work/other_sep")" != "$(first "$work/masked")" ] \
    && ok "another separator (32) gives another loss: the mask follows eot_token" \
    || fail "eot_token = 32 gave eot_token = 256's loss"
train plain_lr0 --set optim.lr=0 --set run.eval_every=2
train masked_lr0 --set optim.lr=0 --set run.eval_every=2 --set data.doc_mask=true
v1=$(metric_series "$work/masked_lr0" val/loss | head -1); v0=$(metric_series "$work/plain_lr0" val/loss | head -1)
[ -n "$v1" ] && [ "$v1" != "$v0" ] && ok "evaluation masks too: val loss $v1 vs $v0 (lr 0)" \
    || fail "val loss with doc_mask ($v1) equals without ($v0)"

# refusals
"$CTRAIN" prepare --text /usr/share/common-licenses/GPL-3 --out "$work/plain_data" --quiet \
    --val-fraction 0.1 > /dev/null 2>&1
expect_refusal() { # NAME NEEDLE args...
    local name=$1 needle=$2; shift 2
    "$CTRAIN" train "$work/t.ini" --set run.out_dir="$work/refused" "$@" > "$work/r.log" 2>&1
    local rc=$?
    if [ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -qF -- "$needle" "$work/r.log"; then ok "$name"
    else fail "$name: exit $rc: $(tail -2 "$work/r.log")"; fi
}
expect_refusal "doc_mask on shards without eot_token: refused, naming the key" \
    "[data] doc_mask = true needs the token that separates documents" \
    --set data.doc_mask=true --set data.train="$work/plain_data" --set data.val= --set model.vocab_size=256
expect_refusal "a separator outside the vocabulary: refused" "outside the model's vocabulary" \
    --set data.doc_mask=true --set data.eot_token=300
cp -r "$work/data" "$work/bad_data"
sed -i 's/^eot_token = 256$/eot_token = x/' "$work/bad_data/meta.ini"
expect_refusal "a bad eot_token in meta.ini: refused, naming it" "bad value of eot_token" \
    --set data.doc_mask=true --set data.train="$work/bad_data" --set data.val=
finish
