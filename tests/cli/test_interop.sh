#!/usr/bin/env bash
# test_interop.sh — ctrain's Hugging Face folders with the real clients (tests/interop_check.py):
# exports loaded by transformers (GPT2LMHeadModel, LlamaForCausalLM, AutoTokenizer; logits,
# greedy generation, bf16), and transformers' save_pretrained folders (sharded, bf16, a
# rope_theta of 5e5) started from with [model] init_from; refusals of what ctrain cannot
# represent. Runs with the python of $CTRAIN_INTEROP_PYTHON, else .venv-interop (made by
# `make test-interop`), else python3; skipped, saying why, when none has torch and transformers.
set -u
source "$(dirname "$0")/lib.sh"
ranks="$ROOT/.deps/tokenizers/gpt2.tiktoken"
py=${CTRAIN_INTEROP_PYTHON:-}
[ -z "$py" ] && [ -x "$ROOT/.venv-interop/bin/python" ] && py="$ROOT/.venv-interop/bin/python"
[ -z "$py" ] && py=python3
need="import torch, transformers, sentencepiece, google.protobuf, numpy"
if ! "$py" -c "$need" 2> /dev/null; then
    echo "skip test_interop: $py cannot import torch, transformers, sentencepiece and protobuf ---> run \`make test-interop\` (it installs them into .venv-interop)"
    ct_summary
    exit 0
fi
if [ ! -f "$ranks" ] && ! "$ROOT/scripts/get-gpt2-tokenizer.sh" > /dev/null 2>&1; then
    echo "skip test_interop: $ranks is missing and PyPI cannot be reached (scripts/get-gpt2-tokenizer.sh)"
    ct_summary
    exit 0
fi
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$py" "$ROOT/tests/interop_check.py" "$CTRAIN" "$CT_TMP/w" "$ranks"
