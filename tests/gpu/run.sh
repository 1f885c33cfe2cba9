#!/usr/bin/env bash
# tests/gpu/run.sh — everything ctrain checks on a GPU machine, in one script of at most ~8
# minutes: build with nvcc for sm_90 using only what is carried (.deps-gpu), run each
# tests/gpu/*_vs_cpu.c program (CUDA plugin against CPU plugin on the same inputs), 20 training
# steps of ctrain on cuda against cpu, the unit tests, then the throughput benchmarks (ctrain
# GPT-2 124M bf16 amp at the largest batch that fits, with MFU; PyTorch's reference).
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
ls "$BUILD"/plugins/ "$BUILD"/plugins/cuda/ >>"$OUT/build.log" 2>&1  # cuda/: the companions

# ---- 4. CUDA-vs-CPU programs: tests/gpu/*_vs_cpu.c (device, model, losses) ----------------
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

# ---- 4b. 20 training steps, ctrain with [device] type = cuda against type = cpu -----------
# Same INI, seed and data (a learnable bigram-chain shard, V=512); losses ce + zloss; the
# per-step loss of the cuda run must stay within 1e-3 (fp32) / 5e-3 (amp) relative of the cpu
# run's, and the run must learn (last < first). On the CPU alone, amp and fp32 runs of this
# INI differ by < 1e-4 over the 20 steps; the margins are for the GPU's f32 sum order and bf16
# rounding flips (model_vs_cpu.c), which Adam's normalised steps carry forward.
train_compare() {
    local work=/tmp/ctrain-gpu-train
    rm -rf "$work" && mkdir -p "$work"
    python3 - "$work/train.bin" <<'PY' || return 1
import random, struct, sys
rng = random.Random(7); V = 512; n = 400000
nxt = [rng.randrange(V) for _ in range(V)]
toks, t = [], 0
for _ in range(n):
    t = nxt[t] if rng.random() < 0.8 else rng.randrange(V)
    toks.append(t)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", *([20240520, 1, n] + [0] * 253)))
    f.write(struct.pack("<%dH" % n, *toks))
PY
    local prec dev rc=0
    for prec in fp32 amp; do
        for dev in cpu cuda; do
            cat >"$work/$prec-$dev.ini" <<INI
[run]
name = $prec-$dev
out_dir = $work/$prec-$dev
steps = 20
seed = 1234
log_every = 1
[data]
train = $work/train.bin
batch_size = 8
seq_len = 64
[model]
plugin = gpt
n_layer = 2
n_head = 4
d_model = 128
vocab_size = 512
seq_len = 64
[loss]
plugins = ce, zloss
[precision]
plugin = $prec
[strategy]
plugin = ddp
[device]
type = $dev
[optim]
lr = 3e-3
warmup = 5
INI
            timeout 60 "$BUILD/ctrain" train "$work/$prec-$dev.ini" >"$work/$prec-$dev.log" 2>&1 ||
                { echo "train $prec $dev failed:"; tail -5 "$work/$prec-$dev.log"; rc=1; }
        done
        python3 - "$work/$prec-cpu/metrics.jsonl" "$work/$prec-cuda/metrics.jsonl" "$prec" <<'PY' || rc=1
import json, sys
def losses(p):
    rows = [json.loads(l) for l in open(p)]
    return [(r["step"], r["loss"], r.get("loss/zloss", 0.0)) for r in rows if "loss" in r]
a, b, prec = losses(sys.argv[1]), losses(sys.argv[2]), sys.argv[3]
tol = 1e-3 if prec == "fp32" else 5e-3
worst = max(abs(y[1] - x[1]) / abs(x[1]) for x, y in zip(a, b)) if a and len(a) == len(b) else 1e9
learns = len(b) > 1 and b[-1][1] < b[0][1]
ok = len(a) == 20 and len(b) == 20 and worst <= tol and learns
print(("ok" if ok else "FAIL") + f" train_20_steps_{prec}_cuda_vs_cpu: {len(b)} steps, loss "
      f"{a[0][1]:.4f} -> {a[-1][1]:.4f} (cpu) vs {b[0][1]:.4f} -> {b[-1][1]:.4f} (cuda), "
      f"worst rel diff {worst:.2e} (tol {tol:.0e}); zloss term {a[-1][2]:.3e} vs {b[-1][2]:.3e}")
for x, y in zip(a, b):
    print(f"  step {x[0]:2d}  cpu {x[1]:.6f}  cuda {y[1]:.6f}")
sys.exit(0 if ok else 1)
PY
    done
    return $rc
}
if [ -x "$BUILD/ctrain" ]; then
    echo "== train_compare" >>"$OUT/gpu_tests.log"
    train_compare >>"$OUT/gpu_tests.log" 2>&1
    rc=$?
    grep -E '^(ok|FAIL) train_20_steps' "$OUT/gpu_tests.log" | tee -a "$summary" >/dev/null
    say "train_compare: exit $rc"
else
    say "train_compare: skipped (no ctrain binary)"
fi

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
# T = 1024, bf16 amp, the largest per-GPU batch that fits (tried 64, 32, 16; grad_accum 1);
# MFU = tokens/s * (6 N + 12 L C T) / 790e12 (N = 124.48M parameters, tied head; the attention
# term as PaLM's appendix B), against 790 TFLOP/s dense bf16.
bench_ctrain() {
    local work=/tmp/ctrain-gpu-bench B
    rm -rf "$work" && mkdir -p "$work"
    python3 bench/make_random_shard.py "$work/train.bin" 50257 4000000 || return 1
    for B in 64 32 16; do
        rm -rf "$work/out"
        cat >"$work/gpt2.ini" <<INI
[run]
name = gpt2_cuda
out_dir = $work/out
steps = 10
log_every = 1
[data]
train = $work/train.bin
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
        echo "== batch_size $B"
        if timeout 100 "$BUILD/ctrain" train "$work/gpt2.ini" >"$work/train-$B.log" 2>&1; then
            tail -4 "$work/train-$B.log"
            python3 - "$work/out/metrics.jsonl" "$B" <<'PY' 2>/dev/null
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
tps = sorted(r["tokens_per_s"] for r in rows[3:]) or [0]
med = tps[len(tps) // 2]
L, C, V, T = 12, 768, 50257, 1024
n = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
flops = 6 * n + 12 * L * C * T
print(f"bench ctrain_gpt2_124M_bf16_amp: {med:.0f} tokens/s (median of steps 4..), "
      f"B={sys.argv[2]} T=1024, MFU {100 * med * flops / 790e12:.1f}% of 790 TFLOP/s")
PY
            return 0
        fi
        tail -3 "$work/train-$B.log"
    done
    return 1
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
