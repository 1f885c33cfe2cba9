#!/usr/bin/env bash
# test_comm_bytes.sh — the traffic and memory figures in metrics.jsonl, end to end on a tiny GPT:
# "comm/bytes_per_rank" of a step equals the ring formula for the strategy's collectives (DDP:
# one all-reduce of the padded parameters; full_shard: two all-gathers in the param dtype and a
# reduce-scatter in the reduce dtype), mpirun -np 2 logs the same bytes as the threads engine,
# one rank logs 0, and full_shard's optimizer state per rank is DDP's divided by N.
# Not for: the per-collective formulas (unit test test_comm_bytes.c).
set -u
cd "$(dirname "$0")/../.."
. tests/cli/train_lib.sh
work=$(mktemp -d /tmp/ctrain-bytes-XXXXXX)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_mpi_yield_when_idle=1

"$CTRAIN" prepare /usr/share/common-licenses/GPL-3 --out "$work/data" --tokenizer bytes \
    --val-fraction 0.1 > /dev/null 2>&1 || { fail "prepare"; finish; exit 1; }
tiny_ini "$work/base.ini" "$work/w1" "$work/data" 256

# train NAME N STRATEGY PRECISION [launcher...]: 3 steps, global batch 8, into $work/NAME.
train() {
    local name=$1 n=$2 s=$3 p=$4; shift 4
    local comm=(--set comm.plugin=threads --set comm.world_size="$n")
    [ "$n" = 1 ] && comm=(--set comm.plugin=local)
    [ $# -gt 0 ] && comm=(--set comm.plugin=mpi)
    "$@" "$CTRAIN" train "$work/base.ini" --set run.steps=3 --set data.batch_size=$((8 / n)) \
        "${comm[@]}" --set strategy.plugin="$s" --set precision.plugin="$p" \
        --set run.out_dir="$work/$name" > "$work/$name.log" 2>&1 \
        || fail "train $name: $(tail -3 "$work/$name.log")"
}

# value NAME METRIC STEP: the metric at that step of run NAME.
value() {
    python3 - "$work/$1/metrics.jsonl" "$2" "$3" <<'PY'
import json, sys
for d in map(json.loads, open(sys.argv[1])):
    if d["step"] == int(sys.argv[3]) and sys.argv[2] in d:
        print(repr(d[sys.argv[2]])); break
else:
    print("missing")
PY
}

# expect LABEL GOT WANT SLACK: |GOT - WANT| <= SLACK. The slack covers the host's own f64
# reductions of the step (grad norm, logged scalars: a few dozen doubles), nothing else.
expect() {
    if python3 -c "import sys; g, w, s = map(float, sys.argv[1:4]); sys.exit(abs(g - w) > s)" \
        "$2" "$3" "$4" 2> /dev/null; then
        pass; echo "ok $1: $2 (formula $3)"
    else
        fail "$1: got $2, formula gives $3 (slack $4)"
    fi
}

train ddp2 2 ddp fp32
train fs2 2 full_shard fp32
train ddp4amp 4 ddp amp
train fs4amp 4 full_shard amp
train fs4bf 4 full_shard pure_bf16
train one 1 ddp fp32
train mpi_fs2 2 full_shard fp32 timeout 120 mpirun --oversubscribe -np 2

# P = padded parameters per rank world: DDP keeps f32 masters of P elements (params_bytes / 4
# with fp32: no compute copy); every strategy keeps AdamW m and v for its shard (8 bytes each).
P2=$(python3 -c "print($(value ddp2 mem/params_bytes 1) / 4)")
expect "ddp fp32 N=2: all-reduce 2(N-1)/N * 4P" "$(value ddp2 comm/bytes_per_rank 2)" \
    "$(python3 -c "print(2 * 1 / 2 * 4 * $P2)")" 256
expect "full_shard fp32 N=2: 2 all-gathers + reduce-scatter, 3 (N-1)/N * 4P" \
    "$(value fs2 comm/bytes_per_rank 2)" "$(python3 -c "print(3 * 1 / 2 * 4 * $P2)")" 256
P4=$(python3 -c "print($(value ddp4amp mem/optim_bytes 1) / 8)")
expect "ddp amp N=4: f32 all-reduce (DDP's f32 .grad under autocast) 2(N-1)/N * 4P" \
    "$(value ddp4amp comm/bytes_per_rank 2)" "$(python3 -c "print(2 * 3 / 4 * 4 * $P4)")" 512
expect "full_shard amp N=4: (N-1)/N * P * (2 + 2 bf16 gathers + 4 f32 reduce-scatter)" \
    "$(value fs4amp comm/bytes_per_rank 2)" "$(python3 -c "print(3 / 4 * $P4 * 8)")" 512
expect "full_shard pure_bf16 N=4: (N-1)/N * P * (2 + 2 + 2)" \
    "$(value fs4bf comm/bytes_per_rank 2)" "$(python3 -c "print(3 / 4 * $P4 * 6)")" 512
expect "full_shard N=4 AdamW state per rank = DDP's / 4" "$(value fs4amp mem/optim_bytes 1)" \
    "$(python3 -c "print($(value ddp4amp mem/optim_bytes 1) / 4)")" 0
expect "one rank (comm local) sends nothing" "$(value one comm/bytes_per_rank 2)" 0 0
compare_series "$work/mpi_fs2" "$work/fs2" comm/bytes_per_rank 0 \
    "mpirun -np 2 logs the threads engine's bytes (full_shard)"
finish
