#!/usr/bin/env python3
"""export_check.py — independent checks of `ctrain export` for tests/cli/test_export.sh.

Reads the exported files with PyPI's safetensors and numpy only (no ctrain code):
  forward DIR TOKENS LOGITS T a float64 numpy forward written from the Hugging Face
                              architectures (GPT-2: layernorm, tanh-GELU, learned positions,
                              Conv1D (in, out) weights, tied head; Llama: RMSNorm, SwiGLU,
                              rotate-half RoPE, optional untied head) on DIR/model.safetensors
                              and DIR/config.json, compared with ctrain's raw f32 logits
                              (`ctrain logits`); prints max abs and max relative difference
                              (|diff| / max |logit|); also through transformers when importable.
  llmc FILE DIR               llm.c's model file read from llm.c's documented layout, every
                              tensor compared bit for bit with DIR's hf-gpt2 safetensors.
  ckpt CKPT DIR               the checkpoint's rank files reassembled here (checkpoint.c's
                              format), every tensor compared bit for bit with DIR's
                              ctrain-layout safetensors.
  same A B                    two safetensors files hold the same tensors, bit for bit.
Exit status 0 when the check holds, 1 otherwise; one line per claim.
"""
import json
import os
import struct
import sys

import numpy as np
from safetensors.numpy import load_file

TOL = 1e-5


def load(d):
    return json.load(open(os.path.join(d, "config.json"))), load_file(os.path.join(d, "model.safetensors"))


def layernorm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def rmsnorm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def gelu_new(x):  # transformers' NewGELUActivation (tanh approximation)
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def attention(q, k, v, nh, nkv=None):  # q (B, T, C), k, v (B, T, nkv*hd) -> (B, T, C), causal
    B, T, C = q.shape
    hd = C // nh
    nkv = nkv or nh
    q = q.reshape(B, T, nh, hd).transpose(0, 2, 1, 3)
    # grouped-query attention: each key/value head serves nh / nkv query heads (repeat_kv)
    k = np.repeat(k.reshape(B, T, nkv, hd).transpose(0, 2, 1, 3), nh // nkv, axis=1)
    v = np.repeat(v.reshape(B, T, nkv, hd).transpose(0, 2, 1, 3), nh // nkv, axis=1)
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hd)
    s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
    s = np.exp(s - s.max(-1, keepdims=True))
    p = s / s.sum(-1, keepdims=True)
    return (p @ v).transpose(0, 2, 1, 3).reshape(B, T, C)


def gpt2_forward(cfg, w, tok):
    g = lambda n: w[n].astype(np.float64)
    eps, nh = cfg["layer_norm_epsilon"], cfg["n_head"]
    T = tok.shape[1]
    x = g("transformer.wte.weight")[tok] + g("transformer.wpe.weight")[:T]
    for l in range(cfg["n_layer"]):
        p = f"transformer.h.{l}."
        h = layernorm(x, g(p + "ln_1.weight"), g(p + "ln_1.bias"), eps)
        qkv = h @ g(p + "attn.c_attn.weight") + g(p + "attn.c_attn.bias")  # Conv1D: x W + b
        q, k, v = np.split(qkv, 3, axis=-1)
        x = x + attention(q, k, v, nh) @ g(p + "attn.c_proj.weight") + g(p + "attn.c_proj.bias")
        h = layernorm(x, g(p + "ln_2.weight"), g(p + "ln_2.bias"), eps)
        h = gelu_new(h @ g(p + "mlp.c_fc.weight") + g(p + "mlp.c_fc.bias"))
        x = x + h @ g(p + "mlp.c_proj.weight") + g(p + "mlp.c_proj.bias")
    x = layernorm(x, g("transformer.ln_f.weight"), g("transformer.ln_f.bias"), eps)
    return x @ g("transformer.wte.weight").T


def rope_inv_freq(hd, theta, scaling):
    """transformers' inverse frequencies (modeling_rope_utils): default, linear, llama3."""
    inv = 1.0 / theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    if kind == "linear":
        return inv / scaling["factor"]
    if kind == "llama3":
        f, lo, hi = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        wavelen = 2 * np.pi / inv
        out = np.where(wavelen > old / lo, inv / f, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        mid = ~(wavelen < old / hi) & ~(wavelen > old / lo)
        return np.where(mid, (1 - smooth) * out / f + smooth * out, out)
    assert kind == "default", kind
    return inv


def rope(x, nh, theta, scaling=None):  # transformers' apply_rotary_pos_emb with rotate_half
    B, T, C = x.shape
    hd = C // nh
    inv = rope_inv_freq(hd, theta, scaling)
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, -1)[None, :, None, :]
    sin = np.concatenate([np.sin(ang)] * 2, -1)[None, :, None, :]
    x = x.reshape(B, T, nh, hd)
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    rot = np.concatenate([-x2, x1], -1)
    return (x * cos + rot * sin).reshape(B, T, C)


def llama_forward(cfg, w, tok):
    """Llama, and Qwen2 (q/k/v biases), as transformers computes them: grouped-query attention
    (num_key_value_heads), attention_bias, mlp_bias, rope_scaling."""
    g = lambda n: w[n].astype(np.float64)
    lin = lambda x, n: x @ g(n + ".weight").T + (g(n + ".bias") if n + ".bias" in w else 0.0)
    eps, nh, theta = cfg["rms_norm_eps"], cfg["num_attention_heads"], cfg["rope_theta"]
    nkv, sc = cfg.get("num_key_value_heads") or nh, cfg.get("rope_scaling")
    x = g("model.embed_tokens.weight")[tok]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rmsnorm(x, g(p + "input_layernorm.weight"), eps)
        q = rope(lin(h, p + "self_attn.q_proj"), nh, theta, sc)  # Linear: x W^T + b
        k = rope(lin(h, p + "self_attn.k_proj"), nkv, theta, sc)
        v = lin(h, p + "self_attn.v_proj")
        x = x + lin(attention(q, k, v, nh, nkv), p + "self_attn.o_proj")
        h = rmsnorm(x, g(p + "post_attention_layernorm.weight"), eps)
        gate = lin(h, p + "mlp.gate_proj")
        up = lin(h, p + "mlp.up_proj")
        x = x + lin(gate / (1.0 + np.exp(-gate)) * up, p + "mlp.down_proj")
    x = rmsnorm(x, g("model.norm.weight"), eps)
    head = g("model.embed_tokens.weight") if cfg["tie_word_embeddings"] else g("lm_head.weight")
    return x @ head.T


def report(label, ref, got):
    diff = np.abs(ref - got)
    mabs, mrel = diff.max(), diff.max() / np.abs(ref).max()
    ok = mrel <= TOL
    print(f"{'ok' if ok else 'FAIL'} {label}: max abs diff {mabs:.3e}, max rel diff {mrel:.3e} "
          f"(|diff| / max |logit| {np.abs(ref).max():.3f}; tolerance {TOL:g})")
    return ok


def cmd_forward(d, tokens, logits, T):
    cfg, w = load(d)
    V, T = cfg["vocab_size"], int(T)
    tok = np.fromfile(tokens, dtype="<i4")
    got = np.fromfile(logits, dtype="<f4").astype(np.float64)
    B = tok.size // T
    tok = tok.reshape(B, T)
    got = got.reshape(B, T, V)
    fwd = gpt2_forward if cfg["model_type"] == "gpt2" else llama_forward
    ok = report(f"numpy {cfg['model_type']} forward vs ctrain logits", fwd(cfg, w, tok), got)
    try:
        import torch
        import transformers
    except Exception as e:  # not an error: CI does not install torch
        print(f"ok skipped: transformers not installed ({type(e).__name__}: {e})")
        return ok
    model = transformers.AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32)
    with torch.no_grad():
        hf = model(torch.tensor(tok, dtype=torch.long)).logits.double().numpy()
    return report(f"transformers {type(model).__name__} vs ctrain logits", hf, got) and ok


def cmd_llmc(path, d):
    cfg, w = load(d)
    raw = open(path, "rb").read()
    h = struct.unpack("<256i", raw[:1024])
    if h[0] != 20240326 or h[1] != 3:
        print(f"FAIL llmc header magic {h[0]} version {h[1]}")
        return False
    maxT, V, L, NH, C, Vp = h[2:8]
    want = (cfg["n_positions"], cfg["vocab_size"], cfg["n_layer"], cfg["n_head"], cfg["n_embd"],
            (cfg["vocab_size"] + 127) // 128 * 128)
    if (maxT, V, L, NH, C, Vp) != want:
        print(f"FAIL llmc header {(maxT, V, L, NH, C, Vp)} != config.json {want}")
        return False
    data = np.frombuffer(raw, dtype="<f4", offset=1024)
    shapes = [("wte", (Vp, C)), ("wpe", (maxT, C)), ("ln1w", (L, C)), ("ln1b", (L, C)),
              ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)),
              ("attprojb", (L, C)), ("ln2w", (L, C)), ("ln2b", (L, C)), ("fcw", (L, 4 * C, C)),
              ("fcb", (L, 4 * C)), ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)),
              ("lnfw", (C,)), ("lnfb", (C,))]
    p, t = {}, 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        p[name] = data[t:t + n].reshape(shape)
        t += n
    if t != data.size:
        print(f"FAIL llmc file holds {data.size} floats, the layout {t}")
        return False
    # llm.c weights are (out, in) like torch.nn.Linear; GPT-2's Conv1D ones are (in, out)
    pairs = [("wte", lambda: p["wte"][:V], "transformer.wte.weight"),
             ("wte padding", lambda: p["wte"][V:], None),
             ("wpe", lambda: p["wpe"], "transformer.wpe.weight"),
             ("lnfw", lambda: p["lnfw"], "transformer.ln_f.weight"),
             ("lnfb", lambda: p["lnfb"], "transformer.ln_f.bias")]
    per = [("ln1w", "ln_1.weight", False), ("ln1b", "ln_1.bias", False),
           ("qkvw", "attn.c_attn.weight", True), ("qkvb", "attn.c_attn.bias", False),
           ("attprojw", "attn.c_proj.weight", True), ("attprojb", "attn.c_proj.bias", False),
           ("ln2w", "ln_2.weight", False), ("ln2b", "ln_2.bias", False),
           ("fcw", "mlp.c_fc.weight", True), ("fcb", "mlp.c_fc.bias", False),
           ("fcprojw", "mlp.c_proj.weight", True), ("fcprojb", "mlp.c_proj.bias", False)]
    for l in range(L):
        for a, b, tr in per:
            pairs.append((f"{a}[{l}]", (lambda a=a, l=l, tr=tr: p[a][l].T if tr else p[a][l]),
                          f"transformer.h.{l}.{b}"))
    bad = 0
    for label, get, hf in pairs:
        x = get()
        y = np.zeros_like(x) if hf is None else w[hf]
        if x.shape != y.shape or x.tobytes() != np.ascontiguousarray(y).tobytes():
            print(f"FAIL llmc {label} differs from {hf}")
            bad += 1
    print(f"{'ok' if not bad else 'FAIL'} llm.c file read back: {len(pairs)} tensors "
          f"bit-identical to the safetensors export ({bad} differ)")
    return not bad


def read_ckpt(dirname):
    """Every unit's master weights, reassembled from rank_NNNNN.bin (checkpoint.c's layout)."""
    units, world, q = None, 1, 0
    while q < world:
        raw = open(os.path.join(dirname, f"rank_{q:05d}.bin"), "rb").read()
        assert raw[:8] == b"CTCKPT01", "not a ctrain checkpoint"
        version, rank, world, step, nu = struct.unpack_from("<IiiqI", raw, 8)
        at = 8 + 4 + 4 + 4 + 8 + 4
        n_state, n_comp = 2, 0  # version 1: AdamW's m and v
        if version >= 2:
            n_state, = struct.unpack_from("<I", raw, at)
            at += 4
        if version >= 3:  # a bf16 master's compensation buffers after the state
            n_comp, = struct.unpack_from("<I", raw, at)
            at += 4
        at += 8 + 8  # the loader's epoch and position
        if units is None:
            units = [None] * nu
        for u in range(nu):
            unit_numel, off, numel, repl = struct.unpack_from("<QQQi", raw, at)
            at += 28
            master = np.frombuffer(raw, dtype="<f4", count=numel, offset=at)
            at += (1 + n_state + n_comp) * 4 * numel
            if units[u] is None:
                units[u] = np.full(unit_numel, np.nan, dtype=np.float32)
            n = max(0, min(numel, unit_numel - off))
            units[u][off:off + n] = master[:n]
        q += 1
    return units


def cmd_ckpt(ckpt, d):
    units = read_ckpt(ckpt)
    path = os.path.join(d, "model.safetensors")
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    w = load_file(path)
    order = sorted(header, key=lambda k: header[k]["data_offsets"][0])  # unit order, as saved
    offs = {}
    for name in order:
        u = int(name.split(".")[1]) + 1 if name.startswith("blocks.") else 0
        at = offs.get(u, 0)
        size = int(np.prod(header[name]["shape"]))
        want = units[u][at:at + size].reshape(header[name]["shape"])
        if want.tobytes() != w[name].tobytes():
            print(f"FAIL {name} differs from the checkpoint's unit {u} at {at}")
            return False
        offs[u] = at + (size + 63) // 64 * 64
    print(f"ok {len(order)} exported tensors bit-identical to the master weights reassembled "
          f"from {ckpt} ({len(units)} units)")
    return True


def cmd_same(a, b):
    x, y = load_file(a), load_file(b)
    same = x.keys() == y.keys() and all(x[k].tobytes() == y[k].tobytes() for k in x)
    print(f"{'ok' if same else 'FAIL'} {len(x)} tensors of {a} and {b} are "
          f"{'bit-identical' if same else 'different'}")
    return same


if __name__ == "__main__":
    cmds = {"forward": cmd_forward, "llmc": cmd_llmc, "ckpt": cmd_ckpt, "same": cmd_same}
    if len(sys.argv) < 2 or sys.argv[1] not in cmds:
        print(__doc__)
        sys.exit(2)
    sys.exit(0 if cmds[sys.argv[1]](*sys.argv[2:]) else 1)
