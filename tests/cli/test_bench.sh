#!/usr/bin/env bash
# test_bench.sh — claims about make bench's references (bench/, issue 13), cheaply: the sgemm
# reference (bench/peak.c) runs the OpenBLAS kernel `ctrain train` runs, whatever OpenBLAS
# would choose alone, and keeps a user's OPENBLAS_CORETYPE; the arithmetic peak
# (bench/fma_peak.c) measures an FMA latency of 3.5-5.5 cycles against its 1-cycle add chain
# (so its clock is a clock) and a peak that is cores x clock x FMA/cycle x lanes x 2; the
# hand-written GEMM of bench/gemm_ceiling.c matches a double-precision product; and
# bench/run.sh prints a table row with all its columns for 3-step fp32 and amp runs of the small
# shape (the amp run naming its bf16 path), one step's products through oneDNN where it is
# installed, and with PERF=1 the product kernels' share of the steps and where the rest went
# (bench/kernel_share.py) or why not. On every ISA (issue 31): fma_peak runs one thread on each
# core it may use, the printed arithmetic peak is >= the sgemm rate measured beside it, and a
# product that was refused or skipped prints as such, never as a time or rate.
# Not for: the figures themselves (they depend on the machine and its load: docs/benchmarks.md).
set -u
cd "$(dirname "$0")/../.."
. tests/cli/train_lib.sh
work=$(mktemp -d /tmp/ctrain-bench-test-XXXXXX)
trap 'rm -rf "$work"' EXIT
unset OPENBLAS_CORETYPE CTRAIN_BLAS_REEXEC

# ---- 1. peak.c runs training's kernel -----------------------------------------------------
if cc -O2 -o "$work/peak" bench/peak.c host/base/blas_core.c -Ihost $(pkg-config --cflags --libs openblas) \
    -ldl 2> "$work/cc.log"; then
    small_run_setup "$work" || { finish; exit 1; }
    "$CTRAIN" train "$work/t.ini" --set run.steps=1 --set run.out_dir="$work/one" \
        > "$work/one.log" 2>&1 || fail "train: $(tail -3 "$work/one.log")"
    trained=$(sed -nE 's/.*BLAS: .*, kernel ([A-Za-z0-9]+) .*/\1/p' "$work/one.log" | head -1)
    line=$("$work/peak" 256)
    got=$(echo "$line" | awk '$1 == "peak_gflops" && $2 > 0 {print $4}')
    [ -n "$trained" ] && [ "$got" = "$trained" ] \
        && ok "peak.c ran OpenBLAS kernel $got, the one training's first line names" \
        || fail "peak.c: expected kernel '$trained' (training's), got: $line"
    line=$(OPENBLAS_CORETYPE=Prescott "$work/peak" 256)
    [ "$(echo "$line" | awk '{print $4}')" = Prescott ] \
        && ok "peak.c keeps a user's OPENBLAS_CORETYPE=Prescott" \
        || fail "peak.c with OPENBLAS_CORETYPE=Prescott: expected kernel Prescott, got: $line"
else
    fail "bench/peak.c does not build: $(tail -3 "$work/cc.log")"
fi

# ---- 2. fma_peak.c measures a clock and a consistent peak ---------------------------------
if cc -O2 -pthread -o "$work/fma" bench/fma_peak.c 2> "$work/cc.log"; then
    "$work/fma" 0.3 > "$work/fma.log" 2>&1 || fail "fma_peak exited $?: $(tail -2 "$work/fma.log")"
    python3 - "$work/fma.log" "$(nproc)" <<'PY' && ok "fma_peak: $(grep '^fma_peak gflops' "$work/fma.log")" || fail "fma_peak: $(cat "$work/fma.log")"
import re, sys
text = open(sys.argv[1]).read()
s = re.search(r"^fma_peak gflops (\S+) clock_mhz (\S+) fma_per_cycle (\S+) isa (\S+) lanes (\d+) cores (\d+)$", text, re.M)
if not s:
    sys.exit("no summary line")
g, mhz, upc, isa, lanes, cores = float(s[1]), float(s[2]), float(s[3]), s[4], int(s[5]), int(s[6])
if isa == "none":  # no FMA / not x86: the line says so, nothing to check
    sys.exit(0)
lat = float(re.search(r"FMA latency ([0-9.]+) cycles measured", text)[1])
errors = []
if not 3.5 <= lat <= 5.5: errors.append(f"FMA latency {lat} cycles, expected 3.5-5.5")
if not 300 <= mhz <= 7000: errors.append(f"clock {mhz} MHz")
if not 0.5 <= upc <= 4.5: errors.append(f"{upc} FMA/cycle")
if not 1 <= cores <= int(sys.argv[2]): errors.append(f"{cores} cores of {sys.argv[2]} CPUs")
import os  # one thread per distinct (package, core) this process may run on: all the cores
def topo(cpu, name, default):
    try:
        return int(open(f"/sys/devices/system/cpu/cpu{cpu}/topology/{name}").read())
    except (OSError, ValueError):
        return default
allowed = os.sched_getaffinity(0)
distinct = len({(topo(c, "physical_package_id", 0), topo(c, "core_id", c)) for c in allowed})
if cores != distinct: errors.append(f"ran on {cores} core(s), but this process may use {distinct}")
expect = cores * mhz * 1e6 * upc * lanes * 2 / 1e9
if abs(g - expect) > 0.02 * g + 0.5: errors.append(f"peak {g} != cores x clock x FMA/cycle x lanes x 2 = {expect:.1f}")
if errors:
    sys.exit("; ".join(errors))
PY
else
    fail "bench/fma_peak.c does not build: $(tail -3 "$work/cc.log")"
fi

# ---- 2b. gemm_ceiling.c's hand-written GEMM computes the product it times ------------------
if cc -O2 -fopenmp -Wall -Wextra -Werror -o "$work/gemm_ceiling" bench/gemm_ceiling.c \
    host/base/blas_core.c -Ihost $(pkg-config --cflags --libs openblas) -ldl 2> "$work/cc.log"; then
    if "$work/gemm_ceiling" --check > "$work/gc.log" 2>&1; then
        ok "$(cat "$work/gc.log")"
    else
        fail "gemm_ceiling --check: $(tail -2 "$work/gc.log")"
    fi
else
    fail "bench/gemm_ceiling.c does not build: $(tail -3 "$work/cc.log")"
fi

# ---- 3. run.sh: one table row with every column, and PERF=1's line -------------------------
BUILD="$BUILD" STEPS=3 TORCH=0 PERF=1 PRECISIONS="fp32 amp" PRODUCT_REPS=1 bash bench/run.sh small \
    > "$work/run.log" 2>&1 \
    || fail "bench/run.sh small exited $?: $(tail -3 "$work/run.log")"
# with perf: the micro-kernel's share and rate as numbers in range; without: a line says why
share=$(grep '^small_fp32: perf: the product' "$work/run.log" || true)
parts=$(grep "^small_amp: perf: products' kernels" "$work/run.log" || true)
if echo "$share" | grep -qE 'took ([1-9][0-9]?|100)\.[0-9]% of the steps.* ran [0-9.]+ GFLOP/s over all its steps, so the kernels ran [0-9.]+ GFLOP/s = [0-9.]+% of the arithmetic peak' \
    && echo "$parts" | grep -qE "kernels [0-9.]+% \(OpenBLAS micro-kernel [0-9.]+%, oneDNN's JIT kernels [0-9.]+%\), packing and BLAS copies [0-9.]+%, bf16 conversions [0-9.]+%, OpenMP waits [0-9.]+%, the rest [0-9.]+%$"; then
    ok "run.sh PERF=1: ${share#small_fp32: }; ${parts#small_amp: }"
elif grep -q "^perf: not measured: 'perf record' does not run here" "$work/run.log"; then
    ok "run.sh PERF=1: perf does not run here, and run.sh says so"
else
    fail "run.sh PERF=1: no kernel-share line nor a reason: $(grep perf "$work/run.log" | tail -3)"
fi
for prec in fp32 amp; do
    row=$(grep "^| small (L=4 C=256) | $prec |" "$work/run.log")
    if echo "$row" | grep -qE '^\| small \(L=4 C=256\) \| [a-z0-9_]+ \| 99\.30 M \| [0-9]+ \| [0-9.]+ \| [0-9.]+% \| [0-9.]+% \| - \| - \|$' \
        && grep -q "^torch: not measured: TORCH=0" "$work/run.log" && ! grep -q WARNING "$work/run.log"; then
        ok "run.sh: $row"
    else
        fail "run.sh's $prec table row or torch line: $(tail -8 "$work/run.log")"
    fi
done
grep -q "^small_amp: cpu bf16: " "$work/run.log" && ok "run.sh: the amp row's path: $(grep '^small_amp: cpu bf16: ' "$work/run.log")" \
    || fail "run.sh: the amp run's 'cpu bf16:' line is missing: $(grep '^small_amp' "$work/run.log")"
if [ -e "$BUILD/.onednn-on" ] || [ -e "build/.onednn-on" ]; then
    grep -qE "^products: small, the step's products through oneDNN: openblas_s [0-9.]+ f32_s [0-9.]+ sgemm_s [0-9.]+ bf16_s ([0-9.]+|refused) " "$work/run.log" \
        && ok "run.sh: $(grep "^products: small, the step" "$work/run.log")" \
        || fail "run.sh: no oneDNN products line: $(grep '^products' "$work/run.log")"
fi
# ---- 4. every ISA: a peak bounds what runs under it; refused is never a time -------------
# the summary line: "... sgemm peak S GFLOP/s (KERNEL), arithmetic peak A GFLOP/s; GPT-2 124M's
# products alone P GFLOP/s ..." (A and P may be "not measured", never "?")
summary=$(grep '^AdamW, B=4' "$work/run.log" || true)
sgemm=$(echo "$summary" | sed -nE 's/.*sgemm peak ([0-9.]+) GFLOP\/s.*/\1/p')
arith=$(echo "$summary" | sed -nE 's/.*arithmetic peak ([0-9.]+) GFLOP\/s.*/\1/p')
if [ -z "$sgemm" ] || ! echo "$summary" | grep -qE "arithmetic peak ([0-9.]+ GFLOP/s|not measured[^;]*); GPT-2 124M's products alone ([0-9.]+ GFLOP/s \(OpenBLAS, [0-9]+ threads\)|not measured .*)$"; then
    fail "run.sh's summary line names no sgemm rate, arithmetic peak or products figure: '$summary'"
elif [ -n "$arith" ] && ! awk -v a="$arith" -v s="$sgemm" 'BEGIN {exit !(a >= s)}'; then
    fail "run.sh: arithmetic peak $arith GFLOP/s < the sgemm rate $sgemm GFLOP/s measured beside it (expected peak >= sgemm): $(grep '^arith: ' "$work/run.log" | tail -2)"
else
    ok "run.sh: arithmetic peak ${arith:-not measured} GFLOP/s >= sgemm ${sgemm} GFLOP/s; GPT-2${summary#*; GPT-2}"
fi
# a refused or skipped way: the word, in every cell and key=value it would fill; and no figure
# of 10 or more digits in the references' lines or the table (the 4.8e31 s of issue 31)
python3 - "$work/run.log" <<'PY' && ok "run.sh: refused and skipped products print as such ($(grep -cE 'refused|skipped' "$work/run.log") line(s)), never as a time" || fail "run.sh: a refused or skipped product printed as a number (expected the word)"
import re, sys
bad = []
for n, line in enumerate(open(sys.argv[1]), 1):
    line = line.rstrip("\n")
    if re.search(r"\d{10,}", line) and line.startswith(("products: ", "arith: ", "sgemm: ", "| ", "AdamW")):
        bad.append(f"{n}: {line}")
    # summary lines: each way's seconds / gain is a number or "refused"/"skipped"
    if line.startswith(("products: ", "onednn_products ")) and "refused" in line:
        for key, val in re.findall(r"\b(\w+_(?:s|gain)) (\S+)", line):
            if not re.fullmatch(r"[0-9.]+|refused|skipped", val):
                bad.append(f"{n}: {key} {val}: {line}")
    if line.startswith("products: ") and ("ISA avx2" in line or "no bf16" in line) and re.search(r"bf16_s [0-9]", line):
        bad.append(f"{n}: bf16 timed on an ISA without bf16: {line}")
text = open(sys.argv[1]).read()
isa = re.search(r"oneDNN [0-9.]+, ISA (\S+)", text)
if isa and not re.search(r"bf16|amx", isa[1]):  # no bf16 instructions: bf16 must say refused
    if not re.search(rf"refused: ISA {re.escape(isa[1])} has no bf16", text):
        bad.append(f"ISA {isa[1]}: no line 'refused: ISA {isa[1]} has no bf16'")
    if re.search(r"bf16_s [0-9]", text):
        bad.append(f"ISA {isa[1]}: a bf16 time printed: " + re.search(r".*bf16_s [0-9].*", text)[0])
for b in bad:
    print("  " + b)
sys.exit(1 if bad else 0)
PY
finish
