#!/usr/bin/env bash
# bench/bench_dist.sh — distributed cost on this machine: seconds per step and bytes each rank
# sends per step (metric comm/bytes_per_rank, ring-algorithm bytes) for every strategy (ddp,
# no_shard, full_shard) x precision (fp32, amp = bf16 compute + f32 reduce, pure_bf16 = bf16
# reduce), under mpirun -np 2 and the threads engine at N = 2, 4, 8, on bench/run.sh's small
# shape (L=4 C=256 H=4 V=50257 T=256, random tokens) with the same global batch for every N;
# then full_shard's memory per rank at N = 1, 2, 4, 8. Reports; never gates (not a test).
# Usage: bench/bench_dist.sh. Env: BUILD (default build), STEPS (default 2: the first is
# warm-up, the median of the rest is reported), GLOBAL_BATCH (sequences per step, default 8),
# SIZES ("2 4 8"), STRATEGIES, PRECISIONS, MPI (1: also mpirun -np 2), OUT (keep the runs there).
# Bytes are exact (ring formulas, docs/benchmarks.md); seconds are only as good as the machine
# is quiet.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
steps=${STEPS:-2}
gb=${GLOBAL_BATCH:-8}
sizes=${SIZES:-"2 4 8"}
strategies=${STRATEGIES:-"ddp no_shard full_shard"}
precisions=${PRECISIONS:-"fp32 amp pure_bf16"}
use_mpi=${MPI:-1}
if [ -n "${OUT:-}" ]; then work=$OUT; mkdir -p "$work"; else
    work=$(mktemp -d /tmp/ctrain-bench-dist-XXXXXX); trap 'rm -rf "$work"' EXIT; fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_mpi_yield_when_idle=1
[ "$steps" -ge 2 ] || { echo "bench_dist: STEPS must be >= 2 (the first step is warm-up)" >&2; exit 2; }

python3 bench/make_random_shard.py "$work/train.bin" 50257 400000
cat > "$work/base.ini" <<INI
[run]
name = bench_dist
out_dir = $work/unused
steps = $steps
log_every = 1
[data]
train = $work/train.bin
batch_size = $gb
seq_len = 256
[model]
plugin = gpt
n_layer = 4
n_head = 4
d_model = 256
vocab_size = 50257
seq_len = 256
tie_embeddings = true
[precision]
plugin = fp32
[strategy]
plugin = ddp
[optim]
lr = 1e-4
INI
: > "$work/results.tsv"

# run ENGINE N STRATEGY PRECISION: train, then append one line to results.tsv.
run() {
    local engine=$1 n=$2 s=$3 p=$4 dir="$work/$1_$2_$3_$4"
    local common=(train "$work/base.ini" --set run.out_dir="$dir" --set strategy.plugin="$s"
                  --set precision.plugin="$p" --set data.batch_size=$((gb / n)))
    local t0=$SECONDS
    case $engine in
    local) "$BUILD/ctrain" "${common[@]}" --set comm.plugin=local ;;
    threads) "$BUILD/ctrain" "${common[@]}" --set comm.plugin=threads --set comm.world_size="$n" ;;
    mpi) timeout 600 mpirun --oversubscribe -np "$n" "$BUILD/ctrain" "${common[@]}" \
             --set comm.plugin=mpi ;;
    esac > "$dir.log" 2>&1 || { echo "bench_dist: $engine N=$n $s $p failed:" >&2;
                                 tail -3 "$dir.log" >&2; return 0; }
    python3 - "$dir/metrics.jsonl" "$engine" "$n" "$s" "$p" "$((gb * 256))" \
        >> "$work/results.tsv" <<'PY'
import json, statistics, sys
path, engine, n, s, p, tokens = sys.argv[1:]
rows = [json.loads(l) for l in open(path) if '"tokens_per_s"' in l]
first, rest = rows[0], rows[1:]            # the first step is warm-up
sec = statistics.median(int(tokens) / r["tokens_per_s"] for r in rest)
sent = statistics.mean(r.get("comm/bytes_per_rank", float("nan")) for r in rest)
mem = [first.get("mem/" + k + "_bytes", float("nan")) for k in ("params", "grads", "gathered", "optim")]
print("\t".join([engine, n, s, p, f"{sec:.4f}", f"{sent:.0f}"] + [f"{m:.0f}" for m in mem]))
PY
    rm -rf "$dir/checkpoints"  # the host saves the last step: ~0.2-1.5 GB per run at this shape
    echo "  $engine N=$n $s $p: $((SECONDS - t0)) s wall" >&2
}

echo "bench_dist: L=4 C=256 H=4 V=50257 T=256, global batch $gb sequences, $steps steps per run" \
     "(first = warm-up), $(nproc) cores" >&2
for p in $precisions; do
    for s in $strategies; do
        [ "$use_mpi" = 1 ] && run mpi 2 "$s" "$p"
        for n in $sizes; do run threads "$n" "$s" "$p"; done
    done
done
for n in 1 $sizes; do  # full_shard memory per rank; N > 1 comes from the matrix when it ran
    grep -q "^threads	$n	full_shard	amp	" "$work/results.tsv" && continue
    if [ "$n" = 1 ]; then run local 1 full_shard amp; else run threads "$n" full_shard amp; fi
done

python3 - "$work/results.tsv" "$gb" <<'PY'
import math, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
R = {}
for e, n, s, p, sec, sent, *mem in rows:
    R[(e, int(n), s, p)] = (float(sec), float(sent), [float(m) for m in mem])
def mb(x): return f"{x / 1e6:9.3f}"
print(f"\nper step, global batch {sys.argv[2]} x 256 tokens; MB = 1e6 bytes each rank sends per step")
print(f"{'engine':8} {'N':>2} {'strategy':10} {'precision':9} {'s/step':>7} {'MB sent':>9}")
for (e, n, s, p), (sec, sent, _) in sorted(R.items(), key=lambda kv: (kv[0][0] != "mpi", kv[0][1], kv[0][2], kv[0][3])):
    if e == "local": continue
    print(f"{e:8} {n:2} {s:10} {p:9} {sec:7.2f} {mb(sent)}")
print("\nratios: bf16 reduce / f32 reduce (pure_bf16 / amp), and full_shard / ddp (same precision)")
print(f"{'engine':8} {'N':>2} {'what':28} {'bytes':>6} {'time':>6}")
def ratio(a, b):
    if a not in R or b not in R: return None
    return R[a][1] / R[b][1] if R[b][1] else math.nan, R[a][0] / R[b][0]
for e, n in sorted({(k[0], k[1]) for k in R if k[0] != "local"}, key=lambda x: (x[0] != "mpi", x[1])):
    for s in ("ddp", "no_shard", "full_shard"):
        r = ratio((e, n, s, "pure_bf16"), (e, n, s, "amp"))
        if r: print(f"{e:8} {n:2} {s + ' pure_bf16/amp':28} {r[0]:6.2f} {r[1]:6.2f}")
    for p in ("fp32", "amp", "pure_bf16"):
        r = ratio((e, n, "full_shard", p), (e, n, "ddp", p))
        if r: print(f"{e:8} {n:2} {'full_shard/ddp ' + p:28} {r[0]:6.2f} {r[1]:6.2f}")
print("\nfull_shard amp, bytes per rank (MB): params = f32 master shard + bf16 compute shard;")
print("grads = gradient shard + peak unsharded gradient; gathered = peak gathered parameters;")
print("optim = AdamW m and v of the shard (2 x 4 bytes per element)")
print(f"{'N':>2} {'params':>9} {'grads':>9} {'gathered':>9} {'optim':>9} {'total':>9}")
for n in sorted({k[1] for k in R if k[2] == "full_shard" and k[3] == "amp"}):
    key = [k for k in R if k[1] == n and k[2] == "full_shard" and k[3] == "amp" and k[0] != "mpi"]
    if not key: continue
    m = R[key[0]][2]
    print(f"{n:2} {mb(m[0])} {mb(m[1])} {mb(m[2])} {mb(m[3])} {mb(sum(m))}")
PY
