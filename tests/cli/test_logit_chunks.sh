#!/usr/bin/env bash
# test_logit_chunks.sh — the logits by row ranges (ABI 1.3, [run] logit_chunk_rows) train and
# evaluate as the whole micro-batch does: losses, every term, the logit metrics, every tensor's
# gradient norm and the validation figures agree over three steps, for ranges that divide
# N = B*T = 33 (11), that do not (8) and that hold it all (1000), under fp32 and under a bf16
# compute policy (amp with f32 gradient accumulation); with bf16 gradient accumulation training
# keeps whole micro-batches and says so; a loss plugin built against the frozen ABI 1.2 header
# makes the host take the whole-batch path, bit for bit today's; the start-up line gives the
# logits' bytes per rank with and without ranges.
#
# The bound: the two paths run the same per-element arithmetic (each row's logits, row
# statistics and loss terms are computed alike); what differs is the order of f32 sums. The
# head's weight gradient is summed range by range (partial sums over ranges, then added)
# instead of over all N rows at once, and a BLAS product over fewer rows may group its dot
# products differently: differences of a few f32 ulps (2^-24 relative) per element, which the
# step's update carries on into later steps. So: 1e-5 relative on losses, norms and
# log-sum-exps over three steps (measured: ~1e-7), 1e-3 on logit_mean (a sum of values of both
# signs: its relative error is amplified by the cancellation), and bit for bit where the two
# runs take the same path.
set -u
source "$(dirname "$0")/lib.sh"
ct_need_ctrain
cd "$ROOT"
work="$CT_TMP"
V=300
python3 - "$work/d.bin" "$V" <<'PY'
import struct, sys
n, V = 6000, int(sys.argv[2])
toks = [(i * 7919 + i * i) % V for i in range(n)]
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack(f"<{n}H", *toks))
PY
cat > "$work/t.ini" <<EOF
[run]
name = chunks
steps = 3
seed = 5
log_every = 1
eval_every = 1
eval_batches = 2
log_param_norms = true
[data]
train = $work/d.bin
val = $work/d.bin
batch_size = 3
seq_len = 11
[model]
plugin = gpt
n_layer = 1
n_head = 2
d_model = 32
vocab_size = $V
seq_len = 16
[loss]
plugins = ce, zloss, logitreg
[loss.zloss]
coef = 0.01
mask_ignored = false
[loss.logitreg]
coef = 0.01
[optim]
lr = 3e-3
EOF

# the same run with the term built against ABI 1.2 (below) in place of logitreg
sed -e "s#^plugins = ce, zloss, logitreg#plugins = ce, zloss, $work/v12/loss_fx_v12.so#" \
    -e 's#^\[loss.logitreg\]#[loss.fx_v12]#' "$work/t.ini" > "$work/t_v12.ini"

# run NAME [--set ...]: train into $work/NAME (INI: $ini, t.ini by default); its stdout in
# $work/NAME.log
run() {
    local name=$1
    shift
    "$CTRAIN" train "$work/${ini:-t.ini}" --set "run.out_dir=$work/$name" "$@" > "$work/$name.log" 2>&1 \
        || { ct_fail "$name" "train failed: $(tail -3 "$work/$name.log")"; return 1; }
}

# same NAME A B RTOL: every numeric metric both runs log (speed and memory figures aside) at
# every step within RTOL relative (0: bit for bit); logit_mean within 1e-3 unless RTOL is 0
same() {
    local msg
    msg=$(python3 - "$work/$2/metrics.jsonl" "$work/$3/metrics.jsonl" "$4" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
rtol = float(sys.argv[3])
skip = ("tokens_per_s", "tflops", "mfu", "time", "mem/", "peak", "flops_per_token")
if len(a) != len(b) or not a:
    print(f"{len(a)} vs {len(b)} logged steps"); sys.exit(1)
worst, names = (0.0, ""), 0
for ra, rb in zip(a, b):
    # the figures both runs have (a term of another name differs in its own figures only)
    keys = [k for k in ra if k in rb and isinstance(ra[k], (int, float))
            and not any(s in k for s in skip)]
    want = {"val/loss"} if "val/loss" in ra else {"loss", "grad_norm", "logit_norm_mean", "lse_mean"}
    if not want <= set(keys):
        print(f"step {ra['step']}: figures missing: {sorted(want - set(keys))}"); sys.exit(1)
    for k in keys:
        names += 1
        tol = rtol if rtol == 0 or "logit_mean" not in k else 1e-3
        rel = abs(ra[k] - rb[k]) / max(abs(rb[k]), 1e-30)
        if (tol == 0 and ra[k] != rb[k]) or rel > tol:
            print(f"step {ra['step']} {k}: {ra[k]!r} vs {rb[k]!r} (relative {rel:.3g}, "
                  f"tolerance {tol:g})"); sys.exit(1)
        if rel > worst[0]: worst = (rel, k)
print(f"{names} figures, worst relative difference {worst[0]:.3g} ({worst[1]})")
PY
    ) && ct_pass "$1: $msg" || ct_fail "$1" "$msg"
}

# says NAME RUN TEXT: RUN's start-up output holds TEXT
says() {
    grep -qF -- "$3" "$work/$2.log" && ct_pass "$1" \
        || ct_fail "$1" "no \"$3\" in: $(grep '^logits' "$work/$2.log")"
}

# fp32: whole micro-batch against ranges of 11 (divides 33), 8 (does not) and 1000 (all rows)
run w0 --set run.logit_chunk_rows=0 && run c11 --set run.logit_chunk_rows=11 \
    && run c8 --set run.logit_chunk_rows=8 && run c1000 --set run.logit_chunk_rows=1000 && {
    same "fp32: ranges of 11 rows (dividing N = 33) equal the whole micro-batch" c11 w0 1e-5
    same "fp32: ranges of 8 rows (not dividing N = 33) equal the whole micro-batch" c8 w0 1e-5
    same "fp32: one range of all rows equals the whole micro-batch" c1000 w0 1e-5
    says "fp32: the start-up line gives the whole path's logits bytes" w0 \
        "logits: whole micro-batch (33 rows): logits + dlogits 0.1 MB per rank; [run] logit_chunk_rows = 0"
    says "fp32: the start-up line gives the ranges' logits bytes" c8 \
        "logits: ranges of 8 rows: logits + dlogits + softmax 0.0 MB per rank (whole micro-batch: 0.1 MB)"
}

# a bf16 compute policy (amp) accumulating gradients in f32: ranges in training and evaluation
run aw0 --set precision.plugin=amp --set precision.grad_accum_dtype=f32 \
    --set run.logit_chunk_rows=0 \
    && run ac8 --set precision.plugin=amp --set precision.grad_accum_dtype=f32 \
        --set run.logit_chunk_rows=8 \
    && same "amp (bf16 compute, f32 accumulation): ranges of 8 rows equal the whole micro-batch" \
        ac8 aw0 1e-5
# amp's bf16 accumulation (FSDP's, its default under full_shard and no_shard): training keeps
# whole micro-batches (a range's head gradient would take its own bf16 rounding), evaluation
# still goes by ranges
run bw0 --set precision.plugin=amp --set precision.grad_accum_dtype=bf16 \
    --set run.logit_chunk_rows=0 \
    && run bc8 --set precision.plugin=amp --set precision.grad_accum_dtype=bf16 \
        --set run.logit_chunk_rows=8 && {
    same "amp with bf16 accumulation: training equals the whole path, evaluation by ranges" \
        bc8 bw0 1e-5
    says "amp with bf16 accumulation: the start-up line says why training keeps whole batches" \
        bc8 "evaluation by ranges; training keeps whole micro-batches: the precision policy accumulates gradients in bf16"
}

# a loss plugin built against the frozen 1.2 header has no forward_backward_rows: every term
# then gets the whole micro-batch. Its term is logitreg's arithmetic: with the in-tree logitreg
# on the whole path it agrees bit for bit; against logitreg on ranges, within the bound.
v12="$work/v12"
mkdir -p "$v12"
if FX_INCLUDE=tests/abi/v1.2 ct_fixture "$v12/loss_fx_v12.so" -DFX_NAME=fx_v12 -DFX_REAL_TERM; then
    ini=t_v12.ini run fx --set run.logit_chunk_rows=8 && {
        says "a 1.2 loss plugin: the host says the term takes whole micro-batches" fx \
            "loss term fx_v12 (ABI 1.2) takes whole micro-batches"
        same "a 1.2 loss plugin: the whole path, bit for bit the in-tree term's whole path" \
            fx w0 0
        same "a 1.2 loss plugin on the whole path equals the in-tree term on ranges" fx c8 1e-5
    }
else
    ct_fail "build a loss plugin against tests/abi/v1.2" "cc failed"
fi
ct_summary
