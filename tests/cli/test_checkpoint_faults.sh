#!/usr/bin/env bash
# test_checkpoint_faults.sh — checkpoints under faults, through the real binary on a tiny GPT:
# (a) SIGKILL at 25 random moments (seeded) of a 2-rank run that saves at every step: after
#     each kill the newest checkpoint is complete (every file present, checksums right) and is
#     the one --resume takes; the chain of resumes ends with the losses of an uninterrupted
#     run, bit for bit, each step logged once;
# (b) a full disk (a small tmpfs): a save that does not fit and a metrics line that does not
#     fit each fail the run clearly, leave no *.tmp, keep the previous checkpoint complete and
#     metrics.jsonl whole lines; after space is freed the run resumes to the same losses.
# Skips (b) with a line saying why when tmpfs cannot be mounted. Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
. tests/cli/train_lib.sh
work=$(mktemp -d /tmp/ctrain-ckptfaults-XXXXXX)
mnt=""
cleanup() {
    [ -n "$mnt" ] && umount "$mnt" 2> /dev/null
    rm -rf "$work"
}
trap cleanup EXIT
[ -x "$CTRAIN" ] || { fail "no $CTRAIN: build first (make)"; finish; exit 1; }

small_run_setup "$work" || { finish; exit 1; }

# complete DIR WORLD: every file of checkpoint folder DIR is there and its checksum is right.
complete() {
    python3 - "$1" "$2" <<'PY'
import os, struct, sys
d, world = sys.argv[1], int(sys.argv[2])
if not os.path.isfile(os.path.join(d, "config.ini")): print("no config.ini"); sys.exit(1)
for q in range(world):
    p = os.path.join(d, "rank_%05d.bin" % q)
    if not os.path.isfile(p): print("no", p); sys.exit(1)
    b = open(p, "rb").read()
    h = 0xcbf29ce484222325
    for x in b[:-8]:
        h = ((h ^ x) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    if len(b) < 56 or struct.unpack("<Q", b[-8:])[0] != h: print("bad checksum", p); sys.exit(1)
PY
}
# newest DIR: the newest complete-looking checkpoint folder name (step_ and digits), or empty.
newest() { ls "$1/checkpoints" 2> /dev/null | grep -E '^step_[0-9]+$' | sort | tail -1; }
newest_step() { local n; n=$(newest "$1"); n=${n#step_}; echo $((10#${n:-0})); }
# whole_lines FILE: every line of FILE ends with a newline and is a JSON object.
whole_lines() {
    python3 - "$1" <<'PY'
import json, sys
data = open(sys.argv[1], "rb").read()
if data and not data.endswith(b"\n"): print("last line has no newline"); sys.exit(1)
for i, line in enumerate(data.decode().splitlines(), 1):
    try: json.loads(line)
    except Exception as e: print(f"line {i}: {e}"); sys.exit(1)
PY
}
# steps_once FILE N: the "step" of the lines of FILE are 1..N, once each, in order.
steps_once() {
    python3 - "$1" "$2" <<'PY'
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1])]
if steps != list(range(1, int(sys.argv[2]) + 1)): print("steps", steps); sys.exit(1)
PY
}

# --- (a) SIGKILL at random moments of a run that saves at every step -------------------------
# The run is 100000 steps long (it never ends by itself; the schedule is that of 100000 steps):
# 25 attempts, each killed after a random 0-299 ms (start-up included), each with --resume
# (from the newest checkpoint once there is one: a fresh train would be refused in a folder
# that holds a killed run's metrics); then one more resume runs to 3 steps past the newest and
# a fresh run stops at the same step: the losses of every step must be equal, bit for bit.
kargs=(--set run.steps=100000 --set run.checkpoint_every=1 --set comm.plugin=threads
       --set comm.world_size=2 --set data.batch_size=1 --set strategy.plugin=full_shard)
RANDOM=20261201                      # the kill moments are reproducible (for a given speed)
kills=0 in_save=0 resumes=0 bad=0
k="$work/k"
# (on a slow or loaded machine the 25 attempts may not reach step 10: more attempts follow,
# at most 40 in all, until they do)
attempt=0
while [ $attempt -lt 25 ] || { [ $attempt -lt 40 ] && [ "$(newest_step "$k")" -lt 10 ]; }; do
    attempt=$((attempt + 1))
    had=$(newest "$k")   # --resume always, as a requeue script: with no checkpoint yet it starts
    "$CTRAIN" train "$work/t.ini" "${kargs[@]}" --set run.out_dir="$k" --resume \
        > "$k.$attempt.out" 2> "$k.$attempt.err" &
    pid=$!
    sleep "$(printf '0.%03d' $((RANDOM % 300)))"
    kill -KILL "$pid" 2> /dev/null && kills=$((kills + 1))
    wait "$pid" 2> /dev/null
    if [ -n "$had" ]; then   # this attempt resumed: from the newest, no fallback
        if grep -q "skipping checkpoint" "$k.$attempt.err"; then
            bad=$((bad + 1)); fail "attempt $attempt skipped a checkpoint: $(grep skipping "$k.$attempt.err")"
        fi
        grep -q "^resumed from step" "$k.$attempt.out" && resumes=$((resumes + 1))
    fi
    ls "$k/checkpoints" 2> /dev/null | grep -q '\.tmp$' && in_save=$((in_save + 1))
    last=$(newest "$k")
    if [ -n "$last" ] && ! why=$(complete "$k/checkpoints/$last" 2); then
        bad=$((bad + 1)); fail "after kill $kills the newest checkpoint $last is incomplete: $why"
    fi
done
last=$(newest "$k"); last=${last#step_}; last=$((10#${last:-0}))
M=$((last + 3))
"$CTRAIN" train "$work/t.ini" "${kargs[@]}" --set run.out_dir="$k" --resume --stop-after $M \
    > "$k.final.out" 2> "$k.final.err" || fail "final resume: $(tail -3 "$k.final.err")"
grep -q "skipping checkpoint" "$k.final.err" && fail "the final resume skipped a checkpoint"
"$CTRAIN" train "$work/t.ini" "${kargs[@]}" --set run.out_dir="$work/ref" --stop-after $M \
    > "$work/ref.log" 2>&1 || fail "reference run: $(tail -3 "$work/ref.log")"
if [ "$kills" -ge 20 ] && [ "$bad" = 0 ] && [ "$last" -ge 10 ]; then
    ok "$kills SIGKILLs ($in_save inside a save, $resumes after the resume had begun) reaching step $last: the newest checkpoint was complete after each and the next resume took it"
else
    fail "kill test: $kills kills (want >= 20), $bad incomplete or skipped checkpoints, reached step $last (want >= 10)"
fi
compare_series "$k" "$work/ref" loss 0 "losses after $kills kills and resumes == uninterrupted run"
steps_once "$k/metrics.jsonl" $M && ok "metrics.jsonl after the kills: steps 1..$M once each" \
    || fail "metrics.jsonl after the kills: steps not 1..$M once each"

# --- (b) a full disk ---------------------------------------------------------------------------
mnt="$work/mnt"
mkdir -p "$mnt"
if ! why=$(mount -t tmpfs -o size=1024k tmpfs "$mnt" 2>&1); then
    mnt=""
    ok "disk-full checks skipped: cannot mount a tmpfs here ($why)"
    finish
    exit
fi
M=40
fargs=(--set run.steps=$M --set run.checkpoint_every=1)
"$CTRAIN" train "$work/t.ini" "${fargs[@]}" --set run.out_dir="$work/fref" > "$work/fref.log" 2>&1 \
    || fail "reference run (b): $(tail -3 "$work/fref.log")"
o="$mnt/run"
"$CTRAIN" train "$work/t.ini" "${fargs[@]}" --set run.out_dir="$o" --stop-after 2 > "$work/f1.log" 2>&1 \
    || fail "first 2 steps on the tmpfs: $(tail -3 "$work/f1.log")"
# fill FREE_KB: a filler file leaves about FREE_KB free on the tmpfs
fill() {
    rm -f "$mnt/filler"
    local avail; avail=$(df -B1024 --output=avail "$mnt" | tail -1)
    dd if=/dev/zero of="$mnt/filler" bs=1024 count=$((avail - $1)) status=none 2> /dev/null
}
# state LABEL: no temporary anywhere, step 2 still the newest and complete, whole lines only.
state() {
    local tmps why
    tmps=$(find "$o" -name '*.tmp*')
    [ -z "$tmps" ] && ok "$1: no temporary left" || fail "$1: temporaries left: $tmps"
    [ "$(newest "$o")" = step_00000002 ] && why=$(complete "$o/checkpoints/step_00000002" 1) \
        && ok "$1: step_00000002 is still the newest and complete" \
        || fail "$1: newest is '$(newest "$o")': $why"
    why=$(whole_lines "$o/metrics.jsonl") && ok "$1: metrics.jsonl holds whole lines only" \
        || fail "$1: metrics.jsonl: $why"
}
# 1. the save of step 3 does not fit (60 KB free, a rank file is about 95 KB)
fill 60
"$CTRAIN" train "$work/t.ini" "${fargs[@]}" --set run.out_dir="$o" --resume > "$work/f2.out" 2> "$work/f2.err"
rc=$?
[ $rc = 1 ] && grep -qF "cannot write $o/checkpoints/step_00000003.tmp/rank_00000.bin: No space left on device --->" "$work/f2.err" \
    && ok "a save on a full disk fails the run naming the file and the reason" \
    || fail "save on a full disk: rc $rc: $(tail -2 "$work/f2.err")"
state "after the failed save"
# 2. a metrics line does not fit (12 KB free, no save due before step $M)
fill 12
"$CTRAIN" train "$work/t.ini" "${fargs[@]}" --set run.checkpoint_every=1000 --set run.out_dir="$o" --resume \
    > "$work/f3.out" 2> "$work/f3.err"
rc=$?
[ $rc = 1 ] && grep -qE "cannot write $o/metrics.jsonl \(step [0-9]+\): No space left on device --->" "$work/f3.err" \
    && ok "metrics.jsonl on a full disk fails the run naming the file and the reason" \
    || fail "metrics on a full disk: rc $rc: $(tail -2 "$work/f3.err")"
state "after the failed metrics write"
# 3. space freed: the run resumes to the end with the losses of an uninterrupted run
rm -f "$mnt/filler"
"$CTRAIN" train "$work/t.ini" "${fargs[@]}" --set run.out_dir="$o" --resume > "$work/f4.out" 2> "$work/f4.err" \
    && grep -q "resumed from step 2" "$work/f4.out" || fail "resume after the full disk: $(tail -2 "$work/f4.err")"
compare_series "$o" "$work/fref" loss 0 "after the full disk: resumed losses == uninterrupted run"
steps_once "$o/metrics.jsonl" $M && ok "after the full disk: metrics.jsonl steps 1..$M once each" \
    || fail "after the full disk: metrics.jsonl steps"

finish
