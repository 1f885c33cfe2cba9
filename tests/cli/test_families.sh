#!/usr/bin/env bash
# test_families.sh — today's checkpoint families (Llama-3 with grouped-query attention and
# llama3 rope scaling, Qwen2 with q/k/v biases and a tied head, Mistral, SmolLM) made by
# transformers and started from with [model] init_from: torch's logits, 10 AdamW steps equal to
# torch.optim.AdamW's, greedy generation equal to generate(), the export reloaded in
# transformers (tests/families_check.py; prints the family table of docs/interop.md). Runs with
# the python of $CTRAIN_INTEROP_PYTHON (`make test-interop` sets it); skipped, saying why,
# without it, so `make test` never needs torch.
set -u
source "$(dirname "$0")/lib.sh"
py=${CTRAIN_INTEROP_PYTHON:-}
if [ -z "$py" ]; then
    echo "skip test_families: CTRAIN_INTEROP_PYTHON is not set ---> run \`make test-interop\` (a venv with torch and transformers)"
    ct_summary
    exit 0
fi
if ! "$py" -c "import torch, transformers, numpy" 2> /dev/null; then
    echo "skip test_families: $py cannot import torch, transformers and numpy ---> run \`make test-interop\`"
    ct_summary
    exit 0
fi
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 OMP_NUM_THREADS=2 \
    "$py" "$ROOT/tests/families_check.py" "$CTRAIN" "$CT_TMP/w" ${FAMILIES_TABLE:+--table "$FAMILIES_TABLE"}
