#!/usr/bin/env bash
# test_broken_plugins.sh — the broken-plugin corpus: a plugin that lacks a REQUIRED vtable member
# (one per kind tried), whose schema contradicts itself, or that fails without a message is a
# clear error naming the file and the member or key in `plugins` (a warning; the others are
# still listed), `inspect`, `validate` and `train` — never a signal. The SDK's own example
# survives evaluation (dlogits == NULL). Fixtures: tests/abi/fixture_plugin.c.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/train_lib.sh"
ct_need_ctrain
cd "$ROOT"

# case: name, kind, section key to select it, cc flags, the message every command must show
cases=(
  "nofb|loss|-DFX_NULL_SLOT=2|vtable has no forward_backward (required)"
  "nodestroy|loss|-DFX_NULL_SLOT=1|vtable has no destroy (required)"
  "nopolicy|precision|-DFX_KIND=CT_KIND_PRECISION -DFX_NULL_SLOT=2|vtable has no policy (required)"
  "nobackward|model|-DFX_KIND=CT_KIND_MODEL -DFX_NULL_SLOT=5|vtable has no backward (required)"
  "nofinish|strategy|-DFX_KIND=CT_KIND_STRATEGY -DFX_NULL_SLOT=10|vtable has no finish_backward (required)"
  "norowstats|device|-DFX_KIND=CT_KIND_DEVICE -DFX_NULL_SLOT=11|vtable has no row_stats (required)"
  "nobarrier|comm|-DFX_KIND=CT_KIND_COMM -DFX_NULL_SLOT=11|vtable has no barrier (required)"
  "baddefault|loss|-DFX_SCHEMA=FX_BAD_DEFAULT|weight = 5 is out of range|schema contradicts itself"
  "enumdefault|loss|-DFX_SCHEMA=FX_ENUM_DEFAULT|style = 'medium' is not one of: fast, slow"
  "nochoices|loss|-DFX_SCHEMA=FX_NO_CHOICES|enum parameter 'style' has no choices"
  "twice|loss|-DFX_SCHEMA=FX_TWICE|parameter 'count' is declared twice"
  "badkey|loss|-DFX_SCHEMA=FX_BAD_KEY|has key 'Count' ---> keys are [a-z0-9_]+"
)

work="$CT_TMP/work"; mkdir -p "$work"
small_run_setup "$work" || { ct_summary; exit 1; }

for c in "${cases[@]}"; do
    IFS='|' read -r name kind flags needles <<<"$c"
    dir="$CT_TMP/$name"; mkdir -p "$dir"
    so="$dir/${kind}_fx$name.so"
    # shellcheck disable=SC2086
    ct_fixture "$so" -DFX_NAME="fx$name" $flags || { ct_fail "$name build" "cc failed"; continue; }
    want="$kind fx$name ($so)|$needles"
    if [ "$kind" = loss ]; then sel=(--set "loss.plugins=ce,fx$name")
    elif [ "$kind" = device ]; then sel=(--set "device.type=fx$name")
    else sel=(--set "$kind.plugin=fx$name"); fi

    # plugins: exit 0, the others listed, a warning naming the file and the member
    ct_run env CTRAIN_PLUGIN_PATH="$dir" "$CTRAIN" plugins
    bad=0
    [ "$ct_rc" -eq 0 ] && grep -q '^loss  *ce ' "$CT_TMP/out" || bad=1
    IFS='|' read -ra ns <<<"$want"
    for n in "${ns[@]}"; do grep -qF -- "$n" "$CT_TMP/err" || bad=1; done
    [ $bad -eq 0 ] && ct_pass "$name: plugins warns and lists the rest" \
        || ct_fail "$name: plugins" "rc $ct_rc; stderr: $ct_err"
    ct_expect_failure "$name: inspect by path" "$want" "$CTRAIN" inspect "$so"
    ct_expect_failure "$name: validate" "$want" env CTRAIN_PLUGIN_PATH="$dir" "$CTRAIN" validate \
        "$work/t.ini" "${sel[@]}"
    ct_expect_failure "$name: train" "$want" env CTRAIN_PLUGIN_PATH="$dir" timeout 60 \
        "$CTRAIN" train "$work/t.ini" --set "run.out_dir=$dir/run" --set run.steps=2 "${sel[@]}"
done

# a loss term that fails without a message: the host names the plugin, the member, the status
dir="$CT_TMP/silent"; mkdir -p "$dir"
ct_fixture "$dir/loss_fxsilent.so" -DFX_NAME=fxsilent -DFX_SILENT_ERROR || ct_fail silent_build cc
ct_expect_failure "a term failing without a message is named" \
    "loss fxsilent ($dir/loss_fxsilent.so): forward_backward failed with CT_ERR_INVALID (1) but no message" \
    env CTRAIN_PLUGIN_PATH="$dir" timeout 60 "$CTRAIN" train "$work/t.ini" \
    --set "run.out_dir=$dir/run" --set run.steps=2 --set loss.plugins=ce,fxsilent
if grep -q '^ctrain: rank 0: *$' "$CT_TMP/err"; then
    ct_fail "no empty rank line" "stderr: $ct_err"
else
    ct_pass "no empty rank line"
fi

# the SDK's own example (the plugin printed at the top of ctrain.h) survives evaluation, where
# dlogits is NULL
dir="$CT_TMP/example"; mkdir -p "$dir"
cc -std=c11 -shared -fPIC -fvisibility=hidden -Wl,-z,defs -Isdk/include \
    examples/loss_mse_logit/mse_logit.c -o "$dir/loss_mse_logit.so" -lm \
    || ct_fail example_build "cc failed"
sed -i 's|^val =.*|val = '"$work"'/data|' "$work/t.ini"
ct_run env CTRAIN_PLUGIN_PATH="$dir" timeout 60 "$CTRAIN" train "$work/t.ini" \
    --set "run.out_dir=$dir/run" --set run.steps=4 --set run.eval_every=2 \
    --set loss.plugins=ce,mse_logit
if [ "$ct_rc" -eq 0 ] && grep -q '"val/loss/mse_logit"' "$dir/run/metrics.jsonl"; then
    ct_pass "the SDK example runs through evaluation (dlogits NULL)"
else
    ct_fail "the SDK example runs through evaluation" "rc $ct_rc; $ct_err"
fi

ct_summary
