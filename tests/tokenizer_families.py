#!/usr/bin/env python3
"""tokenizer_families.py — byte-level BPE tokenizers of the families' shapes, built with the
tokenizers library (no hub), against ctrain's ids.

usage: tokenizer_families.py check CTRAIN WORKDIR
       tokenizer_families.py fixture OUTDIR

Each family is its published pre-tokenizer (the Split regex quoted from its tokenizer.json, then
ByteLevel without its regex), its normalizer (Qwen2: NFC), its special tokens (added_tokens with
special=true after the trained vocabulary, as the families have them) and a merge table trained
here by the library's BpeTrainer on real text (Debian's /usr/share/common-licenses):

  gpt2-split  GPT-2's pattern written as a Split            <|endoftext|>
  llama3      Llama-3's pattern (digits in threes), ignore_merges true
                                                             <|begin_of_text|>, <|end_of_text|>,
                                                             <|start_header_id|>, ... <|eot_id|>
  qwen2       Qwen2's pattern (one digit a piece), NFC        <|endoftext|>, <|im_start|>,
                                                             <|im_end|>
  other-split a pattern of no family that leaves gaps          <|endoftext|>, <s>
  string-split a Split on the literal text " "                  <|endoftext|>
  smollm      Digits (one digit a piece), then ByteLevel with GPT-2's regex
                                                             <|endoftext|>, <|im_start|>,
                                                             <|im_end|>
  digit-runs  Digits (a run of digits a piece), then the same  <|endoftext|>

check: ctrain encodes the hard texts of tests/bpe_check.py (accents, CJK, emoji, code,
whitespace runs, digits, contractions, control bytes, long runs, ill-formed UTF-8, random mixes,
real text) plus texts with special tokens and NFC cases; expected ids are the library's
encode of bytes.decode("utf-8", errors="replace"): with `ctrain tokenize --specials` against the
tokenizer itself, without it against the same file with no added tokens (special text is then
ordinary). Also the tokenizer.json ctrain writes (`--hf-out`) read back by the library. Prints
the counts per family; exits 1 on any mismatch.

fixture: writes OUTDIR/llama3.tokenizer.json, OUTDIR/qwen2.tokenizer.json and
OUTDIR/smollm.tokenizer.json (vocabularies of 600 trained tokens, the special tokens after them) and OUTDIR/expected.txt (for each, the ids
of a set of texts with and without --specials), the test data of
tests/cli/test_tokenizer_fixture.sh, which checks ctrain's C path without Python libraries
(tests/cli/test_vocab32.sh pads the llama3 one to Llama-3's 128,256 ids).
"""
import json
import os
import random
import subprocess
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# The Split patterns as the families' tokenizer.json files publish them.
GPT2_PATTERN = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                   "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>",
                   "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
                   "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
FAMILIES = {
    "gpt2-split": dict(pattern=GPT2_PATTERN, nfc=False, ignore_merges=False,
                       specials=["<|endoftext|>"]),
    "llama3": dict(pattern=LLAMA3_PATTERN, nfc=False, ignore_merges=True,
                   specials=LLAMA3_SPECIALS),
    "qwen2": dict(pattern=QWEN2_PATTERN, nfc=True, ignore_merges=False,
                  specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"]),
    # any other Split regex: one that leaves gaps (each gap a piece of its own, as Isolated
    # makes it) and that ctrain knows no cut places of
    "other-split": dict(pattern=r"\p{L}+|\p{N}{1,2}|[.,;:!?]", nfc=False, ignore_merges=False,
                        specials=["<|endoftext|>", "<s>"]),
    # a Split on literal text ({"String": " "}), not a regex
    "string-split": dict(pattern=" ", literal=True, nfc=False, ignore_merges=False,
                         specials=["<|endoftext|>"]),
    # SmolLM's (and StarCoder's): Digits with one digit a piece, then ByteLevel with GPT-2's
    # regex; and the same with Digits' default (a run of digits a piece)
    "smollm": dict(digits=True, nfc=False, ignore_merges=False,
                   specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"]),
    "digit-runs": dict(digits=False, nfc=False, ignore_merges=False,
                       specials=["<|endoftext|>"]),
}


def training_text():
    """Real English text every Debian machine has, in a fixed order: the merges are the same
    wherever the fixture is regenerated."""
    names = ["GPL-3", "Apache-2.0", "Artistic", "LGPL-2.1", "MPL-2.0", "GPL-2"]
    return [open(os.path.join("/usr/share/common-licenses", n), encoding="utf-8").read()
            for n in names if os.path.isfile(os.path.join("/usr/share/common-licenses", n))]


def build(family, vocab_size):
    f = FAMILIES[family]
    tk = Tokenizer(models.BPE(ignore_merges=f["ignore_merges"]))
    if f["nfc"]:
        tk.normalizer = normalizers.NFC()
    if "digits" in f:
        tk.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=f["digits"]),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    else:
        tk.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(f["pattern"] if f.get("literal") else Regex(f["pattern"]),
                                 behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(training_text(), trainer)
    tk.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in f["specials"]])
    doc = json.loads(tk.to_str())
    doc["model"]["ignore_merges"] = f["ignore_merges"]  # the trainer may drop it
    return doc


def special_texts(family):
    s = FAMILIES[family]["specials"]
    a, b = s[0], s[-1]
    return [t.encode("utf-8") for t in [
        a + "Hello" + b, a + a + b + b, "x" + a + "y " + b + "\n", a[:-1] + " half " + a[1:],
        "<|" + a + "|>", a + " " + a + "\n\n" + b, "text " + b + " more text " + a,
        "\n".join(s), " ".join(s) + "!",
    ]] + [("<|start_header_id|>user<|end_header_id|>\n\nHi there!<|eot_id|>" if family == "llama3"
           else "<|im_start|>user\nHi 123456 there!<|im_end|>\n<|im_start|>assistant\n"
           ).encode("utf-8")]


def nfc_texts():
    return [t.encode("utf-8") for t in [
        "e\u0301 a\u030a n\u0303 \u212b \u1100\u1161\u11a8 Cafe\u0301", "o\u0308\u0304 q\u0307\u0323",
        "'S 'T 'RE 'Ve 'LL 'D it'S DON'T \u017f 's 'ſ", "1234567 12 1 123 ٣٤٥٦ 12a34b",
        "\t\tabc\t.def\v:x\f;y ,z \"q\" (a)[b]{c}", "a.b,c;d!e?f", "x\r\ny\rz\n\r\n w",
    ]]


def hard_texts():
    sys.path.insert(0, HERE)
    import bpe_check  # the GPT-2 test's texts
    rng = random.Random(1234)
    return (bpe_check.hard_texts() + bpe_check.invalid_texts(rng) +
            bpe_check.random_texts(rng, 300) + bpe_check.real_texts())


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        sys.exit("tokenizer_families: %s failed (%d): %s" % (" ".join(cmd[:4]), r.returncode,
                                                               r.stderr.decode(errors="replace")))
    return r.stdout


def ctrain_ids(ctrain, tokfile, files, specials):
    out = run([ctrain, "tokenize", tokfile] + (["--specials"] if specials else []) + files)
    lines = out.decode().split("\n")
    assert len(lines) == len(files) + 1, (len(lines), len(files))
    return [[int(x) for x in l.split()] for l in lines[:-1]]


def write_texts(texts, tdir):
    os.makedirs(tdir, exist_ok=True)
    files = []
    for i, b in enumerate(texts):
        p = os.path.join(tdir, "%04d.txt" % i)
        open(p, "wb").write(b)
        files.append(p)
    return files


def check(ctrain, work):
    os.makedirs(work, exist_ok=True)
    bad_total = 0
    for family in FAMILIES:
        doc = build(family, 1200)
        fdir = os.path.join(work, family)
        os.makedirs(fdir, exist_ok=True)
        tok_path = os.path.join(fdir, "tokenizer.json")
        plain_path = os.path.join(fdir, "plain.tokenizer.json")
        json.dump(doc, open(tok_path, "w", encoding="utf-8"), ensure_ascii=False)
        plain_doc = dict(doc, added_tokens=[])
        json.dump(plain_doc, open(plain_path, "w", encoding="utf-8"), ensure_ascii=False)
        full = Tokenizer.from_file(tok_path)
        plain = Tokenizer.from_file(plain_path)
        texts = hard_texts() + special_texts(family) + nfc_texts()
        files = write_texts(texts, os.path.join(fdir, "texts"))
        written = os.path.join(fdir, "written")
        os.makedirs(written, exist_ok=True)
        run([ctrain, "tokenize", tok_path, "--hf-out", written])
        back = Tokenizer.from_file(os.path.join(written, "tokenizer.json"))
        got_sp = ctrain_ids(ctrain, tok_path, files, True)
        got_plain = ctrain_ids(ctrain, tok_path, files, False)
        got_written = ctrain_ids(ctrain, os.path.join(written, "tokenizer.json"), files, True)
        bad = {"specials": 0, "ordinary": 0, "written": 0, "library reading written": 0}
        n_ids = 0
        for i, b in enumerate(texts):
            s = b.decode("utf-8", errors="replace")
            want_sp = full.encode(s, add_special_tokens=False).ids
            want_plain = plain.encode(s, add_special_tokens=False).ids
            n_ids += len(want_sp)
            for k, got, want in [("specials", got_sp[i], want_sp),
                                 ("ordinary", got_plain[i], want_plain),
                                 ("written", got_written[i], want_sp),
                                 ("library reading written",
                                  back.encode(s, add_special_tokens=False).ids, want_sp)]:
                if got != want:
                    bad[k] += 1
                    first = next((j for j in range(min(len(got), len(want)))
                                  if got[j] != want[j]), min(len(got), len(want)))
                    print("MISMATCH %s %s text %d (%r...): at id %d: got %s, library %s" %
                          (family, k, i, b[:40], first, got[first:first + 5],
                           want[first:first + 5]))
        n_sp = sum(1 for b in texts if any(t.encode() in b for t in FAMILIES[family]["specials"]))
        print("tokenizer_families: %-10s %d texts (%d with special tokens), %d ids; mismatches: "
              "%d with --specials, %d ordinary, %d of ctrain's written tokenizer.json, %d of the "
              "library reading it" % (family, len(texts), n_sp, n_ids, bad["specials"],
                                      bad["ordinary"], bad["written"],
                                      bad["library reading written"]))
        bad_total += sum(bad.values())
    sys.exit(1 if bad_total else 0)


def fixture(out):
    """The committed test data: two small tokenizers and the library's ids of fixed texts."""
    os.makedirs(out, exist_ok=True)
    texts = [t for t in special_texts("llama3") + special_texts("qwen2") + nfc_texts()]
    texts += [b"Hello world! It's 2024.", "東京 😀 café naïve".encode(), b"  a  b\n\n\tc",
              "v1.2.3 x 12,345.67 ٣٤٥ ½ Ⅻ 2²".encode(),
              b"def f(x):\n    return x**2  # 12345\n", b"ok \xf0\x9f bad \xff bytes"]
    lines = ["# tokenizer_families.py fixture: FAMILY MODE TEXT_HEX IDS (the tokenizers "
             "library's, version %s)" % __import__("tokenizers").__version__]
    for family in ["llama3", "qwen2", "smollm"]:
        doc = build(family, 600)
        path = os.path.join(out, family + ".tokenizer.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, indent=1)
            f.write("\n")
        full = Tokenizer.from_file(path)
        plain = Tokenizer.from_str(json.dumps(dict(doc, added_tokens=[])))
        assert [t["id"] for t in doc["added_tokens"]] == list(range(600, 600 + len(
            FAMILIES[family]["specials"]))), "the added tokens follow the vocabulary"
        for b in texts:
            s = b.decode("utf-8", errors="replace")
            for mode, tk in [("specials", full), ("ordinary", plain)]:
                ids = tk.encode(s, add_special_tokens=False).ids
                lines.append("%s %s %s %s" % (family, mode, b.hex(), " ".join(map(str, ids))))
    open(os.path.join(out, "expected.txt"), "w").write("\n".join(lines) + "\n")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "fixture":
        fixture(sys.argv[2])
    else:
        sys.exit(__doc__)
