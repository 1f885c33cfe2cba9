#!/usr/bin/env python3
"""bpe_check.py — ctrain's byte-level BPE against the references, id for id.

usage: bpe_check.py CTRAIN GPT2_TIKTOKEN WORKDIR

Builds GPT-2's tokenizer three ways from the ranks file: tiktoken's own "gpt2" definition
(its pattern and <|endoftext|>, the ranks read locally), and with the tokenizers library a
Hugging Face tokenizer.json and vocab.json + merges.txt (merges recovered from the ranks the
way Hugging Face converts tiktoken files). ctrain loads each file (`ctrain tokenize`) and
encodes hard texts: accents, CJK, emoji, digits, contractions, whitespace runs, control bytes,
long runs (the heap path), real text, random mixes, ill-formed UTF-8. Expected ids: tiktoken's
encode_ordinary and tokenizers' encode of bytes.decode("utf-8", errors="replace"). Also the
tokenizer.json ctrain writes (`ctrain tokenize --hf-out`), read back by tokenizers, and
ctrain's decode against tiktoken's. Prints the counts; exits 1 on any mismatch.
"""
import json
import os
import random
import subprocess
import sys

import tiktoken
import tiktoken.load
import tiktoken_ext.openai_public as openai_public
from tokenizers import Tokenizer, decoders, models, pre_tokenizers


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + \
        list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def bpe_parts(ranks, token, max_rank):
    parts = [bytes([b]) for b in token]
    while True:
        best, best_rank = None, None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and (best_rank is None or r < best_rank):
                best, best_rank = i, r
        if best_rank is None or best_rank >= max_rank:
            return parts
        parts = parts[:best] + [parts[best] + parts[best + 1]] + parts[best + 2:]


def hf_tokenizer(ranks, with_eot):
    b2u = bytes_to_unicode()
    show = lambda b: "".join(b2u[x] for x in b)
    vocab = {show(t): r for t, r in ranks.items()}
    merges = []
    for t, r in sorted(ranks.items(), key=lambda x: x[1]):
        if len(t) > 1:
            p = bpe_parts(ranks, t, r)
            assert len(p) == 2, (t, p)
            merges.append((show(p[0]), show(p[1])))
    if with_eot:
        vocab["<|endoftext|>"] = len(ranks)
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tk.decoder = decoders.ByteLevel()
    if with_eot:
        from tokenizers import AddedToken
        tk.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    return tk


def hard_texts():
    t = [
        "Hello world! It's 2024.",
        "I'm, you're, he's, they've, we'll, she'd, can't, DON'T, It'S, 's 'll 're 've 'm 'd 't",
        "rock 'n' roll ’s curly and ‘quoted’ — dashes – …",
        "café naïve résumé Ångström façade Zürich e\u0301 n\u0303 a\u030a",
        "東京都は日本の首都です。北京欢迎你！안녕하세요 세계",
        "😀👍🏽👨‍👩‍👧‍👦🇯🇵🇫🇷 ❤️ ✨ 🤖 emoji😀inside",
        "1234567890 3.14159 1,000,000 -42 +7 1e-9 0x1F ٣٤٥ ४५६ Ⅻ Ⅳ ²³ ½ 12:30",
        "a  b   c\t\td\n\n\ne \r\n f\u00a0g\u3000h\u2028i\u0085j   \n  ",
        "   leading and trailing   ",
        " ", "\n", "\n\n", " \n ", "\t \t", "x", "",
        "def f(x):\n    return x**2  # comment\n\n\nclass A:\n\tpass\n",
        "the <|endoftext|> token written as text <|endoftext|>",
        "مرحبا بالعالم 123 — नमस्ते दुनिया — สวัสดีชาวโลก — Привет, мир! — Γειά σου Κόσμε",
        "a\x00b\x01c\x7fd\x1b[0m\x0b\x0c",
        "Dr. Smith's cat's toy's price: $3.50 (USD); e-mail: a.b@c.de; URL: https://x.y/z?q=1&r=2",
        "ALLCAPS WORDS AND MiXeD cAsE, snake_case, camelCase, kebab-case",
        "a" * 5000, " " * 3000, "\n" * 1000, "ab" * 2000, "1234567890" * 300,
        "😀" * 500, "東" * 1500, "aaa bbb " * 400, "!" * 700 + "?" * 300,
    ]
    return [s.encode("utf-8") for s in t]


def invalid_texts(rng):
    t = [b"\xff\xfe", b"abc\x80def", b"\xe2\x82", b"x\xe2\x82y", b"\xc0\xaf", b"\xed\xa0\x80",
         b"\xf0\x9f\x98x", b"\xf4\x90\x80\x80", b"caf\xe9 na\xefve", b"\x80\x80\x80 a",
         b"ok \xf0\x9f\x98\x80 then \xf0\x9f bad", b"\xc3", b"end\xe6\x97"]
    t.append(bytes(rng.randrange(256) for _ in range(3000)))
    t.append(bytes(rng.choice(b"ab \n\x80\xc3\xa9\xe2\x82\xac\xf0\x9f\x98") for _ in range(3000)))
    return t


def random_texts(rng, n):
    pools = [
        "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789",
        " ", "  ", "\n", "\t", "'", ".,;:!?-()[]{}\"/\\@#$%^&*_+=<>|~`",
        "éèêëàâäôöûüçñÅØß", "東京日本語中文字", "한국어", "😀👍🏽🇯🇵✨", "\u00a0\u3000\u2028\u0085\r",
        "٣٤٥४५६²½", "'s", "'ll", "'re", "'ve", "'m", "'d", "'t", "’s",
    ]
    out = []
    for _ in range(n):
        k = rng.randrange(20, 400)
        s = "".join(rng.choice(rng.choice(pools)) for _ in range(k))
        out.append(s.encode("utf-8"))
    return out


def real_texts():
    out = []
    for p in ["/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0",
              "/usr/share/common-licenses/Artistic"]:
        if os.path.isfile(p):
            out.append(open(p, "rb").read())
    return out


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        sys.exit("bpe_check: %s failed (%d): %s" % (" ".join(cmd[:4]), r.returncode,
                                                      r.stderr.decode(errors="replace")))
    return r.stdout


def ctrain_ids(ctrain, tokfile, files):
    out = run([ctrain, "tokenize", tokfile] + files).decode()
    lines = out.split("\n")
    assert len(lines) == len(files) + 1, (len(lines), len(files))
    return [[int(x) for x in l.split()] for l in lines[:-1]]


def main():
    ctrain, ranks_path, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    ranks = tiktoken.load.load_tiktoken_bpe(ranks_path)
    openai_public.data_gym_to_mergeable_bpe_ranks = lambda *a, **k: ranks
    enc = tiktoken.Encoding(**openai_public.gpt2())
    hf_dir = os.path.join(work, "hf")
    os.makedirs(hf_dir, exist_ok=True)
    full = hf_tokenizer(ranks, True)
    full.save(os.path.join(hf_dir, "tokenizer.json"))
    full.model.save(hf_dir)  # vocab.json, merges.txt
    vocab = json.load(open(os.path.join(hf_dir, "vocab.json")))
    if "<|endoftext|>" not in vocab:  # GPT-2's vocab.json lists it
        vocab["<|endoftext|>"] = len(ranks)
        json.dump(vocab, open(os.path.join(hf_dir, "vocab.json"), "w"))
    plain = hf_tokenizer(ranks, False)  # no added tokens: special text is ordinary
    written = os.path.join(work, "written")
    os.makedirs(written, exist_ok=True)
    run([ctrain, "tokenize", ranks_path, "--hf-out", written])
    ctrain_json = Tokenizer.from_file(os.path.join(written, "tokenizer.json"))

    rng = random.Random(1234)
    texts = hard_texts() + invalid_texts(rng) + random_texts(rng, 300) + real_texts()
    files = []
    tdir = os.path.join(work, "texts")
    os.makedirs(tdir, exist_ok=True)
    for i, b in enumerate(texts):
        p = os.path.join(tdir, "%04d.txt" % i)
        open(p, "wb").write(b)
        files.append(p)
    got = {
        "tiktoken file": ctrain_ids(ctrain, ranks_path, files),
        "tokenizer.json": ctrain_ids(ctrain, os.path.join(hf_dir, "tokenizer.json"), files),
        "vocab.json + merges.txt": ctrain_ids(ctrain, os.path.join(hf_dir, "vocab.json"), files),
        "ctrain's tokenizer.json": ctrain_ids(ctrain, os.path.join(written, "tokenizer.json"),
                                              files),
    }
    bad = 0
    counts = {k: [0, 0] for k in got}
    ref_disagree = 0
    ctrain_written_bad = 0
    for i, b in enumerate(texts):
        s = b.decode("utf-8", errors="replace")
        want_tt = enc.encode_ordinary(s)
        want_hf = plain.encode(s, add_special_tokens=False).ids
        if want_tt != want_hf:
            ref_disagree += 1
        if "<|endoftext|>" not in s and ctrain_json.encode(s).ids != want_tt:
            ctrain_written_bad += 1
            print("MISMATCH tokenizers reading ctrain's tokenizer.json, text %d" % i)
        for k, ids in got.items():
            want = want_tt if k == "tiktoken file" else want_hf
            counts[k][0] += 1
            counts[k][1] += len(want)
            if ids[i] != want:
                bad += 1
                first = next((j for j in range(min(len(ids[i]), len(want)))
                              if ids[i][j] != want[j]), min(len(ids[i]), len(want)))
                print("MISMATCH %s text %d (%r...): at id %d: ctrain %s, reference %s" %
                      (k, i, b[:40], first, ids[i][first:first + 5], want[first:first + 5]))
    # decoding: ctrain's text of tiktoken's ids is tiktoken's decode (errors="replace")
    dec_files, dec_want = [], []
    for i, b in enumerate(texts[:60] + [bytes([0xe2])]):
        ids = enc.encode_ordinary(b.decode("utf-8", errors="replace"))
        if i == 60:  # a token holding a lone byte of a character
            ids = [enc.encode_single_token(b"\xe2")]
        p = os.path.join(tdir, "ids%04d.txt" % i)
        open(p, "w").write(" ".join(map(str, ids)))
        dec_files.append(p)
        dec_want.append(enc.decode(ids).encode("utf-8"))
    dec_bad = 0
    for p, want in zip(dec_files, dec_want):
        if run([ctrain, "tokenize", ranks_path, "--decode", p]) != want:
            dec_bad += 1
            print("MISMATCH decode %s" % p)
    for k, (n_texts, n_ids) in counts.items():
        print("bpe_check: %-24s %d texts, %d ids compared" % (k, n_texts, n_ids))
    print("bpe_check: tiktoken and tokenizers disagree on %d of %d texts (references)" %
          (ref_disagree, len(texts)))
    print("bpe_check: %d mismatches, %d decode mismatches of %d, %d texts where tokenizers "
          "reading ctrain's tokenizer.json differs from tiktoken" %
          (bad, dec_bad, len(dec_files), ctrain_written_bad))
    sys.exit(1 if bad or dec_bad or ctrain_written_bad else 0)


if __name__ == "__main__":
    main()
