#!/usr/bin/env bash
# test_loss_scale.sh — loss scaling owned by the precision policy (ABI 1.7 loss_scale,
# after_reduce, state_save/state_load) through the real binary, with precision scaled_amp
# (torch.amp.GradScaler's rule):
#   - no step overflows: the same losses and weights as amp, bit for bit (the scale is a power
#     of two: multiplying the loss gradient by it and the reduced gradient by its inverse
#     changes no bit), on two ranks of the threads engine, under full_shard and under ddp with
#     clipping;
#   - metrics.jsonl has loss_scale (grown every growth_interval = 3 clean steps) and
#     skipped_steps; amp writes neither;
#   - an injected overflow (init_scale = 2^127 with zloss coef 1000: the scaled gradients are
#     not finite) is skipped on both ranks alike, the scale backs off, the run goes on;
#     an overflow on one rank only (test plugin loss_fault, mode inf_grad) is skipped on both,
#     and stops the run under amp; steps that are all skipped leave the master weights and AdamW moments untouched;
#   - a run stopped at step 4 and resumed ends on the losses, weights and scales of the whole
#     run (precision.bin holds the scale and the clean-step counter); a damaged precision.bin
#     stops the resume;
#   - the unit test's stream of verdicts replayed by tests/loss_scale_reference.py (an f32
#     transcription of GradScaler's rule; torch.amp.GradScaler when torch is importable).
set -u
source "$(dirname "$0")/lib.sh"
ct_need_ctrain
cd "$ROOT"
work="$CT_TMP"
V=300
ct_shard "$work/d.bin" 6000 "$V"
cat > "$work/t.ini" <<EOF2
[run]
name = loss_scale
steps = 8
seed = 5
log_every = 1
eval_every = 0
checkpoint_every = 4
[data]
train = $work/d.bin
batch_size = 2
seq_len = 12
[model]
plugin = gpt
n_layer = 1
n_head = 2
d_model = 32
vocab_size = $V
seq_len = 16
[comm]
plugin = threads
world_size = 2
[precision]
plugin = amp
[precision.scaled_amp]
growth_interval = 3
[optim]
lr = 1e-2
warmup = 0
EOF2

# run NAME [--set ...]: train into $work/NAME and export its weights to $work/NAME.st/
run() {
    local name=$1
    shift
    "$CTRAIN" train "$work/t.ini" --set "run.out_dir=$work/$name" "$@" > "$work/$name.log" 2>&1 \
        && "$CTRAIN" export "$work/$name" --format safetensors --target ctrain \
            --out "$work/$name.st" >> "$work/$name.log" 2>&1 \
        || { ct_fail "$name" "train or export failed: $(tail -3 "$work/$name.log")"; return 1; }
}
# col NAME KEY: the KEY column of NAME's metrics.jsonl, one value a line
col() {
    python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "loss" in r: print(r.get(sys.argv[2], "absent"))' "$work/$1/metrics.jsonl" "$2"
}
same_weights() { cmp -s "$work/$1.st/model.safetensors" "$work/$2.st/model.safetensors"; }

scaled=(--set precision.plugin=scaled_amp)
run amp && run scaled "${scaled[@]}" || { ct_summary; exit; }

if [ "$(col amp loss)" = "$(col scaled loss)" ] && same_weights amp scaled; then
    ct_pass "scaled_amp_gives_amps_losses_and_weights_bit_for_bit"
else
    ct_fail "scaled_amp_gives_amps_losses_and_weights_bit_for_bit" \
        "amp $(col amp loss | tr '\n' ' ') scaled $(col scaled loss | tr '\n' ' ')"
fi

# the same under ddp (f32 local gradients: autocast's .grad) and with grad_clip on
run amp_ddp --set strategy.plugin=ddp --set optim.grad_clip=0.5 \
    && run scaled_ddp "${scaled[@]}" --set strategy.plugin=ddp --set optim.grad_clip=0.5 \
    || { ct_summary; exit; }
if [ "$(col amp_ddp loss)" = "$(col scaled_ddp loss)" ] && same_weights amp_ddp scaled_ddp; then
    ct_pass "under_ddp_with_clipping_too"
else
    ct_fail "under_ddp_with_clipping_too" \
        "amp $(col amp_ddp loss | tr '\n' ' ') scaled $(col scaled_ddp loss | tr '\n' ' ')"
fi

# GradScaler's rule with growth_interval 3: 2^16 for steps 1-3, 2^17 for 4-6, 2^18 for 7-8
want_scale=$'65536\n65536\n65536\n131072\n131072\n131072\n262144\n262144'
got_scale=$(col scaled loss_scale)
if [ "$got_scale" = "$want_scale" ] && [ "$(col scaled skipped_steps | sort -u)" = "0" ] \
    && [ "$(col amp loss_scale | sort -u)" = "absent" ]; then
    ct_pass "metrics_log_loss_scale_growing_every_3_clean_steps_and_no_skips"
else
    ct_fail "metrics_log_loss_scale_growing_every_3_clean_steps_and_no_skips" \
        "loss_scale: $(echo $got_scale) skipped: $(col scaled skipped_steps | tr '\n' ' ')"
fi

# overflow: 2^127 * the loss gradient is not finite in f32 somewhere in the backward pass
over=(--set precision.scaled_amp.init_scale=1.7014118346046923e38 --set loss.plugins=ce,zloss
      --set loss.zloss.coef=1000)
run over "${scaled[@]}" "${over[@]}" --set precision.scaled_amp.backoff_factor=9.5367431640625e-07 \
    || { ct_summary; exit; }
skips=$(col over skipped_steps | python3 -c 'import sys; print(int(sum(float(x) for x in sys.stdin)))')
last_loss=$(col over loss | tail -1)
if [ "$skips" -ge 1 ] && [ "$skips" -lt 8 ] && [ "$last_loss" != "None" ] \
    && grep -q "step 8/8" "$work/over.log"; then
    ct_pass "an_overflow_is_skipped_on_both_ranks_and_the_run_goes_on ($skips skipped)"
else
    ct_fail "an_overflow_is_skipped_on_both_ranks_and_the_run_goes_on" \
        "skipped $skips, last loss $last_loss, scales $(col over loss_scale | tr '\n' ' ')"
fi

# an overflow on one rank only (the test plugin loss_fault adds +Inf to rank 1's dlogits at
# step 3): both ranks skip step 3 alike (the verdict is agreed over ranks), the scale backs off
# to 2^15 and grows back after 3 clean steps; amp (no after_reduce) stops the run there
one=(--set "loss.plugins=ce,$BUILD/tests/plugins/loss_fault.so" --set loss.fault.mode=inf_grad
     --set loss.fault.rank=1 --set loss.fault.step=3)
run onerank "${scaled[@]}" "${one[@]}" || { ct_summary; exit; }
want_one=$'65536\n65536\n65536\n32768\n32768\n32768\n65536\n65536'
if [ "$(col onerank loss_scale)" = "$want_one" ] \
    && [ "$(col onerank skipped_steps | tr '\n' ' ')" = "0 0 1 0 0 0 0 0 " ] \
    && [ "$(col onerank loss | sed -n 1,2p)" = "$(col scaled loss | sed -n 1,2p)" ]; then
    ct_pass "an_overflow_on_one_rank_is_skipped_on_both"
else
    ct_fail "an_overflow_on_one_rank_is_skipped_on_both" \
        "scales $(col onerank loss_scale | tr '\n' ' ') skipped $(col onerank skipped_steps | tr '\n' ' ')"
fi
ct_expect_failure "without_after_reduce_an_overflow_still_stops_the_run" "step 3: gradient norm is" \
    "$CTRAIN" train "$work/t.ini" --set "run.out_dir=$work/amp_one" "${one[@]}"

# every step skipped: the weights stay the initial ones (checkpoint_at_start)
run allskip "${scaled[@]}" "${over[@]}" \
    --set precision.scaled_amp.backoff_factor=0.9999 --set run.steps=2 \
    --set run.checkpoint_at_start=true || { ct_summary; exit; }
# the rank files after the 48-byte header (step, data position) up to the checksum: every
# unit's master weights and AdamW moments
body() { tail -c +49 "$work/allskip/checkpoints/step_0000000$1/rank_00000.bin" | head -c -8 | md5sum; }
a0=$(body 0)
a2=$(body 2)
if [ "$(col allskip skipped_steps | tr '\n' ' ')" = "1 1 " ] && [ "$a0" = "$a2" ]; then
    ct_pass "skipped_steps_leave_the_weights_untouched"
else
    ct_fail "skipped_steps_leave_the_weights_untouched" \
        "skipped $(col allskip skipped_steps | tr '\n' ' ') weights same: $([ "$a0" = "$a2" ] && echo yes || echo no)"
fi

# resume: stop after step 4, resume, end as the whole run (weights, losses, scale)
"$CTRAIN" train "$work/t.ini" --set "run.out_dir=$work/res" "${scaled[@]}" --stop-after 4 \
    > "$work/res.log" 2>&1 || ct_fail "resume_first_half" "$(tail -3 "$work/res.log")"
if [ -f "$work/res/checkpoints/step_00000004/precision.bin" ]; then
    ct_pass "the_checkpoint_holds_the_policys_state"
else
    ct_fail "the_checkpoint_holds_the_policys_state" "no precision.bin in step_00000004"
fi
run res "${scaled[@]}" --resume || { ct_summary; exit; }
if same_weights res scaled && [ "$(col res loss)" = "$(col scaled loss)" ] \
    && [ "$(col res loss_scale)" = "$want_scale" ]; then
    ct_pass "resume_is_bit_for_bit_with_the_scale_and_counter"
else
    ct_fail "resume_is_bit_for_bit_with_the_scale_and_counter" \
        "scales $(col res loss_scale | tr '\n' ' '); losses same: $([ "$(col res loss)" = "$(col scaled loss)" ] && echo yes || echo no)"
fi
# a damaged precision.bin stops the resume, naming the file (nothing is set aside)
p8="$work/res/checkpoints/step_00000008/precision.bin"
printf '\x55' | dd of="$p8" bs=1 seek=13 conv=notrunc 2> /dev/null
ct_expect_failure "a_damaged_policy_state_stops_the_resume" "precision.bin is damaged" \
    "$CTRAIN" train "$work/t.ini" --set "run.out_dir=$work/res" "${scaled[@]}" --resume \
    --set run.steps=9

# the plugin's scales and skips on a stream of verdicts with injected overflows (the unit test,
# which holds a transcription of GradScaler's rule) replayed by tests/loss_scale_reference.py:
# a Python f32 transcription, and torch.amp.GradScaler itself when torch is importable
if [ -x "$BUILD/tests/unit_tests" ]; then
    CTRAIN_SCALER_TRACE="$work/scaler.txt" "$BUILD/tests/unit_tests" \
        precision_scaled_amp_follows > "$work/unit.log" 2>&1
    if "${CTRAIN_INTEROP_PYTHON:-python3}" "$ROOT/tests/loss_scale_reference.py" "$work/scaler.txt" > "$work/ref.log" 2>&1; then
        if grep -q 'not importable' "$work/ref.log"; then
            ct_pass "scales_and_skips_match_gradscaler ($(grep -c '^transcription:' "$work/ref.log") runs; torch not importable: the f32 transcription only; make test-interop runs torch's)"
        else
            ct_pass "scales_and_skips_match_gradscaler ($(grep -c '^torch:' "$work/ref.log") runs equal torch.amp.GradScaler's step for step)"
        fi
    else
        ct_fail "scales_and_skips_match_gradscaler" "$(cat "$work/unit.log" "$work/ref.log" | tail -5)"
    fi
fi
ct_summary
