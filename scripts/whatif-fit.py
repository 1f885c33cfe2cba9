#!/usr/bin/env python3
"""whatif-fit.py — fit the constants of the logit-push model (host/whatif/whatif_model.c; docs/
logit-growth.md, "A model of the push", and docs/seed-experiments.md, "The model, refitted")
to `ctrain what-if` replays, and report the error on replays held out of the fit. Not for:
predicting in production (what-if does that in C; this file mirrors its formula to search the
constants, and prints its predictions so that they can be checked against what-if's
`predicted` column once the constants are in the C file).

Usage:
  scripts/whatif-fit.py --fit COUNTS TABLE... [--fit COUNTS TABLE...] \\
                        [--hold COUNTS TABLE...]... [--law sharp|smooth] [--floor P]
                        [--constants a,tau,b,kstar[,gamma,delta]] [--min-tokens T]
  COUNTS: the unigram counts of the tables' data: a `what-if --per-row` file of the whole head
          (its count column), or a token shard in llm.c's format (train_000000.bin)
  TABLE:  `ctrain what-if` outputs, with or without --rows (only pure_bf16 rows are used; the
          other policies are predicted 0); `nccl` rows take the order what-if printed as the
          tuner's pick
The fit minimises the squared error of log10(push) over rows with push >= floor and, for
sampled replays, push > 2 standard errors. --law sharp is the model of issue 15 (thresholds
q*T_loc < tau and L > kstar); smooth replaces each threshold by 1 / (1 + (x / tau)^gamma) and
(L / kstar)^delta / (1 + (L / kstar)^delta). --min-tokens: report held-out rows with at least
that many tokens per rank separately (the issue's criterion: x2 rms at >= 1024).
"""
import argparse, math, re, sys
import numpy as np


def read_counts(path):
    """Unigram probabilities q (V) from a --per-row file or an llm.c token shard."""
    if path.endswith(".bin"):
        raw = np.fromfile(path, dtype=np.uint16, offset=256 * 4)
        c = np.bincount(raw.astype(np.int64)).astype(float)
        return c / c.sum()
    counts = {}
    for line in open(path):
        if line.startswith("#") or line.startswith("world_size"):
            continue
        f = line.rstrip("\n").split("\t")
        counts[int(f[3])] = int(f[4])
    V = max(counts) + 1
    c = np.array([counts.get(v, 0) for v in range(V)], dtype=float)
    return c / c.sum()


def read_table(path, q):
    rows, hbar2, G, V, picks = [], None, 0, None, {}
    for line in open(path):
        m = re.search(r"\|hbar\|\^2 = ([0-9.eE+-]+)(?:.*gpus_per_node (\d+))?", line)
        if m:
            hbar2, G = float(m.group(1)), int(m.group(2) or 0)
        m = re.search(r"head (\d+) x (\d+)", line)
        if m:
            V = int(m.group(1))
        m = re.search(r"N = (\d+), bf16 head: .* as ([a-z_]+)/", line)
        if m:
            picks[int(m.group(1))] = m.group(2)
        f = line.split()
        if len(f) in (8, 11) and f[0].isdigit() and f[2] == "pure_bf16":
            sampled = len(f) == 11
            push = float(f[8] if sampled else f[6])
            se = float(f[9]) if sampled else 0.0
            rows.append(dict(N=int(f[0]), algo=f[1], T=float(f[3]), push=push, se=se,
                             pred=float(f[-1]), file=path))
    for r in rows:
        if r["algo"] == "nccl":
            r["algo"] = picks.get(r["N"], "ring")
        r.update(hbar2=hbar2, G=G, V=V, q=q)
    return rows


def sigma(x, tau, gamma, law):
    """The chance that a small term is lost, at x = q * (tokens in its partial sum)."""
    if law == "sharp":
        return (x < tau).astype(float)
    return 1.0 / (1.0 + (x / tau) ** gamma)


def lost_terms(N, G, algo, qT, tau, gamma, law):
    """Mirror of lost_terms() in host/whatif/whatif_model.c (vectorised over qT)."""
    G = G if G > 0 else N
    M = N / G
    s = lambda x: sigma(x, tau, gamma, law)
    if algo == "ring":
        return (N - 1) / 2.0 * s(qT)
    if algo == "hier":
        return (G - 1) / 2.0 * s(qT) + (M - 1) / 2.0 * G * s(G * qT)
    if algo == "nvls":
        return (M - 1) / 2.0 * G * s(G * qT)
    g = G if algo in ("dbtree", "nvls_tree") else 1
    lost = 0.0 if algo == "nvls_tree" else (g - 1) / 2.0 * s(qT)
    k = g
    while k < N:
        lost = lost + k * s(k * qT)
        k *= 2
    return lost


def chain(N, G, algo):
    G = G if G > 0 else N
    if algo == "ring":
        return N
    if algo == "hier":
        return max(N / G, G)
    if algo == "nvls":
        return N / G
    return 1


def stagnation(L, kstar, delta, law):
    if law == "sharp":
        return 1 - kstar / L if L > kstar else 0.0
    x = (L / kstar) ** delta
    return x / (1 + x)


def features(r, tau, kstar, gamma, delta, law):
    N, T, q = r["N"], r["T"], r["q"]
    swamp = float(np.sum(q * (1 - np.exp(-N * T * q)) * lost_terms(N, r["G"], r["algo"], q * T, tau,
                                                                     gamma, law)) / N)
    stag = stagnation(chain(N, r["G"], r["algo"]), kstar, delta, law)
    scale = r["hbar2"] / r["V"]
    return scale * swamp, scale * stag


def predict(r, c, law):
    s, z = features(r, c["tau"], c["kstar"], c["gamma"], c["delta"], law)
    return c["a"] * s + c["b"] * z


def log_err(rows, c, law):
    e = []
    for r in rows:
        p = predict(r, c, law)
        e.append(math.log10(p) - math.log10(r["push"]) if p > 0 else 3.0)
    return np.array(e)


def fit(rows, law):
    """log-space least squares: a and b for each (tau, kstar, gamma, delta) of a grid by a small
    non-negative search on a log grid; the grid refined around the best."""
    ly = np.log10(np.array([r["push"] for r in rows]))
    ab = np.geomspace(1e-4, 1e3, 71)
    best = None
    taus = np.geomspace(1e-5, 1e0, 21)
    kstars = [64, 128, 256, 384, 512, 768, 1024, 2048]
    gammas = [1.0] if law == "sharp" else [0.25, 0.35, 0.5, 0.7, 1.0, 1.5, 2.5]
    deltas = [1.0] if law == "sharp" else [1.0, 2.0, 4.0, 8.0]
    for tau in taus:
        for gamma in gammas:
            Fs = np.array([features(r, tau, 384, gamma, 1, law)[0] for r in rows])
            for kstar in kstars:
                for delta in deltas:
                    Fz = np.array([features(r, tau, kstar, gamma, delta, law)[1] for r in rows])
                    P = ab[:, None, None] * Fs[None, None, :] + ab[None, :, None] * Fz[None, None, :]
                    with np.errstate(divide="ignore"):
                        E = np.where(P > 0, np.log10(np.maximum(P, 1e-300)) - ly, 3.0)
                    score = np.mean(E ** 2, axis=2)
                    i, j = np.unravel_index(np.argmin(score), score.shape)
                    if best is None or score[i, j] < best[0]:
                        best = (float(score[i, j]), dict(a=ab[i], tau=tau, b=ab[j], kstar=kstar,
                                                         gamma=gamma, delta=delta))
    return best[1]


def report(name, rows, c, law, min_tokens):
    if not rows:
        return
    err = log_err(rows, c, law)
    def line(label, e):
        print(f"{label}: {len(e)} replays; log10(model/replay): mean {np.mean(e):+.3f}, rms "
              f"{math.sqrt(float(np.mean(e ** 2))):.3f} (x{10 ** math.sqrt(float(np.mean(e ** 2))):.2f}), "
              f"max |.| {np.abs(e).max():.3f} (x{10 ** np.abs(e).max():.2f})")
    line(name, err)
    if min_tokens:
        big = np.array([r["T"] >= min_tokens for r in rows])
        if big.any():
            line(f"{name}, >= {min_tokens:g} tokens per rank", err[big])
    for r, e in zip(rows, err):
        p = predict(r, c, law)
        print(f"   N={r['N']:5d} {r['algo']:9s} G={r['G']} T_loc={r['T']:8.4g} replay {r['push']:10.3e}"
              f" (se {r['se']:8.2e}) model {p:10.3e} (what-if printed {r['pred']:10.3e}) log10 err "
              f"{e:+.2f}  [{r['file']}]")


def load(groups, floor):
    rows = []
    for g in groups or []:
        q = read_counts(g[0])
        for f in g[1:]:
            rows += [r for r in read_table(f, q) if r["push"] >= floor and r["push"] > 2 * r["se"]]
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fit", nargs="+", action="append", required=True, metavar="COUNTS TABLE")
    ap.add_argument("--hold", nargs="+", action="append", metavar="COUNTS TABLE")
    ap.add_argument("--law", choices=["sharp", "smooth"], default="smooth")
    ap.add_argument("--constants", help="a,tau,b,kstar[,gamma,delta]: skip the fit")
    ap.add_argument("--floor", type=float, default=0.0,
                    help="replayed pushes below this are noise (the model gives the mean): "
                         "left out of the fit and the error")
    ap.add_argument("--min-tokens", type=float, default=1024)
    o = ap.parse_args()
    fit_rows, hold_rows = load(o.fit, o.floor), load(o.hold, o.floor)
    if o.constants:
        v = [float(x) for x in o.constants.split(",")] + [1.0, 1.0]
        c = dict(a=v[0], tau=v[1], b=v[2], kstar=v[3], gamma=v[4], delta=v[5])
    else:
        c = fit(fit_rows, o.law)
    print(f"law {o.law}: a = {c['a']:.4g}, tau = {c['tau']:.4g}, b = {c['b']:.4g}, "
          f"kstar = {c['kstar']:g}, gamma = {c['gamma']:g}, delta = {c['delta']:g}")
    report("fit", fit_rows, c, o.law, o.min_tokens)
    report("held out", hold_rows, c, o.law, o.min_tokens)


if __name__ == "__main__":
    sys.exit(main())
