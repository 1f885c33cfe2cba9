#!/usr/bin/env bash
# test_loss_on_batch.sh — `ctrain check-plugin LOSS.so --logits L.npy --targets T.npy --out G.npy`
# runs a loss term on an author's own batch: ce's and zloss's values and gradients against NumPy
# references computed here in float64 (cross-entropy over the counted rows, softmax minus one-hot
# over their count; z-loss coef * mean(lse^2) and its gradient 2 coef lse softmax / count), f2
# and f8 logits and i8 targets read too; and what an author can get wrong, each refused naming
# the file and the field: shapes that disagree, a target past the vocabulary, a Fortran-order or
# big-endian array, a file that is not .npy, a FIFO as input, an existing --out without --force.
set -u
source "$(dirname "$0")/lib.sh"
ct_need_ctrain
python3 -c "import numpy" 2> /dev/null || { echo "skip: numpy is missing"; ct_summary; exit $?; }
D="$CT_TMP"

python3 - "$D" <<'PY'
import sys
import numpy as np
d = sys.argv[1]
rng = np.random.default_rng(3)
N, V = 37, 101
x = rng.normal(0.0, 3.0, size=(N, V)).astype(np.float32)
t = rng.integers(0, V, size=N).astype(np.int32)
t[[4, 9]] = -100  # ignored rows
np.save(f"{d}/L.npy", x); np.save(f"{d}/T.npy", t)
np.save(f"{d}/L8.npy", x.astype(np.float64)); np.save(f"{d}/T8.npy", t.astype(np.int64))
np.save(f"{d}/L2.npy", x.astype(np.float16))
np.save(f"{d}/Lbad.npy", x[:-1]); np.save(f"{d}/Tpast.npy", np.where(t == -100, -100, V))
np.save(f"{d}/Lfortran.npy", np.asfortranarray(x)); np.save(f"{d}/Lbig.npy", x.astype(">f4"))
open(f"{d}/Lnot.npy", "wb").write(b"not an npy file at all")
def refs(xf, coef):
    x64 = xf.astype(np.float64)
    m = x64.max(axis=1, keepdims=True)
    lse = (m + np.log(np.exp(x64 - m).sum(axis=1, keepdims=True)))[:, 0]
    p = np.exp(x64 - lse[:, None])
    keep = t >= 0
    n = keep.sum()
    ce = (lse[keep] - x64[keep, t[keep]]).sum() / n
    g = p.copy(); g[keep, t[keep]] -= 1.0; g[~keep] = 0; g /= n
    z = coef * (lse[keep] ** 2).sum() / n
    gz = 2.0 * coef * lse[:, None] * p; gz[~keep] = 0; gz /= n
    return ce, g, z, gz
for name, xf in (("", x), ("2", x.astype(np.float16).astype(np.float32))):
    ce, g, z, gz = refs(xf, 1e-2)
    np.save(f"{d}/ref_ce{name}.npy", g); np.save(f"{d}/ref_z{name}.npy", gz)
    open(f"{d}/ref_ce{name}.txt", "w").write(repr(float(ce))); open(f"{d}/ref_z{name}.txt", "w").write(repr(float(z)))
PY

# close NAME VALUE_FILE GRAD REF_VALUE REF_GRAD: the printed value within 1e-6 relative and the
# gradient within 1e-5 of the largest reference element (f32 sums of V terms)
close() {
    local why
    why=$(python3 - "$@" <<'PY'
import sys, numpy as np
name, out, g, rv, rg = sys.argv[1:6]
value = float(open(out).read().split("value ")[1].split()[0])
want = float(open(rv).read())
G, R = np.load(g), np.load(rg)
why = []
if abs(value - want) > 1e-6 * abs(want): why.append(f"value {value!r}, reference {want!r}")
err = np.abs(G - R).max() / np.abs(R).max() if G.shape == R.shape else float("inf")
if G.dtype != np.float32 or not err < 1e-5:
    why.append(f"gradient {G.dtype} {G.shape}: max error {err:.3g} of the largest element (tol 1e-5)")
print("; ".join(why))
sys.exit(1 if why else 0)
PY
    ) && ct_pass "$1" || ct_fail "$1" "$why"
}

ce="$BUILD/plugins/loss_ce.so"
zl="$BUILD/plugins/loss_zloss.so"
ct_expect_success ce_runs_on_the_batch "value" \
    "$CTRAIN" check-plugin "$ce" --logits "$D/L.npy" --targets "$D/T.npy" --out "$D/G.npy"
echo "$ct_out" > "$D/ce.out"
close ce_value_and_gradient_equal_numpy_float64 "$D/ce.out" "$D/G.npy" "$D/ref_ce.txt" "$D/ref_ce.npy"
ct_expect_success zloss_runs_with_its_key "value" \
    "$CTRAIN" check-plugin "$zl" --set coef=1e-2 --logits "$D/L.npy" --targets "$D/T.npy" --out "$D/Gz.npy"
echo "$ct_out" > "$D/z.out"
close zloss_value_and_gradient_equal_numpy_float64 "$D/z.out" "$D/Gz.npy" "$D/ref_z.txt" "$D/ref_z.npy"
ct_expect_success f8_logits_and_i8_targets "value" \
    "$CTRAIN" check-plugin "$ce" --logits "$D/L8.npy" --targets "$D/T8.npy" --out "$D/G8.npy"
echo "$ct_out" > "$D/ce8.out"
close f8_and_i8_give_the_f4_results "$D/ce8.out" "$D/G8.npy" "$D/ref_ce.txt" "$D/ref_ce.npy"
ct_expect_success f2_logits "value" \
    "$CTRAIN" check-plugin "$ce" --logits "$D/L2.npy" --targets "$D/T.npy" --out "$D/G2.npy"
echo "$ct_out" > "$D/ce2.out"
close f2_logits_are_widened_exactly "$D/ce2.out" "$D/G2.npy" "$D/ref_ce2.txt" "$D/ref_ce2.npy"
ct_expect_success value_without_out "value" \
    "$CTRAIN" check-plugin "$ce" --logits "$D/L.npy" --targets "$D/T.npy"

# what an author can get wrong
ct_expect_failure existing_out_needs_force "$D/G.npy|--force" \
    "$CTRAIN" check-plugin "$ce" --logits "$D/L.npy" --targets "$D/T.npy" --out "$D/G.npy"
ct_expect_success existing_out_with_force "value" \
    "$CTRAIN" check-plugin "$ce" --logits "$D/L.npy" --targets "$D/T.npy" --out "$D/G.npy" --force
ct_expect_failure shapes_disagree "Lbad.npy|(36, 101)|(37,)|one target per row" \
    "$CTRAIN" check-plugin "$ce" --logits "$D/Lbad.npy" --targets "$D/T.npy"
ct_expect_failure target_past_the_vocabulary "row 0's target 101|101 columns" \
    "$CTRAIN" check-plugin "$ce" --logits "$D/L.npy" --targets "$D/Tpast.npy"
ct_expect_failure fortran_order_refused "Lfortran.npy|fortran_order|np.ascontiguousarray" \
    "$CTRAIN" check-plugin "$ce" --logits "$D/Lfortran.npy" --targets "$D/T.npy"
ct_expect_failure big_endian_refused "Lbig.npy|'>f4'|little-endian" \
    "$CTRAIN" check-plugin "$ce" --logits "$D/Lbig.npy" --targets "$D/T.npy"
ct_expect_failure not_an_npy_file "Lnot.npy|not a NumPy .npy file" \
    "$CTRAIN" check-plugin "$ce" --logits "$D/Lnot.npy" --targets "$D/T.npy"
mkfifo "$D/fifo.npy"
ct_expect_failure fifo_refused_at_once "fifo.npy|FIFO" \
    timeout 20 "$CTRAIN" check-plugin "$ce" --logits "$D/fifo.npy" --targets "$D/T.npy"
ct_expect_failure targets_alone_refused "--logits and --targets go together" \
    "$CTRAIN" check-plugin "$ce" --targets "$D/T.npy"
ct_expect_failure not_a_loss_plugin "is a strategy plugin|without them" \
    "$CTRAIN" check-plugin "$BUILD/plugins/strategy_ddp.so" --logits "$D/L.npy" --targets "$D/T.npy"
ct_summary
