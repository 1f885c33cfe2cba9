#!/usr/bin/env bash
# bench/bench_data.sh — data at scale (issue 12): `ctrain prepare` throughput (MB/s) and peak
# resident memory on real text (Debian's documentation and licence texts, repeated) of 250 MB
# and 1 GB with the bytes tokenizer, and of 100 MB and 1 GB with sentencepiece trained on a
# sample (its encoder runs at about 2 MB/s per core: the 1 GB run takes long); then
# the time loader_open takes on the 1 GB corpus's shards (1G tokens, 2 GB) with today's data.c
# and with the one of BASE (default 2777beb, which scanned every token at open). Reports; never
# gates. Everything is made under a fresh folder in $TMPDIR (default /tmp) and removed.
# Usage: bench/bench_data.sh   Env: BUILD, BASE, SIZE_MB (default 1024), SP_SAMPLE (default
# 20000000), SP_VOCAB (default 8192), THREADS (default: all cores).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BASE=${BASE:-2777beb}
SIZE_MB=${SIZE_MB:-1024}
SP_SAMPLE=${SP_SAMPLE:-20000000}
SP_VOCAB=${SP_VOCAB:-8192}
THREADS=${THREADS:-0}
work=$(mktemp -d "${TMPDIR:-/tmp}/ctrain-bench-data-XXXXXX")
trap 'rm -rf "$work"' EXIT
df -h "$work" | tail -1 | awk '{print "disk: " $4 " free on " $6}'
need_kb=$(( SIZE_MB * 1024 * 5 ))
free_kb=$(df -k --output=avail "$work" | tail -1)
if [ "$free_kb" -lt "$need_kb" ]; then
    echo "bench_data: needs about $((need_kb / 1024)) MB free in $work, has $((free_kb / 1024)) MB"
    exit 1
fi

# the corpus: every .gz of /usr/share/doc decompressed, and the licence texts, repeated
{
    find /usr/share/doc -name '*.gz' -type f -print0 | sort -z | xargs -0 zcat -f 2>/dev/null || true
    find /usr/share/common-licenses -type f -print0 | sort -z | xargs -0 cat
} > "$work/base.txt"
echo "base text: $(stat -c %s "$work/base.txt") bytes"
make_corpus() {  # make_corpus FILE MB
    : > "$1"
    while [ "$(stat -c %s "$1")" -lt $(( $2 * 1000000 )) ]; do cat "$work/base.txt" >> "$1"; done
    truncate -s $(( $2 * 1000000 )) "$1"
}

prep() {  # prep LABEL FILE OUT [prepare options]: one line with MB/s and peak RSS
    local label=$1 file=$2 out=$3
    shift 3
    local mb t0 t1
    mb=$(( $(stat -c %s "$file") / 1000000 ))
    t0=$(date +%s.%N)
    /usr/bin/time -f "%M" -o "$work/rss" "$BUILD/ctrain" prepare "$file" --out "$out" --quiet \
        --threads "$THREADS" "$@"
    t1=$(date +%s.%N)
    awk -v l="$label" -v mb="$mb" -v t0="$t0" -v t1="$t1" -v rss="$(cat "$work/rss")" \
        'BEGIN {printf "%-34s %6d MB  %7.1f s  %7.1f MB/s  peak RSS %6.1f MB\n", l, mb, t1 - t0,
                mb / (t1 - t0), rss / 1024}'
}

make_corpus "$work/c250.txt" 250
prep "prepare bytes" "$work/c250.txt" "$work/b250"
rm -rf "$work/b250"
truncate -s 100000000 "$work/c250.txt"
prep "prepare sentencepiece (sample $((SP_SAMPLE / 1000000)) MB)" "$work/c250.txt" "$work/sp" \
    --tokenizer sentencepiece --vocab-size "$SP_VOCAB" --sp-sample-bytes "$SP_SAMPLE" \
    --val-fraction 0
rm -rf "$work/sp" "$work/c250.txt"
make_corpus "$work/c.txt" "$SIZE_MB"
prep "prepare bytes" "$work/c.txt" "$work/bytes" --val-fraction 0
prep "prepare sentencepiece (sample $((SP_SAMPLE / 1000000)) MB)" "$work/c.txt" "$work/sp" \
    --tokenizer sentencepiece --vocab-size "$SP_VOCAB" --sp-sample-bytes "$SP_SAMPLE" \
    --val-fraction 0
rm -rf "$work/sp"

# loader_open on the bytes shards: today's data.c, and BASE's
mkdir -p "$work/old"
for f in data.c data.h files.c files.h; do git show "$BASE:host/$f" > "$work/old/$f"; done
inih="$(pkg-config --cflags --libs inih)"
cc -O2 -std=c11 -D_GNU_SOURCE -Isdk/include -Ihost -o "$work/open_new" bench/loader_open.c \
    host/data/data.c host/io/files.c host/io/outfile.c $inih -lm
cc -O2 -std=c11 -D_GNU_SOURCE -Isdk/include -I"$work/old" -o "$work/open_old" \
    bench/loader_open.c "$work/old/data.c" "$work/old/files.c" -lm
cat "$work"/bytes/train_*.bin > /dev/null  # the same warm page cache for both
echo "loader_open, $(du -sh "$work/bytes" | cut -f1) of shards (warm page cache):"
echo "  $BASE: $("$work/open_old" "$work/bytes")"
echo "  today:   $("$work/open_new" "$work/bytes")"
