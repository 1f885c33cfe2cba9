#!/usr/bin/env python3
"""torch_gpt2.py -- the PyTorch reference for ctrain's throughput: one GPT-2-style training
step (scaled_dot_product_attention, tied head, AdamW; on a GPU bf16 autocast, torch.compile and
fused AdamW) on random tokens, timed, printed as tokens/s. Any shape: GPT-2 124M by default,
--layers 4 --heads 4 --dim 256 for bench/run.sh's small one. Not a test: it reports, it does
not gate; and not a numerics reference (random data, no loss curve).

Usage: python3 bench/torch_gpt2.py [--steps 20] [--batch 16] [--seq 1024] [--no-compile]
       [--layers 12 --heads 12 --dim 768 --vocab 50257] [--device cuda|cpu]
       [--dtype bf16|fp32] [--threads N]
--dtype fp32 runs without autocast (bench/run.sh's CPU comparison with ctrain's fp32 runs);
--threads sets torch.set_num_threads (bench/run.sh: the same count as ctrain's cpu device).
Prints "torch: ..." (the version, its BLAS, threads), then one line "bench torch_gpt2_...: N
tokens/s ..." (tests/gpu/run.sh and bench/run.sh grep it).
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    """Pre-norm transformer block (GPT-2): x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.fc_proj = nn.Linear(4 * dim, dim)

    def forward(self, x):  # x: (B, T, C)
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, heads, dim, vocab, seq):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied, as GPT-2
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx, targets):  # idx, targets: (B, T)
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln_f(x))  # (B, T, V)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps (compilation)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16",
                    help="bf16: autocast (default); fp32: none")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    blas = "MKL" if torch.backends.mkl.is_available() else "not MKL (see torch.__config__.show())"
    print(f"torch: {torch.__version__}, BLAS {blas}, oneDNN "
          f"{'on' if torch.backends.mkldnn.is_available() else 'off'}, "
          f"{torch.get_num_threads()} thread(s), device {a.device}, {a.dtype}, "
          f"{'eager' if a.no_compile else 'torch.compile'}")

    torch.manual_seed(0)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    model = GPT(a.layers, a.heads, a.dim, a.vocab, a.seq).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1, fused=cuda)
    step_model = model if a.no_compile else torch.compile(model)
    gen = torch.Generator(device="cpu").manual_seed(1)
    tokens = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=gen).to(dev)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def step():
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = step_model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.time()
    for _ in range(a.warmup):
        loss = step()
    if cuda:
        torch.cuda.synchronize()
    print(f"warm-up ({a.warmup} steps, compilation included): {time.time() - t0:.1f} s, "
          f"loss {loss.item():.3f} (ln V = {math.log(a.vocab):.3f})")
    times = []
    for _ in range(a.steps):
        t = time.time()
        loss = step()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.time() - t)
    dt = sorted(times)[len(times) // 2]
    tps = a.batch * a.seq / dt
    # FLOPs per token: 6 per parameter (forward + backward) + attention 12*L*T*C (llm.c).
    flops = 6 * n_params + 12 * a.layers * a.seq * a.dim
    mem = torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0
    prec = "bf16_autocast" if a.dtype == "bf16" else "fp32"
    name = f"torch_gpt2_{n_params / 1e6:.0f}M_{prec}{'' if a.no_compile else '_compile'}"
    rate = f"{tps * flops / 1e12:.1f} TFLOP/s" if cuda else f"{tps * flops / 1e9:.1f} GFLOP/s"
    memory = f"peak memory {mem:.1f} GiB" if cuda else "peak memory n/a (cpu)"
    print(f"bench {name}: {tps:.0f} tokens/s, {dt * 1e3:.1f} ms/step (median of {a.steps}), "
          f"{rate}, {memory}, B={a.batch} T={a.seq}, final loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
