#!/usr/bin/env bash
# test_prepare.sh — `ctrain prepare` at scale (issue 12): a 200 MB corpus prepared under an
# address-space limit well below its size (streaming: memory does not grow with the text) with
# the right token counts; the progress line; [model] vocab_size taken from meta.ini when the
# model leaves it out (validate shows the origin) and a smaller one refused naming both; bad
# JSON Lines and .gz inputs refused naming the file.
set -u
source "$(dirname "$0")/lib.sh"
ct_need_ctrain
cd "$CT_TMP"

# a 200 MB corpus of real text: the licence texts repeated
for f in /usr/share/common-licenses/*; do [ -f "$f" ] && cat "$f"; done > base.txt
for i in 1 2 3 4 5 6 7 8; do cat base.txt; done > base8.txt
: > big.txt
while [ "$(stat -c %s big.txt)" -lt 200000000 ]; do cat base8.txt base8.txt base8.txt >> big.txt; done
size=$(stat -c %s big.txt)

# 120 MB of address space (2 threads' stacks and arenas included) for 200 MB of text;
# peak resident memory under 100 MB
# AddressSanitizer reserves terabytes of address space for its shadow, so under `make asan` the
# limit cannot apply: the run goes without it, and only the resident peak (instrumented, so
# larger) is not judged
limit=(prlimit --as=120000000)
asan=0
ldd "$CTRAIN" 2>/dev/null | grep -q libasan && { limit=(); asan=1; }
ct_run "${limit[@]}" /usr/bin/time -f "peak_kb %M" "$CTRAIN" prepare big.txt \
    --out big --threads 2 --shard-tokens 50000000 --val-fraction 0.01
peak=$(grep -o 'peak_kb [0-9]*' "$CT_TMP/err" | cut -d' ' -f2)
train=$(sed -n 's/^train_tokens = //p' big/meta.ini 2>/dev/null)
val=$(sed -n 's/^val_tokens = //p' big/meta.ini 2>/dev/null)
want_val=$(python3 -c "print(round(0.01 * $size))")
if [ "$ct_rc" -ne 0 ]; then
    ct_fail prepare_200mb_in_120mb_address_space "exited $ct_rc: $ct_err"
elif [ "$((train + val))" -ne "$size" ] || [ "$val" -ne "$want_val" ]; then
    ct_fail prepare_200mb_in_120mb_address_space "expected $size tokens ($want_val val), got train $train val $val"
elif [ "$asan" -eq 0 ] && { [ -z "$peak" ] || [ "$peak" -ge 100000 ]; }; then
    ct_fail prepare_200mb_in_120mb_address_space "expected peak RSS < 100000 kB, got '$peak'"
else
    ct_pass prepare_200mb_in_120mb_address_space
    echo "  (200 MB: peak RSS $peak kB$([ "$asan" -eq 1 ] && echo '; ASan build: no address-space limit, RSS not judged'))"
fi
# the shards hold the text: 5 train shards (4 of 50M tokens); each starts with its bytes
ntrain=$(ls big/train_*.bin | wc -l)
ok=$(python3 - "$size" <<'PY'
import struct, sys
size = int(sys.argv[1])
text = open("big.txt", "rb")
bad = 0
for i in range(4):
    with open("big/train_%06d.bin" % i, "rb") as f:
        hdr = struct.unpack("<3i", f.read(12))
        f.seek(1024)
        got = struct.unpack("<4096H", f.read(8192))
    text.seek(i * 50000000)
    want = tuple(text.read(4096))
    bad += hdr[:2] != (20240520, 1) or got != want
print("ok" if bad == 0 else "bad %d" % bad)
PY
)
if [ "$ntrain" -eq 5 ] && [ "$ok" = ok ]; then ct_pass shards_hold_the_text_in_order
else ct_fail shards_hold_the_text_in_order "expected 5 train shards holding the text, got $ntrain ($ok)"; fi
rm -rf big big.txt base8.txt

# the progress line goes to stderr; --quiet prints nothing
ct_run "$CTRAIN" prepare /usr/share/common-licenses/GPL-3 --out small
if [[ "$ct_err" == *"prepare: tokenized 0/0 MB"*"tokens, ETA"* ]]; then ct_pass progress_line
else ct_fail progress_line "stderr was: $ct_err"; fi
ct_run "$CTRAIN" prepare /usr/share/common-licenses/GPL-3 --out small --quiet --force
if [ -z "$ct_out$ct_err" ]; then ct_pass quiet_is_quiet
else ct_fail quiet_is_quiet "printed: $ct_out $ct_err"; fi

# [model] vocab_size left out: meta.ini's vocabulary, shown with its origin by validate
conf() {  # conf FILE [EXTRA MODEL LINE]
    {
        printf '[run]\nname = pp\nout_dir = %s/run\nsteps = 2\nlog_every = 1\n' "$CT_TMP"
        printf '[data]\ntrain = %s/small\nval = %s/small\nbatch_size = 2\nseq_len = 16\n' \
            "$CT_TMP" "$CT_TMP"
        printf '[model]\nplugin = gpt\nn_layer = 1\nn_head = 2\nd_model = 32\nseq_len = 16\n'
        [ $# -gt 1 ] && printf '%s\n' "$2"
        printf '[comm]\nplugin = local\n'
    } > "$1"
}
conf novocab.ini
ct_run "$CTRAIN" validate novocab.ini
if [ "$ct_rc" -eq 0 ] && grep -qE "^vocab_size = 256 +; $CT_TMP/small/meta.ini\$" "$CT_TMP/out"; then
    ct_pass vocab_size_from_meta_ini
else ct_fail vocab_size_from_meta_ini "exit $ct_rc; [model] was: $(grep vocab_size "$CT_TMP/out") $ct_err"; fi
ct_expect_success vocab_size_from_meta_ini_trains "" timeout 120 "$CTRAIN" train novocab.ini
conf smallvocab.ini "vocab_size = 200"
ct_expect_failure smaller_vocab_size_is_refused \
    "smallvocab.ini:17: [model] vocab_size = 200 is smaller than the data's vocabulary 256 ($CT_TMP/small/meta.ini)" \
    "$CTRAIN" validate smallvocab.ini

# JSON Lines: a record without the field names the file and line
printf '{"text": "one"}\n{"body": "two"}\n' > docs.jsonl
ct_expect_failure jsonl_missing_field_names_file_and_line \
    "docs.jsonl:2: --jsonl-field 'text': no key" \
    "$CTRAIN" prepare docs.jsonl --out js --jsonl-field text --quiet

# a .gz cut short, and one that holds no gzip data: refused naming the file
gzip -c /usr/share/common-licenses/GPL-3 | head -c 5000 > cut.txt.gz
ct_expect_failure truncated_gz_is_refused "cannot decompress cut.txt.gz|unexpected end of file" \
    "$CTRAIN" prepare cut.txt.gz --out gz --quiet
printf 'plain' > plain.gz
ct_expect_failure non_gzip_gz_is_refused "plain.gz is named .gz but does not hold gzip data" \
    "$CTRAIN" prepare plain.gz --out gz --quiet

# many inputs with long names: meta.ini keeps every line within what the INI reader takes (199
# characters; `sources` is cut with "..."), and the shards it describes validate and train
long="a_folder_whose_name_is_long_enough_to_matter_$(printf 'x%.0s' $(seq 60))"
mkdir -p "$long"
for i in 1 2 3 4 5; do head -c 3000 /usr/share/common-licenses/GPL-3 > "$long/part_$i.txt"; done
ct_run "$CTRAIN" prepare "$long"/part_*.txt --out many --quiet
longest=$(awk '{ if (length($0) > m) m = length($0) } END { print m }' many/meta.ini)
if [ "$ct_rc" -eq 0 ] && [ "$longest" -le 199 ] && grep -q '^sources = .*\.\.\.$' many/meta.ini; then
    ct_pass meta_ini_lines_fit_the_ini_reader
else
    ct_fail meta_ini_lines_fit_the_ini_reader "rc $ct_rc, longest line $longest: $ct_err"
fi
printf '[run]\nname = m\nout_dir = %s/many_run\nsteps = 1\n[data]\ntrain = %s/many\nbatch_size = 1\nseq_len = 8\n[model]\nplugin = gpt\nn_layer = 1\nd_model = 16\nn_head = 2\nseq_len = 8\n' "$PWD" "$PWD" > many.ini
ct_expect_success prepared_shards_with_many_sources_train "" "$CTRAIN" train many.ini

ct_summary
