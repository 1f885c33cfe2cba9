#!/usr/bin/env bash
# interop-venv.sh [DIR] — the project-local virtual environment of `make test-interop` (default
# .venv-interop, ignored by git): torch, transformers, tensorboard, sentencepiece and protobuf
# (transformers' sentencepiece converter), tiktoken, tokenizers, numpy, safetensors, installed
# from PyPI only when DIR's python cannot import them. Never touches the system's Python.
set -euo pipefail
dir=${1:-"$(cd "$(dirname "$0")/.." && pwd)/.venv-interop"}
[ -x "$dir/bin/python" ] || python3 -m venv "$dir"
mods=(torch transformers tensorboard sentencepiece google.protobuf tiktoken tokenizers numpy safetensors)
pkgs=(torch transformers tensorboard sentencepiece protobuf tiktoken tokenizers numpy safetensors)
want=()
for i in "${!mods[@]}"; do
    "$dir/bin/python" -c "import ${mods[$i]}" 2> /dev/null || want+=("${pkgs[$i]}")
done
if [ ${#want[@]} -gt 0 ]; then
    echo "interop-venv: installing into $dir: ${want[*]} (torch is large: minutes)"
    "$dir/bin/python" -m pip install --quiet "${want[@]}"
fi
"$dir/bin/python" -c "import torch, transformers; print('interop-venv: torch', torch.__version__, 'transformers', transformers.__version__)"
