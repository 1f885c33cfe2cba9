#!/usr/bin/env bash
# run-default.sh — what `make run` does after building: fetch the default English corpus
# (scripts/get-corpus.sh), make sub-word shards with a 4096-token sentencepiece model trained on
# it (once; reused while data/default exists), train ini/tiny.ini on the CPU, and say where the
# metrics and the checkpoint are; a second run continues runs/tiny with --resume. Extra arguments
# go to `ctrain train` (e.g. --set run.steps=50, or --force to start runs/tiny over).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
if [ ! -s data/default/meta.ini ]; then
    mapfile -t texts < <(scripts/get-corpus.sh)
    "$BUILD/ctrain" prepare --text "${texts[@]}" --out data/default \
        --tokenizer sentencepiece --vocab-size 4096 --val-fraction 0.02
fi
grep -h "entropy" data/default/meta.ini | sed 's/^/data: /' || true
# a second `make run` continues the run in runs/tiny (a fresh train would be refused there);
# a finished run says so and how to extend it. `--force` among the arguments starts over.
args=()
if [[ " $* " != *" --force "* ]] && { [ -e runs/tiny/metrics.jsonl ] ||
        compgen -G 'runs/tiny/checkpoints/step_*' > /dev/null; }; then
    echo "runs/tiny holds a run: continuing it (--resume); to start over: make run RUN_ARGS=--force" \
        "or $BUILD/ctrain train ini/tiny.ini --force"
    args=(--resume)
fi
"$BUILD/ctrain" train ini/tiny.ini "${args[@]}" "$@"
echo "resolved config: runs/tiny/config.ini"
