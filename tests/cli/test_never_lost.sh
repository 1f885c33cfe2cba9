#!/usr/bin/env bash
# test_never_lost.sh — a run is never lost: one walk that points ctrain at existing runs every
# way a user can (a fresh train into a run's out_dir, train --force, --resume past a damaged
# newest checkpoint, a checkpoints/ linked to a folder shared with another run, an out_dir that
# is a link to a run, a metrics.jsonl hard-linked elsewhere, every output option aimed at a
# run's own files or nested deep in its checkpoints) and checks byte for byte (the sha256 of
# every file of the trees before and after) that nothing the user did not ask to remove is gone.
# Then: a one-shot writer stopped by SIGTERM leaves no temporary, --resume with no checkpoint
# sets the earlier attempt's metrics aside, --resume on a finished run
# says so, a resume with other steps warns and [optim] schedule_steps keeps the schedule.
set -u
cd "$(dirname "$0")/../.."
source tests/cli/train_lib.sh
work=$(mktemp -d /tmp/ctrain-lost-XXXXXX)
trap 'rm -rf "$work"' EXIT
small_run_setup "$work" || { finish; exit 1; }

# train OUT ARGS...: train t.ini into OUT; rc, and OUT.out / OUT.err
train() {
    local out=$1; shift
    "$CTRAIN" train "$work/t.ini" --set run.out_dir="$out" --set run.steps=6 \
        --set run.checkpoint_every=2 --set run.keep_checkpoints=10 --set run.log_every=2 "$@" \
        > "$out.out" 2> "$out.err"
    rc=$?
}
# snap DIR...: "sha256  relative path" of every file, "link -> target" of every link, "path/" of
# every folder
snap() {
    python3 - "$@" <<'PY'
import hashlib, os, sys
for root in sys.argv[1:]:
    for d, dirs, files in os.walk(root):
        for n in sorted(dirs + files):
            p = os.path.join(d, n)
            rel = os.path.relpath(p, root)
            if os.path.isdir(p) and not os.path.islink(p):
                print(f"{root}:{rel}/")
            elif os.path.islink(p):
                print(f"{root}:{rel} -> {os.readlink(p)}")
            elif os.path.isfile(p):
                print(hashlib.sha256(open(p, "rb").read()).hexdigest(), f"{root}:{rel}")
PY
}
# same NAME BEFORE AFTER: the snapshots are equal, or the lines that differ are printed
same() {
    if cmp -s "$2" "$3"; then ok "$1"; else fail "$1: $(diff "$2" "$3" | head -6 | tr '\n' ' ')"; fi
}
# kept NAME BEFORE AFTER PATTERN: every line of BEFORE matching PATTERN (grep -E) is in AFTER
kept() {
    local lost
    lost=$(grep -E -- "$4" "$2" | grep -vxF -f "$3")
    if [ -z "$lost" ]; then ok "$1"; else fail "$1: lost $(echo "$lost" | head -4 | tr '\n' ' ')"; fi
}
says() { grep -qF -- "$2" "$1"; }

# ---- a run A with checkpoints 2, 4, 6 and metrics --------------------------------------------
A=$work/A
train "$A"
[ $rc = 0 ] && [ -d "$A/checkpoints/step_00000006" ] || { fail "train A: $(tail -3 "$A.err")"; finish; exit 1; }
echo "the user's own notes" > "$A/notes.txt"
deep=$A/checkpoints/step_00000006/a/b/c   # folders that exist, three levels below a step
mkdir -p "$deep"
snap "$A" > "$work/a0"

# 1. a fresh train into A: refused before anything is touched, saying what is there and what to do
train "$A"
if [ $rc = 2 ] && says "$A.err" "holds a run: 3 checkpoint folders under checkpoints/ and metrics.jsonl" \
    && says "$A.err" "--resume to continue it, --force to start over"; then
    ok "fresh_train_into_a_run_is_refused_naming_what_is_there"
else
    fail "fresh train into A: rc $rc: $(cat "$A.err")"
fi
snap "$A" > "$work/a1"
same "fresh_train_into_a_run_touches_nothing" "$work/a0" "$work/a1"

# 2. every output option aimed at A's own files (with --force too), or deep in its checkpoints
python3 -c "import sys; sys.stdout.buffer.write(bytes(2 * 64 * 2))" > "$work/g.bin"
python3 -c "import struct,sys; sys.stdout.buffer.write(struct.pack('<16i', *range(16)))" > "$work/tok.bin"
n_refused=0 n_tried=0
aim() { # EXPECT_NEEDLE COMMAND...: refused (non-zero, no signal), stderr holds the needle
    local needle=$1; shift
    n_tried=$((n_tried + 1))
    "$@" > "$work/aim.out" 2> "$work/aim.err"
    local r=$?
    if [ $r -ne 0 ] && [ $r -lt 128 ] && says "$work/aim.err" "$needle"; then
        n_refused=$((n_refused + 1))
    else
        echo "  not refused as expected (rc $r): $* :: $(head -2 "$work/aim.err")"
    fi
}
for f in config.ini metrics.jsonl run_id .lock tb/x checkpoints/new.bin; do
    aim "which only training writes" "$CTRAIN" export "$A" --format llmc --out "$A/$f" --force
    aim "which only training writes" "$CTRAIN" reduce --world-size 2 --in "$work/g.bin" --out "$A/$f" --force
    aim "which only training writes" "$CTRAIN" plot "$A" --metric loss --out "$A/$f" --force
    aim "which only training writes" "$CTRAIN" what-if "$A" --world-sizes 2 --per-row "$A/$f" --force
    aim "which only training writes" "$CTRAIN" logits "$work/t.ini" --tokens "$work/tok.bin" --out "$A/$f" --force
done
for f in model.bin plots/loss.png; do # a new file inside a run's folder needs --force
    aim "a folder that holds a run ---> use --force" "$CTRAIN" export "$A" --format llmc --out "$A/$f"
    aim "a folder that holds a run ---> use --force" "$CTRAIN" reduce --world-size 2 --in "$work/g.bin" --out "$A/$f"
    aim "a folder that holds a run ---> use --force" "$CTRAIN" plot "$A" --metric loss --out "$A/$f"
    aim "a folder that holds a run ---> use --force" "$CTRAIN" what-if "$A" --world-sizes 2 --per-row "$A/$f"
    aim "a folder that holds a run ---> use --force" "$CTRAIN" logits "$work/t.ini" --tokens "$work/tok.bin" --out "$A/$f"
done
aim "inside a run's checkpoints folder" "$CTRAIN" export "$A" --format llmc --out "$deep/x.bin" --force
aim "inside a run's checkpoints folder" "$CTRAIN" reduce --world-size 2 --in "$work/g.bin" --out "$deep/x.bin" --force
aim "inside a run's checkpoints folder" "$CTRAIN" export "$A" --format safetensors --out "$deep" --force
aim "the folder of the run" "$CTRAIN" export "$A" --format safetensors --out "$A" --force
aim "a record of the run" "$CTRAIN" export "$A" --format safetensors --out "$A/tb" --force
aim "inside a run's checkpoints folder" "$CTRAIN" train "$work/t.ini" --set run.out_dir="$deep/run"
aim "inside a run's checkpoints folder" "$CTRAIN" train "$work/t.ini" --set run.out_dir="$deep" --force
[ $n_refused = $n_tried ] && ok "every_output_option_at_a_runs_records_is_refused ($n_tried)" \
    || fail "output options at A's files: $n_refused of $n_tried refused"
snap "$A" > "$work/a2"
same "output_options_leave_the_run_byte_for_byte" "$work/a0" "$work/a2"
# an existing output outside any run needs --force too
"$CTRAIN" reduce --world-size 2 --in "$work/g.bin" --out "$work/red.bin" > /dev/null 2>&1
"$CTRAIN" reduce --world-size 2 --in "$work/g.bin" --out "$work/red.bin" > "$work/r.out" 2> "$work/r.err"
r1=$?
"$CTRAIN" reduce --world-size 2 --in "$work/g.bin" --out "$work/red.bin" --force > /dev/null 2>&1
r2=$?
[ $r1 != 0 ] && says "$work/r.err" "exists ---> use --force" && [ $r2 = 0 ] \
    && ok "an_existing_output_file_needs_force" || fail "existing output: rc $r1/$r2: $(cat "$work/r.err")"

# 3. --resume past a damaged newest checkpoint (an empty config.ini): set aside, never deleted
: > "$A/checkpoints/step_00000006/config.ini"
snap "$A" > "$work/a3"
train "$A" --resume
if [ $rc = 0 ] && says "$A.out" "resumed from step 4" \
    && says "$A.err" "skipping checkpoint $A/checkpoints/step_00000006: $A/checkpoints/step_00000006/config.ini is truncated or corrupt" \
    && says "$A.err" "set aside the damaged checkpoint $A/checkpoints/step_00000006 as $A/checkpoints/step_00000006.skipped"; then
    ok "resume_skips_a_checkpoint_with_an_empty_config_and_names_where_it_is_kept"
else
    fail "resume past an empty config.ini: rc $rc: $(grep -v '^step' "$A.err" | head -4)"
fi
snap "$A" > "$work/a4"
sed 's#/step_00000006/#/step_00000006.skipped/#' "$work/a3" > "$work/a3moved"
kept "resume_keeps_the_skipped_folder_byte_for_byte" "$work/a3moved" "$work/a4" "step_00000006.skipped/"
kept "resume_keeps_the_older_checkpoints_and_the_users_files" "$work/a3" "$work/a4" "step_0000000[24]/|notes.txt"

# 4. train --force: removes only what A's run wrote, and says so
ln "$A/metrics.jsonl" "$work/hardlink.jsonl"   # another name of the same file
snap "$work/hardlink.jsonl" > "$work/h0"
snap "$A" > "$work/a5"
train "$A" --force
if [ $rc = 0 ] && says "$A.err" "--force: removed $A/checkpoints/step_00000002" \
    && says "$A.err" "--force: removed $A/metrics.jsonl" \
    && says "$A.err" "kept 1 folder(s) under $A/checkpoints"; then
    ok "force_starts_over_naming_what_it_removed"
else
    fail "train --force: rc $rc: $(grep -v '^step' "$A.err" | head -5)"
fi
snap "$A" > "$work/a6"
kept "force_keeps_set_aside_folders_and_the_users_files" "$work/a5" "$work/a6" "step_00000006.skipped/|notes.txt"
snap "$work/hardlink.jsonl" > "$work/h1"
same "force_leaves_a_hard_link_of_metrics_intact" "$work/h0" "$work/h1"
# a resume rewrites metrics.jsonl through a new file, never in place
rm -f "$work/hardlink.jsonl"
ln "$A/metrics.jsonl" "$work/hardlink.jsonl"
snap "$work/hardlink.jsonl" > "$work/h2"
train "$A" --resume-from "$A/checkpoints/step_00000004"
snap "$work/hardlink.jsonl" > "$work/h3"
[ $rc = 0 ] && ok "resume_from_an_older_step_runs" || fail "resume-from step 4: $(tail -2 "$A.err")"
same "resume_never_truncates_metrics_in_place" "$work/h2" "$work/h3"

# a --resume that finds no checkpoint starts metrics.jsonl anew: a new file, never truncated in place
rm -rf "$A/checkpoints"/step_0*[0-9]
rm -f "$work/hardlink.jsonl"
ln "$A/metrics.jsonl" "$work/hardlink.jsonl"
snap "$work/hardlink.jsonl" > "$work/h4"
train "$A" --resume
snap "$work/hardlink.jsonl" > "$work/h5"
[ $rc = 0 ] && says "$A.err" "starting from step 0" && ok "resume_without_a_checkpoint_starts_from_step_0" \
    || fail "resume without a checkpoint: rc $rc: $(grep -v '^step' "$A.err" | head -3)"
same "starting_metrics_anew_leaves_a_hard_link_intact" "$work/h4" "$work/h5"

# 5. checkpoints/ of two runs linked to one shared folder
mkdir -p "$work/shared" "$work/B" "$work/C"
ln -s "$work/shared" "$work/B/checkpoints"
ln -s "$work/shared" "$work/C/checkpoints"
train "$work/B"
[ $rc = 0 ] || fail "train B: $(tail -2 "$work/B.err")"
snap "$work/shared" > "$work/s0"
train "$work/C"
[ $rc = 2 ] && says "$work/C.err" "holds a run: 3 checkpoint folders" \
    && ok "fresh_train_into_a_shared_checkpoints_folder_is_refused" || fail "C fresh: rc $rc: $(cat "$work/C.err")"
train "$work/C" --force --set run.steps=3 --set run.checkpoint_every=3 --set run.keep_checkpoints=1
[ $rc = 0 ] && says "$work/C.err" "kept 3 folder(s)" && ! says "$work/C.err" "removed $work/C/checkpoints/step" \
    && ok "force_in_a_shared_folder_removes_none_of_the_other_runs" || fail "C --force: rc $rc: $(grep -v '^step' "$work/C.err" | head -4)"
train "$work/C" --resume --set run.steps=3
[ $rc = 0 ] && says "$work/C.err" "is complete: its checkpoint is of step 3" \
    && ok "resume_in_a_shared_folder_takes_its_own_newest" || fail "C resume: rc $rc: $(grep -v '^step' "$work/C.err" | head -3)"
train "$work/C" --resume --set run.steps=4 --set run.checkpoint_every=1
[ $rc = 1 ] && says "$work/C.err" "step_00000004 exists and was not written by this run" \
    && ok "a_save_onto_another_runs_step_folder_is_refused" || fail "C collides: rc $rc: $(grep -v '^step' "$work/C.err" | head -3)"
train "$work/B" --resume --set run.steps=7 --set run.checkpoint_every=7
[ $rc = 0 ] && says "$work/B.out" "resumed from step 6" \
    && ok "the_other_run_resumes_from_its_own_newest" || fail "B resume: rc $rc: $(grep -v '^step' "$work/B.err" | head -3)"
snap "$work/shared" > "$work/s1"
kept "a_shared_folder_keeps_every_step_of_the_other_run" "$work/s0" "$work/s1" "step_0000000[246]/"
# step folders saved before lineage was recorded (no manifest.ini, no OUT/run_id) behind a link:
# a resume starts from the newest, and no prune removes any of them
mkdir -p "$work/Lsh" "$work/L"
ln -s "$work/Lsh" "$work/L/checkpoints"
train "$work/L"
rm -f "$work/L/run_id" "$work/Lsh"/step_*/manifest.ini
snap "$work/Lsh" > "$work/l0"
train "$work/L" --resume --set run.steps=8 --set run.checkpoint_every=8 --set run.keep_checkpoints=1
snap "$work/Lsh" > "$work/l1"
[ $rc = 0 ] && says "$work/L.out" "resumed from step 6" && [ -d "$work/Lsh/step_00000008" ] \
    && ok "a_pre_lineage_checkpoint_behind_a_link_is_resumed_from" || fail "legacy resume: rc $rc: $(grep -v '^step' "$work/L.err" | head -3)"
kept "a_pre_lineage_checkpoint_behind_a_link_is_never_pruned" "$work/l0" "$work/l1" "step_"
# an out_dir that is itself a link to a run
ln -s "$work/B" "$work/D"
snap "$work/B" "$work/shared" > "$work/b0"
train "$work/D"
snap "$work/B" "$work/shared" > "$work/b1"
[ $rc = 2 ] && says "$work/D.err" "holds a run" && ok "fresh_train_into_a_link_to_a_run_is_refused" \
    || fail "D: rc $rc: $(cat "$work/D.err")"
same "a_link_to_a_run_is_left_byte_for_byte" "$work/b0" "$work/b1"

# 6. a one-shot writer stopped by SIGTERM leaves no temporary behind
python3 -c "import sys; sys.stdout.buffer.write(bytes(4 * 8 * 1024 * 1024 * 4))" > "$work/big.bin"
mkdir -p "$work/sig"
"$CTRAIN" reduce --world-size 4 --in "$work/big.bin" --out "$work/sig/out.bin" --dtype f32 > /dev/null 2>&1 &
pid=$!
for _ in $(seq 1 500); do
    compgen -G "$work/sig/out.bin.tmp.*" > /dev/null && break
    sleep 0.01
done
seen=$(compgen -G "$work/sig/out.bin.tmp.*" | wc -l)
kill -TERM $pid 2> /dev/null
wait $pid
r=$?
left=$(ls "$work/sig")
if [ "$seen" -gt 0 ] && [ $r = 143 ] && [ -z "$left" ]; then
    ok "sigterm_removes_the_writers_temporary"
elif [ "$seen" = 0 ]; then
    ok "sigterm_removes_the_writers_temporary (skipped: reduce ended before its temporary was seen)"
else
    fail "SIGTERM to reduce: rc $r, left: $left"
fi

# 7. --resume on a finished run; a resume with other steps; [optim] schedule_steps
train "$work/E" --set run.log_every=1
train "$work/E" --resume
[ $rc = 0 ] && says "$work/E.err" "is complete: its checkpoint is of step 6 and [run] steps = 6" \
    && says "$work/E.err" "--resume --set run.steps=" && ! says "$work/E.out" "resumed from" \
    && ok "resume_of_a_finished_run_says_it_is_complete" || fail "finished: rc $rc: $(cat "$work/E.err")"
train "$work/F" --set run.log_every=1 --stop-after 4
train "$work/F" --set run.log_every=1 --set run.steps=10 --resume
says "$work/F.err" "learning-rate schedule of 10 steps; the checkpoint" \
    && says "$work/F.err" "set [optim] schedule_steps = 6" \
    && ok "resume_with_other_steps_warns_about_the_schedule" || fail "no schedule warning: $(grep -v '^step' "$work/F.err" | head -3)"
train "$work/G" --set run.log_every=1 --stop-after 4
train "$work/G" --set run.log_every=1 --set run.steps=8 --set optim.schedule_steps=6 --resume
! says "$work/G.err" "learning-rate schedule" && [ "$(metric_series "$work/G" lr | sed -n 5,6p)" = "$(metric_series "$work/E" lr | sed -n 5,6p)" ] \
    && ok "schedule_steps_keeps_the_lr_schedule_when_steps_grow" \
    || fail "schedule_steps: $(metric_series "$work/G" lr | tr '\n' ' ') vs $(metric_series "$work/E" lr | tr '\n' ' ')"

# 8. --resume-from a folder that does not exist: not found, with the resolved path
(cd "$work" && "$CTRAIN" train t.ini --set run.out_dir=H --resume-from nowhere/step_00000001 \
    > H.out 2> H.err); rc=$?
[ $rc = 1 ] && says "$work/H.err" "--resume-from nowhere/step_00000001: not found ($work/nowhere/step_00000001)" \
    && ok "resume_from_a_missing_folder_says_not_found" || fail "resume-from missing: rc $rc: $(cat "$work/H.err")"

# 9. --resume with no checkpoint yet (an attempt ended before its first save) starts from step 0
# and starts metrics.jsonl anew: the earlier attempt's lines are set aside, byte for byte, never
# replaced; a second such resume keeps the first set-aside file too
mkdir -p "$work/K"
printf '{"step": 1, "loss": 9.5}\n{"step": 2, "loss": 9.25}\n' > "$work/K/metrics.jsonl"
before=$(sha256sum < "$work/K/metrics.jsonl")
train "$work/K" --resume --set run.checkpoint_every=0
[ $rc = 0 ] && [ "$(sha256sum < "$work/K/metrics.jsonl.before_resume" 2>/dev/null)" = "$before" ] \
    && says "$work/K.err" "kept the metrics of the attempt before as $work/K/metrics.jsonl.before_resume" \
    && [ -s "$work/K/metrics.jsonl" ] \
    && ok "resume_without_a_checkpoint_sets_the_earlier_metrics_aside" \
    || fail "resume without a checkpoint: rc $rc: $(tail -2 "$work/K.err")"
rm -rf "$work/K/checkpoints"
train "$work/K" --resume --set run.checkpoint_every=0
[ $rc = 0 ] && [ "$(sha256sum < "$work/K/metrics.jsonl.before_resume")" = "$before" ] \
    && [ -s "$work/K/metrics.jsonl.before_resume.2" ] \
    && ok "a_second_set_aside_never_replaces_the_first" \
    || fail "second resume without a checkpoint: rc $rc: $(ls "$work/K" | tr '\n' ' ')"

finish
