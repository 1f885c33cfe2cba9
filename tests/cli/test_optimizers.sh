#!/usr/bin/env bash
# test_optimizers.sh — the optimizer plugin kind (ABI 1.7) through the real binary: the adamw
# plugin's loop gives the cpu device kernel's bits (losses and checkpoint files) on ddp and
# full_shard; every shipped optimizer gives the same losses on ddp and full_shard; its state is
# checkpointed, resumed bit for bit and resharded from full_shard slices to ddp's whole units;
# a resume with another optimizer is refused; the wsd schedule follows its formula; and each
# plugin's steps match a Python transcription (always) and PyTorch (when CTRAIN_INTEROP_PYTHON
# or .venv-interop has torch: make test-interop) on the toy model of test_optimizers.c.
set -u
cd "$(dirname "$0")/../.."
. tests/cli/train_lib.sh
work=$(mktemp -d /tmp/ctrain-optim-XXXXXX)
trap 'rm -rf "$work"' EXIT

# 1. the update of each plugin against references, on the C test's traces
mkdir -p "$work/trace"
CTRAIN_OPTIM_TRACE="$work/trace" "${BUILD:-build}/tests/unit_tests" each_optimizer > "$work/unit.log" 2>&1 \
    || fail "unit traces: $(tail -3 "$work/unit.log")"
if out=$(python3 tests/optim_reference.py --reference transcription "$work"/trace/*.json 2>&1); then
    pass; echo "$out" | sed 's/^/ok reference: /'
else
    fail "transcription: $out"
fi
py=${CTRAIN_INTEROP_PYTHON:-}
[ -z "$py" ] && [ -x .venv-interop/bin/python ] && py=.venv-interop/bin/python
if [ -n "$py" ] && "$py" -c "import torch" 2> /dev/null; then
    if out=$("$py" tests/optim_reference.py --reference torch "$work"/trace/*.json 2>&1); then
        pass; echo "$out" | sed 's/^/ok torch: /'
    else
        fail "torch: $out"
    fi
else
    echo "skip torch comparison: no python with torch (CTRAIN_INTEROP_PYTHON or .venv-interop; make test-interop provides it)"
fi

# 2. the same data for every run: byte tokens of a Debian text
"$CTRAIN" prepare --text /usr/share/common-licenses/GPL-3 --out "$work/data" --tokenizer bytes \
    --val-fraction 0.1 > "$work/prepare.log" 2>&1 || { fail "prepare"; finish; exit 1; }
tiny_ini "$work/t.ini" "$work/unused" "$work/data" 256
run() { # OUT_DIR ARGS...: train, failing the check with the log's tail
    local out=$1; shift
    "$CTRAIN" train "$work/t.ini" --set run.out_dir="$work/$out" --set comm.world_size=2 \
        --set run.steps=12 "$@" > "$work/$out.log" 2>&1 || fail "train $out: $(tail -3 "$work/$out.log")"
}

# 3. adamw: the plugin's own loop = the cpu device's kernel, losses and checkpoints bit for bit
for s in ddp full_shard; do
    run "a_plugin_$s" --set strategy.plugin=$s --set optimizer.adamw.kernel=plugin --set run.checkpoint_every=12
    run "a_device_$s" --set strategy.plugin=$s --set optimizer.adamw.kernel=device --set run.checkpoint_every=12
    compare_series "$work/a_plugin_$s" "$work/a_device_$s" loss 0 "adamw plugin loop = device kernel on $s"
    for f in "$work/a_plugin_$s"/checkpoints/step_00000012/rank_*.bin; do
        cmp -s "$f" "$work/a_device_$s/checkpoints/step_00000012/$(basename "$f")" \
            && ok "adamw checkpoint $(basename "$f") on $s the same bytes on both paths" \
            || fail "adamw checkpoint $(basename "$f") on $s differs between the paths"
    done
done

# 4. every optimizer: ddp and full_shard (which cuts matrices between ranks) give the same bits
for o in sgd lion muon; do
    run "${o}_ddp" --set optimizer.plugin=$o
    run "${o}_fs" --set optimizer.plugin=$o --set strategy.plugin=full_shard
    compare_series "$work/${o}_ddp" "$work/${o}_fs" loss 0 "$o: full_shard = ddp"
done

# 5. state checkpointed: 6 steps + resume = 12 straight (sgd: one buffer, a version-2 file;
#    muon on full_shard: two buffers, sliced); resharded: muon's full_shard slices resumed
#    under ddp (whole units) continue exactly as ddp straight
run sgd_half --set optimizer.plugin=sgd --stop-after 6
"$CTRAIN" train "$work/t.ini" --set run.out_dir="$work/sgd_half" --set comm.world_size=2 \
    --set run.steps=12 --set optimizer.plugin=sgd --resume > "$work/sgd_resume.log" 2>&1 \
    || fail "resume sgd: $(tail -3 "$work/sgd_resume.log")"
compare_series "$work/sgd_half" "$work/sgd_ddp" loss 0 "sgd: 6 steps + resume = 12 straight"
run muon_half --set optimizer.plugin=muon --set strategy.plugin=full_shard --stop-after 6
cp -r "$work/muon_half" "$work/muon_to_ddp"
"$CTRAIN" train "$work/t.ini" --set run.out_dir="$work/muon_half" --set comm.world_size=2 \
    --set run.steps=12 --set optimizer.plugin=muon --set strategy.plugin=full_shard --resume \
    > "$work/muon_resume.log" 2>&1 || fail "resume muon: $(tail -3 "$work/muon_resume.log")"
compare_series "$work/muon_half" "$work/muon_fs" loss 0 "muon full_shard: 6 steps + resume = 12 straight"
"$CTRAIN" train "$work/t.ini" --set run.out_dir="$work/muon_to_ddp" --set comm.world_size=2 \
    --set run.steps=12 --set optimizer.plugin=muon --set strategy.plugin=ddp --resume \
    > "$work/muon_to_ddp.log" 2>&1 || fail "resume muon as ddp: $(tail -3 "$work/muon_to_ddp.log")"
compare_series "$work/muon_to_ddp" "$work/muon_ddp" loss 0 "muon: full_shard state resumed under ddp = ddp straight"
"$CTRAIN" train "$work/t.ini" --set run.out_dir="$work/muon_to_ddp" --set comm.world_size=1 \
    --set run.steps=14 --set optimizer.plugin=muon --resume > "$work/muon_w1.log" 2>&1 \
    && ok "muon state of 2 ranks resumed on 1 rank" \
    || fail "resume muon on 1 rank: $(tail -3 "$work/muon_w1.log")"

# 6. another optimizer's state is refused by name
if "$CTRAIN" train "$work/t.ini" --set run.out_dir="$work/sgd_half" --set comm.world_size=2 \
    --set run.steps=14 --set optimizer.plugin=lion --resume > "$work/mix.log" 2>&1; then
    fail "resuming sgd's state with lion was accepted"
else
    grep -q "optimizer state is sgd's" "$work/mix.log" && ok "resume with another optimizer refused: $(grep -o "optimizer state is sgd's[^-]*" "$work/mix.log" | head -1)" \
        || fail "resume with lion: unexpected message: $(tail -2 "$work/mix.log")"
fi

# 7. validate: the optimizer, its groups, and an inert section of another optimizer
printf '[optimizer.lion]\nbeta2 = 0.98\n' >> "$work/t.ini"
out=$("$CTRAIN" validate "$work/t.ini" --set optimizer.plugin=muon --set optim.decay_embeddings=false 2>&1)
for want in "optimizer  *muon" "\[optimizer.lion\] *inert: the optimizer plugin is muon" "group matrix" "group embedding .*weight_decay none" "group norm .*weight_decay none"; do
    echo "$out" | grep -q "$want" && ok "validate shows '$want'" || fail "validate lacks '$want': $out"
done

# 8. wsd: linear warm-up, constant, then the last decay_frac down to min_lr in each shape
for shape in linear cosine sqrt; do
    run "wsd_$shape" --set optim.schedule=wsd --set optim.decay_shape=$shape --set optim.decay_frac=0.5 \
        --set optim.min_lr=3e-4 --set run.steps=12
    msg=$(metric_series "$work/wsd_$shape" lr | python3 -c "
import math, sys
lr = [float(x) for x in sys.stdin]
want = []
for s in range(12):
    if s < 5: want.append(3e-3 * (s + 1) / 5); continue
    start = 12 - 0.5 * (12 - 5)
    if s < start: want.append(3e-3); continue
    f = (s - start) / (12 - start)
    k = {'linear': 1 - f, 'cosine': 0.5 * (1 + math.cos(math.pi * f)), 'sqrt': 1 - math.sqrt(f)}['$shape']
    want.append(3e-4 + k * (3e-3 - 3e-4))
bad = [(i + 1, a, b) for i, (a, b) in enumerate(zip(lr, want)) if abs(a - b) > 1e-9 * 3e-3 + 1e-6 * b]
print(bad[:3] if bad or len(lr) != 12 else 'ok')")
    [ "$msg" = ok ] && ok "wsd $shape follows warm-up, constant, $shape decay" || fail "wsd $shape: $msg"
done

finish
