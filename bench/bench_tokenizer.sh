#!/usr/bin/env bash
# bench/bench_tokenizer.sh — GPT-2 BPE encoding speed, MB/s on one core: ctrain's encoder
# (`ctrain tokenize --stats`: the encoding alone, text already in memory) against tiktoken's
# encode_ordinary and the tokenizers library's encode (one thread: RAYON_NUM_THREADS=1) on the
# same text, and the ids checked equal. Then `ctrain prepare --tokenizer bpe` end to end (read,
# encode, shards) on 1 and on all cores. Reports; never gates.
# Usage: bench/bench_tokenizer.sh [TEXT_FILE] (default: Debian's licence texts repeated to
# about MB megabytes, env MB=20). Env: BUILD, REPEAT (3: the best of 3 timings each).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
ranks=.deps/tokenizers/gpt2.tiktoken
[ -f "$ranks" ] || scripts/get-gpt2-tokenizer.sh
work=$(mktemp -d /tmp/ctrain-bench-tok-XXXXXX)
trap 'rm -rf "$work"' EXIT
text=${1:-}
if [ -z "$text" ]; then
    text=$work/text.txt
    python3 - "$text" "${MB:-20}" <<'PY'
import glob, sys
base = b"".join(open(p, "rb").read() for p in sorted(glob.glob("/usr/share/common-licenses/*"))
                if not p.endswith("/GPL") and not p.endswith("/LGPL"))
want = int(float(sys.argv[2]) * 1e6)
open(sys.argv[1], "wb").write((base * (want // len(base) + 1))[:want])
PY
fi
repeat=${REPEAT:-3}
bytes=$(stat -c %s "$text")
echo "text: $text, $bytes bytes; $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
best=0
for i in $(seq "$repeat"); do
    line=$("$BUILD/ctrain" tokenize "$ranks" "$text" --count --stats 2>&1 >/dev/null)
    mbs=$(echo "$line" | sed -n 's/.*: \([0-9.]*\) MB\/s.*/\1/p')
    best=$(python3 -c "print(max($best, $mbs))")
done
echo "ctrain tokenize (one thread): $best MB/s (best of $repeat)"
"$BUILD/ctrain" tokenize "$ranks" "$text" > "$work/ids.txt"
RAYON_NUM_THREADS=1 python3 - "$text" "$ranks" "$work/ids.txt" "$repeat" "$best" <<'PY'
import sys, time
import tiktoken, tiktoken.load, tiktoken_ext.openai_public as op
text_path, ranks, ids_path, repeat, ours = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
r = tiktoken.load.load_tiktoken_bpe(ranks)
op.data_gym_to_mergeable_bpe_ranks = lambda *a, **k: r
enc = tiktoken.Encoding(**op.gpt2())
raw = open(text_path, "rb").read()
s = raw.decode("utf-8", errors="replace")
best = 0.0
for _ in range(repeat):
    t = time.perf_counter()
    ids = enc.encode_ordinary(s)
    best = max(best, len(raw) / (time.perf_counter() - t) / 1e6)
same = ids == [int(x) for x in open(ids_path).read().split()]
print("tiktoken %s encode_ordinary (one thread): %.2f MB/s (best of %d); ids equal ctrain's: %s"
      % (tiktoken.__version__, best, repeat, same))
print("ratio ctrain / tiktoken: %.2f" % (ours / best))
try:
    from tokenizers import Tokenizer, models, pre_tokenizers
    sys.path.insert(0, "tests")
    from bpe_check import hf_tokenizer
    tk = hf_tokenizer(r, False)
    hb = 0.0
    for _ in range(repeat):
        t = time.perf_counter()
        hids = tk.encode(s).ids
        hb = max(hb, len(raw) / (time.perf_counter() - t) / 1e6)
    import tokenizers
    print("tokenizers %s encode (RAYON_NUM_THREADS=1): %.2f MB/s; ids equal: %s"
          % (tokenizers.__version__, hb, hids == ids))
except ImportError as e:
    print("tokenizers: not measured (%s)" % e)
PY
for threads in 1 0; do
    start=$(date +%s.%N)
    "$BUILD/ctrain" prepare "$text" --out "$work/data$threads" --tokenizer bpe \
        --tokenizer-file "$ranks" --threads "$threads" --quiet
    end=$(date +%s.%N)
    python3 -c "print('ctrain prepare --tokenizer bpe --threads %s: %.2f MB/s end to end' % ('$threads' if '$threads' != '0' else 'all ($(nproc))', $bytes / ($end - $start) / 1e6))"
done
