#!/usr/bin/env bash
# Install the Debian packages ctrain needs that this machine lacks (dpkg -s decides);
# runs `apt-get update` once, only when something is missing. Not for CUDA (it comes from
# /usr/local/cuda when present). Then, through pip and only when python3 cannot import them,
# PyPI's numpy and safetensors (tests/export_check.py), tiktoken and tokenizers (the references
# of tests/bpe_check.py) and tensorboard (its event reader, tests/cli/test_tensorboard.sh); and
# GPT-2's ranks file into .deps/tokenizers (scripts/get-gpt2-tokenizer.sh). A failed download
# is a notice, not a failure: those tests then say why they are skipped.
set -euo pipefail
# libdnnl-dev: oneDNN (Debian 12 ships 2.6.3) for the gpt plugin's bf16 products
# (plugins/model/gpt/onednn.c); the plugin builds without it too (OpenBLAS only).
packages=(build-essential pkg-config libinih-dev libopenmpi-dev openmpi-bin libopenblas-dev
          gnuplot-nox libsentencepiece-dev sentencepiece zlib1g-dev libpcre2-dev python3 iproute2
          libdnnl-dev)
missing=()
for p in "${packages[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# PyPI's packages of the tests, when python3 lacks them; GPT-2's ranks file
python_deps() {
    command -v python3 > /dev/null || return 0
    local want=() m
    for m in numpy safetensors tiktoken tokenizers tensorboard; do
        python3 -c "import importlib.util as u, sys; sys.exit(not u.find_spec('$m'))" 2> /dev/null ||
            want+=("$m")
    done
    if [ ${#want[@]} -gt 0 ]; then
        echo "installing from PyPI for the tests: ${want[*]}"
        python3 -m pip install --quiet "${want[@]}" 2>/dev/null ||
            python3 -m pip install --quiet --break-system-packages "${want[@]}" ||
            echo "notice: could not install ${want[*]} from PyPI; the tests that need them say so"
    fi
    "$(dirname "$0")/get-gpt2-tokenizer.sh" ||
        echo "notice: could not fetch gpt2.tiktoken; the BPE tests that need it say so"
}
[ ${#missing[@]} -eq 0 ] && { python_deps; exit 0; }
echo "installing missing Debian packages: ${missing[*]}"
sudo_cmd=""
[ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
$sudo_cmd apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
python_deps
