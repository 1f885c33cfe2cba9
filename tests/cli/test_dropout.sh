#!/usr/bin/env bash
# test_dropout.sh — [model] dropout end to end (a 2-layer GPT on byte-level GPL-3 text, 6 steps):
# dropout = 0 is the run without the key bit for bit; dropout = 0.1 changes the training loss
# from the first step on, yet with lr = 0 (the weights never move) its validation loss equals the
# run without dropout bit for bit (evaluation does not drop); a run stopped after 3 steps and
# resumed equals the straight run bit for bit, with threads = 2 ranks too (masks per rank,
# step and micro-batch, grad_accum = 2); `ctrain logits` on the dropout run is unaffected by the
# key. The masks' statistics and gradients: tests/unit/test_gpt_train.c.
set -u
cd "$(dirname "$0")/../.."
. tests/cli/train_lib.sh
work=$(mktemp -d /tmp/ctrain-dropout-XXXXXX)
trap 'rm -rf "$work"' EXIT

"$CTRAIN" prepare --text /usr/share/common-licenses/GPL-3 --out "$work/data" --tokenizer bytes \
    --val-fraction 0.1 > /dev/null 2>&1 || { fail "prepare"; finish; exit 1; }
tiny_ini "$work/t.ini" "$work/unused" "$work/data" 256
sed -i -e 's/^steps = 20/steps = 6/' "$work/t.ini"
printf '[device.cpu]\nthreads = 2\n' >> "$work/t.ini"
train() { # train NAME [args...]: a run in $work/NAME, its log in $work/NAME.log
    local name=$1; shift
    "$CTRAIN" train "$work/t.ini" --set run.out_dir="$work/$name" "$@" > "$work/$name.log" 2>&1 \
        || fail "train $name: $(tail -3 "$work/$name.log")"
}

train plain
train zero --set model.dropout=0
compare_series "$work/zero" "$work/plain" loss 0 "dropout = 0 is the run without the key, bit for bit"
train drop --set model.dropout=0.1
first() { metric_series "$1" loss | head -1; }
[ -n "$(first "$work/drop")" ] && [ "$(first "$work/drop")" != "$(first "$work/plain")" ] \
    && ok "dropout = 0.1 changes the first step's loss ($(first "$work/drop") vs $(first "$work/plain"))" \
    || fail "dropout = 0.1 left the first step's loss at $(first "$work/plain")"

# lr = 0: the same weights at every step; training losses differ, validation losses may not
train plain_lr0 --set optim.lr=0 --set run.eval_every=2
train drop_lr0 --set optim.lr=0 --set run.eval_every=2 --set model.dropout=0.3
compare_series "$work/drop_lr0" "$work/plain_lr0" val/loss 0 "evaluation does not drop: val loss bit for bit with dropout 0.3 (lr 0)"
if ! cmp -s <(metric_series "$work/drop_lr0" loss) <(metric_series "$work/plain_lr0" loss); then
    ok "with lr 0 the training losses differ from the plain run's (training drops)"
else
    fail "with lr 0 and dropout 0.3 the training losses equal the plain run's"
fi

# resume bit for bit: one rank; two ranks with gradient accumulation
for shape in one two; do
    extra=(--set model.dropout=0.1)
    [ $shape = two ] && extra+=(--set comm.plugin=threads --set comm.world_size=2 \
                                --set data.batch_size=2 --set data.grad_accum=2)
    train straight_$shape "${extra[@]}"
    train resumed_$shape "${extra[@]}" --stop-after 3
    "$CTRAIN" train "$work/t.ini" --set run.out_dir="$work/resumed_$shape" "${extra[@]}" --resume \
        > "$work/resumed_$shape.2.log" 2>&1 || fail "resume $shape: $(tail -3 "$work/resumed_$shape.2.log")"
    compare_series "$work/resumed_$shape" "$work/straight_$shape" loss 0 "dropout 0.1 ($shape): stop at 3, resume, bit for bit"
done
if ! cmp -s <(metric_series "$work/straight_two" loss) <(metric_series "$work/drop" loss); then
    ok "two ranks with grad_accum 2 drop differently from one rank (masks per rank and micro-batch)"
else
    fail "two ranks x 2 micro-batches gave one rank's losses"
fi

# ctrain logits (no training: no dropout) on the dropout run's weights, with and without the key
python3 -c "import struct; open('$work/tok.bin','wb').write(struct.pack('<64i', *[(7*i) % 256 for i in range(64)]))"
"$CTRAIN" logits "$work/drop/config.ini" --tokens "$work/tok.bin" --out "$work/l1.bin" \
    > "$work/l1.log" 2>&1 || fail "logits: $(tail -2 "$work/l1.log")"
"$CTRAIN" logits "$work/drop/config.ini" --set model.dropout=0 --tokens "$work/tok.bin" \
    --out "$work/l0.bin" > "$work/l0.log" 2>&1 || fail "logits dropout 0: $(tail -2 "$work/l0.log")"
[ -s "$work/l1.bin" ] && cmp -s "$work/l1.bin" "$work/l0.bin" \
    && ok "ctrain logits: the same bytes with dropout 0.1 and 0" || fail "ctrain logits differ with dropout"
finish
