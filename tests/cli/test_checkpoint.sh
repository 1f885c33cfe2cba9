#!/usr/bin/env bash
# test_checkpoint.sh — what `ctrain train` writes, through the real binary on a tiny GPT: paths
# with shell metacharacters stay opaque (no shell deletes a sibling folder or runs a command);
# [optim] bounds; non-finite weights or moments never reach a checkpoint; --resume skips an
# invalid newest checkpoint, --resume-from takes a folder, both refuse a changed [model];
# metrics.jsonl is written with checked writes and trimmed on resume; plot and compare read a
# torn last line; a failed save leaves no temporaries. Prints "N passed, N failed".
# Not for: killing runs during saves and full disks (test_checkpoint_faults.sh).
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
. tests/cli/train_lib.sh
work=$(mktemp -d /tmp/ctrain-ckpt-XXXXXX)
trap 'rm -rf "$work"' EXIT
[ -x "$CTRAIN" ] || { fail "no $CTRAIN: build first (make)"; finish; exit 1; }

small_run_setup "$work" || { finish; exit 1; }

# run OUT [args...]: train t.ini into OUT; sets rc, and OUT.out / OUT.err hold the output.
run() {
    local out=$1; shift
    "$CTRAIN" train "$work/t.ini" --set run.out_dir="$out" "$@" > "$out.out" 2> "$out.err"
    rc=$?
}
# steps_of DIR: the checkpoint folder names under DIR/checkpoints, space-separated.
steps_of() { ls "$1/checkpoints" 2> /dev/null | tr '\n' ' ' | sed 's/ $//'; }
# says FILE TEXT: FILE holds TEXT (fixed string).
says() { grep -qF -- "$2" "$1"; }

# the reference: 8 steps straight, no checkpoint before the end
run "$work/straight" --set run.steps=8
[ $rc = 0 ] || fail "straight run: $(tail -3 "$work/straight.err")"

# --- 1. paths are opaque bytes: no shell sees out_dir ---------------------------------------
# A shell given rm -rf 'OUT/...' would delete "$q/a" and "$q/b/checkpoints/..." (relative to the
# working folder) and run touch X. Both siblings exist beforehand and must survive.
q="$work/q"
mkdir -p "$q/a" "$q/b/checkpoints/step_00000001" "$q/b/checkpoints/step_00000002"
touch "$q/a/keep" "$q/b/checkpoints/step_00000001/keep" "$q/b/checkpoints/step_00000002/keep"
evil="$q/a' \$(touch X) 'b"
(cd "$q" && "$CTRAIN" train "$work/t.ini" --set run.out_dir="$evil" --set run.steps=5 \
    --set run.checkpoint_every=1 --set run.keep_checkpoints=2 > "$work/evil.out" 2>&1)
rc=$?
got=$(steps_of "$evil")
if [ $rc = 0 ] && [ "$got" = "step_00000004 step_00000005" ]; then
    ok "out_dir with ' \$( ) and spaces: trains, checkpoints, prunes to: $got"
else
    fail "out_dir with shell characters: rc $rc, checkpoints '$got': $(tail -3 "$work/evil.out")"
fi
if [ -f "$q/a/keep" ] && [ -f "$q/b/checkpoints/step_00000001/keep" ] \
    && [ -f "$q/b/checkpoints/step_00000002/keep" ]; then
    ok "sibling folders named like the path cut at the quote survive"
else
    fail "a sibling folder was deleted: $(cd "$q" && find . | sort | tr '\n' ' ')"
fi
# the plot of that run (gnuplot is a child with an argument vector) to a PNG named the same way
if command -v gnuplot > /dev/null; then
    (cd "$q" && "$CTRAIN" plot "$evil" --metric loss --out "$evil/p '\$(touch Y)'.png" --force \
        > "$work/evilplot.out" 2>&1)
    [ $? = 0 ] && [ -s "$evil/p '\$(touch Y)'.png" ] && ok "plot of that run to a PNG named with ' and \$( )" \
        || fail "plot with shell characters: $(tail -3 "$work/evilplot.out")"
fi
# gnuplot found in a PATH folder whose name holds a quote and $( ): run as argv[0], no shell
if command -v gnuplot > /dev/null; then
    g="$work/g'\$(touch Z) it"
    mkdir -p "$g" && ln -s "$(command -v gnuplot)" "$g/gnuplot"
    (cd "$q" && PATH="$g:$PATH" "$CTRAIN" plot "$evil" --metric loss --out "$work/gp.png" > "$work/gp.out" 2>&1)
    [ $? = 0 ] && [ -s "$work/gp.png" ] && [ ! -e "$q/Z" ] && ok "gnuplot from a folder named with ' and \$( ) runs, no shell" \
        || fail "gnuplot in a folder with shell characters: $(tail -3 "$work/gp.out")"
fi
found=$(find "$work" "$ROOT" -maxdepth 1 \( -name X -o -name Y -o -name Z \); find "$q" \( -name X -o -name Y -o -name Z \))
[ -z "$found" ] && ok "no command in the paths ran (no X, Y or Z)" || fail "a shell ran the path: $found"
left=$(grep -rnE '\b(system|popen)\s*\(' host plugins)
[ -z "$left" ] && ok "no system() or popen() in host/ and plugins/" || fail "shell calls left: $left"

# --- 2a. [optim] bounds: train refuses before writing anything ------------------------------
bound() { # NAME KEY VALUE TEXT: the key set in the INI file (line known) is refused
    cp "$work/t.ini" "$work/b_$1.ini"
    printf '%s = %s\n' "$2" "$3" >> "$work/b_$1.ini"
    local line; line=$(wc -l < "$work/b_$1.ini")
    "$CTRAIN" train "$work/b_$1.ini" --set run.out_dir="$work/b_$1" > "$work/b_$1.log" 2>&1
    local rc=$?
    if [ $rc != 0 ] && [ $rc -lt 128 ] && says "$work/b_$1.log" "b_$1.ini:$line: [optim] $2 = $3$4" \
        && [ ! -e "$work/b_$1" ]; then
        ok "[optim] $2 = $3 refused at b_$1.ini:$line, nothing written"
    else
        fail "[optim] $2 = $3: rc $rc, out_dir $( [ -e "$work/b_$1" ] && echo made || echo absent): $(cat "$work/b_$1.log")"
    fi
}
bound beta1 beta1 1 " is out of range [0, 1)"
bound beta2 beta2 1 " is out of range [0, 1)"
bound eps0 eps 0 ": must be > 0"
bound epssub eps 1e-40 ": must be at least 1.1754944e-38"
bound minlr min_lr 0.01 ": must be <= [optim] lr"

# --- 2b. non-finite values never reach a checkpoint -------------------------------------------
# beta2 = 0 and eps = FLT_MIN (both allowed) with a large gradient (zloss coef 1000, no clip):
# a token embedding seen at step 1 and not at step 2 gets m/(sqrt(0)+eps) = Inf at step 2.
inf=(--set loss.plugins=ce,zloss --set loss.zloss.coef=1000 --set optim.beta2=0
     --set optim.beta1=0.999 --set optim.eps=1.2e-38 --set optim.lr=10 --set optim.warmup=0
     --set optim.grad_clip=0 --set run.steps=10)
msg="step 2: unit 0 (root) tensor 'wte.weight' holds Inf in its master weights"
run "$work/inf" "${inf[@]}" --set run.checkpoint_every=1
got=$(steps_of "$work/inf")
if [ $rc = 1 ] && says "$work/inf.err" "$msg" && [ "$got" = "step_00000001" ]; then
    ok "Inf weights: the save of step 2 is refused, step_00000001 stays the newest"
else
    fail "Inf weights at a save: rc $rc, checkpoints '$got': $(tail -2 "$work/inf.err")"
fi
run "$work/inf2" "${inf[@]}" --set run.checkpoint_every=1 --set comm.plugin=threads \
    --set comm.world_size=2 --set data.batch_size=1 --set strategy.plugin=full_shard
got=$(steps_of "$work/inf2")
if [ $rc = 1 ] && says "$work/inf2.err" "$msg" && [ "$got" = "step_00000001" ]; then
    ok "Inf weights in one rank's full_shard shard: every rank stops, step_00000001 stays"
else
    fail "Inf weights, 2 ranks: rc $rc, checkpoints '$got': $(tail -2 "$work/inf2.err")"
fi
# checked at log steps too: with saves every 3 steps the run stops at step 2, not later
run "$work/inf3" "${inf[@]}" --set run.checkpoint_every=3
if [ $rc = 1 ] && says "$work/inf3.err" "$msg" && [ -z "$(steps_of "$work/inf3")" ]; then
    ok "Inf weights at a log step (no save due) stop the run at step 2"
else
    fail "Inf weights at a log step: rc $rc: $(tail -2 "$work/inf3.err")"
fi

# --- 2c / 4 / 5. resume: fallback, --resume-from, stale temporaries, [model] ------------------
# fnv_fix FILE: recompute the FNV-1a 64 checksum at the end of a rank file.
fnv_fix() {
    python3 - "$1" <<'PY'
import struct, sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
h = 0xcbf29ce484222325
for x in b[:-8]:
    h = ((h ^ x) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
b[-8:] = struct.pack("<Q", h)
open(p, "wb").write(b)
PY
}
# poke FILE OFFSET HEX: overwrite bytes at OFFSET.
poke() { printf "$(echo "$3" | sed 's/../\\x&/g')" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none; }
# first_master FILE: byte offset of unit 0's master[0] (header 48 bytes + unit header 28).
first_master=76

fresh() { # DIR: 6 steps, a checkpoint at each, keep 10
    rm -rf "$1"
    run "$1" --set run.steps=8 --stop-after 6 --set run.checkpoint_every=1 --set run.keep_checkpoints=10
    [ $rc = 0 ] || fail "train $1: $(tail -2 "$1.err")"
}
r="$work/r"
fresh "$r"
# a corrupt newest (a flipped byte: checksum), a NaN newest with a valid checksum, no config.ini
poke "$r/checkpoints/step_00000006/rank_00000.bin" 1000 ff
poke "$r/checkpoints/step_00000005/rank_00000.bin" $first_master 0000c07f   # NaN
fnv_fix "$r/checkpoints/step_00000005/rank_00000.bin"
rm "$r/checkpoints/step_00000004/config.ini"
# stale temporaries of an interrupted save must be ignored
mkdir -p "$r/checkpoints/step_00000007.tmp" "$r/checkpoints/step_00000009.old"
head -c 100 /dev/urandom > "$r/checkpoints/step_00000007.tmp/rank_00000.bin"
run "$r" --set run.steps=8 --resume
if [ $rc = 0 ] && says "$r.out" "resumed from step 3" \
    && says "$r.err" "skipping checkpoint $r/checkpoints/step_00000006: $r/checkpoints/step_00000006/rank_00000.bin is truncated or corrupt (checksum mismatch)" \
    && says "$r.err" "skipping checkpoint $r/checkpoints/step_00000005: $r/checkpoints/step_00000005/rank_00000.bin: unit 0 holds NaN in its master weights" \
    && says "$r.err" "skipping checkpoint $r/checkpoints/step_00000004: cannot read configuration $r/checkpoints/step_00000004/config.ini" \
    && ! says "$r.err" "step_00000007.tmp"; then
    ok "--resume skips a corrupt, a NaN and a config-less newest (saying why), ignores .tmp, takes step 3"
else
    fail "--resume fallback: rc $rc: $(cat "$r.out" "$r.err" | grep -v '^step' | head -8)"
fi
compare_series "$r" "$work/straight" loss 0 "losses after the fallback resume == straight run"
python3 - "$r/metrics.jsonl" <<'PY' && ok "metrics.jsonl after the resume: steps 1..8 once each" || fail "metrics.jsonl steps after resume"
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1])]
if steps != list(range(1, 9)): print("steps", steps); sys.exit(1)
PY
got=$(steps_of "$r")
want="step_00000003 step_00000004.skipped step_00000005.skipped step_00000006.skipped step_00000008"
[ "$got" = "$want" ] && ok "the resume sets the damaged folders aside (kept), the save removes the temporaries: $got" \
    || fail "after the resume the checkpoints are '$got' (want $want)"
says "$r.err" "set aside the damaged checkpoint $r/checkpoints/step_00000006 as $r/checkpoints/step_00000006.skipped" \
    && ok "each damaged folder set aside is named on stderr" || fail "set aside not named: $(grep aside "$r.err")"

# --resume-from a folder: step 4 of a fresh run, into another out_dir; rows > 4 dropped
fresh "$r"
cp "$r/metrics.jsonl" "$work/rf_metrics_before"
mkdir -p "$work/rf" && cp "$r/metrics.jsonl" "$work/rf/"
run "$work/rf" --set run.steps=8 --resume-from "$r/checkpoints/step_00000004"
if [ $rc = 0 ] && says "$work/rf.out" "resumed from step 4"; then
    ok "--resume-from DIR resumes from that folder"
else
    fail "--resume-from: rc $rc: $(tail -3 "$work/rf.err")"
fi
compare_series "$work/rf" "$work/straight" loss 0 "losses after --resume-from == straight run"
run "$work/rf2" --resume-from "$work/nowhere/step_00000001"
[ $rc = 1 ] && says "$work/rf2.err" "--resume-from $work/nowhere/step_00000001: not found ($work/nowhere/step_00000001)" \
    && ok "--resume-from a missing folder: clear error" || fail "--resume-from missing: rc $rc: $(cat "$work/rf2.err")"
run "$work/rf3" --resume --resume-from "$r/checkpoints/step_00000004"
[ $rc = 2 ] && says "$work/rf3.err" "exclude each other" && ok "--resume with --resume-from refused" \
    || fail "--resume + --resume-from: rc $rc: $(cat "$work/rf3.err")"

# [model] must not change on resume; other sections may
for how in "--resume" "--resume-from $r/checkpoints/step_00000006"; do
    run "$r" --set run.steps=8 --set model.n_head=4 $how
    if [ $rc = 1 ] && says "$r.err" "--set: [model] n_head = 4, but the checkpoint was trained with n_head = 2 ($r/checkpoints/step_00000006/config.ini)"; then
        ok "$how with a changed [model] n_head: refused naming both values"
    else
        fail "$how with n_head changed: rc $rc: $(tail -2 "$r.err")"
    fi
done
run "$r" --set run.steps=8 --set optim.lr=1e-3 --resume
[ $rc = 0 ] && says "$r.out" "resumed from step 6" && ok "--resume with another [optim] lr is accepted" \
    || fail "--resume with a new lr: rc $rc: $(tail -2 "$r.err")"
rm -rf "$r/checkpoints"/*
# no checkpoint yet: --resume starts from step 0 and says so (a requeue script always passes it)
run "$r" --resume --set run.steps=8
[ $rc = 0 ] && says "$r.err" "no checkpoint under $r/checkpoints yet; starting from step 0" \
    && ! says "$r.out" "resumed from" && ok "--resume without a checkpoint: starts from step 0, saying so" \
    || fail "--resume with none: rc $rc: $(cat "$r.err")"

# --- 3. metrics.jsonl: checked writes; plot and compare read a torn last line ----------------
# a file size cap (ulimit -f 8 KB, SIGXFSZ ignored: write() fails with EFBIG as on a full disk)
# that config.ini (about 4 KB) fits and metrics.jsonl (about 500 bytes a step) outgrows
mkdir -p "$work/full"
(trap '' XFSZ; ulimit -f 8; exec "$CTRAIN" train "$work/t.ini" --set run.out_dir="$work/full" \
    --set run.steps=40 > "$work/full.out" 2> "$work/full.err"); rc=$?
if [ $rc = 1 ] && says "$work/full.err" "cannot write $work/full/metrics.jsonl (step " \
    && says "$work/full.err" "File too large --->" \
    && python3 -c "import json,sys; [json.loads(l) for l in open(sys.argv[1])]" "$work/full/metrics.jsonl"; then
    ok "metrics.jsonl on a full disk: the run fails naming the file and the reason, whole lines kept"
else
    fail "metrics.jsonl on a full disk: rc $rc: $(tail -2 "$work/full.err")"
fi
cp -r "$work/straight" "$work/torn"
printf '{"step": 9, "loss": 3.1, "lr' >> "$work/torn/metrics.jsonl"   # cut short, no newline
"$CTRAIN" compare "$work/torn" --csv > "$work/torn.csv" 2> "$work/torn.err"; rc=$?
want_loss=$(metric_series "$work/straight" loss | tail -1)
if [ $rc = 0 ] && says "$work/torn.err" "$work/torn/metrics.jsonl:9: skipped the incomplete last line" \
    && python3 -c "import sys; r = open(sys.argv[1]).read().splitlines()[1].split(','); sys.exit(abs(float(r[10]) / float(sys.argv[2]) - 1) > 1e-8)" \
        "$work/torn.csv" "$want_loss"; then
    ok "compare reads a run with a torn last line (warning names file:line; final loss is step 8's, to the 9 digits CSV prints)"
else
    fail "compare with a torn last line: rc $rc: $(cat "$work/torn.err" "$work/torn.csv")"
fi
if command -v gnuplot > /dev/null; then
    "$CTRAIN" plot "$work/torn" --metric loss --out "$work/torn.png" > /dev/null 2> "$work/tornp.err"; rc=$?
    [ $rc = 0 ] && [ -s "$work/torn.png" ] && says "$work/tornp.err" "metrics.jsonl:9: skipped the incomplete last line" \
        && ok "plot reads a run with a torn last line" || fail "plot with a torn last line: rc $rc: $(cat "$work/tornp.err")"
fi

# --- 4. a failed save leaves no temporary; the next resume works ------------------------------
# Files are capped at 40 KB (ulimit -f; SIGXFSZ ignored, so write() fails with EFBIG): a rank
# file (about 95 KB) cannot be written, the config (2 KB) can.
s="$work/s"
run "$s" --set run.steps=8 --stop-after 2 --set run.checkpoint_every=1
(trap '' XFSZ; ulimit -f 40; exec "$CTRAIN" train "$work/t.ini" --set run.out_dir="$s" \
    --set run.steps=8 --set run.checkpoint_every=1 --resume > "$s.out" 2> "$s.err")
rc=$?
tmps=$(find "$s" -name '*.tmp*')
if [ $rc = 1 ] && says "$s.err" "cannot write $s/checkpoints/step_00000003.tmp/rank_00000.bin: File too large" \
    && [ -z "$tmps" ] && [ "$(steps_of "$s")" = "step_00000001 step_00000002" ]; then
    ok "a failed save (file too large) fails the run, removes step_00000003.tmp, keeps step 2"
else
    fail "failed save: rc $rc, temporaries '$tmps', checkpoints '$(steps_of "$s")': $(tail -2 "$s.err")"
fi
run "$s" --set run.steps=8 --resume
[ $rc = 0 ] && says "$s.out" "resumed from step 2" && compare_series "$s" "$work/straight" loss 0 \
    "resume after the failed save == straight run" || fail "resume after the failed save: rc $rc: $(tail -2 "$s.err")"
# the configuration itself cannot be written: no config.ini.PID.tmp is left
(trap '' XFSZ; ulimit -f 1; exec "$CTRAIN" train "$work/t.ini" --set run.out_dir="$work/c" \
    > "$work/c.out" 2> "$work/c.err")
rc=$?
tmps=$(find "$work/c" -name '*.tmp*' 2> /dev/null)
[ $rc = 1 ] && says "$work/c.err" "cannot write $work/c/config.ini: File too large" && [ -z "$tmps" ] \
    && ok "config.ini that cannot be written: clear error, no temporary left" \
    || fail "config.ini write failure: rc $rc, temporaries '$tmps': $(cat "$work/c.err")"

# --- resume at many ranks: a rank reads every rank file, but holds one open at a time ---------
# (ranks on threads once held all N files each while they loaded: N^2 descriptors, "Too many open
# files" at N = 256 under ulimit -n 20000; here N = 256 under a limit of 2000, which a run of
# one file open per rank at a time stays far below and 8 ranks loading together the old way pass)
m="$work/many"
many=(--set comm.plugin=threads --set comm.world_size=256 --set strategy.plugin=full_shard
      --set data.batch_size=1 --set run.steps=4 --set run.checkpoint_every=2)
run "$m" "${many[@]}" --stop-after 2
rc1=$rc
(ulimit -n 2000; "$CTRAIN" train "$work/t.ini" --set run.out_dir="$m" "${many[@]}" --resume \
    > "$m.out2" 2> "$m.err2")
rc2=$?
run "$work/many-straight" "${many[@]}"
if [ $rc1 = 0 ] && [ $rc2 = 0 ] && says "$m.out2" "resumed from step 2"; then
    ok "256 ranks resume under ulimit -n 2000 (a rank holds one rank file open at a time)"
    compare_series "$m" "$work/many-straight" loss 0 "256 ranks: losses after the resume == straight run"
else fail "resume at 256 ranks under ulimit -n 2000: rc $rc1/$rc2: $(grep -v '^step' "$m.err2" | head -3)"; fi

finish
