#!/usr/bin/env bash
# install-deps.sh [--run] — install what ctrain needs that this machine lacks, after saying what.
#   (no option)  what `make test` needs: every Debian package of the build and the tests, then,
#                through pip and only when python3 cannot import them, PyPI's numpy and
#                safetensors (tests/export_check.py), tiktoken and tokenizers (the references of
#                tests/bpe_check.py) and tensorboard (tests/cli/test_tensorboard.sh); and GPT-2's
#                ranks file into .deps/tokenizers (scripts/get-gpt2-tokenizer.sh).
#   --run        what `make run` needs: the Debian packages that build ctrain and its CPU plugins
#                and fetch the default corpus; nothing from PyPI, no tokenizer file.
# Debian packages: `dpkg -s` decides what is missing; the list is printed, then `apt-get update`
# runs once and `apt-get install` takes only those. Not for CUDA (it comes from /usr/local/cuda).
# Python packages go into python3's own site (the system's Python on Debian) and the script says
# so before pip runs; CTRAIN_NO_PIP=1 skips them. A failed PyPI download is a notice, not a
# failure: the tests that need the package then say why they are skipped.
set -euo pipefail
mode=test
case "${1:-}" in
    --run) mode=run ;;
    "") ;;
    *) echo "usage: scripts/install-deps.sh [--run]" >&2; exit 2 ;;
esac
# The build and `make run`. libdnnl-dev: oneDNN (Debian 12 ships 2.6.3) for the gpt plugin's
# bf16 products (plugins/model/gpt/onednn.c; the plugin builds without it too, OpenBLAS only);
# libopenmpi-dev: the mpi comm plugin; python3: scripts/get-corpus.sh reads the corpus' R data.
packages=(build-essential pkg-config libinih-dev libopenmpi-dev libopenblas-dev
          libsentencepiece-dev zlib1g-dev libpcre2-dev libicu-dev python3 libdnnl-dev)
# The tests besides: mpirun, gnuplot (ctrain plot), the sentencepiece tools, ip (network
# namespaces of the two-host test), pip (PyPI's packages below, get-gpt2-tokenizer.sh's download).
[ "$mode" = test ] && packages+=(openmpi-bin gnuplot-nox sentencepiece iproute2 python3-pip)
missing=()
for p in "${packages[@]}"; do
    dpkg -s "$p" > /dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "install-deps: missing Debian packages: ${missing[*]}"
    echo "install-deps: installing them with apt-get (and what they depend on)"
    sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
[ "$mode" = run ] && exit 0

# PyPI's packages of the tests, when python3 lacks them; GPT-2's ranks file
command -v python3 > /dev/null || exit 0
want=()
for m in numpy safetensors tiktoken tokenizers tensorboard; do
    python3 -c "import importlib.util as u, sys; sys.exit(not u.find_spec('$m'))" 2> /dev/null ||
        want+=("$m")
done
if [ ${#want[@]} -gt 0 ] && [ -n "${CTRAIN_NO_PIP:-}" ]; then
    echo "install-deps: python3 lacks ${want[*]}; CTRAIN_NO_PIP is set, so the tests that need them are skipped"
elif [ ${#want[@]} -gt 0 ]; then
    site=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" 2> /dev/null || echo "?")
    echo "install-deps: python3 lacks these modules of the tests: ${want[*]}"
    echo "install-deps: installing them from PyPI into $(command -v python3)'s packages (pip;" \
         "user site or $site; CTRAIN_NO_PIP=1 skips this)"
    if ! python3 -m pip install --quiet "${want[@]}" 2> /dev/null; then
        echo "install-deps: this python3 is managed by Debian (PEP 668): installing into the system's" \
             "Python with pip --break-system-packages"
        python3 -m pip install --quiet --break-system-packages "${want[@]}" ||
            echo "notice: could not install ${want[*]} from PyPI; the tests that need them say so"
    fi
fi
ranks="$(cd "$(dirname "$0")/.." && pwd)/.deps/tokenizers/gpt2.tiktoken"
if [ ! -f "$ranks" ]; then
    echo "install-deps: fetching GPT-2's tokenizer (0.8 MB, for the BPE tests) into .deps/tokenizers"
    "$(dirname "$0")/get-gpt2-tokenizer.sh" ||
        echo "notice: could not fetch gpt2.tiktoken; the BPE tests that need it say so"
fi
exit 0
