#!/usr/bin/env bash
# test_vocab32.sh — a vocabulary of Llama-3's size (V = 128,256) end to end through the real
# binary: the Llama-3-shaped fixture tokenizer (tests/tokenizers/llama3.tokenizer.json) padded
# to 128,000 vocabulary entries with its special tokens at 128000..128255, as Llama-3's file
# has them; `ctrain prepare` picks 32-bit shards (version 2, meta.ini token_bytes = 4) whose
# tokens are <|end_of_text|> (128001) + the file's ids; a tiny model (C = 16) trains on them
# from a first loss of ln(V), `what-if` replays its head, `sample` prints text (with --specials
# a special token in the prompt is one id) and `export` writes a tokenizer.json that gives the
# same ids. A 16-bit vocabulary still gets version 1.
# Hostile 32-bit shards: truncated, a header whose width does not match its size or meta.ini,
# a token >= V, a FIFO — each refused naming the file (and the position), without blocking.
set -u
source "$(dirname "$0")/lib.sh"
ct_need_ctrain
W=$CT_TMP
FX="$ROOT/tests/tokenizers/llama3.tokenizer.json"

# ---- 1. the tokenizer and the shards -------------------------------------------------------
python3 - "$FX" "$W/llama3_128k.json" <<'PY'
import json, sys
src, dst = sys.argv[1:3]
d = json.load(open(src, encoding="utf-8"))
v = d["model"]["vocab"]
n = len(v)
for i in range(n, 128000):  # unused entries, as a real 128,000-entry vocabulary has used ones
    v["<pad%d>" % i] = i
names = [t["content"] for t in d["added_tokens"]]
names += ["<|reserved_special_token_%d|>" % k for k in range(3, 3 + 256 - len(names))]
d["added_tokens"] = [{"id": 128000 + k, "content": c, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True}
                     for k, c in enumerate(names)]
json.dump(d, open(dst, "w", encoding="utf-8"), ensure_ascii=False)
PY
ct_run "$CTRAIN" prepare /usr/share/common-licenses/GPL-3 --out "$W/data" --tokenizer bpe \
    --tokenizer-file "$W/llama3_128k.json" --val-fraction 0.1 --threads 2 --unit-bytes 4000
prep_rc=$ct_rc
prep_out=$ct_out
ct_run "$CTRAIN" tokenize "$W/llama3_128k.json" /usr/share/common-licenses/GPL-3
msg=$(python3 - "$W/data" "$CT_TMP/out" <<'PY'
import glob, struct, sys
d, ids = sys.argv[1:3]
toks, versions = [], set()
for split in ("train", "val"):
    for p in sorted(glob.glob("%s/%s_*.bin" % (d, split))):
        b = open(p, "rb").read()
        magic, version, n = struct.unpack("<3i", b[:12])
        versions.add(version)
        assert magic == 20240520 and len(b) == 1024 + 4 * n, (p, magic, len(b), n)
        toks += struct.unpack("<%dI" % n, b[1024:])
want = [128001] + [int(x) for x in open(ids).read().split()]
print("ok" if toks == want and versions == {2} else "differ", len(toks), sorted(versions),
      sum(t >= 65536 for t in toks))
PY
)
set -- $msg
if [ "$prep_rc" = 0 ] && [ "$1" = ok ] && grep -q '^token_bytes = 4$' "$W/data/meta.ini" \
    && grep -q '^vocab_size = 128256$' "$W/data/meta.ini" && grep -q '^eot_token = 128001$' "$W/data/meta.ini" \
    && grep -q 'of uint32 tokens' <<< "$prep_out"; then
    ct_pass "prepare, V = 128,256: version-2 shards (uint32) = <|end_of_text|> 128001 + the file's ids ($2 tokens; meta.ini token_bytes = 4)"
else ct_fail prepare_v2 "rc $prep_rc: $prep_out $ct_err $msg $(grep -E 'token_bytes|vocab' "$W/data/meta.ini" 2>/dev/null)"; fi
ct_run "$CTRAIN" prepare /usr/share/common-licenses/GPL-3 --out "$W/bytes" --tokenizer bytes --quiet
[ "$ct_rc" = 0 ] && grep -q '^token_bytes = 2$' "$W/bytes/meta.ini" \
    && [ "$(od -An -tu4 -j4 -N4 "$W/bytes/train_000000.bin" | tr -d ' ')" = 1 ] \
    && ct_pass "a 16-bit vocabulary (bytes) still gets llm.c's version 1 (token_bytes = 2)" \
    || ct_fail prepare_v1 "rc $ct_rc: $ct_err"

# ---- 2. train, what-if, sample, export -----------------------------------------------------
cat > "$W/t.ini" <<EOF
[run]
name = v32
out_dir = $W/run
steps = 4
seed = 7
log_every = 1
checkpoint_every = 2
[data]
train = $W/data
val = $W/data
batch_size = 2
seq_len = 16
[model]
plugin = gpt
n_layer = 1
n_head = 2
d_model = 16
seq_len = 16
vocab_size = 128256
[optim]
lr = 3e-3
warmup = 1
[device]
threads = 2
EOF
ct_run "$CTRAIN" train "$W/t.ini"
msg=$(python3 - "$W/run/metrics.jsonl" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
loss = [r["loss"] for r in rows if "loss" in r and r.get("step")]
ok = len(loss) >= 4 and abs(loss[0] - math.log(128256)) < 0.3 and all(math.isfinite(x) for x in loss)
print("ok" if ok else "bad", " ".join("%.4f" % x for x in loss))
PY
)
[ "$ct_rc" = 0 ] && [ "${msg%% *}" = ok ] \
    && ct_pass "train, V = 128,256 (C = 16): losses ${msg#ok } from ln(V) = 11.76" \
    || ct_fail train "rc $ct_rc: ${ct_err:0:600} $msg"
ct_run timeout -k 5 120 "$CTRAIN" what-if "$W/run/checkpoints/step_00000002" --world-sizes 2 \
    --policies pure_bf16 --rows 64
[ "$ct_rc" = 0 ] && grep -q pure_bf16 "$CT_TMP/out" \
    && ct_pass "what-if replays the head of a 128,256-token run from its 32-bit shards" \
    || ct_fail whatif "rc $ct_rc: ${ct_err:0:400}"
ct_run "$CTRAIN" sample "$W/run" --prompt "The GNU" --tokens 6 --greedy
[ "$ct_rc" = 0 ] && [ -n "$ct_out" ] \
    && ct_pass "sample --prompt prints text from the 128,256-token run (\"$(head -c 40 <<< "$ct_out" | tr -d '\n')\")" \
    || ct_fail sample "rc $ct_rc: $ct_err"
# --specials: the chat marker is one id (the prompt fits the context of 16), else 18 ids of text
ct_run "$CTRAIN" sample "$W/run" --prompt "<|begin_of_text|>The" --tokens 3 --greedy --specials
sp_rc=$ct_rc
ct_run "$CTRAIN" sample "$W/run" --prompt "<|begin_of_text|>The" --tokens 3 --greedy
[ "$sp_rc" = 0 ] && [ "$ct_rc" != 0 ] && grep -q "the prompt is 18 tokens" "$CT_TMP/err" \
    && ct_pass "sample --specials: <|begin_of_text|> in the prompt is one id (without it, 18 ids of text)" \
    || ct_fail sample_specials "rc $sp_rc / $ct_rc: $ct_err"
ct_run "$CTRAIN" export "$W/run" --format safetensors --out "$W/export"
exp_rc=$ct_rc
printf '<|begin_of_text|>The GNU General Public License 123456<|eot_id|>' > "$W/chat.txt"
ct_run "$CTRAIN" tokenize "$W/llama3_128k.json" --specials "$W/chat.txt"
want=$ct_out
ct_run "$CTRAIN" tokenize "$W/export/tokenizer.json" --specials "$W/chat.txt"
if [ "$exp_rc" = 0 ] && [ "$ct_out" = "$want" ] && [ "${want%% *}" = 128000 ] \
    && grep -q '"vocab_size": 128256' "$W/export/config.json" && grep -q '"Split"' "$W/export/tokenizer.json"; then
    ct_pass "export: config.json vocab_size 128256; its tokenizer.json (Split kept) gives the same ids ($want)"
else ct_fail export "rc $exp_rc: $ct_err / '$ct_out' vs '$want'"; fi

# ---- 3. hostile 32-bit shards --------------------------------------------------------------
# run_on NAME DATA_DIR NEEDLE: training on DATA_DIR fails within 60 s, no crash, stderr holds
# NEEDLE (fixed string)
run_on() {
    local name=$1 data=$2 needle=$3
    sed -e "s#^train = .*#train = $data#" -e "s#^val = .*#val =#" -e "s#^out_dir = .*#out_dir = $W/r_$name#" \
        "$W/t.ini" > "$W/$name.ini"
    ct_run timeout -k 5 60 "$CTRAIN" train "$W/$name.ini"
    if [ "$ct_rc" -eq 124 ] || [ "$ct_rc" -eq 137 ]; then ct_fail "$name" "hung"; return; fi
    if [ "$ct_rc" -eq 0 ] || [ "$ct_rc" -ge 128 ]; then ct_fail "$name" "rc $ct_rc: ${ct_err:0:400}"; return; fi
    if ! grep -qF -- "$needle" "$CT_TMP/err"; then ct_fail "$name" "stderr lacks \"$needle\": ${ct_err:0:600}"; return; fi
    ct_pass "$name: $(grep -F -- "$needle" "$CT_TMP/err" | head -1 | cut -c1-150)..."
}
mkdir -p "$W/cut" "$W/width" "$W/above" "$W/fifo"
cp "$W/data/train_000000.bin" "$W/cut/train_000000.bin"
truncate -s -2 "$W/cut/train_000000.bin"
run_on truncated_v2 "$W/cut" "train_000000.bin: header says"
grep -qF "the file is truncated" "$CT_TMP/err" || ct_fail truncated_v2_why "$(head -c 300 "$CT_TMP/err")"
cp "$W/data/train_000000.bin" "$W/data/meta.ini" "$W/width/"
sed -i 's/^token_bytes = 4$/token_bytes = 2/' "$W/width/meta.ini"
run_on width_meta "$W/width" "says 4-byte tokens but its meta.ini"
cp "$W/data/train_000000.bin" "$W/width/train_000000.bin.v1"
printf '\001\000\000\000' | dd of="$W/width/train_000000.bin.v1" bs=1 seek=4 conv=notrunc status=none
mv "$W/width/train_000000.bin.v1" "$W/width/train_000000.bin"; rm -f "$W/width/meta.ini"
run_on width_header "$W/width" "the header's version does not match the tokens written"
python3 - "$W/above/train_000000.bin" <<'PY'
import struct, sys
toks = [(i * 7919) % 128256 for i in range(33)]  # two windows of 16+1: one global batch
toks[27] = 130000
open(sys.argv[1], "wb").write(struct.pack("<256i", 20240520, 2, len(toks), *([0] * 253)) +
                               struct.pack("<%dI" % len(toks), *toks))
PY
# the first batch deals both windows: the one holding position 27 is refused as it is read
run_on token_above_v "$W/above" "train_000000.bin: token 130000 at position 27 is >= the model's vocab_size 128256"
cp "$W/above/train_000000.bin" "$W/fifo/train_000000.bin"
python3 -c "import struct,sys; open(sys.argv[1],'wb').write(struct.pack('<256i',20240520,2,0,*([0]*253)))" "$W/fifo/train_000000.bin"
mkfifo "$W/fifo/train_000001.bin"
run_on fifo_shard "$W/fifo" "train_000001.bin"
ct_summary
