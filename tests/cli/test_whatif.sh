#!/usr/bin/env bash
# test_whatif.sh — `ctrain what-if`: a run trained with the threads engine at N = 16 (pure_bf16,
# full_shard, probe on, a 1000-token sentencepiece vocabulary) is replayed from its checkpoint of
# step 2, and the replay of step 3 at N = 16 gives the probe's head figures of step 3 (ring,
# a run trained with NCCL's tree at 4 ranks per node against --algo dbtree, and one trained
# with algo = nccl against --algo nccl: the tuner model's pick, the same code path); the
# hierarchical order at one rank per node equals the ring; --per-row writes a row per
# vocabulary entry; --rows: every row through the streamed path gives the whole replay's
# figures, and over 20 samples of 300 of the 1000 rows the estimates lie within two of their
# standard errors of the whole replay as often as a 95% interval should; every error names
# its flag and exits 2 (usage) or 1, never a signal.
#
# Tolerance: what-if forms the logits and the local gradients in f64 where the gpt plugin's
# sgemm sums in f32, so a value that sits next to a bf16 rounding boundary may land one bf16
# step away (measured: rel_err and logit_push agree to < 0.1%, bias to < 1%). The bounds below
# (1% on rel_err and logit_push, 5% on bias) are well inside what a wrong order or rounding
# does (one combine rounded to f32 instead of bf16 moves rel_err by > 10%).
set -u
cd "$(dirname "$0")/../.."
. tests/cli/lib.sh
ct_need_ctrain
W=$CT_TMP

ct_prepare_licenses "$W/sp" || { ct_fail prepare "$(tail -3 "$W/sp.log")"; ct_summary; exit 1; }

# train OUT [--set ...]: 3 steps at N = 16 (2 sequences of 8 tokens per rank), the probe at
# step 3, checkpoints at steps 2 and 3
train() {
    local out=$1
    shift
    cat > "$W/w.ini" <<EOF
[run]
name = w
out_dir = $out
steps = 3
seed = 11
log_every = 3
eval_every = 0
checkpoint_every = 2
keep_checkpoints = 5
probe = true
[data]
train = $W/sp
batch_size = 2
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
plugin = full_shard
[precision]
plugin = pure_bf16
[comm]
plugin = threads
world_size = 16
[optim]
lr = 5e-3
warmup = 1
[device]
threads = 1
EOF
    "$CTRAIN" train "$W/w.ini" "$@" > "$out.log" 2>&1 || ct_fail "train $out" "$(tail -3 "$out.log")"
}

# probe RUN KEY: the probe's value of KEY at step 3
probe() {
    python3 -c 'import json,sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    if d.get("step") == 3 and sys.argv[2] in d: print(repr(d[sys.argv[2]]))' "$1/metrics.jsonl" "$2"
}

# row ALGO POLICY: the what-if table's row (N, algo, policy, tokens/rank, rel_err, bias, push)
row() { awk -v a="$1" -v p="$2" '$2 == a && $3 == p' "$CT_TMP/out"; }

# near NAME GOT WANT TOL: |got - want| <= TOL * |want|
near() {
    if python3 -c 'import sys; g, w, t = map(float, sys.argv[1:4]); sys.exit(0 if abs(g - w) <= t * abs(w) and w != 0 else 1)' "$2" "$3" "$4"; then
        ct_pass "$1 (expected $3, got $2, tolerance $4 relative)"
    else
        ct_fail "$1" "expected $3 within $4 relative, got $2"
    fi
}

# ---- 1. the ring: what-if at N = 16 gives the probe's figures of the run ------------------
train "$W/ring"
ct_run "$CTRAIN" what-if "$W/ring/checkpoints/step_00000002" --world-sizes 16 --algo ring,hier \
    --gpus-per-node 1 --policies pure_bf16,bf16_fp32acc,amp --per-row "$W/rows.tsv"
if [ "$ct_rc" -ne 0 ]; then
    ct_fail "what-if ring" "exited $ct_rc: $ct_err"
else
    grep -q "replaying the head gradient of step 3" "$CT_TMP/out" && ct_pass "what-if names the step it replays" \
        || ct_fail "replayed step" "$ct_out"
    r=$(row ring pure_bf16)
    near "ring pure_bf16 head rel_err = the probe's" "$(echo "$r" | awk '{print $5}')" "$(probe "$W/ring" probe/head/rel_err)" 0.01
    near "ring pure_bf16 head bias = the probe's" "$(echo "$r" | awk '{print $6}')" "$(probe "$W/ring" probe/head/bias)" 0.05
    near "ring pure_bf16 head logit_push = the probe's" "$(echo "$r" | awk '{print $7}')" "$(probe "$W/ring" probe/head/logit_push)" 0.01
    # hier at one rank per node is the flat ring, figure for figure
    for p in pure_bf16 bf16_fp32acc amp; do
        a=$(row ring $p | cut -c8- | awk '{$1=""; print}') b=$(row hier $p | cut -c8- | awk '{$1=""; print}')
        [ -n "$a" ] && [ "$a" = "$b" ] && ct_pass "hier at gpus_per_node 1 = ring ($p)" \
            || ct_fail "hier = ring ($p)" "ring '$a', hier '$b'"
    done
    # amp's f32 reduction is exact to ~1e-8; the bf16 ring's error is far above it
    amp=$(row ring amp | awk '{print $5}') pure=$(row ring pure_bf16 | awk '{print $5}')
    python3 -c 'import sys; a, p = map(float, sys.argv[1:]); sys.exit(0 if a < 1e-6 < p else 1)' "$amp" "$pure" \
        && ct_pass "amp's error ($amp) is f32's, pure_bf16's ($pure) bf16's" \
        || ct_fail "amp vs pure_bf16" "amp $amp, pure_bf16 $pure"
    n=$(grep -c -v '^#\|^world_size' "$W/rows.tsv")
    [ "$n" -eq 6000 ] && ct_pass "--per-row: 1000 rows for each of 6 replays" \
        || ct_fail "--per-row rows" "expected 6000, got $n"
fi

# ---- 1b. a model without hidden_rows (as an ABI 1.3 plugin): the prefix fallback, same figures
# The fallback recovers each row from mean_hidden of two prefixes (exact to ~1e-7 |h|) and
# rounds it to bf16 as hidden_rows' rows are: a row next to a bf16 boundary may land one step
# away, so the figures agree to well under the probe tolerance above, not bit for bit.
if ct_install_gpt_without "$W/old" GPT_WITHOUT_HIDDEN_ROWS; then
    cp "$CT_TMP/out" "$W/new.out"
    grep -q "head's input rows from the model's hidden_rows" "$W/new.out" \
        && ct_pass "what-if reads the head's input with hidden_rows" \
        || ct_fail "hidden_rows used" "$(grep "input rows" "$W/new.out")"
    ct_run "$W/old/ctrain" what-if "$W/ring/checkpoints/step_00000002" --world-sizes 16 \
        --algo ring --policies pure_bf16,bf16_fp32acc,amp
    grep -q "from mean_hidden of every prefix" "$CT_TMP/out" \
        && ct_pass "without hidden_rows what-if says it falls back to prefixes" \
        || ct_fail "prefix fallback named" "exit $ct_rc: $(grep "input rows" "$CT_TMP/out") $ct_err"
    for p in pure_bf16 bf16_fp32acc; do
        a=$(awk -v p=$p '$2 == "ring" && $3 == p' "$W/new.out") b=$(row ring $p)
        for col in 5 6 7; do
            near "prefix fallback = hidden_rows ($p, column $col)" \
                "$(echo "$b" | awk -v c=$col '{print $c}')" "$(echo "$a" | awk -v c=$col '{print $c}')" 0.002
        done
    done
else
    ct_fail "build gpt without hidden_rows" "$(tail -3 "$W/old/build.log")"
fi

# ---- 2. NCCL's tree: a run trained with dbtree (4 ranks per node) and what-if --algo dbtree -
train "$W/tree" --set comm.algo=dbtree --set comm.gpus_per_node=4
ct_run "$CTRAIN" what-if "$W/tree" --world-sizes 16 --algo dbtree --gpus-per-node 4 --policies pure_bf16
if [ "$ct_rc" -ne 0 ]; then
    ct_fail "what-if dbtree" "exited $ct_rc: $ct_err"
else
    # a run folder replays its newest checkpoint (step 3): compare with a replay of step 2
    ct_run "$CTRAIN" what-if "$W/tree/checkpoints/step_00000002" --world-sizes 16 --algo dbtree \
        --gpus-per-node 4 --policies pure_bf16
    r=$(row dbtree pure_bf16)
    near "dbtree pure_bf16 head rel_err = the probe's" "$(echo "$r" | awk '{print $5}')" "$(probe "$W/tree" probe/head/rel_err)" 0.01
    near "dbtree pure_bf16 head logit_push = the probe's" "$(echo "$r" | awk '{print $7}')" "$(probe "$W/tree" probe/head/logit_push)" 0.01
fi

# ---- 2b. NCCL's choice: a run trained with algo = nccl (2 nodes x 8 H100) and what-if --algo
# nccl: the same model of the tuner picks the same order for the head, and both say so
train "$W/nccl" --set comm.algo=nccl --set comm.gpu=h100 --set comm.gpus_per_node=8
grep -q "NCCL 2.30 would run this .* at 2 nodes x 8 H100 as" "$W/nccl.log" \
    && ct_pass "train with algo = nccl logs the tuner model's pick" \
    || ct_fail "train logs the pick" "$(grep -i nccl "$W/nccl.log" | head -3)"
ct_run "$CTRAIN" what-if "$W/nccl/checkpoints/step_00000002" --world-sizes 16 --algo nccl \
    --gpu h100 --gpus-per-node 8 --policies pure_bf16
if [ "$ct_rc" -ne 0 ]; then
    ct_fail "what-if nccl" "exited $ct_rc: $ct_err"
else
    grep -q "what-if: N = 16, bf16, the head alone: NCCL 2.30 would run this" "$CT_TMP/out" \
        && ct_pass "what-if --algo nccl prints the pick" || ct_fail "what-if pick" "$ct_out"
    r=$(row nccl pure_bf16)
    near "nccl pure_bf16 head rel_err = the probe's" "$(echo "$r" | awk '{print $5}')" "$(probe "$W/nccl" probe/head/rel_err)" 0.01
    near "nccl pure_bf16 head logit_push = the probe's" "$(echo "$r" | awk '{print $7}')" "$(probe "$W/nccl" probe/head/logit_push)" 0.01
fi

# ---- 3. --rows: the sampled replay against the whole one ---------------------------------
# A batch of 512 sequences (4096 tokens: 256 and 64 per rank at N = 16 and 64), ring and NCCL's
# tree, two policies: 8 replays of three figures each.
C2="$W/ring/checkpoints/step_00000002"
RW=(--world-sizes 16,64 --global-batch 512 --algo ring,dbtree --gpus-per-node 8 --policies pure_bf16,bf16_fp32acc)
ct_run "$CTRAIN" what-if "$C2" "${RW[@]}"
cp "$CT_TMP/out" "$W/whole.out"
ct_run "$CTRAIN" what-if "$C2" "${RW[@]}" --rows 1000
# every row taken: the streamed local gradients are the whole replay's, figure for figure
if python3 - "$W/whole.out" "$CT_TMP/out" <<'EOF'
import sys
def table(path):
    lines = open(path).read().splitlines()
    i = [k for k, l in enumerate(lines) if l.split()[:2] == ["N", "algo"]][0]
    return [l.split() for l in lines[i + 1:] if l.split() and l.split()[0].isdigit()]
w, c = table(sys.argv[1]), table(sys.argv[2])
ok = len(w) == len(c) == 8 and all(a[:7] == [b[0], b[1], b[2], b[3], b[4], b[6], b[8]] and
                                   b[5] == b[7] == b[9] == "0" for a, b in zip(w, c))
sys.exit(0 if ok else 1)
EOF
then ct_pass "--rows 1000 of 1000: the whole replay's figures, standard errors 0"
else ct_fail "--rows census" "$(tail -9 "$W/whole.out") / $(tail -9 "$CT_TMP/out")"
fi
# 20 samples: for an estimate and standard error that are right, |estimate - whole| <= 2 se
# holds 95% of the time; 20 seeds x 8 replays x 3 figures = 480 checks, 456 expected, the
# binomial's sd 4.8. Passing: >= 440 (3.3 sd below). A standard error half its size (the
# figures of a broken estimator) covers ~68%, so ~330. And the estimates must be unbiased: the
# mean of the 20 lies within 3.5 of its own standard errors of the whole replay in all 24.
for seed in $(seq 1 20); do
    "$CTRAIN" what-if "$C2" "${RW[@]}" --rows 300 --sample-seed "$seed" > "$W/s$seed.out" 2> "$W/s$seed.err" \
        || ct_fail "what-if --rows 300 --sample-seed $seed" "$(cat "$W/s$seed.err")"
done
if cover=$(python3 - "$W" <<'EOF'
import sys
def table(path):
    lines = open(path).read().splitlines()
    i = [k for k, l in enumerate(lines) if l.split()[:2] == ["N", "algo"]][0]
    return [l.split() for l in lines[i + 1:] if l.split() and l.split()[0].isdigit()]
w = table(sys.argv[1] + "/whole.out")
hits, n, zmax = [0, 0, 0], 0, 0.0
est = [table("%s/s%d.out" % (sys.argv[1], seed)) for seed in range(1, 21)]
for j, a in enumerate(w):
    for k, (wc, ec, sc) in enumerate([(4, 4, 5), (5, 6, 7), (6, 8, 9)]):
        x = [float(e[j][ec]) for e in est]
        se = [float(e[j][sc]) for e in est]
        hits[k] += sum(abs(xi - float(a[wc])) <= 2 * si for xi, si in zip(x, se))
        # the mean of 20 independent samples: (mean - whole) / (rms se / sqrt(20)) ~ N(0, 1)
        rms = (sum(si * si for si in se) / 20) ** 0.5
        zmax = max(zmax, abs(sum(x) / 20 - float(a[wc])) / (rms / 20 ** 0.5))
    n += 20
print("rel_err %d, bias %d, logit_push %d of %d each; %d of %d in all; the largest |z| of the "
      "24 means of 20 samples %.2f" % (*hits, n, sum(hits), 3 * n, zmax))
sys.exit(0 if sum(hits) >= 440 and min(hits) >= 140 and zmax <= 3.5 else 1)
EOF
); then ct_pass "--rows 300, 20 seeds: the whole replay within 2 standard errors: $cover"
else ct_fail "--rows coverage" "$cover (wanted >= 440 of 480, >= 140 of 160 per figure, |z| <= 3.5)"
fi

# ---- 4. errors: each names its flag -------------------------------------------------------
ct_expect_failure "no --world-sizes" "--world-sizes is required" "$CTRAIN" what-if "$C2"
ct_expect_failure "world size 0" "--world-sizes '0' is not an integer in [1, 65536]" \
    "$CTRAIN" what-if "$C2" --world-sizes 8,0
ct_expect_failure "world size not a number" "--world-sizes 'x8'" "$CTRAIN" what-if "$C2" --world-sizes x8
ct_expect_failure "unknown algo" "--algo: unknown algo 'butterfly'" "$CTRAIN" what-if "$C2" --world-sizes 8 --algo ring,butterfly
ct_expect_failure "unknown gpu" "--gpu 'v100' is not one of a100, h100, h200" "$CTRAIN" what-if "$C2" --world-sizes 8 --algo nccl --gpu v100
ct_expect_failure "unknown policy" "--policies: unknown policy 'fp8'" "$CTRAIN" what-if "$C2" --world-sizes 8 --policies fp8
ct_expect_failure "gpus per node not dividing N" "--world-sizes 12 with --gpus-per-node 8|not a whole number of nodes" \
    "$CTRAIN" what-if "$C2" --world-sizes 16,12 --algo hier --gpus-per-node 8
ct_expect_failure "not a run" "$W/sp" "$CTRAIN" what-if "$W/sp" --world-sizes 8
ct_expect_failure "more ranks than tokens" "--world-sizes 1024: more ranks than the global batch's 256 tokens|--global-batch" \
    "$CTRAIN" what-if "$C2" --world-sizes 1024
ct_expect_failure "unknown option" "unknown option '--world'" "$CTRAIN" what-if "$C2" --world 8
ct_expect_failure "--stratify without --rows" "--stratify without --rows" "$CTRAIN" what-if "$C2" --world-sizes 8 --stratify freq
ct_expect_failure "unknown stratification" "--stratify 'zipf' is not one of uniform, batch, freq" \
    "$CTRAIN" what-if "$C2" --world-sizes 8 --rows 100 --stratify zipf
ct_expect_failure "too few rows for the strata" "--rows 5: too few to take 4 rows of each of the" \
    "$CTRAIN" what-if "$C2" --world-sizes 8 --rows 5
ct_expect_failure "--zloss-coef without --lr" "--zloss-coef without --lr" "$CTRAIN" what-if "$C2" --world-sizes 8 --zloss-coef 1e-3
ct_expect_failure "learning rate 0" "--lr '0' is not a number in (0, 1000]" "$CTRAIN" what-if "$C2" --world-sizes 8 --lr 0
ct_run "$CTRAIN" what-if "$C2" --world-sizes 16 --per-row "$W/no/such/dir/rows.tsv" --policies amp
[ "$ct_rc" -eq 0 ] && [ -s "$W/no/such/dir/rows.tsv" ] && [ -z "$(ls "$W/no/such/dir" | grep tmp)" ] \
    && ct_pass "--per-row into a missing folder: the folders are made, the file written whole" \
    || ct_fail "--per-row missing folder" "exit $ct_rc: $ct_err"
ct_summary
