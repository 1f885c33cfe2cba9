#!/usr/bin/env python3
"""families_check.py — today's checkpoint families through ctrain against transformers and torch.

usage: families_check.py CTRAIN WORKDIR [--table FILE]

For each family — Llama-3-shaped (grouped-query attention, rope_scaling llama3, untied head),
Qwen2-shaped (q/k/v biases without an output bias, tied head, grouped-query), Mistral-shaped
(grouped-query, sliding_window wider than the context), SmolLM-shaped (Llama with a tied head,
3 of 9 key/value heads, an MLP width of its own) — a small random model is built with
transformers (AutoConfig -> from_config -> save_pretrained) and:
  1. `ctrain logits` of the folder ([model] from_config, init_from) = torch's logits
     (max |diff| / max |logit| <= 1e-5);
  2. 10 AdamW steps of `ctrain train` from the folder = 10 steps of torch.optim.AdamW on the
     same batch (the data is exactly one batch of B windows: every step sees the same rows), the
     same lr (constant), betas, eps and weight decay (2-D tensors decay, 1-D do not, as ctrain's
     groups), ctrain's gradient clipping off: the largest parameter difference after 10 steps,
     relative to the largest parameter (<= 1e-4: ten steps of f32 Adam, whose update divides by
     sqrt(v) and so magnifies rounding in tiny gradients);
  3. `ctrain sample --greedy` from the trained run = generate(do_sample=False) of the torch
     model after the same steps, token for token;
  4. `ctrain export` of the run reloads with AutoModelForCausalLM.from_pretrained (no missing or
     unexpected keys, the family's class) and gives ctrain's logits (<= 1e-5).
Prints "ok NAME" / "FAIL NAME: why" lines, then the family table (also written to --table FILE
as Markdown) and "N passed, N failed".
"""
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

warnings.filterwarnings("ignore")
transformers.logging.set_verbosity_error()
torch.set_num_threads(1)

CTRAIN, WORK = sys.argv[1:3]
TABLE = sys.argv[sys.argv.index("--table") + 1] if "--table" in sys.argv else None
B, T, V, STEPS = 4, 32, 320, 10
LR, BETAS, EPS, WD = 1e-3, (0.9, 0.95), 1e-8, 0.1
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


def ctrain(*args):
    r = subprocess.run([CTRAIN] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        raise RuntimeError("ctrain %s failed (%d): %s" % (args[0], r.returncode,
                                                          r.stderr.decode(errors="replace")[-2000:]))
    return r


def rel(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


# family: (name, AutoConfig model_type, its keys, transformers class name expected on reload)
FAMILIES = [
    ("Llama-3", "llama", dict(hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, vocab_size=V,
                              max_position_embeddings=64, rms_norm_eps=1e-5,
                              tie_word_embeddings=False,
                              rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                            "original_max_position_embeddings": 16},
                              rope_theta=500000.0), "LlamaForCausalLM"),
    ("Qwen2", "qwen2", dict(hidden_size=64, intermediate_size=136, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, vocab_size=V,
                            max_position_embeddings=64, rms_norm_eps=1e-6,
                            tie_word_embeddings=True, rope_theta=1000000.0,
                            use_sliding_window=False), "Qwen2ForCausalLM"),
    ("Mistral", "mistral", dict(hidden_size=64, intermediate_size=224, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=1, vocab_size=V,
                                max_position_embeddings=128, rms_norm_eps=1e-5,
                                tie_word_embeddings=False, sliding_window=64,
                                rope_theta=10000.0), "LlamaForCausalLM"),
    ("SmolLM", "llama", dict(hidden_size=72, intermediate_size=192, num_hidden_layers=2,
                             num_attention_heads=9, num_key_value_heads=3, vocab_size=V,
                             max_position_embeddings=64, rms_norm_eps=1e-5,
                             tie_word_embeddings=True, rope_theta=10000.0), "LlamaForCausalLM"),
]


def write_ini(path, out, data, init_from, steps):
    open(path, "w").write(f"""[run]
name = f
out_dir = {out}
steps = {steps}
seed = 5
log_every = 1
checkpoint_every = {steps}
[data]
train = {data}
batch_size = {B}
seq_len = {T}
[model]
plugin = gpt
from_config = true
init_from = {init_from}
[optim]
lr = {LR}
min_lr = {LR}
schedule = constant
warmup = 0
grad_clip = 0
weight_decay = {WD}
beta1 = {BETAS[0]}
beta2 = {BETAS[1]}
eps = {EPS}
""")


def ctrain_logits(ini, tokens, *sets):
    tp, op = os.path.join(WORK, "tok.bin"), os.path.join(WORK, "logits.bin")
    np.asarray(tokens, dtype="<i4").tofile(tp)
    args = ["logits", ini, "--tokens", tp, "--out", op, "--force"]
    for s in sets:
        args += ["--set", s]
    ctrain(*args)
    return np.fromfile(op, dtype="<f4").reshape(len(tokens), len(tokens[0]), -1)


def torch_logits(model, tokens):
    with torch.no_grad():
        return model(torch.tensor(tokens, dtype=torch.long)).logits.float().numpy()


def torch_steps(model, x, y):
    """STEPS of torch.optim.AdamW on (x, y): ctrain's groups (2-D tensors decay)."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": WD},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=EPS)
    model.train()
    losses = []
    for _ in range(STEPS):
        logits = model(x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses


def one_batch_data():
    """B*T+1 bytes of a Debian text as a bytes-tokenizer shard: exactly B windows (stride T),
    so every step's batch holds the same rows (in the epoch's order, which a mean ignores)."""
    text = open("/usr/share/common-licenses/GPL-3", "rb").read()[3000:3000 + B * T + 1]
    src = os.path.join(WORK, "batch.txt")
    open(src, "wb").write(text)
    data = os.path.join(WORK, "data")
    ctrain("prepare", "--text", src, "--out", data, "--tokenizer", "bytes", "--val-fraction", "0",
           "--quiet")
    toks = np.fromfile(os.path.join(data, "train_000000.bin"), dtype="<u2", offset=1024)
    assert len(toks) == B * T + 1, len(toks)
    w = np.stack([toks[i * T:i * T + T + 1] for i in range(B)]).astype(np.int64)
    return data, torch.tensor(w[:, :-1]), torch.tensor(w[:, 1:])


def check_family(name, mtype, keys, cls, data, x, y, rows):
    torch.manual_seed(sum(map(ord, name)))
    cfg = AutoConfig.for_model(mtype, **keys)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():  # biases of order one, so that a bias mapped wrong shows
        for n, p in model.named_parameters():
            if n.endswith(".bias"):
                p.normal_(0.0, 0.5)
    src = os.path.join(WORK, name, "hf")
    model.save_pretrained(src)
    ini = os.path.join(WORK, name, "f.ini")
    run = os.path.join(WORK, name, "run")
    write_ini(ini, run, data, src, STEPS)
    tokens = x[:2].tolist()
    # 1. logits of the folder
    cl = ctrain_logits(ini, tokens)
    d_in = rel(cl, torch_logits(model, tokens))
    claim("%s: save_pretrained -> init_from: torch's logits" % name, d_in <= 1e-5,
          "max |diff| / max |logit| = %.2e" % d_in)
    # 2. 10 AdamW steps
    ctrain("train", ini)
    losses = torch_steps(model, x, y)
    ours = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]
    ours = [m["loss"] for m in ours if "loss" in m and "step" in m][:STEPS]
    exp = os.path.join(WORK, name, "export")
    ctrain("export", run, "--format", "safetensors", "--out", exp)
    back, info = AutoModelForCausalLM.from_pretrained(exp, output_loading_info=True,
                                                      dtype=torch.float32)
    back.eval()
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys",
                                                        "mismatched_keys")}
    sd_t, sd_c = model.state_dict(), back.state_dict()
    pmax = max(float(p.abs().max()) for p in sd_t.values())
    dmax = max(float((sd_t[k] - sd_c[k]).abs().max()) for k in sd_t)
    moved = max(float((sd_t[k] - p0).abs().max()) for k, p0 in
                AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).state_dict().items())
    dloss = max(abs(a - b) / abs(b) for a, b in zip(ours, losses)) if len(ours) == STEPS else 1
    claim("%s: %d AdamW steps = torch.optim.AdamW (parameters, losses)" % (name, STEPS),
          dmax <= 1e-4 * pmax and moved > 100 * dmax and dloss <= 1e-5,
          "max |param diff| / max |param| = %.2e after the weights moved by %.2e; losses within "
          "%.1e (last %.6f vs %.6f)" % (dmax / pmax, moved / pmax, dloss, ours[-1] if ours else 0,
                                       losses[-1]))
    # 3. greedy generation
    prompt = x[0, :8].tolist()
    r = ctrain("sample", run, "--ids", "--prompt", " ".join(map(str, prompt)), "--tokens", "20",
               "--greedy")
    gen_c = [int(t) for t in r.stdout.split()]
    with torch.no_grad():
        gen_t = model.generate(torch.tensor([prompt]), max_new_tokens=20, do_sample=False,
                               pad_token_id=0, eos_token_id=None)[0, 8:].tolist()
    same = sum(a == b for a, b in zip(gen_c, gen_t))
    claim("%s: ctrain sample --greedy = generate(do_sample=False)" % name,
          gen_c == gen_t, "%d of %d tokens equal" % (same, len(gen_t)))
    # 4. export back
    cl2 = ctrain_logits(ini, tokens, "model.init_from=" + exp)
    d_out = rel(cl2, torch_logits(back, tokens))
    claim("%s: export -> %s.from_pretrained: no missing or unexpected keys, ctrain's logits" %
          (name, cls), not bad and type(back).__name__ == cls and d_out <= 1e-5,
          "%s, max |diff| / max |logit| = %.2e" % (bad or type(back).__name__, d_out))
    rows.append((name, "%.1e" % d_in, "%.1e" % (dmax / pmax), "%d/%d" % (same, len(gen_t)),
                 "%.1e" % d_out, cls))


def main():
    os.makedirs(WORK, exist_ok=True)
    print("families: torch %s, transformers %s" % (torch.__version__, transformers.__version__))
    data, x, y = one_batch_data()
    rows = []
    for name, mtype, keys, cls in FAMILIES:
        try:
            check_family(name, mtype, keys, cls, data, x, y, rows)
        except Exception as e:  # a step that could not run is a failure with its reason
            fail("%s" % name, repr(e)[:600])
    head = ("| family | logits from the folder (max rel. error) | params after %d AdamW steps "
            "(max diff / max param) | greedy tokens equal | export reloaded: logits | "
            "class |" % STEPS)
    lines = [head, "|---|---|---|---|---|---|"] + ["| %s |" % " | ".join(r) for r in rows]
    print("\n".join(lines))
    if TABLE:
        open(TABLE, "w").write("\n".join(lines) + "\n")
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
