#!/usr/bin/env bash
# bench/bench_recompute.sh — what [model] recompute (activation checkpointing) saves and costs on
# the CPU: GPT-2 small's shape (ini/presets/gpt2-124m.ini: 12 blocks, C = 768, 12 heads, V = 50257,
# tied head), B = 1, T = 1024, fp32, one rank, [device] threads pinned, STEPS steps with
# recompute = none, blocks and attention in turn. For each: the peak resident memory of the
# process (/usr/bin/time -v "Maximum resident set size"), the plugin's own count of the block
# activations kept for backward (its start-up line "activations kept for backward"), and the
# seconds per step after the first (metrics.jsonl tokens_per_s). Prints a markdown table
# (docs/benchmarks.md "Activation checkpointing"). Not for: GPUs (recompute is CPU-only) or a
# gate: it reports. Usage: bench/bench_recompute.sh. Env: BUILD (build), STEPS (3, at least 2),
# THREADS (nproc), NICE (10: the niceness the runs take on a shared machine), ORDER (the modes in
# the order run, default "none blocks attention"; reverse it for a second sitting).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
steps=${STEPS:-3}
threads=${THREADS:-$(nproc)}
nice_n=${NICE:-10}
[ "$steps" -ge 2 ] || { echo "bench_recompute.sh: STEPS=$steps ---> at least 2 (the first is warm-up)" >&2; exit 2; }
[ -x "$BUILD/ctrain" ] || { echo "bench_recompute.sh: no $BUILD/ctrain ---> make first" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "bench_recompute.sh: no /usr/bin/time ---> apt-get install time" >&2; exit 2; }
work=$(mktemp -d /tmp/ctrain-bench-recompute-XXXXXX)
trap 'rm -rf "$work"' EXIT

"$BUILD/ctrain" prepare --text /usr/share/common-licenses/GPL-3 --out "$work/data" \
    --tokenizer bytes --val-fraction 0 > "$work/prepare.log" 2>&1
{
    printf '[run]\nname = recompute\nout_dir = %s/run\nsteps = %s\nseed = 1\nlog_every = 1\n' "$work" "$steps"
    printf 'checkpoint_every = 0\n'
    printf '[data]\ntrain = %s/data\nbatch_size = 1\nseq_len = 1024\n' "$work"
    sed -n '/^\[model\]/,$p' ini/presets/gpt2-124m.ini
    printf '[device.cpu]\nthreads = %s\n' "$threads"
} > "$work/run.ini"

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores, threads = $threads, load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| recompute | max RSS (MiB) | block activations kept (MiB) | wall s/step (steps 2..$steps) | CPU s/step (all $steps, start-up included) |"
echo "|---|---:|---:|---:|---:|"
for mode in ${ORDER:-none blocks attention}; do
    rm -rf "$work/run"
    CTRAIN_DEBUG=1 nice -n "$nice_n" /usr/bin/time -v "$BUILD/ctrain" train "$work/run.ini" \
        --set model.recompute=$mode --force > "$work/$mode.log" 2>&1 ||
        { echo "bench_recompute.sh: the $mode run failed:" >&2; tail -5 "$work/$mode.log" >&2; exit 1; }
    rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$work/$mode.log")
    acts=$(sed -n 's/.*activations kept for backward: \([0-9.]*\) MiB.*/\1/p' "$work/$mode.log" | head -1)
    sps=$(python3 - "$work/run/metrics.jsonl" <<'PY'
import json, sys
v = [d for d in map(json.loads, open(sys.argv[1])) if "tokens_per_s" in d and d["step"] >= 2]
print(f"{sum(1024 / d['tokens_per_s'] for d in v) / len(v):.1f}")
PY
)
    cpu=$(awk -F': ' -v n="$steps" '/User time \(seconds\)|System time \(seconds\)/ { s += $2 }
                                  END { printf "%.1f", s / n }' "$work/$mode.log")
    printf '| %s | %.0f | %s | %s | %s |\n' "$mode" "$(echo "$rss / 1024" | bc -l)" "$acts" "$sps" "$cpu"
done
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
