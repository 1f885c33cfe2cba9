#!/usr/bin/env bash
# test_hostile_input.sh — issue 30's "slow, hung or wrong on hostile input", through the real
# binary, each input made here in a temporary folder: a safetensors header of 300,000 tensors
# opened within a bound the old quadratic parse exceeded 50 times over; a zero-size tensor at
# offset 0 accepted (as the reference reader does); a tensor in two shards named with both; a
# config.json that is a broken link refused by name; a config.json whose head_dim x heads
# overflows int64 refused; an event file whose name's seconds overflow refused by name; reduce
# --policy naming a rank thread that cannot start, at once; reduce --stats naming a NaN or Inf
# input; BPE prepare of a 4 MB one-letter line in bounded memory; what-if --stratify uniform's
# standard errors covering the whole replay; a newline or a C1 control inside a path shown
# escaped in a message.
set -u
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/train_lib.sh"   # tiny_ini
cd "$CT_TMP" || exit 1
W=$CT_TMP

# bounded NAME SECONDS NEEDLE command...: fails non-zero within SECONDS, no crash, stderr holds
# NEEDLE (fixed string).
bounded() {
    local name=$1 secs=$2 needle=$3
    shift 3
    ct_run timeout -k 5 "$secs" "$@"
    if [ "$ct_rc" -eq 124 ] || [ "$ct_rc" -eq 137 ]; then ct_fail "$name" "hung (killed after ${secs}s)"; return; fi
    if [ "$ct_rc" -eq 0 ]; then ct_fail "$name" "exited 0; expected a refusal"; return; fi
    if [ "$ct_rc" -ge 128 ]; then ct_fail "$name" "crashed (exit $ct_rc): ${ct_err:0:400}"; return; fi
    if ! grep -qF -- "$needle" "$CT_TMP/err"; then ct_fail "$name" "stderr lacks \"$needle\": ${ct_err:0:600}"; return; fi
    ct_pass "$name"
}

"$CTRAIN" prepare --text /usr/share/common-licenses/GPL-3 --out data --tokenizer bytes \
    --val-fraction 0.1 > prepare.log 2>&1 || { ct_fail setup "prepare: $(tail -3 prepare.log)"; ct_summary; exit 1; }
tiny_ini t.ini unused data 256

# ---- safetensors: O(n log n) header, zero-size tensors, shards, config.json ----------------
python3 - <<'PY'
import json, os, random, struct
def save(name, header, payload):
    j = json.dumps(header, separators=(",", ":")).encode(); j += b" " * (-len(j) % 8)
    open(name, "wb").write(struct.pack("<Q", len(j)) + j + payload)
# 300,000 tensors of 4 bytes in shuffled order: the old parse (a linear name search per tensor)
# took ~26 s for 40,000, so ~25 minutes for these; sorting takes about a second
n = 300000
idx = list(range(n)); random.Random(1).shuffle(idx)
save("big.safetensors", {f"tensor.{k}": {"dtype": "F32", "shape": [1], "data_offsets": [4 * k, 4 * k + 4]}
                         for k in idx}, b"\0" * (4 * n))
# a header 20,240,326 bytes long (padded with spaces, as the format allows): its first word is
# llm.c's model magic, but its second is 0 and its JSON opens at byte 8
j = json.dumps({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
j += b" " * (20240326 - len(j))
open("magic.safetensors", "wb").write(struct.pack("<Q", len(j)) + j + b"\0" * 4)
# a zero-size tensor at offset 0 beside one starting there (the reference reader sorts by
# (begin, end) and accepts it); the header order puts the zero-size one second
save("zero.safetensors", {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                          "empty": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}}, b"\0" * 8)
# an index whose two shards both hold tensor "b"
os.makedirs("two", exist_ok=True)
save("two/s1.safetensors", {"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                            "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8)
save("two/s2.safetensors", {"b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4)
json.dump({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}},
          open("two/model.safetensors.index.json", "w"))
# a Llama config.json whose head_dim x num_attention_heads wraps int64 to hidden_size exactly
# (2^32 + 1) * 2^32 = 2^64 + 2^32: the old check saw 2^32 == hidden_size and let it through
os.makedirs("wrap", exist_ok=True)
C = 2 ** 32
json.dump({"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 2 ** 32,
           "num_key_value_heads": 2 ** 32, "hidden_size": C, "head_dim": 2 ** 32 + 1,
           "vocab_size": 256, "max_position_embeddings": 32,
           "intermediate_size": 256 * ((int(8 * C / 3) + 255) // 256)}, open("wrap/config.json", "w"))
save("wrap/model.safetensors", {}, b"")
PY
bounded safetensors_300k_tensors_parse_in_seconds 30 "do not match this model" \
    "$CTRAIN" validate t.ini --set model.init_from=big.safetensors
# an index mapping each of the 300,000 tensors to that file: the old check of each weight_map
# key was a linear search of the shard's names too
mkdir -p idx && ln -f big.safetensors idx/big.safetensors
python3 -c 'import json; json.dump({"weight_map": {"tensor.%d" % k: "big.safetensors" for k in range(300000)}}, open("idx/model.safetensors.index.json", "w"))'
bounded safetensors_index_300k_keys_in_seconds 30 "do not match this model" \
    "$CTRAIN" validate t.ini --set model.init_from=idx
bounded safetensors_header_of_llmc_magic_length_is_safetensors 20 "a unexpected" \
    "$CTRAIN" validate t.ini --set model.init_from=magic.safetensors
ct_run "$CTRAIN" validate t.ini --set model.init_from=zero.safetensors
if grep -qF overlap "$CT_TMP/err"; then ct_fail safetensors_zero_size_at_offset_0_accepted "${ct_err:0:400}"
elif grep -qF "empty unexpected" "$CT_TMP/err"; then ct_pass safetensors_zero_size_at_offset_0_accepted
else ct_fail safetensors_zero_size_at_offset_0_accepted "not read to the tensor check: ${ct_err:0:400}"; fi
bounded safetensors_tensor_in_two_shards_names_both 20 "tensor b is in both shard two/s1.safetensors and shard two/s2.safetensors" \
    "$CTRAIN" validate t.ini --set model.init_from=two
mkdir -p linked; cp zero.safetensors linked/model.safetensors; ln -s nowhere.json linked/config.json
bounded config_json_broken_link_refused 20 "linked/config.json" \
    "$CTRAIN" validate t.ini --set model.init_from=linked
bounded config_json_head_dim_times_heads_overflow 20 "head_dim = 4294967297" \
    "$CTRAIN" validate t.ini --set model.init_from=wrap

# ---- tensorboard: an event file whose name's seconds overflow ------------------------------
mkdir -p tbrun/tb
touch tbrun/tb/events.out.tfevents.99999999999999999999.host.1
bounded tensorboard_event_name_overflow_refused 30 "events.out.tfevents.99999999999999999999.host.1" \
    "$CTRAIN" train t.ini --set run.out_dir=tbrun --set run.tensorboard=true --set run.steps=1

# ---- reduce: a rank thread that cannot start; --stats of non-finite input -------------------
python3 - <<'PY'
import struct
open("in1024.bin", "wb").write(b"\x80\x3f" * 1024 * 8)          # 1024 ranks x 8 bf16 ones
v = [float("nan") if (r, i) == (2, 5) else 1.0 + i for r in range(4) for i in range(8)]
open("nan.bin", "wb").write(struct.pack("<32f", *v))            # rank 2's element 5 is NaN
v = [1.0 + i for r in range(4) for i in range(8)]; v[3 * 8 + 6] = float("-inf")
open("inf.bin", "wb").write(b"".join(struct.pack("<f", x)[2:] for x in v))  # bf16; rank 3's element 6 is -Inf
PY
# 1024 threads of 8 MiB stacks need 8 GiB of address space; 2 GiB lets ~80 start. The old
# reduce ignored pthread_create's failure and waited 600 s for the missing ranks.
if (ulimit -v 2000000 && "$CTRAIN" --help > /dev/null 2>&1); then
    bounded reduce_policy_thread_start_failure_named 20 "cannot start the thread of rank" \
        bash -c 'ulimit -v 2000000; ulimit -s 8192; exec "$@"' - \
        "$CTRAIN" reduce --world-size 1024 --in in1024.bin --out o1024.bin --policy bf16_fp32acc
else
    echo "skip reduce_policy_thread_start_failure_named: ctrain does not start under ulimit -v (a sanitizer build)"
fi
for op in all_reduce reduce_scatter; do
    ct_run "$CTRAIN" reduce --world-size 4 --in nan.bin --out "o_$op.bin" --dtype f32 --op "$op" --stats
    if [ "$ct_rc" -eq 0 ] && grep -qF "stats: the input is not finite: rank 2's element 5 is NaN" "$CT_TMP/out" \
        && ! grep -qF "relative error" "$CT_TMP/out"; then ct_pass "reduce_stats_nan_input_named_$op"
    else ct_fail "reduce_stats_nan_input_named_$op" "rc $ct_rc: $ct_out $ct_err"; fi
done
ct_run "$CTRAIN" reduce --world-size 4 --in inf.bin --out o_inf.bin --stats --policy bf16_fp32acc
if grep -qF "rank 3's element 6 is -Inf" "$CT_TMP/out" && ! grep -qF "relative error" "$CT_TMP/out"; then
    ct_pass reduce_stats_inf_input_named_policy
else ct_fail reduce_stats_inf_input_named_policy "rc $ct_rc: $ct_out $ct_err"; fi

# ---- BPE prepare: a 4 MB line of one letter (no cut point) in bounded memory ---------------
# The old encoder merged the whole run as one piece (~37 bytes of memory a byte: +148 MB here),
# and prepare held the whole line. A piece is now merged in segments of 64 KiB and prepare cuts
# units at a segment's end: max RSS (time -v) at most 11 MB above GPL-3's, with 2 threads of
# 256 KiB units (measured +6 MB; the whole line held would be >= +14 MB). Units cut inside long
# runs (letters, punctuation with apostrophes, spaces, digits, non-ASCII letters) give the ids
# of encoding the file whole (ctrain tokenize).
ranks="$ROOT/.deps/tokenizers/gpt2.tiktoken"
if [ -f "$ranks" ] && [ -x /usr/bin/time ]; then
    python3 -c "open('one.txt', 'w').write('a' * 4000000 + '\\n')"
    rss() { rm -rf "$2"; /usr/bin/time -f "%M" -o "$2.rss" "$CTRAIN" prepare --text "$1" --out "$2" \
                --tokenizer bpe --tokenizer-file "$ranks" --threads 2 --unit-bytes 262144 \
                > "$2.log" 2>&1 && cat "$2.rss"; }
    base=$(rss /usr/share/common-licenses/GPL-3 pbase); long=$(rss one.txt plong)
    if [ -n "$base" ] && [ -n "$long" ] && [ $((long - base)) -lt 11000 ]; then
        ct_pass "bpe_prepare_long_run_bounded_memory (+$((long - base)) KB max RSS for 4 MB)"
    else ct_fail bpe_prepare_long_run_bounded_memory "max RSS $long KB vs $base KB for GPL-3: $(tail -2 plong.log)"; fi
    python3 -c "open('mix.txt', 'w').write('hello ' + 'a' * 300000 + \" world's \" + '!' * 70000 + \"'s\" + \"'\" * 70000 + \"'t\" + ' ' * 150000 + 'x\\n' + '\u00e9' * 100000 + ' 12' + '3' * 140000 + '\\n')"
    "$CTRAIN" prepare --text mix.txt --out pmix --tokenizer bpe --tokenizer-file "$ranks" \
        --val-fraction 0 --unit-bytes 100000 > pmix.log 2>&1
    "$CTRAIN" tokenize "$ranks" mix.txt > mix.ids 2> mix.err
    if same=$(python3 - <<'PY'
import glob, sys, numpy as np
toks = np.concatenate([np.fromfile(f, dtype=np.uint16, offset=1024)
                       for f in sorted(glob.glob("pmix/train_*.bin"))]).astype(int).tolist()
ids = [int(x) for x in open("mix.ids").read().split()]
if toks and toks[0] == 50256 and (not ids or ids[0] != 50256): toks = toks[1:]
print("%d ids from units of 100 kB, %d whole" % (len(toks), len(ids)))
sys.exit(0 if toks == ids and ids else 1)
PY
    ); then ct_pass "bpe_prepare_cut_in_long_runs_same_ids: $same"
    else ct_fail bpe_prepare_cut_in_long_runs_same_ids "$same $(tail -2 pmix.log) $(cat mix.err)"; fi
else
    echo "skip bpe_prepare_long_run_bounded_memory: no $ranks (scripts/get-gpt2-tokenizer.sh) or no /usr/bin/time"
fi

# ---- what-if --stratify uniform: standard errors that cover -------------------------------
# A 1000-token model (the one test_whatif.sh replays): its most frequent row holds ~55% of the
# head gradient's squared norm, so a uniform sample's ratio figures (rel_err, bias, zloss_lse*)
# covered the whole replay 54% of the time at 2 SE; they are now shown as "-". Every figure
# still printed must hold the whole replay's value within 2 SE in >= 90% of 20 seeds x 8
# replays (the old output, ratios included, held 841 of 960).
ct_prepare_licenses sp || ct_fail whatif_setup "prepare: $(tail -3 sp.log)"
printf '%s\n' '[run]' 'name = w' "out_dir = $W/wrun" 'steps = 2' 'seed = 11' 'log_every = 2' \
    'eval_every = 0' 'checkpoint_every = 2' '[data]' "train = $W/sp" 'batch_size = 2' 'seq_len = 8' \
    '[model]' 'plugin = gpt' 'n_layer = 1' 'n_head = 2' 'd_model = 16' 'vocab_size = 1000' \
    'seq_len = 8' 'norm = gain_only_layernorm' 'mlp = swiglu' 'pos = rope' 'qk_norm = true' \
    'tie_embeddings = false' 'bias = false' 'init = open_lm' '[strategy]' 'plugin = full_shard' \
    '[precision]' 'plugin = pure_bf16' '[comm]' 'plugin = threads' 'world_size = 16' '[optim]' \
    'lr = 5e-3' 'warmup = 1' '[device]' 'threads = 1' > w.ini
if "$CTRAIN" train w.ini > wtrain.log 2>&1; then
    RW=(--world-sizes 16,64 --global-batch 512 --algo ring,dbtree --gpus-per-node 8
        --policies pure_bf16,bf16_fp32acc --lr 1e-3)
    "$CTRAIN" what-if wrun/checkpoints/step_00000002 "${RW[@]}" > whole.out 2>&1
    for seed in $(seq 1 20); do
        "$CTRAIN" what-if wrun/checkpoints/step_00000002 "${RW[@]}" --rows 300 --stratify uniform \
            --sample-seed "$seed" > "u$seed.out" 2>&1
    done
    if cover=$(python3 - <<'PY'
import sys
def tables(path):
    lines = open(path).read().splitlines(); out = []
    for i, l in enumerate(lines):
        if l.split()[:2] == ["N", "algo"]:
            t = []
            for m in lines[i + 1:]:
                if not m.split() or not m.split()[0].isdigit(): break
                t.append(m.split())
            out.append(t)
    return out
w = tables("whole.out")
# (table, whole column, estimate column): rel_err, bias, logit_push; logit/1k, lse/1k, lse*
cols = [(0, 4, 4), (0, 5, 6), (0, 6, 8), (1, 3, 3), (1, 5, 5), (1, 7, 7)]
hits = n = dashes = 0
for seed in range(1, 21):
    e = tables("u%d.out" % seed)
    for ti, wc, ec in cols:
        for a, b in zip(w[ti], e[ti]):
            if b[ec] == "-": dashes += 1; continue
            n += 1; hits += abs(float(b[ec]) - float(a[wc])) <= 2 * float(b[ec + 1])
print("%d of %d figures within 2 SE (%.1f%%), %d ratio figures not shown" % (hits, n, 100.0 * hits / max(n, 1), dashes))
sys.exit(0 if n >= 400 and hits >= 0.9 * n and dashes == 480 else 1)
PY
    ); then ct_pass "whatif_uniform_standard_errors_cover: $cover"
    else ct_fail whatif_uniform_standard_errors_cover "$cover"; fi
else
    ct_fail whatif_setup "train: $(tail -3 wtrain.log)"
fi

# ---- messages: a newline or a C1 control inside a path shown escaped ------------------------
ct_run "$CTRAIN" validate $'no\nctrain: fake line.ini'
if [ "$ct_rc" -ne 0 ] && [ "$(wc -l < "$CT_TMP/err")" -eq 1 ] && grep -qF 'no\nctrain: fake line.ini' "$CT_TMP/err"; then
    ct_pass message_newline_in_path_escaped
else ct_fail message_newline_in_path_escaped "rc $ct_rc: $ct_err"; fi
ct_run "$CTRAIN" prepare --text $'no\nctrain prepare: fake.txt' --out pp
if [ "$ct_rc" -ne 0 ] && [ "$(wc -l < "$CT_TMP/err")" -eq 1 ] && grep -qF 'no\nctrain prepare: fake.txt' "$CT_TMP/err"; then
    ct_pass message_newline_in_path_escaped_prepare
else ct_fail message_newline_in_path_escaped_prepare "rc $ct_rc: $ct_err"; fi
ct_run "$CTRAIN" train t.ini --set $'run.out_dir=/proc/no\nctrain train: fake'
if [ "$ct_rc" -ne 0 ] && [ "$(wc -l < "$CT_TMP/err")" -eq 1 ] && grep -qF '/proc/no\nctrain train: fake' "$CT_TMP/err"; then
    ct_pass message_newline_in_path_escaped_train
else ct_fail message_newline_in_path_escaped_train "rc $ct_rc: $ct_err"; fi
python3 - <<'PY'
import json, struct
h = {("x\nctrain: fake line %d" % k): {"dtype": "F32", "shape": [1], "data_offsets": [4 * k, 4 * k + 4]} for k in range(20)}
j = json.dumps(h).encode(); j += b" " * (-len(j) % 8)
open("nl.safetensors", "wb").write(struct.pack("<Q", len(j)) + j + b"\0" * 80)
PY
ct_run "$CTRAIN" validate t.ini --set model.init_from=nl.safetensors
if [ "$ct_rc" -ne 0 ] && grep -qF 'x\nctrain: fake line 3 unexpected' "$CT_TMP/err" && ! grep -q '^ctrain: fake' "$CT_TMP/err"; then
    ct_pass message_newline_in_tensor_name_escaped
else ct_fail message_newline_in_tensor_name_escaped "rc $ct_rc: ${ct_err:0:600}"; fi
ct_run "$CTRAIN" validate $'no\xc2\x9b2J.ini'
if [ "$ct_rc" -ne 0 ] && grep -qF 'no\u009b2J.ini' "$CT_TMP/err" && ! grep -q $'\xc2\x9b' "$CT_TMP/err"; then
    ct_pass message_c1_control_in_path_escaped
else ct_fail message_c1_control_in_path_escaped "rc $ct_rc: $(od -c "$CT_TMP/err" | head -5)"; fi

ct_summary
