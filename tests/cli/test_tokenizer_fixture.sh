#!/usr/bin/env bash
# test_tokenizer_fixture.sh — Llama-3's, Qwen2's and SmolLM's tokenizer.json shapes through
# ctrain's C path, without Python libraries: tests/tokenizers/ holds three small tokenizers the
# tokenizers library built (Split regex + ByteLevel, Qwen2's NFC, SmolLM's Digits + ByteLevel
# with its regex, special tokens after 600 trained ones)
# and the library's ids of fixed texts (emoji, CJK, decomposed accents,
# contractions in capitals, digit runs, tabs before words, ill-formed UTF-8, chat templates),
# with `tokenize --specials` and without; tests/tokenizer_families.py regenerates them.
# Also: prepare in small units on two threads equals encoding each file whole (the cut places
# of these patterns, on text whose only GPT-2 cut places they forbid; one unit per file for a
# Split pattern of no family); unknown pre-tokenizer, normalizer, Split behavior, added-token flags
# and a regex PCRE2 cannot compile are refused naming the JSON path.
set -u
source "$(dirname "$0")/lib.sh"
ct_need_ctrain
FX="$ROOT/tests/tokenizers"
W=$CT_TMP

# ---- 1. ids equal the library's ------------------------------------------------------------
msg=$(python3 - "$CTRAIN" "$FX" "$W" <<'PY'
import os, subprocess, sys
ctrain, fx, w = sys.argv[1:4]
rows = [l.split(" ", 3) for l in open(os.path.join(fx, "expected.txt")) if not l.startswith("#")]
bad, n_ids, out = 0, 0, []
for fam in ("llama3", "qwen2", "smollm"):
    for mode in ("specials", "ordinary"):
        sel = [r for r in rows if r[0] == fam and r[1] == mode]
        files = []
        for k, r in enumerate(sel):
            p = os.path.join(w, "%s_%s_%03d.txt" % (fam, mode, k))
            open(p, "wb").write(bytes.fromhex(r[2]))
            files.append(p)
        cmd = [ctrain, "tokenize", os.path.join(fx, fam + ".tokenizer.json")] + \
              (["--specials"] if mode == "specials" else []) + files
        got = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if got.returncode:
            print("FAIL", fam, mode, got.stderr.decode()[:300]); sys.exit(0)
        lines = got.stdout.decode().split("\n")[:-1]
        miss = sum(1 for r, l in zip(sel, lines) if l.split() != r[3].split())
        bad += miss + abs(len(lines) - len(sel))
        n_ids += sum(len(r[3].split()) for r in sel)
        out.append("%s %s: %d texts, %d mismatches" % (fam, mode, len(sel), miss))
print("ok" if bad == 0 else "bad", n_ids, "; ".join(out))
PY
)
[ "${msg%% *}" = ok ] && ct_pass "Llama-3, Qwen2 and SmolLM tokenizer.json: ctrain's ids = the tokenizers library's (${msg#ok })" \
    || ct_fail fixture_ids "$msg"

# special tokens: the chat template's markers are single ids with --specials, text without
ct_run "$CTRAIN" tokenize "$FX/llama3.tokenizer.json" --specials - <<< "<|begin_of_text|><|eot_id|>"
[ "$ct_rc" = 0 ] && [ "$ct_out" = "600 609 198" ] \
    && ct_pass "--specials: <|begin_of_text|><|eot_id|> are the added tokens 600 609" \
    || ct_fail specials "rc $ct_rc: '$ct_out' $ct_err"

# ---- 2. prepare in units on threads = each file whole --------------------------------------
python3 - "$W" <<'PY'
import random, sys
r = random.Random(3)
base = open("/usr/share/common-licenses/GPL-3", encoding="utf-8").read()
bits = ["x.y", "\tword", "\vv\ff", "a,b;c", "(a)", "'S 'll it's", "12345678 9", "e\u0301",
        "\u00c5ngstr\u00f6m", "\u6771\u4eac", "\U0001F600", "  \n\n", "\r\nz", "<|im_start|>"]
out = []
for i in range(0, len(base), 400):
    out += [base[i:i + 400], r.choice(bits)]
    if i % 8000 == 0:  # stretches longer than a unit whose only GPT-2 cut places these
        out += ["a.b," * 900, "\tab" * 700, "\n"]  # patterns forbid (".b" and "\tab" are pieces)
open(sys.argv[1] + "/corpus.txt", "w", encoding="utf-8").write("".join(out))
PY
# the fixtures with merges across the places GPT-2's pattern cuts and these do not (".b", ",a",
# "\ta", "\tab" are pieces here): a wrong cut place changes the ids
python3 - "$FX" "$W" <<'PY'
import json, sys
fx, w = sys.argv[1:3]
for fam in ("llama3", "qwen2", "smollm"):
    d = json.load(open("%s/%s.tokenizer.json" % (fx, fam), encoding="utf-8"))
    v, m = d["model"]["vocab"], d["model"]["merges"]
    for k, (a, b) in enumerate([(".", "b"), (",", "a"), ("\u0109", "a"), ("\u0109a", "b")]):
        v[a + b] = 700 + k
        m.append([a, b] if isinstance(m[0], list) else a + " " + b)
    json.dump(d, open("%s/%s.json" % (w, fam), "w", encoding="utf-8"), ensure_ascii=False)
    if fam == "llama3":  # a Split pattern of no family, with gaps: no cut place is claimed
        d["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {"Regex": "\\p{L}+|\\p{N}{1,2}|[.,;]"}
        json.dump(d, open("%s/other.json" % w, "w", encoding="utf-8"), ensure_ascii=False)
PY
for fam in llama3 qwen2 other smollm; do
    ct_run "$CTRAIN" prepare "$W/corpus.txt" --out "$W/d_$fam" --tokenizer bpe \
        --tokenizer-file "$W/$fam.json" --threads 2 --unit-bytes 2000 \
        --val-fraction 0 --quiet
    prc=$ct_rc
    ct_run "$CTRAIN" tokenize "$W/$fam.json" "$W/corpus.txt"
    msg=$(python3 - "$W/d_$fam" "$CT_TMP/out" "$fam" <<'PY'
import glob, struct, sys
d, ids_file, fam = sys.argv[1:4]
got = []
for p in sorted(glob.glob(d + "/train_*.bin")):
    b = open(p, "rb").read()
    magic, version, n = struct.unpack("<3i", b[:12])
    got += struct.unpack("<%d%s" % (n, "H" if version == 1 else "I"), b[1024:])
whole = [int(x) for x in open(ids_file).read().split()]
want_eot = got[0]
print("ok" if got[1:] == whole else "differ", len(got), version, want_eot)
PY
)
    set -- $msg
    if [ "$prc" = 0 ] && [ "$1" = ok ]; then
        ct_pass "prepare $fam: 2 threads, 2000-byte units = <eot> + the file encoded whole ($2 tokens, shard version $3, eot $4)"
    else ct_fail "prepare_$fam" "rc $prc: $ct_err $msg"; fi
done
grep -q '^eot_token = 601$' "$W/d_llama3/meta.ini" && grep -q '^token_bytes = 2$' "$W/d_llama3/meta.ini" \
    && grep -q '^eot_token = 600$' "$W/d_qwen2/meta.ini" \
    && ct_pass "meta.ini: the end-of-text token is Llama-3's <|end_of_text|> (601) or <|endoftext|> (600); 2-byte shards" \
    || ct_fail meta_eot "$(grep -E 'token_bytes|vocab_size|eot' "$W"/d_*/meta.ini)"

# ---- 3. what ctrain does not read is refused naming the JSON path --------------------------
python3 - "$FX/llama3.tokenizer.json" "$W" <<'PY'
import copy, json, sys
src, w = sys.argv[1:3]
doc = json.load(open(src, encoding="utf-8"))
def save(name, change):
    d = copy.deepcopy(doc); change(d)
    json.dump(d, open("%s/%s.json" % (w, name), "w", encoding="utf-8"))
save("pre_digits", lambda d: d["pre_tokenizer"]["pretokenizers"].insert(1, {"type": "Digits", "individual_digits": True}))
save("pre_meta", lambda d: d.__setitem__("pre_tokenizer", {"type": "Metaspace", "replacement": "_"}))
save("norm_nfkc", lambda d: d.__setitem__("normalizer", {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "NFKC"}]}))
save("behavior", lambda d: d["pre_tokenizer"]["pretokenizers"][0].__setitem__("behavior", "MergedWithPrevious"))
save("invert", lambda d: d["pre_tokenizer"]["pretokenizers"][0].__setitem__("invert", True))
save("regex", lambda d: d["pre_tokenizer"]["pretokenizers"][0].__setitem__("pattern", {"Regex": "(?<=a+)b|("}))
save("lstrip", lambda d: d["added_tokens"][3].__setitem__("lstrip", True))
save("bl_regex", lambda d: d["pre_tokenizer"]["pretokenizers"][1].__setitem__("use_regex", True))
# SmolLM's shape (Digits, then ByteLevel with its regex) and what it does not read
doc = json.load(open(src.replace("llama3", "smollm"), encoding="utf-8"))
save("digits_noregex", lambda d: d["pre_tokenizer"]["pretokenizers"][1].__setitem__("use_regex", False))
save("digits_twice", lambda d: d["pre_tokenizer"]["pretokenizers"].insert(0, {"type": "Digits"}))
save("digits_flag", lambda d: d["pre_tokenizer"]["pretokenizers"][0].__setitem__("individual_digits", "yes"))
save("digits_split", lambda d: d["pre_tokenizer"]["pretokenizers"].insert(1, {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Isolated", "invert": False}))
PY
ct_expect_failure refuse_digits "pre_tokenizer.pretokenizers[1].type is Digits" "$CTRAIN" tokenize "$W/pre_digits.json" - <<< "x"
ct_expect_failure refuse_metaspace "pre_tokenizer.type is Metaspace" "$CTRAIN" tokenize "$W/pre_meta.json" - <<< "x"
ct_expect_failure refuse_nfkc "normalizer.normalizers[1].type is NFKC" "$CTRAIN" tokenize "$W/norm_nfkc.json" - <<< "x"
ct_expect_failure refuse_behavior "pre_tokenizer.pretokenizers[0].behavior is MergedWithPrevious" "$CTRAIN" tokenize "$W/behavior.json" - <<< "x"
ct_expect_failure refuse_invert "pre_tokenizer.pretokenizers[0].invert is true" "$CTRAIN" tokenize "$W/invert.json" - <<< "x"
ct_expect_failure refuse_regex "$W/regex.json: PCRE2 cannot compile the pre-tokenizer's pattern" "$CTRAIN" tokenize "$W/regex.json" - <<< "x"
ct_expect_failure refuse_lstrip "added_tokens[3].lstrip is true" "$CTRAIN" tokenize "$W/lstrip.json" - <<< "x"
ct_expect_failure refuse_bytelevel_regex "pre_tokenizer.pretokenizers[1].use_regex is true" "$CTRAIN" tokenize "$W/bl_regex.json" - <<< "x"
ct_expect_failure refuse_digits_noregex "pre_tokenizer.pretokenizers[1].use_regex is false" "$CTRAIN" tokenize "$W/digits_noregex.json" - <<< "x"
ct_expect_failure refuse_digits_twice "pre_tokenizer.pretokenizers[1].type is Digits" "$CTRAIN" tokenize "$W/digits_twice.json" - <<< "x"
ct_expect_failure refuse_digits_flag "pre_tokenizer.pretokenizers[0].individual_digits is not true or false" "$CTRAIN" tokenize "$W/digits_flag.json" - <<< "x"
ct_expect_failure refuse_digits_split "pre_tokenizer.pretokenizers[1].type is Split" "$CTRAIN" tokenize "$W/digits_split.json" - <<< "x"
ct_summary
