#!/usr/bin/env bash
# tests/gpu/run.sh — everything ctrain checks on a GPU machine, in one script that ends within
# its budget (CT_GPU_BUDGET_S, default 500 s: call it with timeout_s=540): unpack the carried kit
# (.deps-gpu), build with nvcc for sm_90, measure the cuBLAS bf16 peak, run each comparison
# program (CUDA plugin against CPU plugin) and 20 training steps cuda-vs-cpu, benchmark ctrain
# GPT-2 124M and its PyTorch peer at the same batch (MFU against the datasheet and the measured
# peak), then the unit tests. Each step runs under its own time cap, taken from what is left so
# that the later steps keep their share, writes its own log and is judged by its exit status and
# its own "N passed, N failed" line (tests/gpu/judge.sh). Not for: CI (no GPU there).
# Usage (GPU machine, repository root): bash tests/gpu/run.sh
#        bash tests/gpu/run.sh --cpu   a dry run of this script on any machine: the comparison
#        programs with --cpu (cpu against cpu), train_compare cpu against cpu, no benchmarks.
# Writes under $OUT (5 files; the device tool returns 8 at most): summary.txt (read it first),
# machine.txt, build.log, tests.log (every step's own log, one after another), bench.log.
set -u
cd "$(dirname "$0")/../.."
. tests/gpu/judge.sh
DRY=0
[ "${1:-}" = "--cpu" ] && DRY=1
OUT=${OUT:-$(mktemp -d /tmp/ctrain-gpu-out-XXXXXX)}
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/ctrain-gpu-XXXXXX) # per-step logs, data, runs; removed at exit
trap 'rm -rf "$WORK"' EXIT
BUDGET=${CT_GPU_BUDGET_S:-500}
start=$(date +%s)
deadline=$((start + BUDGET))
summary=$OUT/summary.txt
tests_log=$OUT/tests.log
bench_log=$OUT/bench.log
: >"$summary"
: >"$tests_log"
: >"$bench_log"
fails=0
say() { echo "$*" | tee -a "$summary"; }
elapsed() { echo $(( $(date +%s) - start )); }
flunk() { say "FAIL $*"; fails=$((fails + 1)); }
# The environment this script started with: the PyTorch peer runs in it (its own cuBLAS and
# NCCL), never with the kit's or the toolkit's library paths.
clean_unset=() clean_set=()
for v in LD_LIBRARY_PATH CPATH LIBRARY_PATH PKG_CONFIG_SYSROOT_DIR PKG_CONFIG_LIBDIR PATH; do
    if [ -n "${!v+x}" ]; then clean_set+=("$v=${!v}"); else clean_unset+=(-u "$v"); fi
done
clean_env=(env "${clean_unset[@]}" "${clean_set[@]}") # env takes its -u options first

# step NAME WANT RESERVE CMD...: run CMD under `timeout` for at most WANT seconds, leaving
# RESERVE seconds of the budget to the steps after it; its own log goes to tests.log after it;
# judged by gpu_judge. A step with no time left is a FAIL (loud), not a silent skip.
step() {
    local name=$1 want=$2 reserve=$3 cap t0 rc log
    shift 3
    log="$WORK/$name.log"
    cap=$(gpu_cap "$want" "$(gpu_left "$deadline")" "$reserve")
    if [ "$cap" -eq 0 ]; then
        flunk "$name: not run: $(gpu_left "$deadline") s of the $BUDGET s budget left, $reserve s kept for later steps"
        return 1
    fi
    t0=$(date +%s)
    timeout -k 5 "$cap" "$@" >"$log" 2>&1
    rc=$?
    { echo "===== $name: exit $rc after $(( $(date +%s) - t0 )) s (cap $cap s): $*"; cat "$log"; echo; } >>"$tests_log"
    if gpu_judge "$name" "$rc" "$log" "$cap" >"$WORK/verdict"; then
        cat "$WORK/verdict" | tee -a "$summary"
    else
        cat "$WORK/verdict" | tee -a "$summary"
        fails=$((fails + 1))
        return 1
    fi
}

# ---- 1. the carried kit: inih, OpenBLAS, sentencepiece, OpenMPI, pkg-config ---------------
# gzip (gpu-kit.sh): GNU tar with gzip, else Python's tarfile (zlib is always built in); an
# older kit.tar.xz is still accepted. The unpack is checked file by file: a half kit is a FAIL.
export CT_GPU_KIT=${CT_GPU_KIT:-$WORK/kit}
kit_ok=1
if [ $DRY -eq 0 ]; then
    arc=
    for f in .deps-gpu/kit.tar.gz .deps-gpu/kit.tar.xz; do [ -f "$f" ] && arc=$f && break; done
    if [ -z "$arc" ] || [ ! -f .deps-gpu/env.sh ]; then
        flunk "kit: no .deps-gpu/kit.tar.gz or env.sh ---> run scripts/gpu-kit.sh here and carry .deps-gpu"
        kit_ok=0
    else
        mkdir -p "$CT_GPU_KIT"
        if ! tar -C "$CT_GPU_KIT" -xf "$arc" 2>"$WORK/kit.err"; then
            python3 - "$arc" "$CT_GPU_KIT" <<'PY' 2>>"$WORK/kit.err"
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:  # mode "r:*": gzip or xz by content
    kw = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
    t.extractall(sys.argv[2], **kw)
PY
        fi
        L=$CT_GPU_KIT/root/usr/lib/x86_64-linux-gnu
        for f in "$CT_GPU_KIT/root/usr/include/ini.h" "$L/libinih.so" "$L/openblas-pthread/libopenblas.so.0" \
                 "$L/libsentencepiece.so" "$L/openmpi/lib/libmpi.so" "$L/pkgconfig/inih.pc"; do
            if [ ! -e "$f" ]; then
                flunk "kit: $arc did not unpack ($f missing; $(head -c 300 "$WORK/kit.err")) ---> rerun scripts/gpu-kit.sh and carry .deps-gpu"
                kit_ok=0
                break
            fi
        done
        [ $kit_ok -eq 1 ] && say "kit: $arc unpacked and complete" && . .deps-gpu/env.sh
    fi
fi

# ---- 2. CUDA toolkit and NCCL (the toolkit's, else the pip package nvidia-nccl-*) ---------
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if [ ! -x "$CUDA_HOME/bin/nvcc" ] && command -v nvcc >/dev/null; then
    CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
fi
NVCC=$CUDA_HOME/bin/nvcc
NCCL_INC=$CUDA_HOME/include
NCCL_LIB=$CUDA_HOME/lib64
if [ ! -e "$NCCL_INC/nccl.h" ] || [ ! -e "$NCCL_LIB/libnccl.so.2" ]; then
    d=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null || true)
    if [ -n "$d" ] && [ -e "$d/include/nccl.h" ]; then NCCL_INC=$d/include; NCCL_LIB=$d/lib; fi
fi
if [ $DRY -eq 0 ]; then
    export LD_LIBRARY_PATH="$CUDA_HOME/lib64:$NCCL_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    {
        nvidia-smi 2>&1 | head -20
        echo "CUDA_HOME=$CUDA_HOME NCCL_INC=$NCCL_INC NCCL_LIB=$NCCL_LIB"
        "$NVCC" --version | tail -2
        command -v compute-sanitizer
    } >"$OUT/machine.txt" 2>&1
    say "machine: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)"
fi

# ---- 3. build (sm_90 only; warnings printed, never fatal here; -k: a host failure still
#      leaves the plugins) ---------------------------------------------------------------------
if [ $DRY -eq 1 ]; then
    BUILD=${BUILD:-build}
    export BUILD
    [ -x "$BUILD/ctrain" ] || make -j"$(nproc)" BUILD="$BUILD" CUDA=0 >"$OUT/build.log" 2>&1
    say "build: dry run: using $BUILD (CUDA=0 if it had to be built)"
else
    BUILD=${BUILD:-build-gpu}
    export BUILD
    NVCCFLAGS_GPU="-O2 -std=c++17 -Xcompiler -fPIC,-fvisibility=hidden -Isdk/include \
-gencode arch=compute_90,code=sm_90"
    cap=$(gpu_cap 240 "$(gpu_left "$deadline")" 200)
    [ "$cap" -lt 60 ] && cap=60
    t0=$(date +%s)
    timeout -k 5 "$cap" make -k -j"$(nproc)" BUILD="$BUILD" CUDA=1 CUDA_HOME="$CUDA_HOME" \
        NVCC="$NVCC" NVCCFLAGS="$NVCCFLAGS_GPU" WARN="-Wall -Wextra -Wno-unused-parameter" \
        NCCL_INC="$NCCL_INC" NCCL_LIB="$NCCL_LIB" all >"$OUT/build.log" 2>&1
    rc=$?
    nw=$(grep -c 'warning' "$OUT/build.log")
    ls "$BUILD"/plugins/ "$BUILD"/plugins/cuda/ >>"$OUT/build.log" 2>&1
    if [ $rc -eq 0 ]; then
        say "ok build: $(( $(date +%s) - t0 )) s, $nw warning lines (build.log)"
    else
        flunk "build: exit $rc after $(( $(date +%s) - t0 )) s (cap $cap s), $nw warning lines; first errors:"
        grep -m5 -E 'error|Error' "$OUT/build.log" | sed 's/^/    /' | tee -a "$summary"
    fi
    grep -m10 'warning' "$OUT/build.log" | sed 's/^/    warning: /' >>"$summary"
fi
mkdir -p "$BUILD/tests"

# ---- 4. the measured peak: cuBLAS bf16 GEMM 8192^3 (tests/gpu/gemm_peak.cu) ---------------
peak_meas=0
if [ $DRY -eq 0 ]; then
    if timeout 60 "$NVCC" -O2 -gencode arch=compute_90,code=sm_90 tests/gpu/gemm_peak.cu \
            -lcublas -o "$BUILD/tests/gemm_peak" >"$WORK/gemm_peak.build" 2>&1; then
        timeout 30 "$BUILD/tests/gemm_peak" >"$WORK/gemm_peak.log" 2>&1
        line=$(grep '^bench ' "$WORK/gemm_peak.log")
        peak_meas=$(echo "$line" | awk '{print $3}')
        say "${line:-FAIL gemm_peak: no result: $(tail -1 "$WORK/gemm_peak.log")}"
        [ -n "$line" ] || { fails=$((fails + 1)); peak_meas=0; }
    else
        flunk "gemm_peak: does not compile: $(tail -2 "$WORK/gemm_peak.build" | tr '\n' ' ')"
    fi
    cat "$WORK/gemm_peak.build" "$WORK/gemm_peak.log" >>"$bench_log" 2>/dev/null
fi

# ---- 5. comparison programs: CUDA against CPU on the same inputs ----------------------------
# Each its own log, cap and verdict. lkit_vs_cpu.cu is CUDA code (the loss kit's block sums);
# the *_vs_cpu.c programs are plain C that dlopen the plugins.
cpu_flag=()
[ $DRY -eq 1 ] && cpu_flag=(--cpu)
if command -v "$NVCC" >/dev/null 2>&1 &&
        timeout 60 "$NVCC" -O2 -std=c++17 -gencode arch=compute_90,code=sm_90 -Isdk/include \
            tests/gpu/lkit_vs_cpu.cu -o "$BUILD/tests/lkit_vs_cpu" >"$WORK/lkit.build" 2>&1; then
    step lkit_vs_cpu 30 210 "$BUILD/tests/lkit_vs_cpu" "${cpu_flag[@]}"
    if [ $DRY -eq 0 ] && command -v compute-sanitizer >/dev/null 2>&1; then
        step lkit_racecheck 60 210 compute-sanitizer --tool racecheck --error-exitcode 3 \
            "$BUILD/tests/lkit_vs_cpu" --small
    fi
else
    flunk "lkit_vs_cpu: does not compile (nvcc $NVCC): $(tail -3 "$WORK/lkit.build" 2>/dev/null | tr '\n' ' ')"
fi
declare -A want=([cuda_vs_cpu]=90 [loss_vs_cpu]=60 [model_vs_cpu]=180)
for src in tests/gpu/*_vs_cpu.c; do
    name=$(basename "$src" .c)
    bin="$BUILD/tests/$name"
    if ! cc -std=c11 -O2 -Wall -Wextra -Isdk/include -Itests/gpu "$src" -o "$bin" -ldl -lm \
            >"$WORK/$name.build" 2>&1; then
        flunk "$name: does not compile: $(grep -m2 error "$WORK/$name.build" | tr '\n' ' ')"
        continue
    fi
    step "$name" "${want[$name]:-90}" 200 "$bin" "${cpu_flag[@]}" "$BUILD/plugins"
done

# ---- 6. 20 training steps, ctrain on cuda against cpu (tests/gpu/train_compare.sh) --------
if [ -x "$BUILD/ctrain" ]; then
    step train_compare $([ $DRY -eq 1 ] && echo 300 || echo 90) 190 bash tests/gpu/train_compare.sh "$BUILD" "$WORK/train" \
        "$([ $DRY -eq 1 ] && echo cpu || echo cuda)"
else
    flunk "train_compare: no $BUILD/ctrain (build.log)"
fi

# ---- 7. throughput: ctrain GPT-2 124M bf16 amp, then PyTorch at the same batch ------------
# MFU = tokens/s * (6 N + 12 L C T) / peak, N = 124.48M parameters (tied head; the attention
# term as PaLM's appendix B), against the H200's dense bf16 datasheet peak (989 TFLOP/s) and
# the cuBLAS peak measured above. ctrain gets at most 150 s and keeps 140 s for PyTorch (whose
# torch.compile alone takes about a minute): the benchmark cannot eat the comparison's time.
mfu() { # TOKENS_PER_S -> "MFU x% of 989 TFLOP/s (datasheet), y% of Z TFLOP/s (measured)"
    python3 - "$1" "$peak_meas" <<'PY'
import sys
tps, meas = float(sys.argv[1]), float(sys.argv[2] or 0)
L, C, V, T = 12, 768, 50257, 1024
n = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
f = tps * (6 * n + 12 * L * C * T)
s = f"MFU {100 * f / 989e12:.1f}% of 989 TFLOP/s (H200 dense bf16 datasheet)"
s += f", {100 * f / (meas * 1e12):.1f}% of {meas:.0f} TFLOP/s (cuBLAS bf16 measured here)" if meas > 0 else ", no measured peak"
print(s)
PY
}
bench_ctrain() { # B CAP -> 0 and "TOKENS_PER_S" on stdout when a run produced tokens/s
    local B=$1 cap=$2 w=$WORK/bench-$1
    mkdir -p "$w"
    cat >"$w/gpt2.ini" <<INI
[run]
name = gpt2_cuda
out_dir = $w/out
steps = 10
log_every = 1
[data]
train = $WORK/bench.bin
batch_size = $B
seq_len = 1024
[model]
plugin = gpt
n_layer = 12
n_head = 12
d_model = 768
vocab_size = 50257
seq_len = 1024
tie_embeddings = true
[precision]
plugin = amp
[strategy]
plugin = ddp
[device]
type = cuda
[optim]
lr = 6e-4
INI
    echo "== ctrain B=$B (cap $cap s)" >>"$bench_log"
    timeout -k 5 "$cap" "$BUILD/ctrain" train "$w/gpt2.ini" >"$w/train.log" 2>&1
    local rc=$?
    tail -6 "$w/train.log" >>"$bench_log"
    echo "exit $rc" >>"$bench_log"
    python3 - "$w/out/metrics.jsonl" <<'PY' 2>/dev/null
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
tps = sorted(r["tokens_per_s"] for r in rows[3:])
if not tps: sys.exit(1)
print(f"{tps[len(tps) // 2]:.0f}")
PY
}
if [ $DRY -eq 1 ]; then
    say "bench: dry run: skipped"
else
    B=64 tps=
    cap=$(gpu_cap 150 "$(gpu_left "$deadline")" 140)
    if [ ! -x "$BUILD/ctrain" ]; then
        flunk "bench ctrain: no $BUILD/ctrain (PyTorch still runs, at B=$B)"
    elif [ "$cap" -eq 0 ]; then
        flunk "bench ctrain: not run: $(gpu_left "$deadline") s left, 140 s kept for PyTorch and the unit tests"
    else
        python3 bench/make_random_shard.py "$WORK/bench.bin" 50257 4000000
        t0=$(date +%s)
        tps=$(bench_ctrain 64 "$cap")
        # Out of memory at 64 shows within seconds: one retry at 32 in what is left of the cap.
        if [ -z "$tps" ] && grep -q 'cannot allocate' "$WORK/bench-64/train.log"; then
            B=32
            left=$(( cap - $(date +%s) + t0 ))
            [ "$left" -ge 30 ] && tps=$(bench_ctrain 32 "$left")
        fi
        if [ -n "$tps" ]; then
            say "bench ctrain_gpt2_124M_bf16_amp: $tps tokens/s (median of steps 4..10), B=$B T=1024, $(mfu "$tps")"
        else
            flunk "bench ctrain: no tokens/s at B=$B: $(grep -v '^[[:space:]]*$' "$WORK/bench-$B/train.log" | tail -1)"
        fi
    fi
    # The PyTorch peer: same model and batch, bf16 autocast, torch.compile, fused AdamW, SDPA;
    # in the environment this script started with (its own cuBLAS/NCCL, not the kit's paths).
    cap=$(gpu_cap 180 "$(gpu_left "$deadline")" 20)
    if [ "$cap" -eq 0 ]; then
        flunk "bench torch: not run: $(gpu_left "$deadline") s left"
    else
        echo "== torch B=$B (cap $cap s)" >>"$bench_log"
        "${clean_env[@]}" PYTHONUNBUFFERED=1 timeout -k 5 "$cap" python3 bench/torch_gpt2.py \
            --steps 20 --batch "$B" >"$WORK/torch.log" 2>&1
        rc=$?
        cat "$WORK/torch.log" >>"$bench_log"
        line=$(grep '^bench ' "$WORK/torch.log" | tail -1)
        ttps=$(echo "$line" | awk '{print $3}')
        if [ -n "$line" ]; then
            say "$line"
            say "    torch at B=$B: $(mfu "$ttps")"
        else
            flunk "bench torch: exit $rc, no result: $(grep -v '^[[:space:]]*$' "$WORK/torch.log" | tail -1)"
        fi
    fi
fi

# ---- 8. the unit tests, with a GPU present (test_cuda_build then opens the device) -------
if [ $DRY -eq 1 ]; then
    say "unit tests: dry run: skipped (tests/run.sh runs them)"
elif [ -x "$BUILD/tests/unit_tests" ]; then
    step unit_tests 150 0 "$BUILD/tests/unit_tests"
else
    flunk "unit tests: not built (build.log)"
fi
say "total: $(elapsed) s of the $BUDGET s budget; $fails step(s) failed"
[ "$fails" -eq 0 ]
