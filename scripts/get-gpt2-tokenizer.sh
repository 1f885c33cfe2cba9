#!/usr/bin/env bash
# get-gpt2-tokenizer.sh [DIR] — GPT-2's byte-level BPE ranks file (gpt2.tiktoken, 0.8 MB) into
# DIR (default .deps/tokenizers, ignored by git), for the BPE tests and `make bench`: taken from
# the source archive of PyPI's openai-whisper (`pip download`, nothing installed), checked
# against its SHA-256. Does nothing when the file is there; exits 1 when it cannot get it.
set -euo pipefail
dir=${1:-"$(cd "$(dirname "$0")/.." && pwd)/.deps/tokenizers"}
want=306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930
[ -f "$dir/gpt2.tiktoken" ] && exit 0
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --no-binary :all: --dest "$tmp" openai-whisper==20250625
python3 - "$tmp" "$dir" "$want" <<'PY'
import glob, hashlib, sys, tarfile
tmp, out, want = sys.argv[1:4]
with tarfile.open(glob.glob(tmp + "/openai_whisper-*.tar.gz")[0]) as t:
    m = next(m for m in t.getmembers() if m.name.endswith("/whisper/assets/gpt2.tiktoken"))
    data = t.extractfile(m).read()
if hashlib.sha256(data).hexdigest() != want:
    sys.exit("get-gpt2-tokenizer: gpt2.tiktoken has an unexpected SHA-256")
open(out + "/gpt2.tiktoken.tmp", "wb").write(data)
PY
mv "$dir/gpt2.tiktoken.tmp" "$dir/gpt2.tiktoken"
echo "get-gpt2-tokenizer: $dir/gpt2.tiktoken"
