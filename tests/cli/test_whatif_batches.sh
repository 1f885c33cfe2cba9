#!/usr/bin/env bash
# test_whatif_batches.sh — `ctrain what-if` over several batches and world-size scans, on a
# 1000-token model trained here for 20 steps: with --batches 8 every figure's standard error
# between batches (se_b) is the spread of the batches' own figures (--per-batch prints them; the
# reference is computed here from those lines) and is not zero, and se_all = sqrt(se^2 + se_b^2);
# AdamW's view under the running second moment is printed beside the same batch's view; the
# mean logit once z-loss caps lse (logit@cap) does not depend on the coef while the cap (lse*)
# scales as 1/coef; --scan per-rank keeps the tokens per rank and its replay at each N equals
# the fixed-global-batch replay of the same global batch; the fitted exponent of N equals a
# weighted least-squares fit of the printed figures; every misuse names its flag.
# The 1/sqrt(f) step of a token present in a fraction f of the batches is checked on
# constructed values in tests/unit/test_whatif_sample.c (the same code path).
set -u
cd "$(dirname "$0")/../.."
. tests/cli/lib.sh
ct_need_ctrain
W=$CT_TMP

ct_prepare_licenses "$W/sp" || { ct_fail prepare "$(tail -3 "$W/sp.log")"; ct_summary; exit 1; }
cat > "$W/w.ini" <<EOF
[run]
name = wb
out_dir = $W/run
steps = 20
seed = 11
log_every = 10
eval_every = 0
checkpoint_every = 20
[data]
train = $W/sp
batch_size = 8
seq_len = 32
[model]
plugin = gpt
n_layer = 1
n_head = 2
d_model = 32
vocab_size = 1000
seq_len = 32
norm = gain_only_layernorm
mlp = swiglu
pos = rope
qk_norm = true
tie_embeddings = false
bias = false
init = open_lm
[precision]
plugin = pure_bf16
[optim]
lr = 5e-3
warmup = 2
[device]
threads = 1
EOF
"$CTRAIN" train "$W/w.ini" > "$W/train.log" 2>&1 || { ct_fail train "$(tail -3 "$W/train.log")"; ct_summary; exit 1; }
C=$W/run/checkpoints/step_00000020

# ---- 1. --batches 8: the error between batches from the batches' own figures ---------------
A=(--world-sizes 8,32 --global-batch 64 --algo ring,dbtree --policies pure_bf16,bf16_fp32acc
   --batches 8 --lr 5e-3 --rows 200)
ct_run "$CTRAIN" what-if "$C" "${A[@]}" --per-batch
if [ "$ct_rc" -ne 0 ]; then
    ct_fail "what-if --batches 8 --per-batch" "exited $ct_rc: $ct_err"
else
    cp "$CT_TMP/out" "$W/a.out"
    res=$(python3 - "$W/a.out" <<'EOF'
import math, sys
lines = open(sys.argv[1]).read().splitlines()
def tables():
    out = []
    for i, l in enumerate(lines):
        if l.split()[:2] == ["N", "algo"]:
            t = []
            for m in lines[i + 1:]:
                if not m.split() or not m.split()[0].isdigit(): break
                t.append(m.split())
            out.append((l.split(), t))
    return out
tabs = tables()
per = {}
for l in lines:
    f = l.split()
    if f and f[0] == "batch":
        per.setdefault((f[1], f[2], f[3]), []).append([float(x) for x in f[5:]])
bad, checks, zero = [], 0, 0
def printed_ok(got, want, digits):
    # got is want printed with %.{digits}g: within half a unit of its last digit (and a hair)
    if want == 0: return float(got) == 0
    unit = 10 ** (math.floor(math.log10(abs(want))) - digits + 1)
    return abs(float(got) - want) <= 0.5 * unit * 1.001 + 1e-300
def check(name, key, col_vals, mean_s, se_b_s, se_s, se_all_s, scale):
    global checks, zero
    B = len(col_vals)
    m = sum(col_vals) / B
    sb = math.sqrt(sum((x - m) ** 2 for x in col_vals) / (B * (B - 1)))
    checks += 1
    if sb == 0: zero += 1
    if not printed_ok(mean_s, scale * m, 4): bad.append("%s %s mean %s vs %.6g" % (name, key, mean_s, scale * m))
    if not printed_ok(se_b_s, scale * sb, 2): bad.append("%s %s se_b %s vs %.6g" % (name, key, se_b_s, scale * sb))
    se = float(se_s)
    if not printed_ok(se_all_s, math.sqrt(se * se + (scale * sb) ** 2), 2) and \
       abs(float(se_all_s) - math.sqrt(se * se + (scale * sb) ** 2)) > 0.06 * float(se_all_s):
        bad.append("%s %s se_all %s vs sqrt(%s^2 + %.3g^2)" % (name, key, se_all_s, se_s, scale * sb))
# main table: N algo policy tokens rel se se_b se_all bias se se_b se_all push se se_b se_all pred
head, main = tabs[0]
for r in main:
    key = (r[0], r[1], r[2]); v = per[key]
    if len(v) != 8: bad.append("%s: %d batches" % (key, len(v)))
    for name, j, c in (("rel_err", 0, 4), ("bias", 1, 8), ("logit_push", 2, 12)):
        check(name, key, [x[j] for x in v], r[c], r[c + 2], r[c + 1], r[c + 3], 1.0)
# AdamW tables: N algo policy logit se se_b se_all lse se se_b se_all ...
for (head, t), cols in ((tabs[1], (3, 4)), (tabs[2], (5, 6))):
    for r in t:
        key = (r[0], r[1], r[2]); v = per[key]
        for name, j, c in (("logit/1k", cols[0], 3), ("lse/1k", cols[1], 7)):
            check(name, key, [x[j] for x in v], r[c], r[c + 2], r[c + 1], r[c + 3], 5.0)
differ = sum(a[3:] != b[3:] for a, b in zip(tabs[1][1], tabs[2][1]))
print("%d figures checked, %d with se_b 0, %d AdamW rows differ between the views; %s" %
      (checks, zero, differ, "; ".join(bad[:4]) or "all match"))
sys.exit(0 if not bad and checks == 56 and zero == 0 and differ >= 4 and len(tabs) == 3 else 1)
EOF
    ) && ct_pass "--batches 8: means, se_b (sd / sqrt(B)) and se_all match the per-batch figures: $res" \
      || ct_fail "between-batch errors" "$res"
    grep -q "the same under AdamW's running second moment: v = the mean of e^2 over the 8 batches" "$W/a.out" \
        && ct_pass "the running second moment's view is printed and named" \
        || ct_fail "running second moment named" "$(grep 'second moment' "$W/a.out")"
fi

# ---- 2. z-loss: the cap scales as 1/coef, the mean logit at the cap does not ---------------
ct_run "$CTRAIN" what-if "$C" --world-sizes 32 --global-batch 64 --algo ring --policies pure_bf16 \
    --batches 4 --lr 5e-3 --zloss-coef 1e-4
cp "$CT_TMP/out" "$W/z4.out"
ct_run "$CTRAIN" what-if "$C" --world-sizes 32 --global-batch 64 --algo ring --policies pure_bf16 \
    --batches 4 --lr 5e-3 --zloss-coef 1e-2
if res=$(python3 - "$W/z4.out" "$CT_TMP/out" <<'EOF'
import sys
def adam(path):
    lines = open(path).read().splitlines()
    t = [i for i, l in enumerate(lines) if l.split()[:4] == ["N", "algo", "policy", "logit/1k_steps"]]
    return [lines[i + 1].split() for i in t]
a, b = adam(sys.argv[1]), adam(sys.argv[2])
ok = len(a) == len(b) == 2
msg = []
for x, y in zip(a, b):  # columns: ... logit se se_b lse se se_b lse* se se_b cap se se_b
    r = float(x[9]) / float(y[9]) if float(y[9]) else 0
    ok = ok and abs(r - 100) < 0.05 and x[12] == y[12] and x[3] == y[3]
    msg.append("lse* %s -> %s (x%.2f), logit@cap %s and %s" % (x[9], y[9], r, x[12], y[12]))
print("; ".join(msg))
sys.exit(0 if ok else 1)
EOF
); then ct_pass "z-loss 1e-4 vs 1e-2: lse* x100, logit@cap unchanged (both views): $res"
else ct_fail "z-loss cap" "$res"
fi

# ---- 3. --scan per-rank: tokens per rank fixed; each N its own global batch ----------------
ct_run "$CTRAIN" what-if "$C" --world-sizes 8,16,32 --global-batch 16 --scan per-rank --algo ring \
    --policies pure_bf16 --batches 4
cp "$CT_TMP/out" "$W/pr.out"
ct_run "$CTRAIN" what-if "$C" --world-sizes 32 --global-batch 64 --algo ring --policies pure_bf16 \
    --batches 4
cp "$CT_TMP/out" "$W/g32.out"
if res=$(python3 - "$W/pr.out" "$W/g32.out" <<'EOF'
import math, sys
pr = open(sys.argv[1]).read().splitlines()
rows = [l.split() for l in pr if l.split() and l.split()[0].isdigit() and len(l.split()) > 8]
g = [l.split() for l in open(sys.argv[2]).read().splitlines()
     if l.split() and l.split()[0].isdigit() and len(l.split()) > 8]
batches = [l for l in pr if l.startswith("what-if: --scan per-rank: N =")]
ok = [r[0] for r in rows] == ["8", "16", "32"] and all(r[3] == "64" for r in rows)
ok = ok and batches == ["what-if: --scan per-rank: N = %d, global batch %d sequences" % (n, s)
                        for n, s in ((8, 16), (16, 32), (32, 64))]
same = rows[-1] == g[0]
# the fit line of rel_err: a weighted least-squares fit of the printed figures and se_b
fit = [l.split() for l in pr if l.split()[:2] == ["ring", "pure_bf16"]][0]
x = [math.log(float(r[0])) for r in rows]; y = [math.log(float(r[4])) for r in rows]
w = [1 / (float(r[5]) / float(r[4])) ** 2 for r in rows]
sw = sum(w); mx = sum(a * b for a, b in zip(w, x)) / sw; my = sum(a * b for a, b in zip(w, y)) / sw
sxx = sum(a * (b - mx) ** 2 for a, b in zip(w, x)); sxy = sum(a * (b - mx) * (c - my) for a, b, c in zip(w, x, y))
ref, se = sxy / sxx, math.sqrt(1 / sxx)
got, gse = float(fit[2]), float(fit[3])
print("tokens/rank %s; N = 32 row %s the global replay's; rel_err exponent %.3f +- %.2f (reference %.3f +- %.2f)"
      % ([r[3] for r in rows], "equals" if same else "differs from", got, gse, ref, se))
sys.exit(0 if ok and same and abs(got - ref) < 0.02 and abs(gse - se) < 0.05 * se + 0.01 and
         "fixed tokens per rank" in "".join(pr) else 1)
EOF
); then ct_pass "--scan per-rank: $res"
else ct_fail "--scan per-rank" "$res"
fi
grep -q "at a fixed global batch (--scan global" "$W/a.out" \
    && ct_pass "a global scan names what it keeps fixed in its fit" \
    || ct_fail "global scan fit" "$(grep exponent "$W/a.out")"

# ---- 4. misuse -------------------------------------------------------------------------------
ct_expect_failure "--scan per-rank without --global-batch" "--scan per-rank without --global-batch" \
    "$CTRAIN" what-if "$C" --world-sizes 8,16 --scan per-rank
ct_expect_failure "--scan per-rank, a world size not a multiple" "--scan per-rank: world size 12" \
    "$CTRAIN" what-if "$C" --world-sizes 8,12 --scan per-rank --global-batch 1
ct_expect_failure "unknown scan" "--scan 'weak' is not one of global, per-rank" \
    "$CTRAIN" what-if "$C" --world-sizes 8 --scan weak
ct_expect_failure "--per-batch with one batch" "--per-batch without --batches 2 or more" \
    "$CTRAIN" what-if "$C" --world-sizes 8 --per-batch
ct_summary
