#!/usr/bin/env bash
# test_init_ckpt.sh — [model] init_from = a ctrain checkpoint folder or run folder (fine-tuning)
# through the real binary on a tiny GPT: a source run saved at world 2 (full_shard) gives, from its
# checkpoint folder and from its run folder (the newest checkpoint), the same logits bit for bit
# as from an export of that checkpoint (an independent path: export.c's reassembly, safetensors,
# import.c); a fine-tuning run from the run folder trains the same losses bit for bit as one from
# the export (both start at step 0 with a fresh optimizer); from_config = true takes the model from
# the checkpoint; a shape mismatch names the key and both values; a damaged checkpoint names its
# file, and a run folder skips it for the older one; the source folders' bytes are unchanged.
# Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. tests/cli/train_lib.sh
work=$(mktemp -d /tmp/ctrain-initckpt-XXXXXX)
trap 'rm -rf "$work"' EXIT
[ -x "$CTRAIN" ] || { fail "no $CTRAIN: build first (make)"; finish; exit 1; }
small_run_setup "$work" || { finish; exit 1; }
sed -i -e 's/^steps = 20/steps = 4\ncheckpoint_every = 2/' "$work/t.ini"
cd "$work"
# 2 sequences of 16 int32 tokens for `ctrain logits`
python3 -c "import random; random.seed(1); import struct; open('tok','wb').write(struct.pack('<32i', *[random.randrange(256) for _ in range(32)]))"
# tree_sum DIR: every path under DIR (files, folders, links) with each file's sha256
tree_sum() { (cd "$1" && find . -printf '%y %p\n' | sort && find . -type f -print0 | sort -z | xargs -0 sha256sum); }
logits() { # OUT [--set ...]: logits of t.ini on tok into OUT; stderr in OUT.err
    local out=$1; shift
    "$CTRAIN" logits t.ini "$@" --tokens tok --out "$out" 2> "$out.err"
}

"$CTRAIN" train t.ini --set run.out_dir=A --set comm.world_size=2 --set comm.plugin=threads \
    --set strategy.plugin=full_shard > A.log 2>&1 || fail "train A: $(tail -3 A.log)"
[ -d A/checkpoints/step_00000002 ] && [ -d A/checkpoints/step_00000004 ] \
    || fail "source run: $(ls A/checkpoints)"
for s in 2 4; do
    "$CTRAIN" export "A/checkpoints/step_0000000$s" --out "E$s" --format safetensors > "E$s.log" 2>&1 \
        || fail "export step $s: $(tail -3 "E$s.log")"
done
tree_sum A > A.sum

# --- 1. the same logits as the export of the same checkpoint ------------------------------
logits l_rand.bin
logits l_e4.bin --set model.init_from=E4
logits l_ck.bin --set model.init_from=A/checkpoints/step_00000004 \
    && cmp -s l_ck.bin l_e4.bin && ! cmp -s l_ck.bin l_rand.bin \
    && ok "init_from = a checkpoint folder saved at world 2: the logits of its export, bit for bit (not the random init's)" \
    || fail "init_from = checkpoint folder: $(tail -2 l_ck.bin.err)"
logits l_run.bin --set model.init_from=A && cmp -s l_run.bin l_e4.bin \
    && grep -qF "its newest valid checkpoint is A/checkpoints/step_00000004 (step 4)" l_run.bin.err \
    && grep -qF "optimizer state, data position and step are not loaded" l_run.bin.err \
    && ok "init_from = a run folder: its newest checkpoint (named on stderr), weights only (said on stderr)" \
    || fail "init_from = run folder: $(cat l_run.bin.err)"

# --- 2. fine-tuning: a fresh run at step 0, as from the export --------------------------------
"$CTRAIN" train t.ini --set run.out_dir=B --set model.init_from=A --set run.steps=3 > B.log 2>&1 \
    || fail "train B: $(tail -3 B.log)"
"$CTRAIN" train t.ini --set run.out_dir=C --set model.init_from=E4 --set run.steps=3 > C.log 2>&1 \
    || fail "train C: $(tail -3 C.log)"
compare_series B C loss 0 "fine-tuning from the run folder trains the losses of fine-tuning from its export (fresh optimizer, step 0)"
W2=(--set comm.world_size=2 --set comm.plugin=threads --set strategy.plugin=full_shard --set run.steps=3)
"$CTRAIN" train t.ini --set run.out_dir=B2 --set model.init_from=A "${W2[@]}" > B2.log 2>&1 || fail "train B2: $(tail -3 B2.log)"
"$CTRAIN" train t.ini --set run.out_dir=C2 --set model.init_from=E4 "${W2[@]}" > C2.log 2>&1 || fail "train C2: $(tail -3 C2.log)"
compare_series B2 C2 loss 0 "fine-tuning at world 2 full_shard: the losses of fine-tuning from the export"
[ "$(metric_series B step | head -1)" = 1 ] && grep -q '^init_from = A/checkpoints/step_00000004' B/config.ini \
    && ok "the fine-tuning run starts at step 1 and records the checkpoint folder it read" \
    || fail "B starts at $(metric_series B step | head -1); $(grep init_from B/config.ini)"
{ printf '[run]\nname = f\nseed = 7\n[data]\ntrain = data\nbatch_size = 2\nseq_len = 16\n'
  printf '[model]\ninit_from = A\nfrom_config = true\n'; } > f.ini
"$CTRAIN" logits f.ini --tokens tok --out l_fc.bin 2> l_fc.err && cmp -s l_fc.bin l_e4.bin \
    && ok "from_config = true: [model] taken from the checkpoint's config.ini, the same logits" \
    || fail "from_config: $(tail -2 l_fc.err)"

# a fine-tuning run resumed after its source run folder moved on (a newer checkpoint there):
# the resume takes its own checkpoint, bit for bit as the straight fine-tuning run
cp -r A A2
"$CTRAIN" train t.ini --set run.out_dir=Bs --set model.init_from=A2 --set run.checkpoint_every=2 > Bs.log 2>&1 \
    || fail "train Bs: $(tail -3 Bs.log)"
"$CTRAIN" train t.ini --set run.out_dir=Br --set model.init_from=A2 --set run.checkpoint_every=2 \
    --stop-after 2 > Br.log 2>&1 || fail "train Br: $(tail -3 Br.log)"
"$CTRAIN" train t.ini --set run.out_dir=A2 --set run.steps=6 --resume > A2.log 2>&1 || fail "advance A2: $(tail -3 A2.log)"
[ -d A2/checkpoints/step_00000006 ] || fail "A2 has no step 6: $(ls A2/checkpoints)"
"$CTRAIN" train t.ini --set run.out_dir=Br --set model.init_from=A2 --set run.checkpoint_every=2 \
    --resume > Br2.log 2>&1 || fail "resume Br after A2 moved on: $(tail -3 Br2.log)"
compare_series Br Bs loss 0 "a fine-tuning run resumed after its source run moved on: the straight run's losses, bit for bit"

# --- 3. refusals ------------------------------------------------------------------------------
logits x.bin --set model.init_from=A --set model.d_model=32
grep -qF "[model] d_model = 32, but init_from's checkpoint A/checkpoints/step_00000004 was trained with d_model = 16" x.bin.err \
    && grep -qF "set [model] d_model = 16" x.bin.err && [ ! -e x.bin ] \
    && ok "a shape mismatch names the key, both values and what to set" || fail "mismatch: $(cat x.bin.err)"
"$CTRAIN" train t.ini --set run.out_dir=A --set model.init_from=A/checkpoints/step_00000002 > own.log 2>&1
[ $? -ne 0 ] && grep -qF "inside this run's own [run] out_dir" own.log \
    && ok "init_from inside the run's own out_dir is refused" || fail "own out_dir: $(tail -2 own.log)"

# --- 4. a damaged checkpoint ------------------------------------------------------------------
cp -r A D
python3 - D/checkpoints/step_00000004/rank_00001.bin <<'PY'
import sys
p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); b[200] ^= 1; open(p, 'wb').write(b)
PY
tree_sum D > D.sum
logits x.bin --set model.init_from=D/checkpoints/step_00000004
grep -qF "D/checkpoints/step_00000004/rank_00001.bin is truncated or corrupt" x.bin.err && [ ! -e x.bin ] \
    && ok "a damaged checkpoint folder is an error naming the file" || fail "damaged: $(cat x.bin.err)"
logits l_d.bin --set model.init_from=D
logits l_e2.bin --set model.init_from=E2
cmp -s l_d.bin l_e2.bin && grep -qF "skipping checkpoint D/checkpoints/step_00000004" l_d.bin.err \
    && grep -qF "its newest valid checkpoint is D/checkpoints/step_00000002 (step 2)" l_d.bin.err \
    && ok "a run folder whose newest checkpoint is damaged: skipped with a warning, the older one's logits" \
    || fail "run folder with a damaged newest: $(cat l_d.bin.err)"

# a FIFO where a rank file belongs is refused by type, never opened for reading (no hang)
mkdir -p F/checkpoints/step_00000001 && mkfifo F/checkpoints/step_00000001/rank_00000.bin
timeout 60 "$CTRAIN" logits t.ini --set model.init_from=F/checkpoints/step_00000001 --tokens tok --out x.bin 2> x.err
rc=$?
[ $rc -ne 0 ] && [ $rc -lt 124 ] && grep -qF "rank_00000.bin is a FIFO (named pipe), not a regular file" x.err \
    && ok "a FIFO as a checkpoint's rank file is refused by type" || fail "FIFO rank file: rc $rc $(cat x.err)"
timeout 60 "$CTRAIN" logits t.ini --set model.init_from=F --tokens tok --out x.bin 2> x.err
rc=$?
[ $rc -ne 0 ] && [ $rc -lt 124 ] && grep -qF "[model] init_from = F: no valid checkpoint under F/checkpoints" x.err \
    && ok "a run folder with no valid checkpoint is an error naming it" || fail "no valid checkpoint: rc $rc $(cat x.err)"

# --- 5. the sources were only read ------------------------------------------------------------
tree_sum A | cmp -s - A.sum && tree_sum D | cmp -s - D.sum \
    && ok "the source run folders' bytes and names are unchanged (sha256 of every file before/after)" \
    || fail "a source folder changed: $(tree_sum A | diff - A.sum | head -5) $(tree_sum D | diff - D.sum | head -5)"
finish
