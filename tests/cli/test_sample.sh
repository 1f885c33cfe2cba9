#!/usr/bin/env bash
# test_sample.sh — `ctrain sample` and [run] sample_every through the real binary and plugins:
# a tiny model trained to memorise a short text continues it greedily from a prefix; greedy
# output is deterministic and the same with the key/value cache and without (recompute),
# also past the context; a seed reproduces a sampled text; a copied run folder (data gone)
# still samples, with its byte or sentencepiece tokenizer; every error case exits non-zero with
# its message, never a signal; sample_every writes valid JSON lines and leaves the training
# losses bit for bit unchanged (one rank ddp, two ranks full_shard); a model plugin without
# decode (built here without it) falls back to forward() with the same results.
set -u
cd "$(dirname "$0")/../.."
. tests/cli/lib.sh
W=$CT_TMP

TEXT='The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs! How vexingly quick daft zebras jump; sphinx of black quartz, judge my vow. '
python3 -c "import sys; open(sys.argv[1], 'w').write(sys.argv[2] * 40)" "$W/text.txt" "$TEXT"
"$CTRAIN" prepare --text "$W/text.txt" --out "$W/data" --tokenizer bytes --val-fraction 0 \
    > "$W/prepare.log" 2>&1 || { ct_fail prepare "$(tail -3 "$W/prepare.log")"; ct_summary; exit 1; }

# mem_ini FILE OUT STEPS D_MODEL: a 2-block GPT with a 32-byte context on the text's shards
# ([data] train names their folder; the sentencepiece run below uses a glob)
mem_ini() {
    cat > "$1" <<EOF
[run]
name = m
out_dir = $2
steps = $3
seed = 7
log_every = 50
[data]
train = $W/data
batch_size = 8
seq_len = 32
[model]
plugin = gpt
n_layer = 2
n_head = 2
d_model = $4
vocab_size = 256
seq_len = 32
[optim]
lr = 1e-2
warmup = 10
weight_decay = 0
[device]
threads = 1
EOF
}

# ---- 1. memorisation: 300 steps, then the text continues greedily from a prefix -----------
mem_ini "$W/m.ini" "$W/run" 300 48
"$CTRAIN" train "$W/m.ini" > "$W/train.log" 2>&1 || ct_fail "train memorise" "$(tail -3 "$W/train.log")"
[ -f "$W/run/tokenizer.ini" ] && grep -q "kind = bytes" "$W/run/tokenizer.ini" \
    && ct_pass "train records the bytes tokenizer in OUT/tokenizer.ini" \
    || ct_fail "tokenizer.ini" "missing or not bytes: $(cat "$W/run/tokenizer.ini" 2>&1)"

want=" fox jumps over the lazy dog. Pack my box"
ct_run "$CTRAIN" sample "$W/run" --prompt "The quick brown" --greedy --tokens ${#want}
[ "$ct_rc" -eq 0 ] && [ "$ct_out" = "$want" ] && ct_pass "greedy continues the memorised text" \
    || ct_fail "memorised" "expected '$want', got '$ct_out' (exit $ct_rc: $ct_err)"

# ---- 2. determinism; cache == recompute (80 tokens: past the 32-token context) ------------
ct_run "$CTRAIN" sample "$W/run" --prompt "Pack my" --greedy --tokens 80; a=$ct_out
ct_run "$CTRAIN" sample "$W/run" --prompt "Pack my" --greedy --tokens 80; b=$ct_out
[ -n "$a" ] && [ "$a" = "$b" ] && ct_pass "greedy twice: the same text" \
    || ct_fail "greedy deterministic" "'$a' vs '$b'"
ct_run "$CTRAIN" sample "$W/run" --prompt "Pack my" --greedy --tokens 80 --no-cache --stats
[ "$ct_out" = "$a" ] && grep -q "(recompute)" "$CT_TMP/err" \
    && ct_pass "greedy with the KV cache == recompute with forward(), past the context" \
    || ct_fail "cache vs recompute" "'$a' vs '$ct_out' ($ct_err)"
ct_run "$CTRAIN" sample "$W/run" --prompt "How" --temperature 1.5 --top-k 20 --seed 5 --tokens 60; a=$ct_out
ct_run "$CTRAIN" sample "$W/run" --prompt "How" --temperature 1.5 --top-k 20 --seed 5 --tokens 60; b=$ct_out
ct_run "$CTRAIN" sample "$W/run" --prompt "How" --temperature 1.5 --top-k 20 --seed 6 --tokens 60; c=$ct_out
[ "$a" = "$b" ] && [ "$a" != "$c" ] && ct_pass "a seed reproduces a sampled text; another seed differs" \
    || ct_fail "seeded sampling" "seed 5: '$a' / '$b', seed 6: '$c'"
ct_run "$CTRAIN" sample "$W/run" --ids --prompt "84 104 101" --greedy --tokens 3
[ "$ct_rc" -eq 0 ] && [ "$ct_out" = "32 113 117" ] && ct_pass "--ids: 'The' -> ' qu' as ids" \
    || ct_fail "--ids" "expected '32 113 117', got '$ct_out' ($ct_err)"

# ---- 3. a copied run folder samples without its data; a checkpoint folder works too --------
cp -r "$W/run" "$W/copied"
mv "$W/data" "$W/data.away"
ct_run "$CTRAIN" sample "$W/copied" --prompt "The quick brown" --greedy --tokens ${#want}
[ "$ct_rc" -eq 0 ] && [ "$ct_out" = "$want" ] && ct_pass "a copied run folder samples (data moved away)" \
    || ct_fail "copied run" "exit $ct_rc, '$ct_out': $ct_err"
ct_run "$CTRAIN" sample "$W/copied/checkpoints/step_00000300" --prompt "The quick brown" --greedy --tokens ${#want}
[ "$ct_rc" -eq 0 ] && [ "$ct_out" = "$want" ] && ct_pass "a checkpoint folder samples" \
    || ct_fail "checkpoint folder" "exit $ct_rc, '$ct_out': $ct_err"
mv "$W/data.away" "$W/data"

# ---- 4. errors: message, exit != 0, no signal ----------------------------------------------
long=$(printf 'x%.0s' $(seq 40))
ct_expect_failure "prompt longer than the context" \
    "the prompt is 40 tokens, longer than the model's context of 32 tokens|---> shorten --prompt" \
    "$CTRAIN" sample "$W/run" --prompt "$long" --greedy
ct_expect_failure "not a run or checkpoint" "$W/data is neither a run folder|--->" \
    "$CTRAIN" sample "$W/data" --greedy
ct_expect_failure "temperature 0 without --greedy" "--temperature 0 must be > 0 ---> use --greedy" \
    "$CTRAIN" sample "$W/run" --temperature 0
ct_expect_failure "top-p 0" "--top-p 0 is outside (0, 1]" "$CTRAIN" sample "$W/run" --top-p 0
ct_expect_failure "top-p 1.5" "--top-p 1.5 is outside (0, 1]" "$CTRAIN" sample "$W/run" --top-p 1.5
mkdir -p "$W/bare"
cp "$W/data/train_000000.bin" "$W/bare/"
mem_ini "$W/bare.ini" "$W/bare_run" 2 16
sed -i "s#^train = .*#train = $W/bare/train_000000.bin#" "$W/bare.ini"
"$CTRAIN" train "$W/bare.ini" > "$W/bare.log" 2>&1 || ct_fail "train bare" "$(tail -3 "$W/bare.log")"
ct_expect_failure "a run without a tokenizer" "records no tokenizer|---> pass --tokenizer bytes" \
    "$CTRAIN" sample "$W/bare_run" --greedy
ct_expect_success "--tokenizer bytes for such a run" "" \
    "$CTRAIN" sample "$W/bare_run" --tokenizer bytes --greedy --tokens 4
ct_expect_failure "sample_every without a tokenizer" "[run] sample_every needs the data's tokenizer|meta.ini does not exist" \
    "$CTRAIN" train "$W/bare.ini" --set run.sample_every=1 --set run.out_dir="$W/bare_run2"

# ---- 5. sentencepiece: the model is copied into the run and checked by checksum ------------
"$CTRAIN" prepare --text /usr/share/common-licenses/GPL-3 --out "$W/sp" --tokenizer sentencepiece --vocab-size 400 \
    --val-fraction 0 > "$W/sp.log" 2>&1 || ct_fail "prepare sp" "$(tail -3 "$W/sp.log")"
grep -q "^tokenizer_fnv64 = [0-9a-f]\{16\}$" "$W/sp/meta.ini" \
    && ct_pass "meta.ini records the sentencepiece model's checksum" \
    || ct_fail "meta.ini checksum" "$(cat "$W/sp/meta.ini")"
mem_ini "$W/sp.ini" "$W/sp_run" 2 16
sed -i -e "s#^train = .*#train = $W/sp/train_*.bin#" -e "s/^vocab_size = 256/vocab_size = 400/" "$W/sp.ini"
"$CTRAIN" train "$W/sp.ini" > "$W/sp_train.log" 2>&1 || ct_fail "train sp" "$(tail -3 "$W/sp_train.log")"
cp -r "$W/sp_run" "$W/sp_copied"
rm -rf "$W/sp"
ct_expect_success "a copied sentencepiece run samples (shards and model gone)" "" \
    "$CTRAIN" sample "$W/sp_copied" --prompt "The GNU General" --tokens 8 --seed 3
printf 'x' >> "$W/sp_copied/tokenizer.model"
ct_expect_failure "a changed tokenizer.model" "has checksum|---> copy the run folder whole" \
    "$CTRAIN" sample "$W/sp_copied" --prompt "The quick" --tokens 8

# ---- 6. sample_every: JSON lines, and the losses bit for bit as without it ------------------
mem_ini "$W/se.ini" "$W/se_off" 12 16
sed -i 's/^log_every = 50/log_every = 1/' "$W/se.ini"
for cfg in "ddp 1" "full_shard 2"; do
    set -- $cfg
    "$CTRAIN" train "$W/se.ini" --set strategy.plugin=$1 --set comm.world_size=$2 \
        --set run.out_dir="$W/off_$1" > "$W/off.log" 2>&1 || ct_fail "train off $1" "$(tail -3 "$W/off.log")"
    "$CTRAIN" train "$W/se.ini" --set strategy.plugin=$1 --set comm.world_size=$2 \
        --set run.out_dir="$W/on_$1" --set run.sample_every=4 --set run.sample_tokens=20 \
        --set run.sample_prompt='say "hi"' > "$W/on.log" 2>&1 || ct_fail "train on $1" "$(tail -3 "$W/on.log")"
    msg=$(python3 - "$W/off_$1/metrics.jsonl" "$W/on_$1/metrics.jsonl" "$W/on_$1/samples.jsonl" <<'PY'
import json, sys
loss = lambda p: [(d["step"], d["loss"]) for d in map(json.loads, open(p)) if "loss" in d]
a, b = loss(sys.argv[1]), loss(sys.argv[2])
if not a or a != b:
    print(f"losses differ: {a[:3]} vs {b[:3]}"); sys.exit(1)
rows = [json.loads(l) for l in open(sys.argv[3], encoding="utf-8")]
if [r["step"] for r in rows] != [4, 8, 12] or any(r["prompt"] != 'say "hi"' for r in rows):
    print(f"samples.jsonl rows: {rows}"); sys.exit(1)
print(f"{len(a)} losses equal bit for bit; samples at steps 4, 8, 12")
PY
    ) && grep -q '^step 4 | sample: say "hi"' "$W/on.log" \
        && ct_pass "sample_every ($1, world $2): $msg" \
        || ct_fail "sample_every $1" "$msg $(grep -c sample "$W/on.log") sample lines"
done

# a checkpoint saved by two ranks (full_shard shards) loads into the one rank of `sample`
ck="$W/on_full_shard/checkpoints/step_00000012"
ct_run "$CTRAIN" sample "$W/on_full_shard" --prompt "The" --greedy --tokens 12; a=$ct_out
[ "$ct_rc" -eq 0 ] && [ -f "$ck/rank_00001.bin" ] && [ ${#a} -ge 12 ] \
    && ct_pass "a checkpoint saved by 2 full_shard ranks samples: '$a'" \
    || ct_fail "world-2 checkpoint" "exit $ct_rc, '$a': $ct_err"

# ---- 7. a model without decode (as an ABI 1.1 plugin): the host recomputes with forward() ---
# the same gpt sources built without the two optional members, in a copy of the install
ct_install_gpt_without "$W/old" GPT_WITHOUT_DECODE \
    || ct_fail "build gpt without decode" "$(tail -3 "$W/old/build.log")"
OLD="$W/old/ctrain"
ct_run "$CTRAIN" sample "$W/run" --prompt "Pack my" --greedy --tokens 80; b=$ct_out
ct_run "$OLD" sample "$W/run" --prompt "Pack my" --greedy --tokens 80 --stats
[ "$ct_rc" -eq 0 ] && grep -q "(recompute)" "$CT_TMP/err" && [ "$ct_out" = "$b" ] \
    && ct_pass "a model without decode: recompute, the same greedy text as the cache" \
    || ct_fail "model without decode" "exit $ct_rc, '$ct_out' vs '$b': $ct_err"
"$OLD" train "$W/se.ini" --set run.out_dir="$W/old_on" \
    --set run.sample_every=4 --set run.sample_tokens=20 --set run.sample_prompt='say "hi"' \
    > "$W/old_on.log" 2>&1 || ct_fail "train without decode" "$(tail -3 "$W/old_on.log")"
msg=$(python3 - "$W/off_ddp/metrics.jsonl" "$W/old_on/metrics.jsonl" "$W/on_ddp/samples.jsonl" "$W/old_on/samples.jsonl" <<'PY'
import json, sys
loss = lambda p: [(d["step"], d["loss"]) for d in map(json.loads, open(p)) if "loss" in d]
if loss(sys.argv[1]) != loss(sys.argv[2]):
    print("losses differ from the run without sample_every"); sys.exit(1)
a = [json.loads(l)["text"] for l in open(sys.argv[3], encoding="utf-8")]
b = [json.loads(l)["text"] for l in open(sys.argv[4], encoding="utf-8")]
if a != b:
    print(f"samples differ: {a} vs {b}"); sys.exit(1)
print("losses bit for bit; samples as with the cache")
PY
) && ct_pass "sample_every with a model without decode: $msg" || ct_fail "sample_every without decode" "$msg"

ct_summary
