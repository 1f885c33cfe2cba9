#!/usr/bin/env bash
# test_whatif_buffer.sh — `ctrain what-if --bucket-bytes B | --fsdp-units MODEL [--nccl-version
# V]`: NCCL's algorithm is picked for the buffer that holds the head, not for the replayed rows.
# A one-step run of a tiny model (V = 1000, C = 16) is replayed at 32 nodes of 8 A100 with a
# 256-token global batch; what is checked are the buffer (the FSDP unit layout against the hand
# computation below and against the gpt plugin's own parameter count for the seed's configs),
# the pick and its margin (against tuning.cc's formulas worked by hand),
# the 10% fragile line on both sides, the rival replayed beside a fragile pick, the replay
# placed in the buffer, --nccl-version in what-if and reduce, [comm.threads] nccl_version in a
# run's log, and every bad value naming its option.
#
# Hand computations (open_lm's model.py and FSDP wrapping, docs/seed-experiments.md):
#   open_lm-1b root unit: tok_embeddings 50,432 x 2048 + norm 2048 + output 50,432 x 2048 =
#     206,571,520 elements = 413,143,040 bytes in bf16 (413.1 MB); a block: in_proj 3 x 2048^2
#     + out_proj 2048^2 + q/k norms 2 x 2048 + SwiGLU 3 x 5632 x 2048 (5632 = 256 ceil(5461 /
#     256)) + 2 norms 2 x 2048 = 51,388,416.
#   open_lm-125m root unit: 2 x 50,432 x 768 + 768 = 77,464,320 elements (154.9 MB); a block
#     4 x 768^2 + 3 x 2048 x 768 + 4 x 768 = 7,080,960.
#   NCCL 2.30, A100, 32 nodes x 8 (N = 256), 16 channels: ring/LL128 = 1113.2 + B / 80,313.7
#     us, tree/LL128 = 116.5 + B / (66,750 c) us (c = 1 from 2^28 bytes up, .9 at 2^26..2^27):
#     for B = 413,143,040 ring 6257.3 against tree 6305.9: the ring by 0.8%, fragile; they cross
#     at B = 996.7 / (1/66,750 - 1/80,313.7) = 393.9 MB: a 380 MB bucket is the tree's (by 0.6%),
#     a 410 MB bucket the ring's; at 100 MB the tree wins by 32%. NCCL 2.18: the ring's latency
#     has 2 x 32 net steps instead of 2 x 31: 6261.5, 0.7%.
#   8 nodes (N = 64): ring/LL128 = 282.8 + B / 81,269.8, tree/LL128 = 82.5 + B / (66,750 c):
#     154,928,640 bytes (c = 1): 2189.1 against 2403.5, the ring by 9.8% (fragile); 76,800,000
#     bytes (c = .9): 1227.8 against 1360.9, by 10.8% (not fragile).
set -u
cd "$(dirname "$0")/../.."
. tests/cli/lib.sh
ct_need_ctrain
W=$CT_TMP

"$CTRAIN" prepare --text /usr/share/common-licenses/GPL-3 --out "$W/sp" --tokenizer sentencepiece \
    --vocab-size 1000 --val-fraction 0.3 > "$W/prepare.log" 2>&1 \
    || { ct_fail prepare "$(tail -3 "$W/prepare.log")"; ct_summary; exit 1; }

# train OUT WORLD [--set ...]: one step, a checkpoint after it
train() {
    local out=$1 world=$2
    shift 2
    cat > "$W/w.ini" <<EOF
[run]
name = w
out_dir = $out
steps = 1
seed = 11
log_every = 1
eval_every = 0
checkpoint_every = 1
[data]
train = $W/sp
batch_size = 1
seq_len = 8
[model]
plugin = gpt
n_layer = 1
n_head = 2
d_model = 16
vocab_size = 1000
seq_len = 8
norm = gain_only_layernorm
mlp = swiglu
pos = rope
qk_norm = true
tie_embeddings = false
bias = false
init = open_lm
[strategy]
plugin = no_shard
[precision]
plugin = pure_bf16
[comm]
plugin = threads
world_size = $world
[optim]
lr = 5e-3
warmup = 1
[device]
threads = 1
EOF
    "$CTRAIN" train "$W/w.ini" "$@" > "$out.log" 2>&1 || ct_fail "train $out" "$(tail -3 "$out.log")"
}

train "$W/run" 2
CK=$W/run/checkpoints/step_00000001
A=(--world-sizes 256 --global-batch 32 --gpu a100 --gpus-per-node 8 --policies pure_bf16)

# row N ALGO POLICY: the table's row
row() { awk -v n="$1" -v a="$2" -v p="$3" '$1 == n && $2 == a && $3 == p' "$CT_TMP/out"; }

# ---- 1. the FSDP unit layout of open_lm's wrapping ----------------------------------------
ct_expect_success "open_lm-1b: root unit 206,571,520 elements = 413.1 MB (hand: 2 x 50,432 x 2048 + 2048)" \
    "the root unit 206571520 elements = 413.1 MB" "$CTRAIN" what-if "$CK" "${A[@]}" --algo nccl \
    --fsdp-units open_lm-1b
grep -q "48 block units of 51388416 elements" "$CT_TMP/out" \
    && ct_pass "open_lm-1b: 48 block units of 51,388,416 elements" \
    || ct_fail "open_lm-1b blocks" "$(grep 'FSDP units' "$CT_TMP/out")"
# ---- 2. the pick for the root unit: the ring by 0.8%, fragile; the tree replayed beside it --
grep -q "N = 256, bf16, the root FSDP unit of open_lm-1b: NCCL 2.30 would run this 413 MB all-reduce at 32 nodes x 8 A100 as ring/LL128" "$CT_TMP/out" \
    && ct_pass "413 MB root unit at 32 nodes: ring/LL128" || ct_fail "1b pick" "$ct_out"
grep -q "ring/LL128 6257.3 us against tree/LL128 6305.9 us .*wins by 0.8% -- fragile" "$CT_TMP/out" \
    && ct_pass "both candidates' times as tuning.cc gives them by hand, fragile at 0.8%" \
    || ct_fail "1b margin" "$(grep 'wins by' "$CT_TMP/out")"
nccl=$(row 256 nccl pure_bf16 | awk '{print $7}')
tree=$(row 256 dbtree pure_bf16 | awk '{print $7}')
if grep -q "replaying dbtree beside it" "$CT_TMP/out" && [ -n "$tree" ] \
    && grep -q "fragile pick at N = 256, pure_bf16: NCCL's ring (6257.3 us): .*logit_push $nccl; dbtree (tree, 6305.9 us): .*logit_push $tree" "$CT_TMP/out"; then
    ct_pass "a fragile pick replays its rival and prints both replays' figures ($nccl, $tree)"
else
    ct_fail "rival replay" "$ct_out"
fi
# the head alone (32 kB) at 32 nodes is a tree's: the buffer flips the pick, and the replay
ct_run "$CTRAIN" what-if "$CK" "${A[@]}" --algo nccl
head_nccl=$(row 256 nccl pure_bf16 | awk '{print $7}')
if grep -q "the head alone: NCCL 2.30 would run this 32 kB all-reduce at 32 nodes x 8 A100 as tree/" "$CT_TMP/out" \
    && [ -n "$head_nccl" ] && [ "$head_nccl" != "$nccl" ]; then
    ct_pass "the head alone is a tree's pick; in the root unit the ring's (push $head_nccl -> $nccl)"
else
    ct_fail "head alone" "$ct_out"
fi

# the same count from the gpt plugin's own parameters for the seed's configs (`ctrain validate`
# prints its parameter groups): root = embedding + head + the final norm (C), a block = (matrices
# + norms - C) / blocks
for cfg in exp1-4nodes:open_lm-125m:24:768 exp2-32nodes-bf16:open_lm-1b:48:2048; do
    IFS=: read -r ini model L C <<< "$cfg"
    "$CTRAIN" validate "ini/experiments/seed/$ini.ini" --set data.train="$W/sp" --set data.val="$W/sp" \
        --set data.seq_len=8 --set model.seq_len=8 --set data.batch_size=1 --set run.eval_batches=1 > "$W/validate.txt" 2>&1
    want=$(awk -v L="$L" -v C="$C" '$2 == "group" { n[$3] = $6 }
        END { if (n["embedding"] && n["head"]) printf "root unit %d elements, %d block units of %d elements",
              n["embedding"] + n["head"] + C, L, (n["matrix"] + n["norm"] - C) / L }' "$W/validate.txt")
    ct_run "$CTRAIN" what-if "$CK" "${A[@]}" --fsdp-units "$model"
    root=$(grep -o "the root unit [0-9]* elements" "$CT_TMP/out" | head -1 | awk '{print $4}')
    blocks=$(grep -o "[0-9]* block units of [0-9]* elements" "$CT_TMP/out" | head -1)
    if [ -n "$want" ] && [ "$want" = "root unit $root elements, $blocks" ]; then
        ct_pass "$model's units equal the gpt plugin's parameters for $ini.ini ($want)"
    else
        ct_fail "$model against $ini" "validate: '$want'; what-if: root $root, $blocks"
    fi
done

# ---- 3. --bucket-bytes: the flip at 393.9 MB, fragile within 10% only ---------------------
ct_run "$CTRAIN" what-if "$CK" "${A[@]}" --algo nccl --bucket-bytes 380000000
grep -q "DDP bucket of 380000000 bytes: NCCL 2.30 would run this 380 MB all-reduce .* as tree/LL128" "$CT_TMP/out" \
    && grep -q "wins by 0.6% -- fragile" "$CT_TMP/out" \
    && ct_pass "380 MB bucket: tree/LL128, by 0.6%, fragile" || ct_fail "380 MB" "$ct_out"
ct_run "$CTRAIN" what-if "$CK" "${A[@]}" --algo nccl --bucket-bytes 410000000
grep -q "410 MB all-reduce .* as ring/LL128" "$CT_TMP/out" \
    && ct_pass "410 MB bucket: ring/LL128 (the flip lies between)" || ct_fail "410 MB" "$ct_out"
ct_run "$CTRAIN" what-if "$CK" "${A[@]}" --algo nccl --bucket-bytes 100000000
if grep -q "100 MB all-reduce .* as tree/LL128" "$CT_TMP/out" && grep -q "wins by 32.4%$" "$CT_TMP/out" \
    && ! grep -q "fragile" "$CT_TMP/out"; then
    ct_pass "100 MB bucket: tree by 32.4%, not fragile, no rival replayed"
else
    ct_fail "100 MB" "$ct_out"
fi
# the 10% line at 8 nodes: 9.8% is fragile, 10.8% is not
B=(--world-sizes 64 --global-batch 32 --gpu a100 --gpus-per-node 8 --policies pure_bf16 --algo nccl)
ct_run "$CTRAIN" what-if "$CK" "${B[@]}" --fsdp-units open_lm-125m
grep -q "the root unit 77464320 elements = 154.9 MB" "$CT_TMP/out" \
    && grep -q "ring/LL128 2189.1 us against tree/LL128 2403.5 us .*wins by 9.8% -- fragile" "$CT_TMP/out" \
    && ct_pass "open_lm-125m root unit (77,464,320 elements) at 8 nodes: the ring by 9.8%, fragile" \
    || ct_fail "125m at 8 nodes" "$ct_out"
ct_run "$CTRAIN" what-if "$CK" "${B[@]}" --bucket-bytes 76800000
if grep -q "ring/LL128 1227.8 us against tree/LL128 1360.9 us .*wins by 10.8%$" "$CT_TMP/out" \
    && ! grep -q fragile "$CT_TMP/out"; then
    ct_pass "76.8 MB at 8 nodes: the ring by 10.8%, not fragile"
else
    ct_fail "76.8 MB at 8 nodes" "$ct_out"
fi

# ---- 4. the replay sits in the buffer: a bucket of the head's own bytes is the head alone ----
P=(--world-sizes 16 --global-batch 32 --algo ring,dbtree --gpus-per-node 4 --channels 2 --policies pure_bf16)
ct_run "$CTRAIN" what-if "$CK" "${P[@]}"
alone=$(awk '$1 == 16' "$CT_TMP/out")
ct_run "$CTRAIN" what-if "$CK" "${P[@]}" --bucket-bytes 32000
same=$(awk '$1 == 16' "$CT_TMP/out")
ct_run "$CTRAIN" what-if "$CK" "${P[@]}" --bucket-bytes 64000000
big=$(awk '$1 == 16' "$CT_TMP/out")
if [ -n "$alone" ] && [ "$alone" = "$same" ] && [ "$alone" != "$big" ]; then
    ct_pass "a 32,000-byte bucket replays as the head alone; a 64 MB one cuts it otherwise"
else
    ct_fail "buffer placement" "alone: $alone / same: $same / big: $big"
fi

# inside the 413 MB root unit at 32 nodes NCCL's pick is ring/LL128 on 16 channels: its replay
# is the plain ring's with those channels and that protocol in the same buffer, and the
# streamed path (--rows over every row) gives the whole replay's figures
R=(--world-sizes 256 --global-batch 32 --algo nccl,ring --gpu a100 --gpus-per-node 8 --channels 16
   --proto ll128 --policies pure_bf16 --fsdp-units open_lm-1b)
ct_run "$CTRAIN" what-if "$CK" "${R[@]}"
whole_n=$(row 256 nccl pure_bf16 | awk '{print $5, $6, $7}')
whole_r=$(row 256 ring pure_bf16 | awk '{print $5, $6, $7}')
ct_run "$CTRAIN" what-if "$CK" "${R[@]}" --rows 1000
rows_n=$(row 256 nccl pure_bf16 | awk '{print $5, $7, $9}')
if [ -n "$whole_n" ] && [ "$whole_n" = "$whole_r" ] && [ "$whole_n" = "$rows_n" ]; then
    ct_pass "in the root unit the pick replays as ring/LL128 on 16 channels, streamed or whole ($whole_n)"
else
    ct_fail "pick in the buffer" "nccl: $whole_n / ring: $whole_r / rows: $rows_n"
fi

# ---- 5. NCCL versions: what-if and a run's log ---------------------------------------------
ct_run "$CTRAIN" what-if "$CK" "${A[@]}" --algo nccl --fsdp-units open_lm-1b --nccl-version 2.18
grep -q "NCCL 2.18 would run this 413 MB all-reduce .* as ring/LL128" "$CT_TMP/out" \
    && grep -q "ring/LL128 6261.5 us against tree/LL128 6305.9 us .*wins by 0.7% -- fragile" "$CT_TMP/out" \
    && ct_pass "--nccl-version 2.18: 2 x 32 net steps, ring 6261.5 us, 0.7%" || ct_fail "2.18" "$ct_out"
train "$W/v219" 16 --set comm.threads.algo=nccl --set comm.threads.gpu=h100 \
    --set comm.threads.gpus_per_node=8 --set comm.threads.nccl_version=2.19
grep -q "NCCL 2.19 would run this .* at 2 nodes x 8 H100" "$W/v219.log" \
    && ct_pass "[comm.threads] nccl_version = 2.19: the run logs 2.19's pick" \
    || ct_fail "run 2.19" "$(grep -i nccl "$W/v219.log" | head -3)"

# ctrain reduce takes the same option: 16 ranks of 1000 bf16 values on 2 nodes of 8 A100
python3 -c 'import struct, sys; sys.stdout.buffer.write(struct.pack("<16000H", *([0x3f80] * 16000)))' > "$W/in.bin"
ct_run "$CTRAIN" reduce --world-size 16 --in "$W/in.bin" --out "$W/out.bin" --dtype bf16 \
    --algo nccl --gpu a100 --gpus-per-node 8 --nccl-version 2.19
grep -q "reduce: NCCL 2.19 would run this 2 kB all-reduce at 2 nodes x 8 A100" "$CT_TMP/out" \
    && ct_pass "reduce --nccl-version 2.19 names its tuner" || ct_fail "reduce 2.19" "$ct_out $ct_err"

# ---- 6. bad values name their option --------------------------------------------------------
ct_expect_failure "--bucket-bytes 0 is refused" "--bucket-bytes '0'" "$CTRAIN" what-if "$CK" "${A[@]}" --bucket-bytes 0
ct_expect_failure "--bucket-bytes 12x is refused" "--bucket-bytes '12x'" "$CTRAIN" what-if "$CK" "${A[@]}" --bucket-bytes 12x
ct_expect_failure "a bucket smaller than the head is refused with the head's size" \
    "--bucket-bytes 1000 is smaller than the head|at least 32000" "$CTRAIN" what-if "$CK" "${A[@]}" --bucket-bytes 1000
ct_expect_failure "an unknown model is refused with the known ones" \
    "--fsdp-units: unknown model 'gpt-5'|open_lm-125m, open_lm-1b" "$CTRAIN" what-if "$CK" "${A[@]}" --fsdp-units gpt-5
ct_expect_failure "--bucket-bytes with --fsdp-units is refused" "--bucket-bytes with --fsdp-units" \
    "$CTRAIN" what-if "$CK" "${A[@]}" --bucket-bytes 100000 --fsdp-units open_lm-1b
ct_expect_failure "--nccl-version 2.21 is refused with the known ones" \
    "--nccl-version '2.21' is not one of 2.18, 2.19, 2.20, 2.30" "$CTRAIN" what-if "$CK" "${A[@]}" --nccl-version 2.21
ct_expect_failure "--fsdp-units without a value" "--fsdp-units needs a value" "$CTRAIN" what-if "$CK" "${A[@]}" --fsdp-units
ct_expect_failure "[comm.threads] nccl_version = 2.17 is refused" "nccl_version" \
    "$CTRAIN" train "$W/w.ini" --set comm.threads.nccl_version=2.17
for rc_name in 0:2 12x:2 1000:1; do
    v=${rc_name%%:*} want=${rc_name##*:}
    ct_run "$CTRAIN" what-if "$CK" "${A[@]}" --bucket-bytes "$v"
    [ "$ct_rc" -eq "$want" ] && ct_pass "--bucket-bytes $v exits $want" || ct_fail "exit of --bucket-bytes $v" "$ct_rc"
done

ct_summary
