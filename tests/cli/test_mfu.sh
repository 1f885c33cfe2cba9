#!/usr/bin/env bash
# test_mfu.sh — model FLOPs utilisation in a real run: metrics.jsonl carries flops_per_token
# (first line only, equal to 6 N + 12 L T C counted here from the shape), model_tflops and mfu
# (every line); [device] peak_tflops = X gives mfu / tokens_per_s = flops_per_token / (X e12 x
# ranks) exactly (so it scales as 1/X; tokens/s itself differs run to run, the ratio does not);
# the first line of the output names the BLAS; the console line shows the MFU. No time is
# asserted. Not for: the FLOP count of GPT-2 (tests/unit/test_mfu.c).
set -u
cd "$(dirname "$0")/../.."
. tests/cli/train_lib.sh
work=$(mktemp -d /tmp/ctrain-mfu-XXXXXX)
trap 'rm -rf "$work"' EXIT

small_run_setup "$work" || { finish; exit 1; }
# small_run_setup's model: L = 1, C = 16, V = 256, T = 16, tied head, learned positions, biases
expect_fpt=$(python3 -c "
L, C, V, T = 1, 16, 256, 16
n = V * C + L * (12 * C * C + 13 * C) + 2 * C   # without wpe (T x C); the tied head once
print(6 * n + 12 * L * T * C)")

run() {  # run NAME [--set ...]: 3 steps into $work/NAME, console into $work/NAME.log
    local name=$1; shift
    "$CTRAIN" train "$work/t.ini" --set run.steps=3 --set run.out_dir="$work/$name" "$@" \
        > "$work/$name.log" 2>&1 || { fail "train $name: $(tail -3 "$work/$name.log")"; return 1; }
}

# checks DIR PEAK_TFLOPS RANKS: the columns, and mfu / tokens_per_s against the formula
checks() {
    python3 - "$1/metrics.jsonl" "$expect_fpt" "$2" "$3" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
fpt, peak, ranks = float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
errs = []
if len(rows) != 3: errs.append(f"{len(rows)} rows, expected 3")
if rows[0].get("flops_per_token") != fpt:
    errs.append(f"first row flops_per_token {rows[0].get('flops_per_token')}, expected {fpt}")
if any("flops_per_token" in r for r in rows[1:]): errs.append("flops_per_token after row 1")
if peak > 0 and rows[0].get("peak_tflops") != peak:
    errs.append(f"peak_tflops {rows[0].get('peak_tflops')}, expected {peak}")
for r in rows:
    tps, mfu, tf = r.get("tokens_per_s"), r.get("mfu"), r.get("model_tflops")
    if not (isinstance(mfu, float) and isinstance(tf, float) and tps):
        errs.append(f"step {r['step']}: mfu {mfu}, model_tflops {tf}, tokens_per_s {tps}"); continue
    if abs(tf - tps * fpt / 1e12) > 1e-12 * tf:
        errs.append(f"step {r['step']}: model_tflops {tf!r}, expected {tps * fpt / 1e12!r}")
    if peak > 0:
        want = fpt / (peak * 1e12 * ranks)
        if abs(mfu / tps - want) > 1e-12 * want:
            errs.append(f"step {r['step']}: mfu/tokens_per_s {mfu / tps!r}, expected {want!r}")
print("; ".join(errs) if errs else f"mfu/tokens_per_s = {rows[-1]['mfu'] / rows[-1]['tokens_per_s']!r}")
sys.exit(1 if errs else 0)
PY
}

# 1. the device's own peak (the cpu device measures its BLAS): columns present, first line names
#    the BLAS and (on a CPU whose OpenBLAS kernel is generic) warns; the console shows MFU
if run measured; then
    msg=$(checks "$work/measured" 0 1) && ok "measured peak: columns and flops_per_token = $expect_fpt" \
        || fail "measured peak: $msg"
    head -1 "$work/measured.log" | grep -q "^mfu: $expect_fpt FLOPs per token .*| BLAS: OpenBLAS " \
        && ok "first line names the BLAS: $(head -1 "$work/measured.log" | sed 's/.*| BLAS: //' | cut -c1-60)" \
        || fail "first line names the BLAS: $(head -1 "$work/measured.log")"
    grep -q "^step 3/3 | .* tok/s | MFU [0-9.]*% | ETA" "$work/measured.log" \
        && ok "console line shows MFU" || fail "console line shows MFU: $(grep '^step 3' "$work/measured.log")"
fi

# 2. [device] peak_tflops = X: mfu / tokens_per_s = fpt / (X e12); X = 0.5 and 2 differ by 4x
ratio() {
    python3 -c "
import json, sys
r = [json.loads(l) for l in open('$1/metrics.jsonl')][-1]
print(repr(r['mfu'] / r['tokens_per_s']))"
}
if run p05 --set device.peak_tflops=0.5 && run p2 --set device.peak_tflops=2; then
    for x in p05:0.5 p2:2; do
        msg=$(checks "$work/${x%%:*}" "${x##*:}" 1) && ok "peak_tflops = ${x##*:}: $msg" \
            || fail "peak_tflops = ${x##*:}: $msg"
    done
    python3 -c "import sys; a, b = $(ratio "$work/p05"), $(ratio "$work/p2"); \
sys.exit(0 if abs(a / b - 4) < 1e-12 else 1)" \
        && ok "mfu scales as 1/peak_tflops: ratios $(ratio "$work/p05") / $(ratio "$work/p2") = 4" \
        || fail "mfu scales as 1/peak_tflops: $(ratio "$work/p05") / $(ratio "$work/p2") != 4"
    grep -q "^mfu: .*| peak 500 GFLOP/s per rank x 1 (\[device\] peak_tflops; device cpu: " \
        "$work/p05.log" && ok "first line says where the peak comes from" \
        || fail "first line says where the peak comes from: $(head -1 "$work/p05.log")"
fi

# 3. MFU is of the whole job: two ranks (threads engine), mfu / tokens_per_s = fpt / (2 X e12)
if run w2 --set comm.world_size=2 --set device.peak_tflops=1; then
    msg=$(checks "$work/w2" 1 2) && ok "2 ranks: $msg" || fail "2 ranks: $msg"
fi

# 4. a negative peak is refused before anything runs, naming the key
if "$CTRAIN" train "$work/t.ini" --set device.peak_tflops=-1 --set run.out_dir="$work/neg" \
        > "$work/neg.log" 2>&1; then
    fail "negative peak_tflops refused: exit 0"
elif grep -q "peak_tflops" "$work/neg.log" && [ ! -e "$work/neg/metrics.jsonl" ]; then
    ok "negative peak_tflops refused: $(grep -m1 peak_tflops "$work/neg.log" | cut -c1-120)"
else
    fail "negative peak_tflops refused: $(cat "$work/neg.log")"
fi
finish
