#!/usr/bin/env bash
# test_bpe.sh — GPT-2's byte-level BPE through the real binary: ctrain's ids equal tiktoken's
# and the tokenizers library's on hard text (tests/bpe_check.py: three file formats, ill-formed
# UTF-8, decoding, the tokenizer.json ctrain writes); `ctrain prepare --tokenizer bpe` on two
# threads in small units equals <|endoftext|> + tiktoken's ids of each file whole; a run on
# those shards records the tokenizer, `ctrain sample --prompt` prints text (also from a copied
# run folder), and its export's tokenizer.json gives tiktoken's ids in the tokenizers library;
# a run started from that export with [model] from_config samples after the folder is gone;
# bad tokenizer files and options are refused naming the file (a FIFO without blocking).
# Skipped, saying why, when tiktoken/tokenizers or gpt2.tiktoken cannot be had.
set -u
source "$(dirname "$0")/lib.sh"
ranks="$ROOT/.deps/tokenizers/gpt2.tiktoken"
W=$CT_TMP
if ! python3 -c "import tiktoken, tokenizers, numpy" 2> /dev/null; then
    echo "skip test_bpe: python3 cannot import tiktoken and tokenizers (scripts/install-deps.sh installs them from PyPI)"
    ct_summary
    exit 0
fi
if [ ! -f "$ranks" ] && ! "$ROOT/scripts/get-gpt2-tokenizer.sh" > /dev/null 2>&1; then
    echo "skip test_bpe: $ranks is missing and PyPI cannot be reached (scripts/get-gpt2-tokenizer.sh)"
    ct_summary
    exit 0
fi

# ---- 1. id for id with the references ------------------------------------------------------
if python3 "$ROOT/tests/bpe_check.py" "$CTRAIN" "$ranks" "$W/check" > "$W/check.log" 2>&1; then
    ct_pass "ctrain's BPE = tiktoken and tokenizers, id for id (ranks file, tokenizer.json, vocab.json + merges.txt)"
else
    ct_fail bpe_check "$(grep -E 'MISMATCH|bpe_check' "$W/check.log" | head -8)"
fi
grep '^bpe_check:' "$W/check.log" | sed 's/^/  /'

# ---- 2. prepare: streamed on two threads, in small units = each file whole ------------------
python3 - "$W" <<'PY'
import random, sys
r = random.Random(5)
s = "".join(open(p, encoding="utf-8").read() for p in
            ["/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0"])
extra = ["café 東京 😀 ", "it's ", "  \n\n", "\t123 456\n", "naïve—résumé ", "\u3000\u00a0", "x" * 300]
out = []
for i in range(0, len(s), 500):
    out += [s[i:i + 500], r.choice(extra)]
open(sys.argv[1] + "/a.txt", "w", encoding="utf-8").write("".join(out))
open(sys.argv[1] + "/b.txt", "wb").write(b"second file \xff\xfe with bad bytes\n" * 50)
PY
ct_run "$CTRAIN" prepare "$W/a.txt" "$W/b.txt" --out "$W/data" --tokenizer bpe \
    --tokenizer-file "$ranks" --threads 2 --unit-bytes 3000 --val-fraction 0.1 --quiet
msg=$(python3 - "$W" "$ranks" <<'PY'
import glob, sys
import numpy as np, tiktoken, tiktoken.load, tiktoken_ext.openai_public as op
w, ranks = sys.argv[1:3]
r = tiktoken.load.load_tiktoken_bpe(ranks)
op.data_gym_to_mergeable_bpe_ranks = lambda *a, **k: r
enc = tiktoken.Encoding(**op.gpt2())
got = np.concatenate([np.fromfile(p, dtype="<u2", offset=1024)
                      for p in sorted(glob.glob(w + "/data/train_*.bin"))])
val = np.concatenate([np.fromfile(p, dtype="<u2", offset=1024)
                      for p in sorted(glob.glob(w + "/data/val_*.bin"))])
want_files = [[50256] + enc.encode_ordinary(open(w + f, "rb").read().decode("utf-8", "replace"))
              for f in ("/a.txt", "/b.txt")]
# each file's last tenth (of its tokens) went to val: rebuild the file order
n_val = [round(0.1 * len(f)) for f in want_files]
want_train = want_files[0][:len(want_files[0]) - n_val[0]] + want_files[1][:len(want_files[1]) - n_val[1]]
want_val = want_files[0][len(want_files[0]) - n_val[0]:] + want_files[1][len(want_files[1]) - n_val[1]:]
print("ok" if list(got) == want_train and list(val) == want_val else
      "differ: %d/%d train, %d/%d val tokens" % (len(got), len(want_train), len(val), len(want_val)),
      sum(map(len, want_files)))
PY
)
if [ "$ct_rc" = 0 ] && [ "${msg%% *}" = ok ]; then
    ct_pass "prepare --tokenizer bpe: two threads, 3000-byte units = <|endoftext|> + tiktoken's ids of each file whole (${msg#* } tokens)"
else ct_fail prepare_bpe "rc $ct_rc: $ct_err $msg"; fi
grep -q '^tokenizer = bpe$' "$W/data/meta.ini" && grep -q '^tokenizer_model = tokenizer.tiktoken$' "$W/data/meta.ini" \
    && grep -q '^eot_token = 50256$' "$W/data/meta.ini" && grep -q '^vocab_size = 50257$' "$W/data/meta.ini" \
    && cmp -s "$ranks" "$W/data/tokenizer.tiktoken" \
    && ct_pass "meta.ini records the BPE tokenizer (bpe, tokenizer.tiktoken copied, eot 50256, vocab 50257)" \
    || ct_fail meta_ini "$(cat "$W/data/meta.ini" | head -12)"

# ---- 3. train, sample text, a copied run folder, export -------------------------------------
cat > "$W/b.ini" <<EOF
[run]
name = b
out_dir = $W/run
steps = 4
log_every = 2
[data]
train = $W/data/train_*.bin
batch_size = 2
seq_len = 16
[model]
plugin = gpt
n_layer = 1
n_head = 2
d_model = 16
seq_len = 16
[device]
threads = 1
EOF
ct_run "$CTRAIN" train "$W/b.ini"
[ "$ct_rc" = 0 ] && grep -q '^kind = bpe$' "$W/run/tokenizer.ini" && cmp -s "$ranks" "$W/run/tokenizer.tiktoken" \
    && ct_pass "a run on BPE shards records its tokenizer (tokenizer.ini kind = bpe, tokenizer.tiktoken)" \
    || ct_fail run_tokenizer "rc $ct_rc: $ct_err"
ct_run "$CTRAIN" sample "$W/run" --prompt "Hello" --tokens 6 --greedy
greedy=$ct_out
[ "$ct_rc" = 0 ] && [ -n "$ct_out" ] && ! grep -q '[0-9] [0-9]' "$CT_TMP/out" \
    && ct_pass "ctrain sample RUN --prompt Hello prints text (\"$(echo "$ct_out" | head -1 | cut -c1-30)\")" \
    || ct_fail sample_text "rc $ct_rc: $ct_err / $ct_out"
cp -r "$W/run" "$W/copy" && mv "$W/data" "$W/data.moved"
ct_run "$CTRAIN" sample "$W/copy" --prompt "Hello" --tokens 6 --greedy
[ "$ct_rc" = 0 ] && [ "$ct_out" = "$greedy" ] \
    && ct_pass "a copied run folder samples the same text with the data gone" \
    || ct_fail sample_copy "rc $ct_rc: $ct_err"
mv "$W/data.moved" "$W/data"
ct_run "$CTRAIN" export "$W/run" --format safetensors --out "$W/x/y/z"
msg=$(python3 - "$W/x/y/z" "$ranks" <<'PY'
import json, sys
import tiktoken, tiktoken.load, tiktoken_ext.openai_public as op
from tokenizers import Tokenizer
d, ranks = sys.argv[1:3]
r = tiktoken.load.load_tiktoken_bpe(ranks)
op.data_gym_to_mergeable_bpe_ranks = lambda *a, **k: r
enc = tiktoken.Encoding(**op.gpt2())
text = open("/usr/share/common-licenses/GPL-3", encoding="utf-8").read()[:6000] + " café 東京 😀 it's"
tk = Tokenizer.from_file(d + "/tokenizer.json")
cfg = json.load(open(d + "/config.json"))
ok = tk.encode(text).ids == enc.encode_ordinary(text) and cfg["bos_token_id"] == 50256 \
    and cfg["eos_token_id"] == 50256 and cfg["pad_token_id"] is None
print("ok" if ok else "differ: bos %s eos %s" % (cfg.get("bos_token_id"), cfg.get("eos_token_id")))
PY
)
[ "$ct_rc" = 0 ] && [ "$msg" = ok ] && [ -f "$W/x/y/z/vocab.json" ] && [ -f "$W/x/y/z/merges.txt" ] \
    && [ -f "$W/x/y/z/tokenizer_config.json" ] \
    && ct_pass "export --out x/y/z (parents created): tokenizer.json gives tiktoken's ids in the tokenizers library; bos/eos 50256, pad null" \
    || ct_fail export_tokenizer "rc $ct_rc: $ct_err $msg"

# a run started from that export folder with from_config (its config.json fills [model]), then
# sampled with the folder gone: the checkpoint's weights are what count
cat > "$W/c.ini" <<EOF
[run]
name = c
out_dir = $W/run2
[data]
train = $W/data/train_*.bin
batch_size = 2
seq_len = 16
[model]
plugin = gpt
init_from = $W/x/y/z
from_config = true
[device]
threads = 1
EOF
ct_run "$CTRAIN" validate "$W/c.ini"
filled=$(grep -c "; $W/x/y/z/config.json" "$CT_TMP/out")
ct_run "$CTRAIN" train "$W/c.ini" --set run.steps=2
rc1=$ct_rc
mv "$W/x" "$W/x.gone"
ct_run "$CTRAIN" sample "$W/run2" --prompt "Hello" --tokens 4 --greedy
[ "$rc1" = 0 ] && [ "$ct_rc" = 0 ] && [ "$filled" -ge 5 ] \
    && ct_pass "from_config fills [model] from an export's config.json ($filled keys); the run samples with the folder gone" \
    || ct_fail from_config_run "validate filled $filled keys; train rc $rc1; sample rc $ct_rc: $ct_err"
mv "$W/x.gone" "$W/x"

# ---- 4. refusals ----------------------------------------------------------------------------
ct_expect_failure "prepare --tokenizer bpe without --tokenizer-file says what to give" \
    "--tokenizer bpe needs --tokenizer-file FILE" "$CTRAIN" prepare "$W/a.txt" --out "$W/r1" --tokenizer bpe
printf 'YQ== 0\nnot base64 here 1\n' > "$W/bad.tiktoken"
ct_expect_failure "a damaged ranks file is refused naming its line" "bad.tiktoken:2:" \
    "$CTRAIN" prepare "$W/a.txt" --out "$W/r2" --tokenizer bpe --tokenizer-file "$W/bad.tiktoken"
mkfifo "$W/fifo.tiktoken"
ct_expect_failure "a FIFO as --tokenizer-file is refused without blocking" "is a FIFO (named pipe), not a regular file" \
    timeout 20 "$CTRAIN" prepare "$W/a.txt" --out "$W/r3" --tokenizer bpe --tokenizer-file "$W/fifo.tiktoken"
ct_expect_failure "--vocab-size with bpe is refused (the file decides)" "a BPE tokenizer's vocabulary is its file's" \
    "$CTRAIN" prepare "$W/a.txt" --out "$W/r4" --tokenizer bpe --tokenizer-file "$ranks" --vocab-size 1000
ct_summary
