#!/usr/bin/env bash
# test_ddp_amp.sh — `strategy = ddp` with `precision = amp` reduces what PyTorch DDP reduces
# under autocast: f32 gradients (products of bf16 operands, held in f32), all-reduced in f32.
# Checked through the real binary and plugins: two ranks of ddp + amp end three steps with the
# same weights, bit for bit, as one rank that sums the same two halves of the batch as f32
# micro-batches (an explicit f32 reduction); pure_bf16, and amp forced to FSDP's bf16 gradient,
# end elsewhere (those two on the same bits: a bf16 gradient on a bf16 wire); full_shard + amp
# keeps FSDP's bf16 gradient; the start-up says which gradient ddp + amp holds.
#
# Why bit for bit: at N = 2 the all-reduce is one f32 addition per element (commutative), the
# divide by N is a power of two (exact), and the one-rank run scales each micro-batch's loss
# gradient by 1/2 instead (exact, and backward is linear in it). The model is untied (a tied
# embedding would add its two gradients in another order), each micro-batch fits one logit
# range and one BLAS K-block, and clipping is off (a norm summed in another order).
set -u
source "$(dirname "$0")/lib.sh"
ct_need_ctrain
cd "$ROOT"
work="$CT_TMP"
V=300
ct_shard "$work/d.bin" 6000 "$V"
cat > "$work/t.ini" <<EOF
[run]
name = ddp_amp
steps = 3
seed = 11
log_every = 1
eval_every = 0
[data]
train = $work/d.bin
batch_size = 3
seq_len = 11
[model]
plugin = gpt
n_layer = 1
n_head = 2
d_model = 32
vocab_size = $V
seq_len = 16
tie_embeddings = false
[strategy]
plugin = ddp
[precision]
plugin = amp
[optim]
lr = 1e-2
warmup = 0
grad_clip = 0
EOF

# run NAME [--set ...]: train into $work/NAME and export its weights to $work/NAME.st/
run() {
    local name=$1
    shift
    "$CTRAIN" train "$work/t.ini" --set "run.out_dir=$work/$name" "$@" > "$work/$name.log" 2>&1 \
        && "$CTRAIN" export "$work/$name" --format safetensors --target ctrain \
            --out "$work/$name.st" >> "$work/$name.log" 2>&1 \
        || { ct_fail "$name" "train or export failed: $(tail -3 "$work/$name.log")"; return 1; }
}

# same NAME A B: the two runs' weights are the same bytes; differ NAME A B: they are not
same() { cmp -s "$work/$2.st/model.safetensors" "$work/$3.st/model.safetensors" && ct_pass "$1" \
    || ct_fail "$1" "the weights of $2 and $3 differ"; }
differ() { cmp -s "$work/$2.st/model.safetensors" "$work/$3.st/model.safetensors" && ct_fail "$1" \
    "the weights of $2 and $3 are the same bytes" || ct_pass "$1"; }

two=(--set comm.plugin=threads --set comm.world_size=2)
run ref --set data.grad_accum=2 --set precision.grad_accum_dtype=f32 \
    && run ddp "${two[@]}" \
    && run pure "${two[@]}" --set precision.plugin=pure_bf16 \
    && run fsdpgrad "${two[@]}" --set precision.grad_accum_dtype=bf16 && {
    same "ddp + amp at N = 2: the f32 reduction of the bf16-compute f32 local gradients" ddp ref
    differ "ddp + amp is not pure_bf16" ddp pure
    differ "ddp + amp is not amp with FSDP's bf16 gradient" ddp fsdpgrad
    same "amp forced to a bf16 gradient under ddp puts it on a bf16 wire: pure_bf16's bits" \
        fsdpgrad pure
    grep -qF "local gradients in f32 under ddp" "$work/ddp.log" \
        && ct_pass "ddp + amp says it holds f32 gradients" \
        || ct_fail "ddp + amp says it holds f32 gradients" "$(head -5 "$work/ddp.log")"
}
run fsdp "${two[@]}" --set strategy.plugin=full_shard && {
    grep -qF "local gradients in f32" "$work/fsdp.log" \
        && ct_fail "full_shard + amp keeps FSDP's bf16 gradient" "it says f32" \
        || ct_pass "full_shard + amp keeps FSDP's bf16 gradient"
    grep -qF "training keeps whole micro-batches: the precision policy accumulates gradients in bf16" \
        "$work/fsdp.log" && ct_pass "full_shard + amp: the host sees a bf16 gradient" \
        || ct_fail "full_shard + amp: the host sees a bf16 gradient" "$(grep '^logits' "$work/fsdp.log")"
}
ct_summary
