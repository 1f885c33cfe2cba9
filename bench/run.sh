#!/usr/bin/env bash
# bench/run.sh — CPU training throughput, AdamW, B=4, T=256, on (a) L=4 C=256 H=4 V=50257 and
# (b) GPT-2 124M, in fp32, amp and pure_bf16 (PRECISIONS; the bf16 rows name the path that
# multiplies: the gpt plugin's start-up line "cpu bf16: ..."), against references measured in
# the same run:
#   - the BLAS sgemm peak with the kernel ctrain uses (bench/peak.c, which makes the same
#     OPENBLAS_CORETYPE decision as `ctrain train`: host/base/blas_core.c; the kernels are compared),
#   - the CPU's arithmetic peak (bench/fma_peak.c: clock and FMA rate timed, all cores),
#   - the GFLOP/s of one GPT-2 124M step's matrix products alone, OpenBLAS's and a hand-written
#     AVX-512 GEMM's (skipped without AVX-512F), on one thread and on all (bench/gemm_ceiling.c),
#   - PyTorch's tokens/s for the same shape, B, T and thread count (bench/torch_gpt2.py, eager
#     fp32 beside fp32, bf16 autocast beside amp and pure_bf16; torch given the same BLAS
#     environment), when `python3 -c 'import torch'` works,
#   - with oneDNN installed: one step's products per shape class through OpenBLAS, oneDNN's
#     f32 matmul, dnnl_sgemm and oneDNN's bf16 matmul (bench/onednn_products.c).
# Reports; never gates (docs/benchmarks.md). Usage: bench/run.sh [small|gpt2|all] (default
# all). Env: STEPS (default 6), BUILD, TORCH (0: skip the PyTorch runs), PYTHON (default
# python3: the interpreter that has torch), PRECISIONS (default "fp32 amp pure_bf16"),
# PRODUCT_REPS (repetitions of onednn_products, default 2, and of gemm_ceiling, default 3), BF16_MATMUL
# (the gpt plugin's [model] bf16_matmul for the bf16 rows; default its own, auto), PERF (1:
# training runs under `perf record` and two lines say what share of its steps the product
# kernels took, how fast they ran and where the rest went: bench/kernel_share.py; needs perf,
# costs ~1% of the tokens/s), THREADS_BENCH (0: skip bench/bench_threads.sh, which `all` runs
# last: [device.cpu] threads = 0 against fixed counts, idle and under a synthetic load, 2-15 minutes).
# A measurement that did not run prints as such ("skipped", "refused: ISA avx2 has no bf16",
# "not measured"), never as a number.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
which=${1:-all}
steps=${STEPS:-6}
python=${PYTHON:-python3}
precisions=${PRECISIONS:-fp32 amp pure_bf16}
case $which in small | gpt2 | all) ;; *)
    echo "bench/run.sh: unknown shape '$which' ---> use small, gpt2 or all" >&2
    exit 2 ;;
esac
work=$(mktemp -d /tmp/ctrain-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
threads=$(nproc)
load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "load average at the start: $(load)"

# ---- the arithmetic peak (all cores, widest FMA) -------------------------------------------
cc -O2 -pthread -o "$work/fma_peak" bench/fma_peak.c
"$work/fma_peak" 1.0 | tee "$work/fma.log" | grep -v '^fma_peak gflops' | sed 's/^fma_peak: /arith: /'
arith=$(awk '/^fma_peak gflops/ {print $3}' "$work/fma.log")
nominal=$(python3 bench/nominal_peak.py)
echo "arith: nominal estimate (bench/nominal_peak.py, not used below): ${nominal#*|} = ${nominal%%|*} GFLOP/s"

# ---- the BLAS sgemm peak with the kernel training will use ---------------------------------
cc -O2 -o "$work/peak" bench/peak.c host/base/blas_core.c -Ihost \
    $(pkg-config --cflags --libs openblas) -ldl
# the best of three measurements: a one-off disturbance lowers one of them, not all
for i in 1 2 3; do "$work/peak"; done > "$work/peak.log"
sgemm=$(awk '{if ($2 > m) m = $2} END {print m}' "$work/peak.log")
peak_kernel=$(awk '{k = $4} END {print k}' "$work/peak.log")
echo "sgemm: 2048^3 on OpenBLAS's own threads, kernel $peak_kernel${OPENBLAS_CORETYPE:+ (OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE set by the user)}: $sgemm GFLOP/s (best of 3 x 6)"

# ---- what the products themselves reach: OpenBLAS and a hand-written AVX-512 GEMM ---------
# (bench/gemm_ceiling.c: one GPT-2 124M step's products, 1 thread and all threads; ~10 s)
cc -O2 -fopenmp -o "$work/gemm_ceiling" bench/gemm_ceiling.c host/base/blas_core.c -Ihost \
    $(pkg-config --cflags --libs openblas) -ldl
"$work/gemm_ceiling" "$arith" ${PRODUCT_REPS:+"$PRODUCT_REPS"} > "$work/gemm_ceiling.log"
grep -v '^|\|^gemm_ceiling products_s' "$work/gemm_ceiling.log" | sed 's/^gemm_ceiling: /products: /'
products=$(awk '/^gemm_ceiling products_s/ {print $7}' "$work/gemm_ceiling.log")
# a peak bounds what runs under it, on every ISA (issue 31: an AVX2 peak of 69 under an sgemm of 180)
if awk -v s="$sgemm" -v a="$arith" 'BEGIN {exit !(a > 0 && s > a)}'; then
    echo "arith: WARNING: the sgemm reference $sgemm GFLOP/s exceeds the arithmetic peak $arith GFLOP/s: bench/fma_peak.c mismeasured this CPU"
fi

# ---- one step's products through oneDNN, f32 and bf16, against OpenBLAS (when installed) ----
if cc -O2 -fopenmp -DGPT_HAVE_ONEDNN -Isdk/include -Ihost -o "$work/onednn_products" \
    bench/onednn_products.c plugins/model/gpt/onednn.c host/base/blas_core.c \
    $(pkg-config --cflags --libs openblas) -ldnnl -ldl 2> "$work/onednn_products.err"; then
    for shape in $([ "$which" = all ] && echo small gpt2 || echo "$which"); do
        "$work/onednn_products" "$shape" "${PRODUCT_REPS:-2}" > "$work/onednn_$shape.log" 2>&1 || true
        sed -n 's/^onednn_products: /products: /p; s/^onednn_products \([a-z0-9]*\) step \(.*\)/products: \1, the step'"'"'s products through oneDNN: \2/p; s/^onednn_products \([a-z0-9]*\) \([a-z_]*\) \(.*\)/products: \1, \2: \3/p' "$work/onednn_$shape.log"
    done
else
    echo "products: oneDNN not measured: bench/onednn_products.c does not build here (libdnnl-dev?)"
fi

perf_ok=0
if [ "${PERF:-0}" = 1 ]; then
    if perf record -q -o "$work/probe.perf" -- true 2>/dev/null; then perf_ok=1
    else echo "perf: not measured: 'perf record' does not run here (install linux-perf; check kernel.perf_event_paranoid)"; fi
fi
torch_ok=0
if [ "${TORCH:-1}" != 0 ] && "$python" -c 'import torch' 2>/dev/null; then torch_ok=1; fi
if [ "$torch_ok" = 0 ]; then
    echo "torch: not measured: $([ "${TORCH:-1}" = 0 ] && echo "TORCH=0" || echo "'$python -c \"import torch\"' fails") (docs/benchmarks.md says how to install it)"
fi
python3 bench/make_random_shard.py "$work/train.bin" 50257 400000

# the step of median tokens/s after 2 warm-up steps, and the rate over every step (equal
# tokens a step: the harmonic mean; what perf's samples of the whole run compare with):
# "tokens/s GFLOP/s step FLOPs/token all-steps-tokens/s"
median_step() {
    python3 - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rest = sorted(rows[2:], key=lambda r: r["tokens_per_s"])
mid = rest[len(rest) // 2]
every = len(rows) / sum(1.0 / r["tokens_per_s"] for r in rows)
print(f"{mid['tokens_per_s']:.1f} {mid['model_tflops'] * 1e3:.2f} {mid['step']} {rows[0]['flops_per_token']:.0f} {every:.1f}")
PY
}

rows=()
run_shape() {  # label L C H precision
    local label=$1 L=$2 C=$3 H=$4 prec=$5
    local run=${label}_$prec
    cat > "$work/$run.ini" <<INI
[run]
name = $run
out_dir = $work/$run
steps = $steps
log_every = 1
[data]
train = $work/train.bin
batch_size = 4
seq_len = 256
[model]
plugin = gpt
n_layer = $L
n_head = $H
d_model = $C
vocab_size = 50257
seq_len = 256
tie_embeddings = true
${BF16_MATMUL:+bf16_matmul = $BF16_MATMUL}
[precision]
plugin = $prec
[strategy]
plugin = ddp
[optim]
lr = 1e-4
INI
    echo "== $run: L=$L C=$C H=$H, $prec, load average $(load)"
    local perf_cmd=()
    [ "$perf_ok" = 1 ] && perf_cmd=(env ONEDNN_JIT_PROFILE=2 perf record -q -o "$work/$run.perf" --)
    "${perf_cmd[@]}" "$BUILD/ctrain" train "$work/$run.ini" > "$work/$run.log" 2> "$work/$run.err"
    grep "^mfu: " "$work/$run.log" | sed "s/^/$run: /"
    { grep -o "cpu bf16: .*" "$work/$run.err" || true; } | head -1 | sed "s/^/$run: /"
    local kernel
    kernel=$(sed -n 's/^mfu: .*BLAS: .*, kernel \([A-Za-z0-9_]*\).*/\1/p' "$work/$run.log" | head -1)
    if [ "$kernel" != "$peak_kernel" ]; then
        echo "$run: WARNING: training ran OpenBLAS's '${kernel:-?}' kernel, the sgemm reference '$peak_kernel': the % of sgemm peak compares different kernels"
    fi
    read -r tps gflops step fpt tps_every < <(median_step "$work/$run/metrics.jsonl")
    if [ "$perf_ok" = 1 ]; then
        python3 bench/kernel_share.py "$run" "$work/$run.perf" "$tps_every" "$fpt" "$arith"
        # oneDNN's symbol map for perf (ONEDNN_JIT_PROFILE=2), /tmp/perf-PID.map: no longer needed
        for pid in $(perf report -i "$work/$run.perf" --sort pid --stdio 2>/dev/null |
                     sed -n 's/^ *[0-9.]*% *\([0-9]*\):.*/\1/p'); do
            rm -f "/tmp/perf-$pid.map"
        done
    fi
    local ttps="-" ratio="-" tdtype=fp32
    [ "$prec" = fp32 ] || tdtype=bf16 # PyTorch's bf16 autocast beside amp and pure_bf16
    if [ "$torch_ok" = 1 ]; then
        # the same BLAS setting as ctrain (torch links MKL, which ignores it: its line says) and
        # the same thread count; one PyTorch run per shape and dtype
        if [ -s "$work/${label}_$tdtype.torch.log" ] || OPENBLAS_CORETYPE=$peak_kernel OMP_NUM_THREADS=$threads \
            "$python" bench/torch_gpt2.py --device cpu \
            --dtype $tdtype --no-compile --threads "$threads" --batch 4 --seq 256 --layers "$L" \
            --heads "$H" --dim "$C" --vocab 50257 --steps $((steps - 2)) --warmup 2 \
            > "$work/${label}_$tdtype.torch.log" 2>&1; then
            sed -n 's/^torch: /torch: /p' "$work/${label}_$tdtype.torch.log" | head -1 | sed "s/^/$run: /"
            ttps=$(sed -n 's/^bench [^:]*: \([0-9.]*\) tokens\/s.*/\1/p' "$work/${label}_$tdtype.torch.log")
            ratio=$(awk -v a="$tps" -v b="$ttps" 'BEGIN {printf "%.2f", a / b}')
        else
            echo "$run: torch failed: $(tail -1 "$work/${label}_$tdtype.torch.log")"
            ttps="failed"
        fi
    fi
    local torch_label=$([ $tdtype = fp32 ] && echo "eager fp32" || echo "bf16 autocast")
    rows+=("$(awk -v l="$label" -v p="$prec" -v L="$L" -v C="$C" -v f="$fpt" -v t="$tps" -v g="$gflops" \
        -v s="$sgemm" -v a="$arith" -v tt="$ttps" -v r="$ratio" -v st="$step" -v tl="$torch_label" 'BEGIN {
        printf "| %s (L=%d C=%d) | %s | %.2f M | %.0f | %.1f | %.1f%% | %s | %s | %s |", l, L, C, p,
            f / 1e6, t, g, 100 * g / s, (a > 0 ? sprintf("%.1f%%", 100 * g / a) : "-"), tt == "-" || tt == "failed" ? tt : sprintf("%.0f (%s)", tt, tl), r }')")
}
for prec in $precisions; do
    [ "$which" = all ] || [ "$which" = small ] && run_shape small 4 256 4 "$prec"
done
for prec in $precisions; do
    [ "$which" = all ] || [ "$which" = gpt2 ] && run_shape gpt2 12 768 12 "$prec"
done
echo
arith_said="$arith GFLOP/s" products_said="$products GFLOP/s (OpenBLAS, $threads threads)"
[ "$arith" = 0 ] && arith_said="not measured (the arith: lines say why)"
[ -n "$products" ] || products_said="not measured (the products: lines say why)"
echo "AdamW, B=4, T=256, V=50257, $threads thread(s); sgemm peak $sgemm GFLOP/s ($peak_kernel), arithmetic peak $arith_said; GPT-2 124M's products alone $products_said"
echo "CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(grep -m1 -owE 'amx_bf16|avx512_bf16|avx512f|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "| shape | precision | FLOPs/token | tokens/s | GFLOP/s | of sgemm peak | of arith peak | PyTorch tokens/s | ctrain/PyTorch |"
echo "|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo "load average at the end: $(load)"
if [ "$which" = all ] && [ "${THREADS_BENCH:-1}" != 0 ]; then
    echo
    BUILD=$BUILD bash bench/bench_threads.sh
fi
exit 0
