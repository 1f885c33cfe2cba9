#!/usr/bin/env bash
# test_train.sh — end-to-end training on real text through the real binary and plugins:
# the loss falls, resume is bit-exact, amp and pure_bf16 track fp32. Strategies at several world
# sizes (tests/cli/test_distributed.sh) give the single-rank losses.
set -u
cd "$(dirname "$0")/../.."
. tests/cli/train_lib.sh
work=$(mktemp -d /tmp/ctrain-train-XXXXXX)
trap 'rm -rf "$work"' EXIT

# real English text present on every Debian machine
"$CTRAIN" prepare --text /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0 \
    --out "$work/data" --tokenizer bytes --val-fraction 0.1 > "$work/prepare.log" 2>&1 \
    || { fail "prepare: $(tail -3 "$work/prepare.log")"; finish; exit 1; }

# 1. the loss falls: from ln(256) = 5.55 nats untrained to at least 2 nats lower on held-out text
tiny_ini "$work/base.ini" "$work/base" "$work/data" 256
"$CTRAIN" train "$work/base.ini" --set run.steps=200 --set run.eval_every=200 > "$work/base.log" 2>&1 \
    || fail "train base: $(tail -3 "$work/base.log")"
val=$(metric_series "$work/base" val/loss | tail -1)
first=$(metric_series "$work/base" loss | head -1)
python3 -c "import sys; sys.exit(0 if $first > 5.4 and $val < $first - 2.0 else 1)" \
    && { pass; echo "ok loss falls: first train loss $first, final val loss $val"; } \
    || fail "loss falls: first train loss $first, final val loss $val (want > 5.4, then 2 nats lower)"

# 2. resume is bit-exact: 2k steps straight == k steps, then --resume to 2k
tiny_ini "$work/r.ini" "$work/straight" "$work/data" 256
"$CTRAIN" train "$work/r.ini" --set run.steps=16 > /dev/null 2>&1 || fail "train straight"
"$CTRAIN" train "$work/r.ini" --set run.steps=16 --stop-after 8 --set run.out_dir="$work/resumed" > /dev/null 2>&1 \
    || fail "train first half"
"$CTRAIN" train "$work/r.ini" --set run.steps=16 --set run.out_dir="$work/resumed" --resume \
    > "$work/resume.log" 2>&1 || fail "resume: $(tail -3 "$work/resume.log")"
compare_series "$work/resumed" "$work/straight" loss 0 "resume is bit-exact"

# 3. amp and pure_bf16 track fp32 over 50 steps
for p in fp32 amp pure_bf16; do
    "$CTRAIN" train "$work/base.ini" --set run.steps=50 --set precision.plugin=$p \
        --set run.out_dir="$work/p_$p" > "$work/p_$p.log" 2>&1 || fail "train $p: $(tail -3 "$work/p_$p.log")"
done
# bf16 keeps 8 significant bits (relative rounding 2^-9 = 0.2% per stored value); over 50 steps
# the runs drift apart by the accumulated rounding of weights and activations, which we bound at
# 3% of the loss: a wrong cast or a missed rounding shows up as far more.
compare_series "$work/p_amp" "$work/p_fp32" loss 0.03 "amp tracks fp32"
compare_series "$work/p_pure_bf16" "$work/p_fp32" loss 0.03 "pure_bf16 tracks fp32"

finish
