#!/usr/bin/env python3
"""push-vs-loss.py — fit a what-if figure against the training loss of the checkpoints it was
replayed from, and extrapolate it to a lower loss (docs/seed-experiments.md, "How far a small
model extrapolates"): ln figure = c + b (loss - ref), weighted least squares with each point's
relative standard error (unweighted when none is given), and the factor exp(b (target - ref))
by which the figure at the reference loss shrinks at each target loss, with the factor's range
from b +- 2 se(b). Not for: producing the figures (ctrain what-if does).

Usage: scripts/push-vs-loss.py --ref LOSS --targets L1,L2,... NAME=LOSS:FIG[:SE],LOSS:FIG[:SE],... ...
"""
import argparse, math, sys

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--ref", type=float, required=True, help="the loss the figures are quoted at")
ap.add_argument("--targets", required=True, help="losses to extrapolate to, comma-separated")
ap.add_argument("series", nargs="+", help="NAME=LOSS:FIG[:SE],...")
a = ap.parse_args()
targets = [float(t) for t in a.targets.split(",")]
for s in a.series:
    name, pts = s.split("=", 1)
    P = [tuple(float(x) for x in p.split(":")) for p in pts.split(",")]
    if any(p[1] <= 0 for p in P):
        sys.exit("push-vs-loss: %s: a figure not above 0 cannot be fitted in logs" % name)
    xs = [p[0] - a.ref for p in P]
    ys = [math.log(p[1]) for p in P]
    ws = [1.0 / (p[2] / p[1]) ** 2 if len(p) > 2 and p[2] > 0 else 1.0 for p in P]
    weighted = all(len(p) > 2 and p[2] > 0 for p in P)
    sw = sum(ws); mx = sum(w * x for w, x in zip(ws, xs)) / sw; my = sum(w * y for w, y in zip(ws, ys)) / sw
    sxx = sum(w * (x - mx) ** 2 for w, x in zip(ws, xs))
    b = sum(w * (x - mx) * (y - my) for w, x, y in zip(ws, xs, ys)) / sxx
    c = my - b * mx
    rss = sum(w * (y - c - b * x) ** 2 for w, x, y in zip(ws, xs, ys))
    dof = len(P) - 2
    # the slope's error: from the weights, scaled up by the residuals when they exceed them
    # (chi^2 / dof > 1: the points scatter more than their errors say)
    scale = max(1.0, rss / dof) if weighted and dof > 0 else (rss / dof if dof > 0 else float("nan"))
    se = math.sqrt(scale / sxx)
    print("%s: ln figure = %.3f + %.3f (loss - %.2f), se(b) %.3f, %d points, chi2/dof %.2f%s" % (
        name, c, b, a.ref, se, len(P), rss / dof if dof > 0 else float("nan"),
        "" if weighted else " (unweighted)"))
    for t in targets:
        f = math.exp(b * (t - a.ref))
        lo, hi = math.exp((b + 2 * se) * (t - a.ref)), math.exp((b - 2 * se) * (t - a.ref))
        print("  at loss %.2f: x%.3g (x%.3g to x%.3g at b +- 2 se)" % (t, f, min(lo, hi), max(lo, hi)))
