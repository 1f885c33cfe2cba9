#!/usr/bin/env python3
"""interop_check.py — ctrain's Hugging Face folders against transformers and torch, both ways.

usage: interop_check.py CTRAIN WORKDIR GPT2_TIKTOKEN

Out (ctrain export -> transformers): a GPT-2 run on GPT-2's tokenizer and a Llama-shaped run on
a sentencepiece tokenizer load with from_pretrained with no missing or unexpected keys, their
logits equal ctrain's (`ctrain logits`), greedy generate() equals `ctrain sample --greedy`,
AutoTokenizer gives ctrain's ids, a bf16 export holds the f32 weights rounded to bf16, a bytes
run's tokenizer.json maps bytes to themselves. In (save_pretrained -> [model] init_from): GPT-2
and Llama (rope_theta 5e5) made by transformers give torch's logits in ctrain, sharded and
bf16 files included; a rope_theta that disagrees is refused naming both values, or taken with
from_config; architectures ctrain cannot represent (a head_dim of its own, the exact GELU, dynamic
rope scaling) are refused with the reason. The families with grouped-query attention, rope
scaling and attention biases are tests/families_check.py's.
Prints "ok NAME" / "FAIL NAME: why" lines with the figures, then "N passed, N failed".
"""
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import torch
import transformers
from transformers import (AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel,
                          LlamaConfig, LlamaForCausalLM)

warnings.filterwarnings("ignore")
transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()
torch.set_num_threads(1)

CTRAIN, WORK, RANKS = sys.argv[1:4]
passed = failed = 0


def ok(name, detail=""):
    global passed
    passed += 1
    print("ok %s%s" % (name, "  (%s)" % detail if detail else ""))


def fail(name, why):
    global failed
    failed += 1
    print("FAIL %s: %s" % (name, why))


def claim(name, cond, detail):
    (ok if cond else fail)(name, detail)


def ctrain(*args, check=True):
    r = subprocess.run([CTRAIN] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if check and r.returncode != 0:
        raise RuntimeError("ctrain %s failed (%d): %s" % (args[0], r.returncode,
                                                          r.stderr.decode(errors="replace")[-2000:]))
    return r


def ini(path, out, data, model, steps=10, extra=""):
    open(path, "w").write(f"""[run]
name = i
out_dir = {out}
steps = {steps}
seed = 5
log_every = 5
{extra}
[data]
train = {data}
batch_size = 4
seq_len = 32
[model]
plugin = gpt
{model}
[optim]
lr = 3e-3
warmup = 2
[device]
type = cpu
[device.cpu]
threads = 1
""")


def ctrain_logits(config, tokens, *sets):
    tp, op = os.path.join(WORK, "tok.bin"), os.path.join(WORK, "logits.bin")
    np.asarray(tokens, dtype="<i4").tofile(tp)
    args = ["logits", config, "--tokens", tp, "--out", op, "--force"]
    for s in sets:
        args += ["--set", s]
    r = ctrain(*args)
    return np.fromfile(op, dtype="<f4").reshape(len(tokens), len(tokens[0]), -1), r


def rel(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def torch_logits(model, tokens):
    with torch.no_grad():
        return model(torch.tensor(tokens, dtype=torch.long)).logits.float().numpy()


def loads_cleanly(cls, path, **kw):
    m, info = cls.from_pretrained(path, output_loading_info=True, **kw)
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys",
                                                          "mismatched_keys")}
    return m.eval(), bad


def text_of(path, n):
    return open(path, "rb").read()[:n].decode("utf-8", errors="replace")


def main():
    os.makedirs(WORK, exist_ok=True)
    print("interop: torch %s, transformers %s" % (torch.__version__, transformers.__version__))
    corpus = os.path.join(WORK, "corpus.txt")
    with open(corpus, "wb") as f:
        for p in ["/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0"]:
            f.write(open(p, "rb").read())
    sample = text_of(corpus, 3000)[1000:1400] + " café 東京 it's 2024\n"

    # ---- out: a GPT-2 run on GPT-2's tokenizer ------------------------------------------
    gdata = os.path.join(WORK, "gdata")
    ctrain("prepare", corpus, "--out", gdata, "--tokenizer", "bpe", "--tokenizer-file", RANKS,
           "--quiet")
    gini, grun, gexp = (os.path.join(WORK, x) for x in ("g.ini", "grun", "gexp/a/b"))
    ini(gini, grun, gdata, "n_layer = 2\nn_head = 2\nd_model = 32\nseq_len = 32")
    ctrain("train", gini)
    ctrain("export", grun, "--format", "safetensors", "--out", gexp)
    m, bad = loads_cleanly(GPT2LMHeadModel, gexp)
    claim("export -> GPT2LMHeadModel.from_pretrained: no missing or unexpected keys", not bad,
          bad or "config.json bos/eos %s/%s" % (m.config.bos_token_id, m.config.eos_token_id))
    tok = AutoTokenizer.from_pretrained(gexp)
    want = [int(x) for x in ctrain("tokenize", os.path.join(grun, "tokenizer.tiktoken"),
                                   write(os.path.join(WORK, "s.txt"), sample)).stdout.split()]
    got = tok.encode(sample)
    claim("AutoTokenizer.from_pretrained(export) = ctrain's ids (GPT-2 BPE)", got == want,
          "%s, %d ids" % (type(tok).__name__, len(want)))
    ids = want[:64]
    tokens = [ids[:32], ids[32:64]]
    cl, _ = ctrain_logits(gini, tokens, "model.init_from=" + gexp)
    d = rel(cl, torch_logits(m, tokens))
    claim("GPT-2 export: transformers' logits = ctrain's", d < 1e-5,
          "max |diff| / max |logit| = %.2e" % d)
    prompt = ids[:8]
    r = ctrain("sample", grun, "--ids", "--prompt", " ".join(map(str, prompt)), "--tokens", "20",
               "--greedy")
    ours = [int(x) for x in r.stdout.split()]
    with torch.no_grad():
        theirs = m.generate(torch.tensor([prompt]), max_new_tokens=20, do_sample=False,
                            pad_token_id=50256)[0, 8:].tolist()
    claim("GPT-2: ctrain sample --greedy = generate(do_sample=False)", ours == theirs,
          "%d of 20 tokens equal" % sum(a == b for a, b in zip(ours, theirs)))
    r = ctrain("sample", grun, "--prompt", "Hello", "--tokens", "8", "--greedy")
    claim("ctrain sample RUN --prompt Hello prints text", r.returncode == 0 and len(r.stdout) > 1,
          repr(r.stdout.decode(errors="replace")[:40]))
    bexp = os.path.join(WORK, "gexp16")
    ctrain("export", grun, "--format", "safetensors", "--out", bexp, "--dtype", "bf16")
    mb, bad = loads_cleanly(GPT2LMHeadModel, bexp, dtype=torch.bfloat16)
    same = all(torch.equal(p.to(torch.bfloat16), q) for p, q in
               zip(m.state_dict().values(), mb.state_dict().values()))
    cfg = json.load(open(os.path.join(bexp, "config.json")))
    claim("--dtype bf16: from_pretrained loads the f32 weights rounded to bf16, bit for bit",
          same and not bad and mb.dtype == torch.bfloat16, "torch_dtype %s, %d tensors" %
          (cfg.get("torch_dtype"), len(mb.state_dict())))

    # ---- out: a Llama-shaped run on a sentencepiece tokenizer --------------------------
    sdata = os.path.join(WORK, "sdata")
    ctrain("prepare", corpus, "--out", sdata, "--tokenizer", "sentencepiece", "--vocab-size",
           "400", "--quiet")
    lini, lrun, lexp = (os.path.join(WORK, x) for x in ("l.ini", "lrun", "lexp"))
    ini(lini, lrun, sdata, "n_layer = 2\nn_head = 2\nd_model = 32\nseq_len = 32\nnorm = rmsnorm"
        "\nmlp = swiglu\npos = rope\nbias = false\ntie_embeddings = false\nvocab_size = 400")
    ctrain("train", lini)
    ctrain("export", lrun, "--format", "safetensors", "--out", lexp)
    m, bad = loads_cleanly(LlamaForCausalLM, lexp)
    claim("export -> LlamaForCausalLM.from_pretrained: no missing or unexpected keys", not bad,
          bad or "")
    want = [int(x) for x in ctrain("tokenize", os.path.join(lrun, "tokenizer.model"),
                                   os.path.join(WORK, "s.txt")).stdout.split()]
    try:
        tok = AutoTokenizer.from_pretrained(lexp)
        got = tok.encode(sample, add_special_tokens=False)
        claim("AutoTokenizer.from_pretrained(export) = ctrain's ids (sentencepiece)",
              got == want, "%s, %d ids, %d differ" % (type(tok).__name__, len(want),
                                                      sum(a != b for a, b in zip(got, want)) +
                                                      abs(len(got) - len(want))))
    except Exception as e:  # the converter's own requirements (sentencepiece, protobuf)
        fail("AutoTokenizer.from_pretrained(export) = ctrain's ids (sentencepiece)", repr(e)[:300])
    tokens = [want[:32], want[32:64]]
    cl, _ = ctrain_logits(lini, tokens, "model.init_from=" + lexp)
    d = rel(cl, torch_logits(m, tokens))
    claim("Llama export: transformers' logits = ctrain's", d < 1e-5,
          "max |diff| / max |logit| = %.2e" % d)

    # ---- out: a bytes run --------------------------------------------------------------
    ydata, yini, yrun, yexp = (os.path.join(WORK, x) for x in ("ydata", "y.ini", "yrun", "yexp"))
    ctrain("prepare", corpus, "--out", ydata, "--quiet")
    ini(yini, yrun, ydata, "n_layer = 1\nn_head = 2\nd_model = 16\nseq_len = 32\nvocab_size = 256",
        steps=2)
    ctrain("train", yini)
    ctrain("export", yrun, "--format", "safetensors", "--out", yexp)
    tok = AutoTokenizer.from_pretrained(yexp)
    text = "Hello, wörld\n\t ☃"
    claim("a bytes run's export: AutoTokenizer gives each byte's value",
          tok.encode(text) == list(text.encode()) and tok.decode(list(text.encode())) == text,
          type(tok).__name__)

    # ---- in: transformers' own folders into ctrain ------------------------------------
    torch.manual_seed(0)
    g = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=32, n_positions=32,
                                   vocab_size=300)).eval()
    gdir = os.path.join(WORK, "hf_gpt2")
    g.save_pretrained(gdir)
    hini = os.path.join(WORK, "h.ini")
    ini(hini, os.path.join(WORK, "hrun"), ydata, "from_config = true\ninit_from = " + gdir)
    btok = [list(np.frombuffer(sample.encode()[:32], dtype=np.uint8)),
            list(np.frombuffer(sample.encode()[32:64], dtype=np.uint8))]
    cl, _ = ctrain_logits(hini, btok)
    d = rel(cl, torch_logits(g, btok))
    claim("GPT2LMHeadModel.save_pretrained -> init_from (from_config): torch's logits", d < 1e-5,
          "max |diff| / max |logit| = %.2e" % d)
    torch.manual_seed(2)  # GPT-2 with an MLP width of its own: n_inner is intermediate_size
    gi = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=32, n_positions=32,
                                    vocab_size=300, n_inner=80)).eval()
    gidir = os.path.join(WORK, "hf_gpt2_inner")
    gi.save_pretrained(gidir)
    cl, _ = ctrain_logits(hini, btok, "model.init_from=" + gidir)
    d = rel(cl, torch_logits(gi, btok))
    claim("GPT-2 with n_inner = 80 (2.5 n_embd) -> init_from: torch's logits", d < 1e-5,
          "max |diff| / max |logit| = %.2e" % d)
    torch.manual_seed(1)
    lc = LlamaConfig(hidden_size=64, intermediate_size=256, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=4, vocab_size=300,
                     max_position_embeddings=64, rope_theta=500000.0, rms_norm_eps=1e-5,
                     tie_word_embeddings=False)
    ll = LlamaForCausalLM(lc).eval()
    ldir, sdir, bdir = (os.path.join(WORK, x) for x in ("hf_llama", "hf_llama_sharded",
                                                        "hf_llama_bf16"))
    ll.save_pretrained(ldir)
    ll.save_pretrained(sdir, max_shard_size="100KB")
    want_ll = torch_logits(ll, btok)
    ll.to(torch.bfloat16).save_pretrained(bdir)
    lini2 = os.path.join(WORK, "l2.ini")
    ini(lini2, os.path.join(WORK, "l2run"), ydata, "from_config = true\ninit_from = " + ldir)
    cl, _ = ctrain_logits(lini2, btok)
    d = rel(cl, want_ll)
    claim("LlamaForCausalLM (rope_theta 5e5) save_pretrained -> init_from: torch's logits",
          d < 1e-5, "max |diff| / max |logit| = %.2e" % d)
    shards = sorted(f for f in os.listdir(sdir) if f.endswith(".safetensors"))
    cs, _ = ctrain_logits(lini2, btok, "model.init_from=" + sdir)
    claim("a sharded folder (model.safetensors.index.json) gives the same logits, bit for bit",
          len(shards) > 1 and np.array_equal(cs, cl), "%d shards" % len(shards))
    cb, r = ctrain_logits(lini2, btok, "model.init_from=" + bdir)
    ref = LlamaForCausalLM.from_pretrained(bdir, dtype=torch.float32).eval()
    d = rel(cb, torch_logits(ref, btok))
    said = r.stderr.decode()
    claim("bf16 safetensors are converted on load (said once): torch's f32 logits of them",
          d < 1e-5 and said.count("converted to f32") == 1,
          "max |diff| / max |logit| = %.2e; %s" % (d, said.strip().splitlines()[-1][:120]
                                                   if said.strip() else "nothing said"))
    # a rope_theta that disagrees: refused naming both values, or taken with from_config
    lini3 = os.path.join(WORK, "l3.ini")
    ini(lini3, os.path.join(WORK, "l3run"), ydata, "init_from = %s\nn_layer = 2\nn_head = 4\n"
        "d_model = 64\nvocab_size = 300\nseq_len = 64\nnorm = rmsnorm\nmlp = swiglu\npos = rope\n"
        "bias = false\ntie_embeddings = false\nnorm_eps = 1e-5" % ldir)
    r = ctrain("validate", lini3, check=False)
    err = r.stderr.decode()
    claim("a rope_theta that disagrees is refused, naming both values and the key to set",
          r.returncode != 0 and "rope_theta = 500000 in config.json (" in err and
          "[model] rope_theta = 10000 (default)" in err and "from_config = true" in err,
          err.strip().splitlines()[-1][:200] if err.strip() else "exit %d" % r.returncode)
    r = ctrain("validate", lini3, "--set", "model.from_config=true", check=False)
    out = r.stdout.decode()
    claim("... and taken from config.json with from_config = true (validate shows it)",
          r.returncode == 0 and "rope_theta = 500000" in out and "config.json" in
          [l for l in out.splitlines() if l.startswith("rope_theta")][0],
          [l for l in out.splitlines() if l.startswith("rope_theta")][0][:120] if r.returncode == 0
          else r.stderr.decode()[-200:])
    # architectures the gpt model cannot represent
    for name, model, needle in [
            ("a head_dim other than hidden_size / heads", LlamaForCausalLM(LlamaConfig(
                hidden_size=64, intermediate_size=256, num_hidden_layers=1,
                num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=300)),
             "head_dim = 32"),
            ("the exact GELU", GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=32,
                                                          vocab_size=300,
                                                          activation_function="gelu")),
             "exact (erf) GELU"),
            ("dynamic rope scaling", LlamaForCausalLM(LlamaConfig(
                hidden_size=64, intermediate_size=256, num_hidden_layers=1,
                num_attention_heads=4, vocab_size=300,
                rope_scaling={"rope_type": "dynamic", "factor": 2.0})),
             "rope_type \"dynamic\"")]:
        d = os.path.join(WORK, "refuse_" + name.split()[-1].replace("/", "_"))
        model.save_pretrained(d)
        rini = os.path.join(WORK, "r.ini")
        ini(rini, os.path.join(WORK, "rrun"), ydata, "from_config = true\ninit_from = " + d)
        r = ctrain("validate", rini, check=False)
        err = r.stderr.decode()
        claim("init_from refuses %s, saying why" % name, r.returncode == 1 and needle in err,
              err.strip().splitlines()[-1][:160] if err.strip() else "exit %d" % r.returncode)
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


def write(path, text):
    open(path, "w").write(text)
    return path


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # a step that could not run is a failure with its reason
        import traceback
        traceback.print_exc()
        print("FAIL interop: %s" % repr(e)[:500])
        print("%d passed, %d failed" % (passed, failed + 1))
        sys.exit(1)
