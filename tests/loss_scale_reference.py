#!/usr/bin/env python3
"""loss_scale_reference.py — the scaled_amp precision policy's loss scales against
torch.amp.GradScaler.

Reads the trace test_precision.c writes (CTRAIN_SCALER_TRACE=FILE build/tests/unit_tests
precision_scaled_amp_follows): per run a line "run init growth backoff interval", then per step
"finite scale skip" (the verdict the host handed to after_reduce, the plugin's loss_scale before
it, the plugin's skip decision) and replays the verdicts:
  transcription  GradScaler's update rule in f32 (struct rounding), no torch needed;
  torch          torch.amp.GradScaler("cpu") itself on a one-element parameter whose gradient
                 is made inf on the non-finite steps; skipped when torch is not importable
                 (said so on stdout).
Prints one line per reference and exits 1 on any difference. Not for: producing the trace.
"""
import math
import struct
import sys


def f32(x):
    """x rounded to f32 (to nearest even; inf past the largest f32)."""
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.inf if x > 0 else -math.inf


def load(path):
    runs = []
    for line in open(path):
        w = line.split()
        if w[0] == "run":
            runs.append(([float(v) for v in w[1:4]] + [int(w[4])], []))
        else:
            runs[-1][1].append((int(w[0]), float(w[1]), int(w[2])))
    return runs


def transcription(cfg, steps):
    init, growth, backoff, interval = cfg
    scale, tracker, out = f32(init), 0, []
    for finite, _, _ in steps:
        out.append((scale, 0 if finite else 1))
        if not finite:
            scale, tracker = f32(scale * f32(backoff)), 0
        elif tracker + 1 == interval:
            grown = f32(scale * f32(growth))
            scale = grown if math.isfinite(grown) else scale
            tracker = 0
        else:
            tracker += 1
    return out


def with_torch(cfg, steps):
    import torch
    init, growth, backoff, interval = cfg
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=init, growth_factor=growth,
                                  backoff_factor=backoff, growth_interval=interval)
    out = []
    for finite, _, _ in steps:
        opt.zero_grad()
        scale = scaler.get_scale()
        scaler.scale(p.sum()).backward()
        if not finite:
            p.grad.fill_(math.inf)
        scaler.unscale_(opt)
        found = sum(v.item() for v in scaler._found_inf_per_device(opt).values())
        scaler.step(opt)
        scaler.update()
        out.append((float(scale), 1 if found else 0))
    return out


def compare(name, ref):
    bad = 0
    for (cfg, steps) in load(sys.argv[1]):
        got = [(s, k) for _, s, k in steps]
        want = ref(cfg, steps)
        diff = sum(1 for a, b in zip(got, want) if a[1] != b[1] or f32(a[0]) != f32(b[0]))
        print(f"{name}: run {cfg}: {len(steps)} steps, {sum(k for _, k in got)} skipped, "
              f"{diff} differences")
        bad += diff
    return bad


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: loss_scale_reference.py TRACE")
    bad = compare("transcription", transcription)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("torch: not importable, the comparison with torch.amp.GradScaler is skipped")
    else:
        bad += compare("torch", with_torch)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
