#!/usr/bin/env bash
# tests/gpu/run.sh — everything ctrain checks on a GPU machine, in one script of at most ~8
# minutes: build with nvcc for sm_90 using only what is carried (.deps-gpu), run each
# tests/gpu/*_vs_cpu.c program (CUDA plugin against CPU plugin on the same inputs), the unit
# tests, then the throughput benchmarks (ctrain GPT-2 124M bf16 amp; PyTorch's reference).
# Writes summary.txt and logs under $OUT (at most 8 files). Not for: CI (no GPU there).
# Usage (on the GPU machine, from the repository root): bash tests/gpu/run.sh
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/ctrain-gpu-out}
mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
JOBS=${JOBS:-$(nproc)}
start=$(date +%s)
summary="$OUT/summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
elapsed() { echo $(( $(date +%s) - start )); }

# ---- 1. the carried kit: inih, OpenBLAS, sentencepiece, OpenMPI, pkg-config ---------------
export CT_GPU_KIT=${CT_GPU_KIT:-/tmp/ctrain-gpu-kit}  # unpacked outside the checkout
if [ -f .deps-gpu/kit.tar.xz ] && [ ! -d "$CT_GPU_KIT/root" ]; then
    mkdir -p "$CT_GPU_KIT" && tar -C "$CT_GPU_KIT" -xJf .deps-gpu/kit.tar.xz
fi
if [ -f .deps-gpu/env.sh ]; then
    . .deps-gpu/env.sh
else
    say "note: no .deps-gpu/env.sh (run scripts/gpu-kit.sh here first and carry .deps-gpu)"
fi

# ---- 2. CUDA toolkit and NCCL (the toolkit's, else the pip package nvidia-nccl-*) ---------
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if [ ! -x "$CUDA_HOME/bin/nvcc" ] && command -v nvcc >/dev/null; then
    CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
fi
NCCL_INC=$CUDA_HOME/include
NCCL_LIB=$CUDA_HOME/lib64
if [ ! -e "$NCCL_INC/nccl.h" ] || [ ! -e "$NCCL_LIB/libnccl.so.2" ]; then
    d=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null || true)
    if [ -n "$d" ] && [ -e "$d/include/nccl.h" ]; then NCCL_INC=$d/include; NCCL_LIB=$d/lib; fi
fi
export LD_LIBRARY_PATH="$CUDA_HOME/lib64:$NCCL_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{
    nvidia-smi 2>&1 | head -20
    echo "CUDA_HOME=$CUDA_HOME NCCL_INC=$NCCL_INC NCCL_LIB=$NCCL_LIB"
    "$CUDA_HOME/bin/nvcc" --version | tail -2
} >"$OUT/machine.txt" 2>&1
say "machine: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)"

# ---- 3. build (sm_90 only: faster; -k: a host failure still leaves the plugins) ----------
NVCCFLAGS_GPU="-O2 -std=c++17 -Xcompiler -fPIC,-fvisibility=hidden -Isdk/include \
-gencode arch=compute_90,code=sm_90 -Werror all-warnings"
timeout 240 make -k -j"$JOBS" BUILD="$BUILD" CUDA=1 CUDA_HOME="$CUDA_HOME" \
    NVCC="$CUDA_HOME/bin/nvcc" NVCCFLAGS="$NVCCFLAGS_GPU" NCCL_INC="$NCCL_INC" \
    NCCL_LIB="$NCCL_LIB" all >"$OUT/build.log" 2>&1
rc=$?
say "build: exit $rc after $(elapsed) s ($(grep -c 'error' "$OUT/build.log") lines mention error; see build.log)"
ls "$BUILD"/plugins/ >>"$OUT/build.log" 2>&1

# ---- 4. CUDA-vs-CPU programs: tests/gpu/*_vs_cpu.c (device now; model and losses later) ---
# Each is a standalone C program: cc it with the SDK headers, run it with the plugin folder.
: >"$OUT/gpu_tests.log"
for src in tests/gpu/*_vs_cpu.c; do
    name=$(basename "$src" .c)
    bin="$BUILD/tests/$name"
    mkdir -p "$BUILD/tests"
    if ! cc -std=c11 -O2 -Wall -Wextra -Werror -Isdk/include -Itests/gpu "$src" -o "$bin" \
            -ldl -lm >>"$OUT/gpu_tests.log" 2>&1; then
        say "FAIL $name: does not compile (gpu_tests.log)"
        continue
    fi
    echo "== $name" >>"$OUT/gpu_tests.log"
    timeout 180 "$bin" "$BUILD/plugins" >>"$OUT/gpu_tests.log" 2>&1
    rc=$?
    say "$name: $(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$OUT/gpu_tests.log" | tail -1) (exit $rc)"
    grep -E '^(FAIL|  )|^bench ' "$OUT/gpu_tests.log" | sed 's/^/    /' | tail -20 >>"$summary"
done

# ---- 5. the unit tests, with a GPU present (test_cuda_build then opens the device) -------
if [ -x "$BUILD/tests/unit_tests" ]; then
    BUILD=$BUILD timeout 150 "$BUILD/tests/unit_tests" >"$OUT/unit.log" 2>&1
    rc=$?
    say "unit tests: $(tail -1 "$OUT/unit.log") (exit $rc)"
    grep '^FAIL' "$OUT/unit.log" | head -10 | sed 's/^/    /' >>"$summary"
else
    say "unit tests: not built (build.log)"
fi

# ---- 6. throughput: ctrain GPT-2 124M, bf16 amp, on the GPU -------------------------------
bench_ctrain() {
    local work=/tmp/ctrain-gpu-bench
    rm -rf "$work" && mkdir -p "$work"
    python3 bench/make_random_shard.py "$work/train.bin" 50257 2000000 || return 1
    cat >"$work/gpt2.ini" <<INI
[run]
name = gpt2_cuda
out_dir = $work/out
steps = 12
log_every = 1
[data]
train = $work/train.bin
batch_size = 16
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
    timeout 120 "$BUILD/ctrain" train "$work/gpt2.ini" 2>&1 | tail -15
    python3 - "$work/out/metrics.jsonl" <<'PY' 2>/dev/null
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
tps = sorted(r["tokens_per_s"] for r in rows[3:]) or [0]
print(f"bench ctrain_gpt2_124M_bf16_amp: {tps[len(tps)//2]:.0f} tokens/s (median of steps 4..)")
PY
}
if [ $(( $(date +%s) - start )) -lt 330 ] && [ -x "$BUILD/ctrain" ]; then
    bench_ctrain >"$OUT/bench.log" 2>&1
    line=$(grep '^bench ' "$OUT/bench.log" | tail -1)
    why=$(grep -v '^[[:space:]]*$' "$OUT/bench.log" | tail -1)
    say "${line:-bench ctrain: no tokens/s: $why}"
else
    say "bench ctrain: skipped (time or no ctrain binary)"
fi

# ---- 7. the PyTorch reference: same model and batch, bf16 autocast, compile, fused AdamW --
left=$(( 470 - $(date +%s) + start ))
if [ "$left" -gt 60 ]; then
    PYTHONUNBUFFERED=1 timeout "$left" python3 bench/torch_gpt2.py --steps 20 \
        >"$OUT/torch.log" 2>&1
    line=$(grep '^bench ' "$OUT/torch.log" | tail -1)
    why=$(grep -v '^[[:space:]]*$' "$OUT/torch.log" | tail -1)
    say "${line:-bench torch: no result: $why}"
else
    say "bench torch: skipped ($left s left)"
fi
say "total: $(elapsed) s"
