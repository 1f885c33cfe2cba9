#!/usr/bin/env bash
# test_plugin_faults.sh — what a plugin does while it runs is ctrain's to contain and name
# (DESIGN §9, "Plugin calls at run time"), through the real binary, the test-only fault term
# (build/tests/plugins/loss_fault.so) and the ABI fixture (tests/abi/fixture_plugin.c):
#   - exit(0) / exit(3) in create or forward_backward: validate, train and check-plugin end
#     non-zero (5, or check-plugin's 1 with its summary) naming the plugin and the call;
#     the threads engine with exit(3) on rank 1, 50 times: status 5 and rank 1 named every time;
#   - SIGSEGV, abort(), a thread of the plugin's own that crashes: the crash names the call;
#   - check-plugin survives crashes, hangs and exits (a FAIL line per check, the summary), and
#     names a 4 KiB and a 64-byte overrun of dlogits and a write into the const logits;
#   - SIGTERM while a plugin call hangs: after [run] stop_grace_s the ranks are named, exit 4;
#     while a plugin's create() hangs in validate's or train's setup: the call named, exit 4;
#   - stdout: a plugin's prints (in its constructor or create) never reach validate's output;
#   - a constructor that hangs: `plugins` and `inspect` end after the probe's time limit,
#     naming the file; .devices = 0, a descriptor of 8 bytes, create() returning NULL without an
#     error, a CUDA-only plugin in check-plugin: each refused with its own message;
#   - validate refuses ddp with a policy whose hooks hand back f32 sums, as train does.
# Every run is bounded by `timeout`, so a regression fails here instead of hanging the suite.
set -u
source "$(dirname "$0")/lib.sh"
ct_need_ctrain
cd "$ROOT"
fault="$BUILD/tests/plugins/loss_fault.so"
[ -f "$fault" ] || { ct_fail setup "$fault missing ---> make"; ct_summary; exit 1; }

source "$(dirname "$0")/train_lib.sh"
work="$CT_TMP/work"
mkdir -p "$work"
small_run_setup "$work" || { ct_fail setup "prepare failed"; ct_summary; exit 1; }
ini="$work/t.ini"
sed -i 's/^steps = 20/steps = 3/' "$ini"
withfault=(--set "loss.plugins=ce,$fault")

# expect NAME RC "NEEDLE|..." command...: exit status RC exactly, and stderr holds every needle
expect() {
    local name=$1 want=$2 needles=$3 IFS n
    shift 3
    ct_run "$@"
    if [ "$ct_rc" -ne "$want" ]; then ct_fail "$name" "exit $ct_rc, want $want; stderr: $ct_err"; return; fi
    IFS='|'
    for n in $needles; do
        grep -qF -- "$n" "$CT_TMP/err" || { ct_fail "$name" "stderr lacks \"$n\"; stderr: $ct_err"; return; }
    done
    ct_pass "$name"
}
# expect_crash NAME RC "NEEDLE|..." command...: as expect; in a sanitizer build (make asan),
# whose runtime reports a SIGSEGV itself and exits 1, its report is accepted instead
expect_crash() {
    local name=$1 want=$2 needles=$3
    shift 3
    expect "$name" "$want" "$needles" "$@" > "$CT_TMP/expect.log"
    if grep -q '^FAIL' "$CT_TMP/expect.log" && grep -q 'Sanitizer' "$CT_TMP/err"; then
        ct_failed=$((ct_failed - 1))
        ct_pass "$name (the sanitizer reports it)"
    else
        cat "$CT_TMP/expect.log"
    fi
}
# checked NAME "NEEDLE|...": the last check-plugin run exited 1 and printed every needle on
# stdout and the summary line last
checked() {
    local name=$1 needles=$2 IFS n
    [ "$ct_rc" -eq 1 ] || { ct_fail "$name" "exit $ct_rc, want 1; $ct_out $ct_err"; return; }
    tail -n 1 "$CT_TMP/out" | grep -qE '^[0-9]+ passed, [1-9][0-9]* failed$' \
        || { ct_fail "$name" "no summary line last: $(tail -n 2 "$CT_TMP/out")"; return; }
    IFS='|'
    for n in $needles; do
        grep -qF -- "$n" "$CT_TMP/out" || { ct_fail "$name" "stdout lacks \"$n\"; stdout: $ct_out"; return; }
    done
    ct_pass "$name"
}
named="loss fault ($fault)"
check() { ct_run timeout 120 "$CTRAIN" check-plugin "$fault" --timeout 2 "$@"; }

# ---- exit() inside a plugin ------------------------------------------------------------------
for st in 0 3; do
    expect "exit($st) in create: validate ends with status 5 naming plugin and call" 5 \
        "plugin $named called exit($st) in create ---> " \
        timeout 60 "$CTRAIN" validate "$ini" "${withfault[@]}" --set loss.fault.mode=exit \
        --set loss.fault.status=$st --set loss.fault.in=create
    expect "exit($st) in create: train ends with status 5" 5 "called exit($st) in create" \
        timeout 60 "$CTRAIN" train "$ini" "${withfault[@]}" --set loss.fault.mode=exit \
        --set loss.fault.status=$st --set loss.fault.in=create --set "run.out_dir=$work/ec$st"
    expect "exit($st) in forward_backward: train ends with status 5 naming rank, plugin, call" 5 \
        "ctrain: rank 0: plugin $named called exit($st) in forward_backward" \
        timeout 60 "$CTRAIN" train "$ini" "${withfault[@]}" --set loss.fault.mode=exit \
        --set loss.fault.status=$st --set "run.out_dir=$work/ef$st"
    check --set mode=exit --set status=$st
    checked "exit($st) in forward_backward: check-plugin names it per check, prints its summary" \
        "FAIL loss fault: value is finite; adds into dlogits rather than overwriting: the plugin called exit($st) in $named: forward_backward"
    check --set mode=exit --set status=$st --set in=create
    checked "exit($st) in create: check-plugin names it and stops after create" \
        "the plugin called exit($st) in $named: create|note loss fault: the remaining checks were not run"
done

# the threads engine: rank 1 calls exit(3) while rank 0 runs; 50 times, never another end
bad=0 first=""
for i in $(seq 1 50); do
    timeout 60 "$CTRAIN" train "$ini" "${withfault[@]}" --set loss.fault.mode=exit \
        --set loss.fault.rank=1 --set comm.plugin=threads --set comm.world_size=2 \
        --set "run.out_dir=$work/race" > "$work/race.out" 2> "$work/race.err"
    rc=$?
    if [ $rc -ne 5 ] || ! grep -qF "ctrain: rank 1: plugin $named called exit(3) in forward_backward" "$work/race.err"; then
        bad=$((bad + 1))
        [ -n "$first" ] || first="run $i: exit $rc: $(cat "$work/race.err")"
    fi
done
[ $bad -eq 0 ] && ct_pass "threads engine, exit(3) on rank 1, 50 runs: status 5 naming rank 1 every time" \
    || ct_fail "threads engine exit(3) race" "$bad of 50 runs differ; $first"

# ---- crashes ----------------------------------------------------------------------------------
expect_crash "SIGSEGV in forward_backward: train names rank, plugin and call" 139 \
    "ctrain: rank 0 crashed: signal 11 (Segmentation fault) in $named: forward_backward" \
    timeout 60 "$CTRAIN" train "$ini" "${withfault[@]}" --set loss.fault.mode=crash \
    --set "run.out_dir=$work/segv"
expect "abort() in forward_backward: train names the call" 134 \
    "crashed: signal 6 (Aborted) in $named: forward_backward" \
    timeout 60 "$CTRAIN" train "$ini" "${withfault[@]}" --set loss.fault.mode=abort \
    --set "run.out_dir=$work/abort"
for cmd in validate train; do
    expect_crash "a thread the plugin started crashes during create: $cmd names the call in progress" 139 \
        "crashed: signal 11 (Segmentation fault) in a thread ctrain did not start (a plugin's own), while the main thread was in $named: create" \
        timeout 60 "$CTRAIN" $cmd "$ini" "${withfault[@]}" --set loss.fault.mode=thread_crash \
        --set loss.fault.in=create --set "run.out_dir=$work/thread"
done
check --set mode=crash
checked "SIGSEGV: check-plugin survives, a FAIL per check naming the call" \
    "the plugin crashed: SIGSEGV (Segmentation fault) in $named: forward_backward"
check --set mode=abort
checked "abort(): check-plugin survives" "the plugin crashed: SIGABRT (Aborted) in $named: forward_backward"
check --set mode=thread_crash
checked "a thread of the plugin's own crashes: check-plugin survives" \
    "the plugin crashed: SIGSEGV (Segmentation fault) in $named: forward_backward"

# ---- buffers ------------------------------------------------------------------------------------
check --set mode=overrun
checked "a 4 KiB overrun of dlogits fails naming dlogits" \
    "forward_backward: it wrote (or read) past the end of dlogits: byte 32 after its end is a guard page"
check --set mode=overrun64
checked "a 64-byte overrun of dlogits fails naming dlogits" \
    "FAIL loss fault: value is finite; adds into dlogits rather than overwriting: the plugin crashed: SIGSEGV (Segmentation fault) in $named: forward_backward: it wrote (or read) past the end of dlogits"
check --set mode=write_logits
checked "a write into the const logits fails naming logits" \
    "forward_backward wrote into its const input logits (byte 0 of 416 changed)"

# ---- hangs ----------------------------------------------------------------------------------------
t0=$(date +%s%N)
check --set mode=hang
took=$(( ($(date +%s%N) - t0) / 1000000 ))
checked "a hang in forward_backward: the check gives up after --timeout 2 naming the call, the rest are skipped (${took} ms)" \
    "no result within 2 s: $named: forward_backward has not returned (a hang?)|note loss fault: the remaining checks were not run"

# SIGTERM while rank 1 hangs in its plugin (threads engine): named after the grace period, exit 4
# (started without `timeout`, which would pass our SIGTERM on and so send a second one; bounded
# by wait_bounded instead)
wait_bounded() { # PID SECONDS: its exit status, or 137 after killing it when it outlives SECONDS
    local pid=$1 i
    for i in $(seq 1 $(( $2 * 20 ))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    wait "$pid"
}
"$CTRAIN" train "$ini" "${withfault[@]}" --set loss.fault.mode=hang --set loss.fault.rank=1 \
    --set loss.fault.step=2 --set comm.plugin=threads --set comm.world_size=2 \
    --set run.stop_grace_s=1 --set "run.out_dir=$work/hang" > "$work/hang.out" 2> "$work/hang.err" &
pid=$!
for _ in $(seq 1 600); do grep -q 'injecting hang' "$work/hang.err" 2>/dev/null && break; sleep 0.05; done
t0=$(date +%s%N)
kill -TERM $pid
wait_bounded $pid 30
rc=$?
took=$(( ($(date +%s%N) - t0) / 1000000 ))
if [ $rc -eq 4 ] && [ $took -lt 5000 ] \
   && grep -qF "ctrain: SIGTERM came 1" "$work/hang.err" \
   && grep -qF "ctrain:   rank 1: in $named: forward_backward (the same call since the signal)" "$work/hang.err" \
   && grep -qF "ctrain: ending the process with status 4, without a checkpoint" "$work/hang.err"; then
    ct_pass "SIGTERM while rank 1 hangs in forward_backward: exit 4 in ${took} ms naming rank 1's call"
else
    ct_fail "SIGTERM while a plugin call hangs" "exit $rc after ${took} ms; stderr: $(cat "$work/hang.err")"
fi

# SIGTERM while a plugin's create() hangs, before any rank started (validate's and train's
# preflight): validate ends at once, train after its setup grace (10 s), each naming the call
for cmd in validate train; do
    "$CTRAIN" $cmd "$ini" "${withfault[@]}" --set loss.fault.mode=hang --set loss.fault.in=create \
        --set loss.fault.rank=0 --set "run.out_dir=$work/hangc" > "$work/hc.out" 2> "$work/hc.err" &
    pid=$!
    sleep 1
    kill -TERM $pid
    wait_bounded $pid 40
    rc=$?
    if [ $rc -eq 4 ] && grep -qF "before any rank started (ctrain was setting up)" "$work/hc.err" \
       && grep -qF "ctrain:   the main thread: in $named: create" "$work/hc.err"; then
        ct_pass "SIGTERM while create() hangs: $cmd exits 4 naming the plugin and create"
    else
        ct_fail "SIGTERM while create hangs ($cmd)" "exit $rc; stderr: $(cat "$work/hc.err")"
    fi
done

# SIGTERM while ctrain itself is blocked (the rank file of the checkpoint resumed from is a FIFO):
# either the read is refused at once (a FIFO is not a checkpoint), or the watchdog names it
"$CTRAIN" train "$ini" --set run.steps=2 --set "run.out_dir=$work/fifo" > /dev/null 2>&1
ck=$(ls -d "$work"/fifo/checkpoints/step_* 2>/dev/null | tail -1)
if [ -n "$ck" ]; then
    rm -f "$ck/rank_00000.bin"
    mkfifo "$ck/rank_00000.bin"
    "$CTRAIN" train "$ini" --set run.steps=4 --set run.stop_grace_s=1 \
        --set "run.out_dir=$work/fifo" --resume-from "$ck" > "$work/fifo.out" 2> "$work/fifo.err" &
    pid=$!
    sleep 1
    kill -TERM $pid 2>/dev/null
    wait_bounded $pid 30
    rc=$?
    if [ $rc -eq 4 ] && grep -qF "ctrain:   rank 0: in ctrain: resuming from a checkpoint" "$work/fifo.err"; then
        ct_pass "SIGTERM while ctrain blocks opening a FIFO: exit 4 naming the operation"
    elif [ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -qF "rank_00000.bin" "$work/fifo.err"; then
        ct_pass "a FIFO as a checkpoint's rank file is refused before any wait (exit $rc)"
    else
        ct_fail "SIGTERM while ctrain blocks" "exit $rc; stderr: $(cat "$work/fifo.err")"
    fi
else
    ct_fail "SIGTERM while ctrain blocks" "no checkpoint to resume from"
fi

# ---- stdout is the command's --------------------------------------------------------------------
ct_run env CTRAIN_TEST_FAULT_CONSTRUCTOR=stdout timeout 60 "$CTRAIN" validate "$ini" \
    "${withfault[@]}" --set loss.fault.mode=stdout --set loss.fault.in=create
if [ "$ct_rc" -eq 0 ] && ! grep -qF '[fault] ' "$CT_TMP/out" \
   && grep -qF "[fault] a constructor printing to stdout" "$CT_TMP/err" \
   && grep -qF "[fault] rank 0 printing to stdout from create" "$CT_TMP/err" \
   && python3 -c 'import configparser,sys; configparser.ConfigParser(strict=False, comment_prefixes=(";",)).read_string(open(sys.argv[1]).read())' "$CT_TMP/out"; then
    ct_pass "a plugin printing to stdout (constructor, create) lands on stderr; validate's INI parses"
else
    ct_fail "stdout kept for validate's INI" "exit $ct_rc; stdout: $(head -3 "$CT_TMP/out"); stderr: $ct_err"
fi

# ---- load time: a constructor that hangs, descriptor defects --------------------------------
hangdir="$CT_TMP/hang"
mkdir -p "$hangdir"
cp "$fault" "$hangdir/loss_fault.so"
for cmd in plugins "inspect ce"; do
    t0=$(date +%s%N)
    ct_run env CTRAIN_TEST_FAULT_CONSTRUCTOR=hang CTRAIN_PROBE_TIMEOUT_S=1 \
        CTRAIN_PLUGIN_PATH="$hangdir" timeout 30 "$CTRAIN" $cmd
    took=$(( ($(date +%s%N) - t0) / 1000000 ))
    if [ "$ct_rc" -eq 0 ] && [ $took -lt 5000 ] \
       && grep -qF "$hangdir/loss_fault.so: did not finish loading within 1 s (its constructor hangs?)" "$CT_TMP/err"; then
        ct_pass "$cmd with a constructor that hangs: done in ${took} ms, the file named"
    else
        ct_fail "$cmd with a hanging constructor" "exit $ct_rc after ${took} ms; stderr: $ct_err"
    fi
done

fx() { # DIR NAME [cc flags]: the fixture as loss_NAME.so in DIR
    local dir=$1 name=$2
    shift 2
    mkdir -p "$dir"
    ct_fixture "$dir/loss_$name.so" -DFX_NAME="$name" "$@"
}
d0="$CT_TMP/devices0"
fx "$d0" fxnodev -DFX_DEVICES=0 || ct_fail build_devices0 cc
want="plugin $d0/loss_fxnodev.so: it declares no device (.devices = 0)"
ct_run env CTRAIN_PLUGIN_PATH="$d0" "$CTRAIN" plugins
[ "$ct_rc" -eq 0 ] && grep -qF "$want" "$CT_TMP/err" && ct_pass ".devices = 0: plugins warns" \
    || ct_fail ".devices = 0: plugins" "exit $ct_rc; $ct_err"
expect ".devices = 0: validate refuses" 1 "$want" env CTRAIN_PLUGIN_PATH="$d0" "$CTRAIN" validate \
    "$ini" --set loss.plugins=ce,fxnodev
expect ".devices = 0: check-plugin refuses" 1 "$want" "$CTRAIN" check-plugin "$d0/loss_fxnodev.so"

d8="$CT_TMP/desc8"
fx "$d8" fxsmall -DFX_DESC_SIZE=8 || ct_fail build_desc8 cc
want="plugin $d8/loss_fxsmall.so: descriptor too small: struct_size 8"
ct_run env CTRAIN_PLUGIN_PATH="$d8" "$CTRAIN" plugins
[ "$ct_rc" -eq 0 ] && grep -qF "$want" "$CT_TMP/err" && ! grep -q 'unknown kind' "$CT_TMP/err" \
    && ct_pass "struct_size 8: plugins says 'descriptor too small'" || ct_fail "struct_size 8: plugins" "exit $ct_rc; $ct_err"
expect "struct_size 8: validate says 'descriptor too small'" 1 "$want" env CTRAIN_PLUGIN_PATH="$d8" \
    "$CTRAIN" validate "$ini" --set loss.plugins=ce,fxsmall

dn="$CT_TMP/createnull"
fx "$dn" fxnull -DFX_CREATE_NULL || ct_fail build_createnull cc
want="loss fxnull ($dn/loss_fxnull.so): create returned NULL and set no error (no code, no message)"
expect "create() NULL without an error: validate says the plugin set no error" 1 "$want" \
    env CTRAIN_PLUGIN_PATH="$dn" "$CTRAIN" validate "$ini" --set loss.plugins=ce,fxnull
if grep -q 'CT_ERR_INTERNAL' "$CT_TMP/err"; then ct_fail "no code the plugin never set" "$ct_err"; else ct_pass "no code the plugin never set"; fi
ct_run "$CTRAIN" check-plugin "$dn/loss_fxnull.so"
checked "create() NULL without an error: check-plugin's FAIL line says so" \
    "FAIL loss fxnull: create with [loss.fxnull] from --set and defaults: $want"

dc="$CT_TMP/cudaonly"
fx "$dc" fxcuda -DFX_DEVICES=CT_DEVICE_CUDA || ct_fail build_cudaonly cc
ct_run "$CTRAIN" check-plugin "$dc/loss_fxcuda.so"
checked "a CUDA-only plugin is not passed on the CPU: check-plugin says it needs a GPU" \
    "on device cpu (the plugin declares cuda)|FAIL loss fxcuda: runs on device cpu: the plugin declares device cuda only|a CUDA-only plugin needs a GPU"

# ---- the grace period and the exit statuses are documented where a user looks first ------------
ct_expect_success "ctrain help train documents the grace period and statuses 4 and 5" \
    "[run] stop_grace_s seconds (default 30)" "$CTRAIN" help train
grep -qF "4 stopped by a signal without one, 5 a plugin" "$CT_TMP/out" \
    && ct_pass "help train lists exit statuses 4 and 5" || ct_fail "help train statuses" "$ct_out"

# ---- validate = train: ddp with a policy whose hooks hand back f32 sums ----------------------
want="strategy ddp: the precision plugin hands back its sums in f32, but ddp all-reduces its buckets in place"
expect "validate refuses ddp with f32 results" 1 "$want" "$CTRAIN" validate "$ini" \
    --set strategy.plugin=ddp --set precision.plugin=bf16_fp32acc --set precision.result=f32
expect "train refuses it the same way, before anything runs" 2 "$want" "$CTRAIN" train "$ini" \
    --set strategy.plugin=ddp --set precision.plugin=bf16_fp32acc --set precision.result=f32 \
    --set "run.out_dir=$work/ddpf32"

ct_summary
