#!/usr/bin/env bash
# test_reduce.sh — `ctrain reduce` through the real binary: results against references computed
# here in Python (NCCL's ring on one channel written out: chunks of ceil(n/N) rounded up to 8
# elements, chunk c born at rank c+1, each combine an f32 add rounded to bf16; the switch's
# once-rounded f32 sum; a two-rank sum; reduce-scatter shards in rank order; ncclAvg's
# premultiply), the part-by-part reading giving the whole-file bits, a precision plugin's hook
# (bf16_fp32acc: one f32 sum in rank order rounded once), the tuner model's decision, --stats'
# figures, and hostile inputs made in a temporary folder (a FIFO or a folder as input or output,
# sizes that do not split, an empty file, the output named as the input), each refused with a
# message that names the thing and the arithmetic, never a hang or a half-written output; a
# missing output folder is created.
set -u
source "$(dirname "$0")/lib.sh"
ct_need_ctrain

# gen FILE N COUNT SEED [f32]: N rank buffers of COUNT random bf16 (or f32) values, mixed signs
# and magnitudes, rank-major little-endian.
gen() {
    python3 - "$@" <<'PY'
import random, struct, sys
path, N, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
f32 = len(sys.argv) > 5
rnd = random.Random(seed)
out = bytearray()
for r in range(N):
    for i in range(n):
        v = rnd.uniform(0.5, 1.5) * 2.0 ** rnd.randint(-4, 4) * rnd.choice((-1, 1))
        b = struct.unpack("<I", struct.pack("<f", v))[0]
        if f32:
            out += struct.pack("<I", b)
        else:
            out += struct.pack("<H", (b + 0x7FFF + ((b >> 16) & 1)) >> 16)
open(path, "wb").write(out)
PY
}

# ref KIND FILE N OUT: the reference result of KIND (ring, nvls, rs2, avg_ring, f32acc) of FILE
# (bf16, N ranks) into OUT.
ref() {
    python3 - "$@" <<'PY'
import struct, sys
kind, path, N, outp = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
raw = open(path, "rb").read()
n = len(raw) // 2 // N
def f32(x):  # round a double to f32, nearest even
    return struct.unpack("<f", struct.pack("<f", x))[0]
def bf16(x):  # round to bf16 (from its f32 value), nearest even
    b = struct.unpack("<I", struct.pack("<f", f32(x)))[0]
    return struct.unpack("<f", struct.pack("<I", ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16))[0]
def bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0] >> 16
x = [[struct.unpack_from("<f", struct.pack("<I", struct.unpack_from("<H", raw, 2 * (r * n + i))[0] << 16))[0]
      for i in range(n)] for r in range(N)]
res = []
if kind in ("ring", "avg_ring"):
    if kind == "avg_ring":  # ncclAvg: x * bf16(1/N), rounded to bf16
        s = bf16(1.0 / N)
        x = [[bf16(v * s) for v in row] for row in x]
    cc = ((n + N - 1) // N + 7) // 8 * 8  # NCCL's last loop: ceil(n/N) aligned to 16 bytes
    for i in range(n):
        c = i // cc
        acc = x[(c + 1) % N][i]
        for h in range(2, N + 1):
            acc = bf16(f32(acc + x[(c + h) % N][i]))
        res.append(acc)
elif kind in ("nvls", "f32acc"):  # f32 sum in rank order, rounded once
    for i in range(n):
        acc = 0.0
        for r in range(N):
            acc = f32(acc + x[r][i])
        res.append(bf16(acc))
elif kind == "rs2":  # two ranks: one combine; shards in rank order
    res = [bf16(f32(x[0][i] + x[1][i])) for i in range(n)]
open(outp, "wb").write(b"".join(struct.pack("<H", bits(v)) for v in res))
PY
}

D="$CT_TMP"

# same NAME GOT WANT WHY: a pass when the two files hold the same bytes, else a failure saying WHY
same() { cmp -s "$2" "$3" && ct_pass "$1" || ct_fail "$1" "$4"; }

# --- results ---------------------------------------------------------------------------------
gen "$D/in4.bin" 4 10007 1
ref ring "$D/in4.bin" 4 "$D/ref_ring.bin"
ct_expect_success ring_all_reduce "all 4 ranks hold the same bits" \
    "$CTRAIN" reduce --world-size 4 --in "$D/in4.bin" --out "$D/ring.bin"
same ring_all_reduce_is_nccls_one_channel_ring "$D/ring.bin" "$D/ref_ring.bin" "output differs from the reference ring"
# reading in parts of 1000 elements changes memory, not bits
ct_expect_success parts_read "wrote" \
    "$CTRAIN" reduce --world-size 4 --in "$D/in4.bin" --out "$D/ring_parts.bin" --part 1000
same parts_give_the_whole_files_bits "$D/ring_parts.bin" "$D/ring.bin" "--part 1000 changed the result"
# the even split of earlier versions cuts 10007 into 2501/2502 chunks: other bits
ct_expect_success even_split "even split" \
    "$CTRAIN" reduce --world-size 4 --in "$D/in4.bin" --out "$D/even.bin" --split even
cmp -s "$D/even.bin" "$D/ring.bin" && ct_fail even_split_differs "same bits as NCCL's split" \
    || ct_pass even_split_differs

gen "$D/in3.bin" 3 4099 2
ref avg_ring "$D/in3.bin" 3 "$D/ref_avg3.bin"
ct_expect_success avg_n3 "AVG: ncclAvg" \
    "$CTRAIN" reduce --world-size 3 --in "$D/in3.bin" --out "$D/avg3.bin" --avg
same avg_premultiplies_by_bf16_one_third "$D/avg3.bin" "$D/ref_avg3.bin" "output differs from the premultiplied ring"

gen "$D/in8.bin" 8 5003 3
ref nvls "$D/in8.bin" 8 "$D/ref_nvls.bin"
ct_expect_success nvls_one_node "all 8 ranks hold the same bits" \
    "$CTRAIN" reduce --world-size 8 --in "$D/in8.bin" --out "$D/nvls.bin" --algo nvls \
    --gpus-per-node 8 --channels 16
same nvls_is_the_once_rounded_f32_sum "$D/nvls.bin" "$D/ref_nvls.bin" "output differs from the f32 sum rounded once"
ct_expect_success policy_fp32acc "precision bf16_fp32acc's all_reduce hook on 8 rank threads" \
    "$CTRAIN" reduce --world-size 8 --in "$D/in8.bin" --out "$D/acc.bin" --policy bf16_fp32acc
same policy_hook_gives_its_f32_sum "$D/acc.bin" "$D/ref_nvls.bin" "bf16_fp32acc's result is not the f32 sum rounded once"
ct_expect_success policy_sr "all 8 ranks hold the same bits" \
    "$CTRAIN" reduce --world-size 8 --in "$D/in8.bin" --out "$D/sr.bin" --policy bf16_sr \
    --set seed_offset=3 --bucket 1000

gen "$D/in2.bin" 2 4096 4
ref rs2 "$D/in2.bin" 2 "$D/ref_rs2.bin"   # two ranks: the all-reduce's sums too
ct_expect_success reduce_scatter "every rank's shard in rank order" \
    "$CTRAIN" reduce --world-size 2 --in "$D/in2.bin" --out "$D/rs2.bin" --op reduce_scatter
same reduce_scatter_shards_in_rank_order "$D/rs2.bin" "$D/ref_rs2.bin" "output differs from the two-rank sums"

# --stats: the relative error of a sum the reference says is exact (f32 sums of 8 values of
# 8 significant bits rounded once) is the rounding's alone, and 100% equal the once-rounded sum
ct_expect_success stats_printed "100.00% of elements equal the exact sum rounded once to bf16" \
    "$CTRAIN" reduce --world-size 8 --in "$D/in8.bin" --out "$D/s.bin" --algo nvls \
    --gpus-per-node 8 --stats
ct_expect_success stats_ring "stats: relative error" \
    "$CTRAIN" reduce --world-size 4 --in "$D/in4.bin" --out "$D/s4.bin" --stats
python3 - "$CT_TMP/out" <<'PY' && ct_pass stats_ring_below_a_bf16_ulp_per_hop || ct_fail stats_ring_below_a_bf16_ulp_per_hop "$(cat "$CT_TMP/out")"
import re, sys
m = re.search(r"relative error ([0-9.e+-]+)", open(sys.argv[1]).read())
e = float(m.group(1))
sys.exit(0 if 1e-4 < e < 3 * 2 ** -8 else 1)  # 3 roundings of at most half an ulp each
PY

# algo = nccl states its choice
ct_expect_success nccl_states_its_pick "NCCL 2.30 would run this" \
    "$CTRAIN" reduce --world-size 16 --in "$D/in2.bin" --out "$D/n.bin" --algo nccl \
    --gpu a100 --gpus-per-node 8 --dtype bf16 --part 64
grep -qF "at 2 nodes x 8 A100 as" "$CT_TMP/out" && ct_pass nccl_pick_names_the_cluster \
    || ct_fail nccl_pick_names_the_cluster "$ct_out"

# --- hostile inputs --------------------------------------------------------------------------
mkfifo "$D/fifo"
ct_run timeout 10 "$CTRAIN" reduce --world-size 2 --in "$D/fifo" --out "$D/x.bin"
if [ "$ct_rc" -ne 0 ] && [ "$ct_rc" -ne 124 ] && grep -qF "is a FIFO (named pipe), not a regular file" "$CT_TMP/err"; then
    ct_pass fifo_input_refused_without_blocking
else
    ct_fail fifo_input_refused_without_blocking "rc $ct_rc: $ct_err"
fi
mkdir "$D/dir"
ct_expect_failure folder_input_refused "is a directory, not a regular file" \
    "$CTRAIN" reduce --world-size 2 --in "$D/dir" --out "$D/x.bin"
head -c 1001 "$D/in2.bin" > "$D/odd.bin"
ct_expect_failure size_not_divisible "odd.bin is 1001 bytes|not a whole number of 2 ranks x bf16 elements (4 bytes)|1001 % 4 = 1 bytes left over" \
    "$CTRAIN" reduce --world-size 2 --in "$D/odd.bin" --out "$D/x.bin"
ct_expect_failure f32_size_not_divisible "12 % 8 = 4 bytes left over" \
    bash -c "head -c 12 '$D/in2.bin' > '$D/twelve.bin' && '$CTRAIN' reduce --world-size 2 --in '$D/twelve.bin' --out '$D/x.bin' --dtype f32"
ct_expect_failure shards_do_not_split "do not split into 3 shards (4099 % 3 = 1)" \
    "$CTRAIN" reduce --world-size 3 --in "$D/in3.bin" --out "$D/x.bin" --op reduce_scatter
: > "$D/empty.bin"
ct_expect_failure empty_input "empty.bin is empty" \
    "$CTRAIN" reduce --world-size 2 --in "$D/empty.bin" --out "$D/x.bin"
cp "$D/in2.bin" "$D/same.bin"
ct_expect_failure output_is_the_input "is the input file" \
    "$CTRAIN" reduce --world-size 2 --in "$D/same.bin" --out "$D/same.bin"
cmp -s "$D/same.bin" "$D/in2.bin" && ct_pass input_untouched || ct_fail input_untouched "changed"
ct_expect_failure fifo_output_refused "is a FIFO (named pipe), not a regular file; it is left as it is" \
    timeout 10 "$CTRAIN" reduce --world-size 2 --in "$D/in2.bin" --out "$D/fifo"
[ -p "$D/fifo" ] && ct_pass fifo_output_left_as_it_is || ct_fail fifo_output_left_as_it_is "replaced"
ct_expect_failure folder_output_refused "is a directory, not a regular file" \
    "$CTRAIN" reduce --world-size 2 --in "$D/in2.bin" --out "$D/dir"
ct_expect_success missing_output_folders_created "wrote" \
    "$CTRAIN" reduce --world-size 2 --in "$D/in2.bin" --out "$D/new/sub/y.bin"
same missing_output_folders_hold_the_result "$D/new/sub/y.bin" "$D/ref_rs2.bin" "not the two-rank sum"
ls "$D" | grep -q '\.tmp\.' && ct_fail no_temporaries_left "$(ls "$D")" \
    || ct_pass no_temporaries_left
[ ! -e "$D/x.bin" ] && ct_pass no_output_after_refusals || ct_fail no_output_after_refusals "x.bin exists"
ct_expect_failure avg_with_nvls "NCCL's NVLS does not reduce ncclAvg" \
    "$CTRAIN" reduce --world-size 8 --in "$D/in8.bin" --out "$D/x.bin" --avg --algo nvls
ct_expect_failure bad_gpus_per_node "not a whole number of nodes of gpus_per_node = 3" \
    "$CTRAIN" reduce --world-size 8 --in "$D/in8.bin" --out "$D/x.bin" --gpus-per-node 3
ct_expect_failure policy_without_hook "precision pure_bf16 has no all_reduce hook" \
    "$CTRAIN" reduce --world-size 2 --in "$D/in2.bin" --out "$D/x.bin" --policy pure_bf16
ct_expect_failure unknown_policy "no_such" \
    "$CTRAIN" reduce --world-size 2 --in "$D/in2.bin" --out "$D/x.bin" --policy no_such
ct_expect_failure policy_dtype "reduces in bf16, the input holds f32" \
    "$CTRAIN" reduce --world-size 2 --in "$D/in2.bin" --out "$D/x.bin" --policy bf16_sr --dtype f32
ct_expect_failure unknown_option "unknown argument '--wrold-size'" \
    "$CTRAIN" reduce --wrold-size 2 --in "$D/in2.bin" --out "$D/x.bin"
ct_expect_failure bad_algo "--algo 'butterfly' is not one of ring, tree, dbtree" \
    "$CTRAIN" reduce --world-size 2 --in "$D/in2.bin" --out "$D/x.bin" --algo butterfly
ct_expect_failure world_size_required "--world-size is required" \
    "$CTRAIN" reduce --in "$D/in2.bin" --out "$D/x.bin"
ct_expect_success help_lists_reduce "reduce" "$CTRAIN" help

# --- f16 (ABI 1.7) -----------------------------------------------------------------------------
# N = 4 buffers of f16 values over f16's whole range (subnormals, and sums that pass 65504 and
# become Inf), reduced with --dtype f16; the reference is NCCL's one-channel ring written out
# with numpy's own f16 rounding (independent of ctrain's numerics.h): each combine an f32 add
# rounded to f16; and ncclAvg's premultiply by f16(1/3) at N = 3.
python3 - "$D/f16in4.bin" "$D/f16in3.bin" "$D/f16ref4.bin" "$D/f16avg3.bin" <<'PY'
import sys
import numpy as np
rng = np.random.default_rng(5)
def gen(N, n):
    mag = 2.0 ** rng.integers(-26, 16, size=(N, n)) * rng.uniform(1.0, 2.0, size=(N, n))
    return (mag * rng.choice([-1.0, 1.0], size=(N, n))).astype(np.float32).astype(np.float16)
def ring(x, avg=False):
    N, n = x.shape
    if avg:
        s = np.float32(np.float16(1.0 / N))
        x = (x.astype(np.float32) * s).astype(np.float16)
    cc = ((n + N - 1) // N + 7) // 8 * 8
    out = np.empty(n, np.float16)
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(n):
            c = i // cc
            acc = x[(c + 1) % N, i]
            for h in range(2, N + 1):
                acc = np.float16(np.float32(acc) + np.float32(x[(c + h) % N, i]))
            out[i] = acc
    return out
x4, x3 = gen(4, 3001), gen(3, 1000)
x4[:, :8] = np.float16(30000.0)  # 120000: Inf
x4.tofile(sys.argv[1]); x3.tofile(sys.argv[2])
ring(x4).tofile(sys.argv[3]); ring(x3, avg=True).tofile(sys.argv[4])
PY
ct_expect_success f16_ring "f16" \
    "$CTRAIN" reduce --world-size 4 --dtype f16 --in "$D/f16in4.bin" --out "$D/f16ring.bin"
same f16_ring_is_nccls_one_channel_ring_in_numpy_f16 "$D/f16ring.bin" "$D/f16ref4.bin" "output differs from numpy's f16 ring"
ct_expect_success f16_avg "f16" \
    "$CTRAIN" reduce --world-size 3 --dtype f16 --avg --in "$D/f16in3.bin" --out "$D/f16avg.bin"
same f16_avg_premultiplies_by_f16_one_third "$D/f16avg.bin" "$D/f16avg3.bin" "output differs from numpy's premultiplied f16 ring"
ct_expect_success f16_stats_names_the_overflow "the sum overflows f16" \
    "$CTRAIN" reduce --world-size 3 --dtype f16 --in "$D/f16in3.bin" --out "$D/f16s.bin" --stats --force

ct_summary
