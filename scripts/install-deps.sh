#!/usr/bin/env bash
# Install the Debian packages ctrain needs that this machine lacks (dpkg -s decides);
# runs `apt-get update` once, only when something is missing. Not for CUDA (it comes from
# /usr/local/cuda when present). Then PyPI's numpy and safetensors (tests/export_check.py)
# through pip, only when python3 cannot import them.
set -euo pipefail
# libdnnl-dev: oneDNN (Debian 12 ships 2.6.3) for the gpt plugin's bf16 products
# (plugins/model/gpt/onednn.c); the plugin builds without it too (OpenBLAS only).
packages=(build-essential pkg-config libinih-dev libopenmpi-dev openmpi-bin libopenblas-dev
          gnuplot-nox libsentencepiece-dev sentencepiece zlib1g-dev python3 iproute2 libdnnl-dev)
missing=()
for p in "${packages[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# PyPI's numpy and safetensors for tests/export_check.py (the export tests), when absent
python_deps() {
    if command -v python3 > /dev/null && ! python3 -c 'import numpy, safetensors' 2> /dev/null; then
        echo "installing numpy and safetensors from PyPI (for tests/export_check.py)"
        python3 -m pip install --quiet numpy safetensors 2>/dev/null ||
            python3 -m pip install --quiet --break-system-packages numpy safetensors
    fi
}
[ ${#missing[@]} -eq 0 ] && { python_deps; exit 0; }
echo "installing missing Debian packages: ${missing[*]}"
sudo_cmd=""
[ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
$sudo_cmd apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
python_deps
