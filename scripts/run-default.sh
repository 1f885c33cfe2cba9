#!/usr/bin/env bash
# run-default.sh — what `make run` does after building: fetch the default English corpus
# (scripts/get-corpus.sh), make sub-word shards with a 4096-token sentencepiece model trained on
# it (once; reused while data/default exists), train ini/tiny.ini on the CPU, and say where the
# metrics and the checkpoint are. Extra arguments go to `ctrain train` (e.g. --set run.steps=50).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
if [ ! -s data/default/meta.ini ]; then
    mapfile -t texts < <(scripts/get-corpus.sh)
    "$BUILD/ctrain" prepare --text "${texts[@]}" --out data/default \
        --tokenizer sentencepiece --vocab-size 4096 --val-fraction 0.02
fi
grep -h "entropy" data/default/meta.ini | sed 's/^/data: /' || true
"$BUILD/ctrain" train ini/tiny.ini "$@"
echo "resolved config: runs/tiny/config.ini"
