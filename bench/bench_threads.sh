#!/usr/bin/env bash
# bench/bench_threads.sh — what `[device.cpu] threads = 0` (auto) costs against the best fixed thread
# count, on an idle machine and under a synthetic background load (issue 31): the same short
# training run (ini/tiny.ini's shape: L=4 C=128 H=4 V=4096, B=16, T=64, fp32, one rank) with
# threads = auto, 1, 2, ... nproc, first with nothing added, then with LOAD busy-loop processes
# this script starts and ends itself. Prints tokens/s (metrics.jsonl, steps after the 2 warm-up
# steps: tokens over their summed time), wall and CPU seconds of each run, and the figure: auto's
# tokens/s as a fraction of the best fixed setting's, idle and under load (goal: >= 0.85).
# Not for: big models (bench/run.sh) or many ranks; it reports, never gates (docs/benchmarks.md,
# "auto threads, idle and under load").
# Usage: bench/bench_threads.sh. Env: BUILD (default build), STEPS (20), REPEATS (2: each setting
# runs REPEATS times, in order then reversed; the median kept), LOAD (busy processes, default
# nproc; 0: no loaded phase), SETTINGS (fixed counts, default "1 .. nproc"), LOAD_MAX_S (900:
# the busy loops end by themselves after this many seconds whatever happens to this script).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
steps=${STEPS:-20}
repeats=${REPEATS:-2}
cores=$(nproc)
load_procs=${LOAD:-$cores}
settings=${SETTINGS:-$(seq -s ' ' 1 "$cores")}
for v in "$steps" "$repeats" "$load_procs" ${LOAD_MAX_S:-900} $settings; do
    case $v in '' | *[!0-9]*) echo "bench_threads.sh: '$v' is not a count ---> STEPS, REPEATS, LOAD, LOAD_MAX_S and SETTINGS take whole numbers" >&2; exit 2 ;; esac
done
[ "$steps" -ge 4 ] || { echo "bench_threads.sh: STEPS=$steps ---> use at least 4 (2 are warm-up)" >&2; exit 2; }
[ -x "$BUILD/ctrain" ] || { echo "bench_threads.sh: no $BUILD/ctrain ---> make BUILD=$BUILD first" >&2; exit 2; }

work=$(mktemp -d /tmp/ctrain-bench-threads-XXXXXX)
busy=() # the pids of the busy loops this script started
stop_load() {
    local pid
    for pid in "${busy[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${busy[@]}"; do wait "$pid" 2>/dev/null || true; done
    busy=()
}
trap 'stop_load; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

python3 bench/make_random_shard.py "$work/train.bin" 4096 200000
cat > "$work/t.ini" <<INI
[run]
name = threads
out_dir = $work/unused
steps = $steps
seed = 1337
log_every = 1
eval_every = 0
checkpoint_every = 0
[data]
train = $work/train.bin
batch_size = 16
seq_len = 64
[model]
plugin = gpt
n_layer = 4
n_head = 4
d_model = 128
vocab_size = 4096
seq_len = 64
tie_embeddings = true
[precision]
plugin = fp32
[strategy]
plugin = ddp
[comm]
plugin = local
[device]
type = cpu
[optim]
lr = 3e-3
warmup = 5
INI

load1() { cut -d' ' -f1 /proc/loadavg; }

# one_run COND SETTING REP: one training run; appends "COND SETTING tokens/s wall cpu load" to
# $work/runs and prints a line
one_run() {
    local cond=$1 th=$2 rep=$3 out=$work/run_$1_$2_$3 t
    local set=$([ "$th" = auto ] && echo 0 || echo "$th")
    TIMEFORMAT='%R %U %S'
    { time "$BUILD/ctrain" train "$work/t.ini" --set run.out_dir="$out" --set device.cpu.threads="$set" \
        > "$out.log" 2> "$out.err"; } 2> "$out.time" \
        || { echo "bench_threads.sh: the run with threads = $set failed: $(tail -2 "$out.err")" >&2; exit 1; }
    t=$(python3 - "$out/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][2:]
print(f"{len(rows) / sum(1.0 / r['tokens_per_s'] for r in rows):.1f}")
PY
)
    read -r wall user sys < "$out.time"
    local cpu l
    cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN {printf "%.2f", u + s}')
    l=$(load1)
    echo "$cond $th $t $wall $cpu $l" >> "$work/runs"
    if [ "$th" = auto ] && [ "$rep" = 1 ]; then # what auto resolved to (ctrain's start-up line)
        printf 'threads: %s, auto: %s\n' "$cond" \
            "$(sed -n 's/^threads: //p' "$out.log" | head -1 | grep . || echo "this ctrain prints no 'threads:' start-up line")"
    fi
    printf 'threads: %s, threads = %s, run %d: %s tokens/s, %s s wall, %s s CPU, load average %s\n' \
        "$cond" "$th" "$rep" "$t" "$wall" "$cpu" "$l"
    rm -rf "$out"
}

phase() { # COND: the settings in order, then reversed (ABC CBA ...), so a load that rises or
    # falls through the phase touches every setting alike
    local rep th order
    for rep in $(seq 1 "$repeats"); do
        order="auto $settings"
        [ $((rep % 2)) = 0 ] && order=$(echo "$order" | tr ' ' '\n' | tac | tr '\n' ' ')
        for th in $order; do one_run "$1" "$th" "$rep"; done
    done
}

echo "threads: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $cores CPU(s), flags $(grep -m1 -owE 'avx512f|avx512_bf16|amx_bf16|avx2|fma' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "threads: L=4 C=128 H=4 V=4096, B=16, T=64, fp32, $steps steps; auto = [device.cpu] threads = 0; settings: auto $settings; $repeats run(s) each; load average at the start $(cut -d' ' -f1-3 /proc/loadavg)"
if awk -v l="$(load1)" -v c="$cores" 'BEGIN {exit !(l >= c)}'; then
    echo "threads: note: load average $(load1) >= $cores CPUs before the idle phase: other processes are running, so 'idle' means no load added by this script"
fi
phase idle
if [ "$load_procs" -gt 0 ]; then
    for _ in $(seq 1 "$load_procs"); do
        timeout "${LOAD_MAX_S:-900}" sh -c 'while :; do :; done' &
        busy+=($!)
    done
    sleep 2 # let the scheduler spread them
    echo "threads: started $load_procs busy-loop process(es) (pids ${busy[*]}), each ending after ${LOAD_MAX_S:-900} s at the latest"
    phase "loaded+$load_procs"
    stop_load
fi

# the table and the figures: per condition and setting the median over the repeats
python3 - "$work/runs" "$settings" <<'PY'
import statistics, sys
from collections import defaultdict
runs = defaultdict(list)
order = []
for line in open(sys.argv[1]):
    cond, th, tps, wall, cpu, load = line.split()
    if cond not in order:
        order.append(cond)
    runs[cond, th].append((float(tps), float(wall), float(cpu), float(load)))
settings = ["auto"] + sys.argv[2].split()
print()
print("| condition | threads | tokens/s (median) | runs' tokens/s | wall s | CPU s | load average (1 min, after each run) |")
print("|---|---|---|---|---|---|---|")
figures = []
for cond in order:
    med = {}
    for th in settings:
        r = runs[cond, th]
        med[th] = statistics.median(x[0] for x in r)
        print(f"| {cond} | {th} | {med[th]:.0f} | {', '.join(f'{x[0]:.0f}' for x in r)} | "
              f"{statistics.median(x[1] for x in r):.2f} | {statistics.median(x[2] for x in r):.2f} | "
              f"{', '.join(f'{x[3]:.2f}' for x in r)} |")
    best = max(settings[1:], key=lambda th: med[th])
    figures.append(f"threads: {cond}: auto {med['auto']:.0f} tokens/s = {med['auto'] / med[best]:.2f} of the "
                   f"best fixed setting (threads = {best}, {med[best]:.0f} tokens/s); goal >= 0.85")
print()
print("\n".join(figures))
PY
echo "threads: load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
