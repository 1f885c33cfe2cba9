#!/usr/bin/env bash
# bench/bench_sample.sh — decoding speed of `ctrain sample` on the CPU: tokens/s with the gpt
# plugin's key/value cache and without it (every token recomputes its window with forward()),
# for the tiny default model (ini/tiny.ini's shape: L=4 C=128 V=4096 T=64) and GPT-2 124M
# (ini/presets/gpt2-124m.ini, T=1024), freshly initialised (`ctrain sample --init`: the speed
# does not depend on the weights). One line per figure. Reports; never gates.
# Usage: bench/bench_sample.sh [tiny|gpt2|all] (default all). Env: BUILD, TOKENS_TINY (256),
# TOKENS_GPT2 (64), THREADS ([device] threads, default 1: on a busy machine OpenMP threads that
# wait for each other on shared cores cost more than they give; 0 = all cores).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
which=${1:-all}
work=$(mktemp -d /tmp/ctrain-bench-sample-XXXXXX)
trap 'rm -rf "$work"' EXIT
prompt="1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16" # 16 token ids: no tokenizer needed

# write_ini FILE MODEL_SECTION_FILE: a run file around a [model] section (data never opened)
write_ini() {
    {
        printf '[run]\nname = bench\nseed = 1\n[data]\ntrain = unused.bin\n'
        sed -n '/^\[model\]/,/^\[/p' "$2" | sed '$!b; /^\[/d'
        printf '[device]\ntype = cpu\nthreads = %s\n' "${THREADS:-1}"
    } > "$1"
}

measure() { # label ini tokens
    local label=$1 ini=$2 tokens=$3 mode line
    for mode in cache recompute; do
        line=$("$BUILD/ctrain" sample --init "$ini" --ids --prompt "$prompt" --greedy \
               --tokens "$tokens" --stats $([ $mode = recompute ] && echo --no-cache) 2>&1 >/dev/null \
               | grep '^sample:')
        echo "$label decode ($mode): $line"
    done
}

if [ "$which" = tiny ] || [ "$which" = all ]; then
    write_ini "$work/tiny.ini" ini/tiny.ini
    measure "tiny (L4 C128 V4096 T64)" "$work/tiny.ini" "${TOKENS_TINY:-256}"
fi
if [ "$which" = gpt2 ] || [ "$which" = all ]; then
    write_ini "$work/gpt2.ini" ini/presets/gpt2-124m.ini
    measure "gpt2-124m (T1024)" "$work/gpt2.ini" "${TOKENS_GPT2:-64}"
fi
