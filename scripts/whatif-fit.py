#!/usr/bin/env python3
"""whatif-fit.py — fit the constants of the logit-push model (host/whatif/whatif_model.c; docs/
logit-growth.md, "A model of the push") to `ctrain what-if` replays, and report the error on
replays held out of the fit. Not for: predicting in production (what-if does that in C; this
file mirrors its formula to search the constants, and prints its predictions so that they can
be checked against what-if's `predicted` column once the constants are in the C file).

Usage: scripts/whatif-fit.py --counts ROWS.tsv --fit A.txt ... --hold C.txt ... [--floor P]
  ROWS.tsv: a `what-if --per-row` file of the same data (its counts give the unigram q)
  *.txt: `ctrain what-if` outputs (only pure_bf16 rows are used; the other policies are
  predicted 0). The fit minimises the squared error of log10(push) over rows with push > 0.
"""
import argparse, math, re, sys
import numpy as np

ALGO = {"ring": 0, "tree": 1, "dbtree": 2, "hier": 3}


def read_counts(path):
    counts = {}
    for line in open(path):
        if line.startswith("#") or line.startswith("world_size"):
            continue
        f = line.rstrip("\n").split("\t")
        counts[int(f[3])] = int(f[4])
    V = max(counts) + 1
    c = np.array([counts.get(v, 0) for v in range(V)], dtype=float)
    return c / c.sum()


def read_table(path):
    rows, hbar2, G, V = [], None, 0, None
    for line in open(path):
        m = re.search(r"\|hbar\|\^2 = ([0-9.eE+-]+)(?:.*gpus_per_node (\d+))?", line)
        if m:
            hbar2, G = float(m.group(1)), int(m.group(2) or 0)
        m = re.search(r"head (\d+) x (\d+)", line)
        if m:
            V = int(m.group(1))
        f = line.split()
        if len(f) == 8 and f[0].isdigit() and f[2] == "pure_bf16":
            rows.append(dict(N=int(f[0]), algo=f[1], T=float(f[3]), push=float(f[6]),
                             pred=float(f[7]), file=path))
    for r in rows:
        r.update(hbar2=hbar2, G=G, V=V)
    return rows


def lost_terms(N, G, algo, qT, tau):
    """Mirror of lost_terms() in host/whatif/whatif_model.c (vectorised over qT)."""
    G = G if G > 0 else N
    M = N / G
    if algo == "ring":
        return np.where(qT < tau, (N - 1) / 2.0, 0.0)
    if algo == "hier":
        return np.where(qT < tau, (G - 1) / 2.0, 0.0) + np.where(G * qT < tau, (M - 1) / 2.0 * G, 0.0)
    g = G if algo == "dbtree" else 1
    lost = np.where(qT < tau, (g - 1) / 2.0, 0.0)
    s = g
    while s < N:
        lost = lost + np.where(s * qT < tau, s, 0.0)
        s *= 2
    return lost


def chain(N, G, algo):
    G = G if G > 0 else N
    if algo == "ring":
        return N
    if algo == "hier":
        return max(N / G, G)
    return 1


def features(r, q, tau, kstar):
    N, T = r["N"], r["T"]
    qT = q * T
    swamp = float(np.sum(q * (1 - np.exp(-N * T * q)) * lost_terms(N, r["G"], r["algo"], qT, tau)) / N)
    L = chain(N, r["G"], r["algo"])
    stag = 1 - kstar / L if L > kstar else 0.0
    scale = r["hbar2"] / r["V"]
    return scale * swamp, scale * stag


def predict(r, q, a, tau, b, kstar):
    s, z = features(r, q, tau, kstar)
    return a * s + b * z


def log_err(rows, q, a, tau, b, kstar):
    """log10(model / replay) per row; rows whose replayed push is not > 0 (noise at small N:
    the model gives the mean push, always >= 0) are left to the caller (NaN here)."""
    e = []
    for r in rows:
        p = predict(r, q, a, tau, b, kstar)
        e.append(math.log10(p) - math.log10(r["push"]) if r["push"] > 0 and p > 0 else
                 (3.0 if r["push"] > 0 else math.nan))
    return np.array(e)


def fit(rows, q):
    """Grid search: tau and kstar on grids, a and b on log grids, minimising the mean squared
    log10 error over the rows with a positive replayed push."""
    y = np.array([r["push"] for r in rows])
    ok = y > 0
    ly = np.log10(y[ok])
    grid = np.geomspace(1e-3, 1e2, 51)
    best = None
    for tau in np.geomspace(1e-4, 1e-1, 31):
        for kstar in [64, 96, 128, 192, 256, 384, 512, 768, 1024]:
            F = np.array([features(r, q, tau, kstar) for r in rows])[ok]
            P = grid[:, None, None] * F[None, None, :, 0] + grid[None, :, None] * F[None, None, :, 1]
            with np.errstate(divide="ignore"):
                E = np.where(P > 0, np.log10(np.maximum(P, 1e-300)) - ly, 3.0)
            score = np.mean(E ** 2, axis=2)
            i, j = np.unravel_index(np.argmin(score), score.shape)
            if best is None or score[i, j] < best[0]:
                best = (float(score[i, j]), grid[i], tau, grid[j], kstar)
    return best


def report(name, rows, q, a, tau, b, kstar):
    err = log_err(rows, q, a, tau, b, kstar)
    ok = ~np.isnan(err)
    print(f"{name}: {len(rows)} replays, {int(ok.sum())} with a positive push; log10(model/replay) "
          f"over those: mean {np.mean(err[ok]):+.3f}, rms {math.sqrt(float(np.mean(err[ok] ** 2))):.3f}, "
          f"max |.| {np.abs(err[ok]).max():.3f} (a factor {10 ** np.abs(err[ok]).max():.2f})")
    for r, e in zip(rows, err):
        p = predict(r, q, a, tau, b, kstar)
        print(f"   N={r['N']:5d} {r['algo']:6s} G={r['G']} T_loc={r['T']:8.4g} replay {r['push']:10.3e} "
              f"model {p:10.3e} (what-if printed {r['pred']:10.3e}) log10 err {e:+.2f}  [{r['file']}]")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--counts", required=True)
    ap.add_argument("--fit", nargs="+", required=True)
    ap.add_argument("--hold", nargs="*", default=[])
    ap.add_argument("--constants", help="a,tau,b,kstar: skip the fit and evaluate these")
    ap.add_argument("--floor", type=float, default=0.0,
                    help="replayed pushes below this are noise (the model gives the mean): "
                         "left out of the fit and the error")
    o = ap.parse_args()
    q = read_counts(o.counts)
    fit_rows = [r for f in o.fit for r in read_table(f) if r["push"] >= o.floor]
    hold_rows = [r for f in o.hold for r in read_table(f) if r["push"] >= o.floor]
    if o.constants:
        a, tau, b, kstar = map(float, o.constants.split(","))
    else:
        score, a, tau, b, kstar = fit(fit_rows, q)
    print(f"constants: a = {a:.4g}, tau = {tau:.4g}, b = {b:.4g}, kstar = {kstar:g}")
    report("fit", fit_rows, q, a, tau, b, kstar)
    if hold_rows:
        report("held out", hold_rows, q, a, tau, b, kstar)


if __name__ == "__main__":
    sys.exit(main())
