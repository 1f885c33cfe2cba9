#!/usr/bin/env bash
# test_export.sh — `ctrain export` and [model] init_from through the real binary on tiny GPTs:
# a checkpoint saved at world 2 (full_shard) exports the bytes of the same weights saved at
# world 1; the export equals the master weights reassembled independently (export_check.py);
# numpy forwards written from the Hugging Face GPT-2 and Llama architectures reproduce ctrain's
# logits to 1e-5; llm.c's file reads back as the safetensors; export -> import -> export is
# bit-identical; importing the safetensors and the llm.c export trains the same step bit for
# bit; the same numpy checks and round trips with grouped-query attention, rope scaling and
# attention biases (Llama-3, Qwen2, Llama attention_bias shapes); mismatches and impossible
# targets are refused with the reason; [run] log_param_norms reduces sharded gradients over
# ranks. Needs python3 with numpy and safetensors (scripts/install-deps.sh).
# Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. tests/cli/train_lib.sh
work=$(mktemp -d /tmp/ctrain-export-XXXXXX)
trap 'rm -rf "$work"' EXIT
[ -x "$CTRAIN" ] || { fail "no $CTRAIN: build first (make)"; finish; exit 1; }
if ! python3 -c 'import numpy, safetensors' 2> /dev/null; then
    fail "python3 lacks numpy or safetensors ---> run scripts/install-deps.sh"
    finish; exit 1
fi
check() { python3 tests/export_check.py "$@"; }
# claim LABEL command...: the command exits 0 (its output shown), else a failure
claim() {
    local label=$1; shift
    local o; o=$("$@" 2>&1); local rc=$?
    [ -n "$o" ] && echo "$o" | sed 's/^/  /'
    [ $rc = 0 ] && ok "$label" || fail "$label"
}
small_run_setup "$work" || { finish; exit 1; }
sed -i -e 's/^n_layer = 1/n_layer = 2/' -e 's/^steps = 20/steps = 3/' "$work/t.ini"
python3 -c "import numpy as np; np.random.seed(1); np.random.randint(0, 256, 2 * 16).astype('<i4').tofile('$work/tok')"
train() { # OUT [--set ...]: train t.ini into OUT; the run's output in OUT.log
    local out=$1; shift
    "$CTRAIN" train "$work/t.ini" --set run.out_dir="$out" "$@" > "$out.log" 2>&1 \
        || fail "train $out: $(tail -3 "$out.log")"
}
export_to() { # SRC OUT ARGS...: export, output in OUT.log
    local src=$1 out=$2; shift 2
    "$CTRAIN" export "$src" --out "$out" "$@" > "$out.log" 2>&1 || fail "export $src: $(tail -3 "$out.log")"
}
LLAMA=(--set model.norm=rmsnorm --set model.mlp=swiglu --set model.pos=rope --set model.bias=false
       --set model.tie_embeddings=false --set model.init=open_lm)

# --- 1. reassembly: world 2 full_shard, world 1; both checkpoint the initial weights ---------
train "$work/w2" --set comm.world_size=2 --set strategy.plugin=full_shard \
    --set run.checkpoint_at_start=true --set run.log_param_norms=true --set run.keep_checkpoints=5
train "$work/w1" --set run.checkpoint_at_start=true --set run.keep_checkpoints=5
[ -d "$work/w2/checkpoints/step_00000000" ] && [ -d "$work/w2/checkpoints/step_00000003" ] \
    && ok "checkpoint_at_start writes step_00000000 before step 1" \
    || fail "checkpoint_at_start: $(ls "$work/w2/checkpoints")"
export_to "$work/w2/checkpoints/step_00000000" "$work/e0w2.bin" --format llmc
export_to "$work/w1/checkpoints/step_00000000" "$work/e0w1.bin" --format llmc
export_to "$work/w2/checkpoints/step_00000000" "$work/e0w2" --format safetensors
export_to "$work/w1/checkpoints/step_00000000" "$work/e0w1" --format safetensors
cmp -s "$work/e0w2.bin" "$work/e0w1.bin" && cmp -s "$work/e0w2/model.safetensors" "$work/e0w1/model.safetensors" \
    && ok "the initial weights saved at world 2 full_shard and at world 1 export the same bytes (llmc and safetensors)" \
    || fail "exports of step 0 at world 2 and world 1 differ"
export_to "$work/w2" "$work/w2c" --format safetensors --target ctrain
# a checkpoint of a GPU run exports here: only the model plugin is needed (no device_cuda.so or
# comm_nccl.so is built on a CPU machine)
cp -r "$work/w2/checkpoints/step_00000003" "$work/gpu_ckpt"
sed -i -e 's/^type = cpu/type = cuda/' -e 's/^plugin = threads/plugin = nccl/' "$work/gpu_ckpt/config.ini"
# the folder's manifest.ini records config.ini's FNV-1a 64: made again for the edited config
python3 - "$work/gpu_ckpt" <<'PY'
import re, sys
d = sys.argv[1]
h = 0xcbf29ce484222325
for x in open(d + "/config.ini", "rb").read():
    h = ((h ^ x) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
m = open(d + "/manifest.ini").read()
open(d + "/manifest.ini", "w").write(re.sub(r"config_fnv1a64 = \w+", "config_fnv1a64 = %016x" % h, m))
PY
export_to "$work/gpu_ckpt" "$work/gpu.bin" --format llmc
grep -q '^type = cuda' "$work/gpu_ckpt/config.ini" && [ -s "$work/gpu.bin" ] \
    && ok "a checkpoint whose config names device cuda and comm nccl exports without those plugins" \
    || fail "export of a GPU run's checkpoint"
claim "world-2 full_shard step 3 (newest of the run folder), ctrain layout = master weights read from the rank files" \
    check ckpt "$work/w2/checkpoints/step_00000003" "$work/w2c"

odd="$work/o' \$(touch X) d"
export_to "$work/w2" "$odd" --format safetensors
[ -s "$odd/model.safetensors" ] && [ ! -e X ] && [ ! -e "$work/X" ] && ok "--out with ' \$( ) and spaces is a plain folder name" \
    || fail "odd --out: $(ls "$work")"

# --- 2. GPT-2: logits of numpy's GPT-2 forward; llm.c's file ---------------------------------
export_to "$work/w2" "$work/g" --format safetensors
export_to "$work/w2" "$work/g.bin" --format llmc
grep -q '"model_type": "gpt2"' "$work/g/config.json" && grep -q '"activation_function": "gelu_new"' "$work/g/config.json" \
    && ok "config.json says gpt2, gelu_new" || fail "config.json: $(cat "$work/g/config.json")"
"$CTRAIN" logits "$work/t.ini" --set model.init_from="$work/g/model.safetensors" \
    --tokens "$work/tok" --out "$work/g.logits" > "$work/gl.log" 2>&1 || fail "logits: $(tail -3 "$work/gl.log")"
claim "GPT-2 export: numpy forward (HF GPT-2 architecture) reproduces ctrain's logits" \
    check forward "$work/g" "$work/tok" "$work/g.logits" 16
claim "llm.c file: header and every tensor equal the safetensors export" check llmc "$work/g.bin" "$work/g"

grep -q '"ctrain_tokenizer": "bytes"' "$work/g/config.json" && [ ! -e "$work/g/tokenizer.model" ] \
    && ok "a byte-level run says so in config.json and copies no tokenizer.model" || fail "bytes tokenizer: $(ls "$work/g")"
# a sentencepiece run: its model travels as tokenizer.model
"$CTRAIN" prepare --text /usr/share/common-licenses/GPL-3 --out "$work/sp" --tokenizer sentencepiece \
    --vocab-size 400 > "$work/sp.log" 2>&1 || fail "prepare sentencepiece: $(tail -2 "$work/sp.log")"
train "$work/s" --set data.train="$work/sp" --set model.vocab_size=400 --set run.steps=1
export_to "$work/s" "$work/sx" --format safetensors
cmp -s "$work/sp/tokenizer.model" "$work/sx/tokenizer.model" && grep -q '"ctrain_tokenizer": "sentencepiece"' "$work/sx/config.json" \
    && ok "a sentencepiece run's model is copied as tokenizer.model" || fail "sentencepiece tokenizer: $(ls "$work/sx")"

# --- 3. Llama: rmsnorm, swiglu, rotate-half rope, untied head --------------------------------
train "$work/l" "${LLAMA[@]}"
export_to "$work/l" "$work/lx" --format safetensors
grep -q '"model_type": "llama"' "$work/lx/config.json" && ok "rmsnorm+swiglu+rope exports as llama" \
    || fail "llama config.json: $(cat "$work/lx/config.json")"
"$CTRAIN" logits "$work/l/config.ini" --set model.init_from="$work/lx/model.safetensors" \
    --tokens "$work/tok" --out "$work/l.logits" > "$work/ll.log" 2>&1 || fail "logits: $(tail -3 "$work/ll.log")"
claim "Llama export: numpy forward (HF Llama architecture, rotate-half RoPE) reproduces ctrain's logits" \
    check forward "$work/lx" "$work/tok" "$work/l.logits" 16

# --- 4. refusals ---------------------------------------------------------------------------
refused() { # LABEL NEEDLE ARGS...: export refuses, exit 1, stderr holds NEEDLE, nothing written
    local label=$1 needle=$2; shift 2
    "$CTRAIN" export "$@" > "$work/r.out" 2> "$work/r.err"; local rc=$?
    if [ $rc = 1 ] && grep -qF -- "$needle" "$work/r.err"; then ok "$label"
    else fail "$label: rc $rc, stderr $(cat "$work/r.err")"; fi
}
refused "llmc refuses a Llama-shaped model, saying why" "llmc expresses GPT-2 only" "$work/l" --format llmc --out "$work/no.bin"
refused "hf-gpt2 refuses a rope model, saying why" "this model has norm = rmsnorm, mlp = swiglu, pos = rope" \
    "$work/l" --format safetensors --target hf-gpt2 --out "$work/no"
refused "hf-llama refuses GPT-2" "hf-llama expresses norm = rmsnorm" "$work/w2" --format safetensors --target hf-llama --out "$work/no"
refused "a folder without checkpoints is refused" "no valid checkpoint in $work/nothing: it is neither a checkpoint folder" "$work/nothing" --format llmc --out "$work/no.bin"
[ ! -e "$work/no.bin" ] && [ -z "$(ls "$work" | grep '\.tmp\.')" ] && ok "a refused export leaves no file nor temporary" \
    || fail "refused exports left: $(ls "$work")"

# --- 5. import: export -> import -> export is bit-identical; two imports train alike ---------
train "$work/is" --set model.init_from="$work/g/model.safetensors" --set run.checkpoint_at_start=true --set run.steps=1 --set run.keep_checkpoints=5
train "$work/il" --set model.init_from="$work/g.bin" --set run.checkpoint_at_start=true --set run.steps=1 --set run.keep_checkpoints=5
export_to "$work/is/checkpoints/step_00000000" "$work/is0.bin" --format llmc
export_to "$work/il/checkpoints/step_00000000" "$work/il0.bin" --format llmc
cmp -s "$work/is0.bin" "$work/g.bin" && cmp -s "$work/il0.bin" "$work/g.bin" \
    && ok "export -> import (safetensors, llm.c) -> export is bit-identical" \
    || fail "a re-export of the imported weights differs from the export"
export_to "$work/is/checkpoints/step_00000001" "$work/is1.bin" --format llmc
export_to "$work/il/checkpoints/step_00000001" "$work/il1.bin" --format llmc
cmp -s "$work/is1.bin" "$work/il1.bin" && compare_series "$work/is" "$work/il" loss 0 "step 1 loss" > /dev/null \
    && ok "one step from the safetensors import = one step from the llm.c import, bit for bit (loss, weights)" \
    || fail "one step after the two imports differs"
# the original run from its step 0 export: AdamW state and data position are those of step 0, so
# the imported run must retrace the original one bit for bit (its own random init differs:
# init = open_lm, so an ignored init_from shows)
train "$work/i0" --set model.init_from="$work/e0w1.bin" --set model.init=open_lm --set run.keep_checkpoints=5
export_to "$work/i0" "$work/i0.bin" --format llmc
export_to "$work/w1" "$work/w1.bin" --format llmc
cmp -s "$work/i0.bin" "$work/w1.bin" && compare_series "$work/i0" "$work/w1" loss 0 "loss" > /dev/null \
    && compare_series "$work/i0" "$work/w1" grad_norm 0 "grad_norm" > /dev/null \
    && ok "a run imported from the original's step-0 export retraces its 3 steps bit for bit (loss, grad norm, weights)" \
    || fail "the imported run departs from the original: $(compare_series "$work/i0" "$work/w1" loss 0 loss)"
train "$work/ilx" "${LLAMA[@]}" --set model.init_from="$work/lx/model.safetensors" --set run.checkpoint_at_start=true --set run.steps=1
export_to "$work/ilx/checkpoints/step_00000000" "$work/ilx0" --format safetensors
claim "Llama: export -> import -> export is bit-identical" check same "$work/lx/model.safetensors" "$work/ilx0/model.safetensors"
# today's families: grouped-query attention with llama3 rope scaling (Llama-3), multi-query with
# q/k/v biases and a tied head (Qwen2: written as Qwen2ForCausalLM), Llama's attention_bias and
# mlp_bias; numpy's forward of the transformers architecture on each export gives ctrain's
# logits, and export -> import -> export is bit-identical
GQA=("${LLAMA[@]}" --set model.n_head=4 --set model.n_kv_head=2 --set model.intermediate_size=24)
for v in "l3|llama|--set model.rope_scaling=llama3 --set model.rope_factor=8 --set model.rope_original_max_position=8 --set model.rope_theta=500000" \
         "q2|qwen2|--set model.attn_bias=qkv --set model.tie_embeddings=true --set model.n_kv_head=1" \
         "lb|llama|--set model.bias=true --set model.attn_bias=qkv_o"; do
    IFS='|' read -r name mtype extra <<< "$v"
    read -ra more <<< "$extra"
    train "$work/$name" "${GQA[@]}" "${more[@]}"
    export_to "$work/$name" "$work/${name}x" --format safetensors
    grep -q "\"model_type\": \"$mtype\"" "$work/${name}x/config.json" \
        && ok "$name ($extra) exports as $mtype" || fail "$name config.json: $(cat "$work/${name}x/config.json")"
    "$CTRAIN" logits "$work/$name/config.ini" --set model.init_from="$work/${name}x" \
        --tokens "$work/tok" --out "$work/$name.logits" > "$work/$name.ll.log" 2>&1 || fail "logits: $(tail -3 "$work/$name.ll.log")"
    claim "$name export: numpy forward (transformers' $mtype: GQA, biases, rope scaling) reproduces ctrain's logits" \
        check forward "$work/${name}x" "$work/tok" "$work/$name.logits" 16
    train "$work/i$name" "${GQA[@]}" "${more[@]}" --set model.init_from="$work/${name}x" --set run.checkpoint_at_start=true --set run.steps=1
    export_to "$work/i$name/checkpoints/step_00000000" "$work/i${name}0" --format safetensors
    claim "$name: export -> import -> export is bit-identical" check same "$work/${name}x/model.safetensors" "$work/i${name}0/model.safetensors"
done
# a combination no Hugging Face class expresses: ctrain's names, and back
train "$work/q" --set model.qk_norm=true --set model.norm=gain_only_layernorm
export_to "$work/q" "$work/qx" --format safetensors
grep -q '"format": "ctrain"' "$work/qx/config.json" && grep -q '"qk_norm": true' "$work/qx/config.json" \
    && ok "qk_norm + gain_only_layernorm exports with ctrain's names and every option in config.json" \
    || fail "ctrain config.json: $(cat "$work/qx/config.json")"
train "$work/iq" --set model.qk_norm=true --set model.norm=gain_only_layernorm --set model.init_from="$work/qx/model.safetensors" --set run.checkpoint_at_start=true --set run.steps=1
export_to "$work/iq/checkpoints/step_00000000" "$work/iq0" --format safetensors
claim "ctrain layout: export -> import -> export is bit-identical" check same "$work/qx/model.safetensors" "$work/iq0/model.safetensors"

# --- 6. import refusals: validate names the key and every mismatching tensor ---------------
# the export's folder: its config.json disagrees first, naming the key and both values
sed "/^\[model\]/a init_from = $work/g" "$work/t.ini" > "$work/m.ini"
sed -i 's/^d_model = 16/d_model = 32/' "$work/m.ini"
line=$(grep -n '^init_from' "$work/m.ini" | cut -d: -f1)
"$CTRAIN" validate "$work/m.ini" > "$work/m.out" 2> "$work/m.err"; rc=$?
if [ $rc != 0 ] && grep -qF "$work/m.ini:$line: [model] init_from" "$work/m.err" \
    && grep -qF "d_model = 16 in config.json (n_embd), [model] d_model = 32 ($work/m.ini:" "$work/m.err" \
    && grep -qF "set [model] d_model = 16, or set [model] from_config = true" "$work/m.err"; then
    ok "validate: a config.json that disagrees names FILE:LINE, the key, both values and what to set"
else fail "config.json mismatch: rc $rc: $(cat "$work/m.err")"; fi
# the weights file alone (no config.json beside it): the tensors say it
mkdir -p "$work/gonly" && cp "$work/g/model.safetensors" "$work/gonly/"
sed -i "s|^init_from = .*|init_from = $work/gonly/model.safetensors|" "$work/m.ini"
"$CTRAIN" validate "$work/m.ini" > "$work/m.out" 2> "$work/m.err"; rc=$?
if [ $rc != 0 ] && grep -qF "$work/m.ini:$line: [model] init_from" "$work/m.err" \
    && grep -qF "transformer.wte.weight expected [256, 32], found [256, 16]" "$work/m.err"; then
    ok "validate: a shape mismatch names FILE:LINE, the tensor, the expected and found shapes"
else fail "shape mismatch: rc $rc: $(cat "$work/m.err")"; fi
"$CTRAIN" validate "$work/t.ini" --set model.init_from="$work/missing.safetensors" > /dev/null 2> "$work/m.err"; rc=$?
[ $rc != 0 ] && grep -qF "[model] init_from" "$work/m.err" && grep -qF "missing.safetensors" "$work/m.err" \
    && ok "validate: a missing init_from file is refused" || fail "missing init_from: rc $rc $(cat "$work/m.err")"
printf '\x10\x00\x00\x00\x00\x00\x00\x00{"a": [1, 2}     ' > "$work/bad.safetensors"
"$CTRAIN" validate "$work/t.ini" --set model.init_from="$work/bad.safetensors" > /dev/null 2> "$work/m.err"; rc=$?
[ $rc != 0 ] && [ $rc -lt 128 ] && grep -qF "safetensors header, byte" "$work/m.err" \
    && ok "validate: a damaged header is refused with its byte" || fail "bad header: rc $rc $(cat "$work/m.err")"
# damaged files: the header's length, offsets outside the file, a repeated name, a dtype
python3 - "$work" <<'PY'
import json, struct, sys
d = sys.argv[1]
def st(name, header, data=b"", hlen=None):
    h = json.dumps(header).encode()
    open(f"{d}/{name}", "wb").write(struct.pack("<Q", len(h) if hlen is None else hlen) + h + data)
t = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
st("long.safetensors", {"a": t}, b"\0" * 8, hlen=1 << 20)
st("outside.safetensors", {"a": dict(t, data_offsets=[0, 64])}, b"\0" * 8)
open(f"{d}/dup.safetensors", "wb").write(struct.pack("<Q", 2 * 71 + 3) + b'{"a":' + json.dumps(t).encode().ljust(66) + b',"a":' + json.dumps(t).encode().ljust(66) + b'}' + b"\0" * 8)
st("i64.safetensors", {"transformer.wte.weight": {"dtype": "I64", "shape": [256, 16], "data_offsets": [0, 32768]}}, b"\0" * 32768)
PY
for c in "long|header length 1048576 does not fit the file" "outside|do not hold its shape in F32 or lie outside the file" \
         "dup|a tensor name appears twice" "i64|transformer.wte.weight is I64, not F32, BF16 or F16"; do
    f=${c%%|*}; needle=${c#*|}
    "$CTRAIN" validate "$work/t.ini" --set model.init_from="$work/$f.safetensors" > /dev/null 2> "$work/m.err"; rc=$?
    [ $rc = 1 ] && grep -qF -- "$needle" "$work/m.err" && ok "validate: init_from $f.safetensors refused: $needle" \
        || fail "init_from $f: rc $rc $(cat "$work/m.err")"
done
"$CTRAIN" validate "$work/t.ini" "${LLAMA[@]}" --set model.init_from="$work/g.bin" > /dev/null 2> "$work/m.err"; rc=$?
[ $rc != 0 ] && grep -qF "llm.c GPT-2 model file, which cannot be loaded" "$work/m.err" \
    && ok "validate: an llm.c file into a Llama-shaped model is refused with the reason" \
    || fail "llmc into llama: rc $rc $(cat "$work/m.err")"

# --- 7. log_param_norms: per-tensor gradient norms, reduced over shards ----------------------
train "$work/d2" --set comm.world_size=2 --set strategy.plugin=ddp --set run.log_param_norms=true
msg=$(python3 - "$work/w2/metrics.jsonl" "$work/d2/metrics.jsonl" <<'PY'
import json, math, sys
fs, dd = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
bad = []
for a, b in zip(fs, dd):
    names = [k for k in a if k.startswith("grad_norm/")]
    if len(names) < 10: bad.append(f"step {a['step']}: only {len(names)} per-tensor norms")
    total = math.sqrt(sum(a[k] ** 2 for k in names))
    if abs(total - a["grad_norm"]) > 1e-6 * a["grad_norm"]:
        bad.append(f"step {a['step']}: sqrt(sum of squares) {total} != grad_norm {a['grad_norm']}")
    for k in names:
        if abs(a[k] - b[k]) > 1e-5 * max(b[k], 1e-12):
            bad.append(f"step {a['step']} {k}: full_shard {a[k]} vs ddp {b[k]}")
print("; ".join(bad[:3]) if bad else "")
PY
)
[ -z "$msg" ] && ok "log_param_norms at world 2: full_shard = ddp per tensor (1e-5), and they add up to grad_norm (1e-6)" \
    || fail "log_param_norms: $msg"

finish
