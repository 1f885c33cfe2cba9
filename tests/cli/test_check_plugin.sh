#!/usr/bin/env bash
# test_check_plugin.sh — claims about `ctrain check-plugin FILE.so [--set k=v]...`: every built
# plugin of kinds loss, precision, strategy, model and optimizer (and the cpu device, the local and threads
# comm engines) passes; deliberately wrong plugins (tests/check-plugin/, compiled here as a third
# party would build them) fail, each with the check that names its mistake, and not with the
# checks it keeps; --set reaches the plugin's section; usage errors and unknown keys are clear;
# the strategy check leaves nothing in its temporary folder.
source "$(dirname "$0")/lib.sh"
ct_need_ctrain

PLUGINS="$BUILD/plugins"
SRC="$ROOT/tests/check-plugin"
WRONG="$CT_TMP/wrong"
mkdir -p "$WRONG"

# cc a wrong plugin as a third party would: OUT.so SOURCE [flags...]
build_wrong() {
    local out=$1 src=$2
    shift 2
    cc -std=c11 -O1 -Wall -Wextra -Werror -shared -fPIC -fvisibility=hidden -Wl,-z,defs \
        -I"$ROOT/sdk/include" "$@" "$SRC/$src" -o "$WRONG/$out" -lm
}

# run check-plugin; ct_rc, ct_out, ct_err as ct_run sets them
check() { ct_run "$CTRAIN" check-plugin "$@"; }

# NAME: the last run exited 1 (not a crash, not 0) and its stdout holds every needle ('|'-sep.)
# and none of the forbidden ones (the second '|'-separated list, may be empty).
expect_fails_with() {
    local name=$1 needles=$2 forbidden=$3 IFS='|' n
    if [ "$ct_rc" -ne 1 ]; then ct_fail "$name" "exit $ct_rc, expected 1; stdout: $ct_out $ct_err"; return; fi
    for n in $needles; do
        if ! grep -qF -- "$n" "$CT_TMP/out"; then
            ct_fail "$name" "stdout lacks \"$n\"; stdout was: $ct_out"
            return
        fi
    done
    for n in $forbidden; do
        if grep -qF -- "$n" "$CT_TMP/out"; then
            ct_fail "$name" "stdout holds \"$n\" (that check should pass); stdout was: $ct_out"
            return
        fi
    done
    ct_pass "$name"
}

# ---- every built-in of the kinds with contract checks passes ------------------------------
for so in "$PLUGINS"/loss_*.so "$PLUGINS"/precision_*.so "$PLUGINS"/strategy_*.so \
          "$PLUGINS"/model_*.so "$PLUGINS"/optimizer_*.so "$PLUGINS"/device_cpu.so "$PLUGINS"/comm_local.so \
          "$PLUGINS"/comm_threads.so; do
    [ -e "$so" ] || continue
    name=$(basename "$so" .so)
    start=$(date +%s.%N)
    check "$so"
    secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
    last=$(tail -n 1 "$CT_TMP/out")
    if [ "$ct_rc" -eq 0 ] && [[ "$last" =~ ^[1-9][0-9]*\ passed,\ 0\ failed$ ]] &&
       ! grep -q '^FAIL' "$CT_TMP/out"; then
        ct_pass "built-in $name passes check-plugin ($last, ${secs}s)"
    else
        ct_fail "built-in $name passes check-plugin" "exit $ct_rc, last line '$last'; $ct_out $ct_err"
    fi
done

# ---- deliberately wrong plugins fail, naming the check ------------------------------------
if build_wrong loss_ce_sign_error.so loss_wrong.c -DWRONG_SIGN; then
    check "$WRONG/loss_ce_sign_error.so"
    expect_fails_with "a loss with a sign error in its gradient fails the finite-difference check" \
        "FAIL loss ce_sign_error: gradient (added minus pre-fill) matches central differences|FAIL loss ce_sign_error: gradient with grad_scale 0.25" \
        "FAIL loss ce_sign_error: adds into dlogits|FAIL loss ce_sign_error: value is finite|FAIL loss ce_sign_error: evaluation"
else
    ct_fail "build loss_ce_sign_error.so" "cc failed"
fi

if build_wrong loss_ce_range_mean.so loss_wrong.c -DWRONG_RANGE_MEAN; then
    check "$WRONG/loss_ce_range_mean.so"
    expect_fails_with "a loss whose row ranges divide by their own rows fails the row-range check" \
        "FAIL loss ce_range_mean: row ranges of 3 rows: the ranges' values add up|FAIL loss ce_range_mean: row ranges of 3 rows: the same gradient" \
        "FAIL loss ce_range_mean: gradient (added minus pre-fill)|FAIL loss ce_range_mean: value is finite|FAIL loss ce_range_mean: evaluation"
else
    ct_fail "build loss_ce_range_mean.so" "cc failed"
fi

if build_wrong loss_ce_overwrite.so loss_wrong.c -DWRONG_OVERWRITE; then
    check "$WRONG/loss_ce_overwrite.so"
    expect_fails_with "a loss that overwrites dlogits fails 'adds into dlogits'" \
        "FAIL loss ce_overwrite: adds into dlogits rather than overwriting: row" \
        "FAIL loss ce_overwrite: value is finite|FAIL loss ce_overwrite: evaluation"
else
    ct_fail "build loss_ce_overwrite.so" "cc failed"
fi

if build_wrong precision_drop_last_rank.so precision_drop_rank.c; then
    check "$WRONG/precision_drop_last_rank.so"
    expect_fails_with "a precision hook that drops a rank fails the fp64-sum check, naming the rank" \
        "FAIL precision drop_last_rank: reduce_scatter hook at N=2 matches an fp64 sum|FAIL precision drop_last_rank: all_reduce hook at N=8 matches an fp64 sum|(rank 1's contribution is missing)|(rank 7's contribution is missing)|ok   precision drop_last_rank: all_reduce hook at N=1 matches an fp64 sum" \
        "FAIL precision drop_last_rank: policy()"
else
    ct_fail "build precision_drop_last_rank.so" "cc failed"
fi

if build_wrong precision_writes_send.so precision_drop_rank.c -DWRONG_WRITES_SEND; then
    check "$WRONG/precision_writes_send.so"
    expect_fails_with "a precision hook that writes into its const send buffer is named" \
        "FAIL precision writes_send: reduce_scatter hook at N=2 leaves its (const) send buffer as it was: rank 0's send buffer was written to|ok   precision writes_send: all_reduce hook at N=8 matches an fp64 sum" \
        "matches an fp64 sum:"
else
    ct_fail "build precision_writes_send.so" "cc failed"
fi

if build_wrong precision_bad_scale.so precision_bad_scale.c; then
    check "$WRONG/precision_bad_scale.so"
    expect_fails_with "a loss scale that reaches 0 fails the loss-scale protocol check" \
        "FAIL precision bad_scale: loss-scale protocol|loss_scale() = 0 after verdict 16" \
        "FAIL precision bad_scale: policy()"
else
    ct_fail "build precision_bad_scale.so" "cc failed"
fi

if build_wrong precision_bad_master.so precision_bad_master.c; then
    check "$WRONG/precision_bad_master.so"
    expect_fails_with "a bf16-master policy whose rule changes between instances fails the master round trip" \
        "FAIL precision bad_master: master bf16 (update kahan) through a checkpoint|policy says master bf16 update sr" \
        "FAIL precision bad_master: policy()"
else
    ct_fail "build precision_bad_master.so" "cc failed"
fi

if build_wrong strategy_no_divide.so strategy_no_divide.c; then
    check "$WRONG/strategy_no_divide.so"
    expect_fails_with "a strategy without the divide by N fails the gradient checks at world 2" \
        "FAIL strategy no_divide: world 2: gradient norms of 4 steps match ddp at world 1|FAIL strategy no_divide: world 2: step-1 gradient of every unit matches|ok   strategy no_divide: world 1: step-1 gradient" \
        "FAIL strategy no_divide: world 1"
else
    ct_fail "build strategy_no_divide.so" "cc failed"
fi

if build_wrong strategy_wrong_shard_flag.so strategy_no_divide.c -DWRONG_SHARD_FLAG; then
    check "$WRONG/strategy_wrong_shard_flag.so"
    expect_fails_with "a strategy that calls replicated units sharded fails the coverage check" \
        "FAIL strategy wrong_shard_flag: world 2: the shards cover every element of every unit once: unit 0 element 0 is owned by 2 ranks, expected 1 (sharded)|FAIL strategy wrong_shard_flag: world 2: gradient norms|ok   strategy wrong_shard_flag: world 2: step-1 gradient" \
        "FAIL strategy wrong_shard_flag: world 1"
else
    ct_fail "build strategy_wrong_shard_flag.so" "cc failed"
fi

for w in hidden_state:WRONG_HIDDEN_STATE ascent:WRONG_ASCENT writes_grad:WRONG_WRITES_GRAD; do
    name=${w%%:*}
    if build_wrong "optimizer_$name.so" optimizer_wrong.c "-D${w#*:}"; then
        check "$WRONG/optimizer_$name.so"
        case $name in
        hidden_state) expect_fails_with "an optimizer with a hidden step counter fails state save -> load" \
            "FAIL optimizer hidden_state: state save -> load|ok   optimizer hidden_state: a descent direction" \
            "FAIL optimizer hidden_state: a descent direction" ;;
        ascent) expect_fails_with "an optimizer that goes uphill fails the descent check" \
            "FAIL optimizer ascent: a descent direction on a quadratic|ok   optimizer ascent: state save -> load" \
            "FAIL optimizer ascent: state save" ;;
        writes_grad) expect_fails_with "an optimizer that writes its (const) gradient is named" \
            "FAIL optimizer writes_grad:|update wrote into its const input grad" "" ;;
        esac
    else
        ct_fail "build optimizer_$name.so" "cc failed"
    fi
done

# ---- --set reaches the plugin's own section -----------------------------------------------
check "$PLUGINS/loss_zloss.so" --set coef=1e-3
default_value=$("$CTRAIN" check-plugin "$PLUGINS/loss_zloss.so" | sed -n 's/.*value is finite (\([^ ]*\) .*/\1/p')
set_value=$(sed -n 's/.*value is finite (\([^ ]*\) .*/\1/p' "$CT_TMP/out")
if [ "$ct_rc" -eq 0 ] && awk -v a="$default_value" -v b="$set_value" \
       'BEGIN { r = b / a; exit !(r > 9.999 && r < 10.001) }'; then
    ct_pass "--set coef=1e-3 reaches [loss.zloss] (value $set_value = 10 x $default_value)"
else
    ct_fail "--set coef=1e-3 reaches [loss.zloss]" "exit $ct_rc, values '$default_value' '$set_value'"
fi
check "$PLUGINS/model_gpt.so" --set d_model=12 --set n_head=3
if [ "$ct_rc" -eq 0 ] && grep -qF "tiny shape: n_layer 2, vocab_size 11, seq_len 8" "$CT_TMP/out" &&
   grep -q "head wte.weight (11, 12)" "$CT_TMP/out"; then
    ct_pass "--set d_model=12 n_head=3 shapes the model checked (head (11, 12))"
else
    ct_fail "--set shapes the model" "exit $ct_rc: $ct_out"
fi

# ---- bad input: clear errors, no signal ---------------------------------------------------
check "$PLUGINS/loss_zloss.so" --set coeff=1
expect_fails_with "an unknown --set key is a FAIL line with the nearest key" \
    "unknown key 'coeff' (did you mean 'coef'?)" ""
ct_expect_failure "--set with a section prefix is a usage error" \
    "is not key=value with a key of the plugin's own section" \
    "$CTRAIN" check-plugin "$PLUGINS/loss_zloss.so" --set loss.zloss.coef=1
[ "$ct_rc" -eq 2 ] || ct_fail "usage error exit status" "got $ct_rc, expected 2"
ct_expect_failure "a bare name is a usage error" "name the plugin's .so file" \
    "$CTRAIN" check-plugin zloss
ct_expect_failure "no file is a usage error" "no plugin file named" "$CTRAIN" check-plugin
ct_expect_failure "a missing file names the path" "$CT_TMP/none.so|No such file" \
    "$CTRAIN" check-plugin "$CT_TMP/none.so"
printf 'not an elf' >"$CT_TMP/bad.so"
ct_expect_failure "a file that is no plugin says why" "cannot load $CT_TMP/bad.so" \
    "$CTRAIN" check-plugin "$CT_TMP/bad.so"

# ---- the strategy check cleans up its temporary data --------------------------------------
mkdir -p "$CT_TMP/tmpdir"
TMPDIR="$CT_TMP/tmpdir" ct_run "$CTRAIN" check-plugin "$PLUGINS/strategy_ddp.so"
left=$(find "$CT_TMP/tmpdir" -mindepth 1 | head -3)
if [ "$ct_rc" -eq 0 ] && [ -z "$left" ]; then
    ct_pass "the strategy check leaves its temporary folder empty"
else
    ct_fail "the strategy check leaves its temporary folder empty" "exit $ct_rc; left: $left"
fi

ct_summary
