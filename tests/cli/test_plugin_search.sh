#!/usr/bin/env bash
# test_plugin_search.sh — how ctrain finds plugins and what it says about the search path: a
# plugin that crashes in its constructor (SIGSEGV) on CTRAIN_PLUGIN_PATH is named by `ctrain
# plugins` (which lists the good ones and exits 0) and never loaded by `validate` or `train` of
# a configuration that does not use it; asked for, its crash names the file. World-writable
# plugin folders and files and a shadowed plugin are warned about in plugins/validate/train;
# a bare x.so is not taken from the current folder; a relative plugin path is relative to the
# working directory, written in an INI or given with --set alike (as data paths are), and a
# missing one is named by the path ctrain looked for.
# Fixtures come from tests/abi/fixture_plugin.c, compiled here with cc.
set -u
source "$(dirname "$0")/lib.sh"
ct_need_ctrain
cd "$ROOT"
okdata="$CT_TMP/ok.bin"   # validate opens [data] train as train does
ct_shard "$okdata" 4096 256
ok="$CT_TMP/ok_minimal.ini"
sed "s#^train = .*#train = $okdata#" tests/bad-input/ok_minimal.ini > "$ok"

good="$CT_TMP/good" crash="$CT_TMP/crash"
mkdir -p "$good" "$crash"
ct_fixture "$good/loss_fx.so" || ct_fail build_fx "cc failed"
ct_fixture "$crash/loss_boom.so" -DFX_NAME=boom -DFX_CRASH_IN_CONSTRUCTOR \
    || ct_fail build_boom "cc failed"
path="$good:$crash"

# ---- a plugin that crashes while loading -------------------------------------------------
ct_run timeout 60 env CTRAIN_PLUGIN_PATH="$path" "$CTRAIN" plugins
if [ "$ct_rc" -eq 0 ] && grep -q "^loss  *ce " "$CT_TMP/out" && grep -q "^loss  *fx " "$CT_TMP/out" \
   && ! grep -q "boom" "$CT_TMP/out"; then
    ct_pass plugins_lists_the_good_ones_despite_a_crashing_one
else
    ct_fail plugins_lists_the_good_ones_despite_a_crashing_one "rc $ct_rc; stdout: $ct_out; stderr: $ct_err"
fi
if grep -qF "warning: $crash/loss_boom.so: crashed while loading (SIGSEGV in its constructor or descriptor) ---> remove it from the search path" "$CT_TMP/err"; then
    ct_pass plugins_names_the_crashing_file_and_signal
else
    ct_fail plugins_names_the_crashing_file_and_signal "stderr: $ct_err"
fi
ct_run timeout 60 env CTRAIN_PLUGIN_PATH="$path" "$CTRAIN" inspect fx
[ "$ct_rc" -eq 0 ] && grep -qF "crashed while loading (SIGSEGV" "$CT_TMP/err" \
    && ct_pass inspect_name_survives_a_crashing_plugin \
    || ct_fail inspect_name_survives_a_crashing_plugin "rc $ct_rc; stderr: $ct_err"
ct_run timeout 60 env CTRAIN_PLUGIN_PATH="$path" "$CTRAIN" validate "$ok" --set loss.plugins=ce,fx
[ "$ct_rc" -eq 0 ] && grep -qF "$good/loss_fx.so" "$CT_TMP/out" && ! grep -q "boom" "$CT_TMP/err" \
    && ct_pass validate_does_not_load_an_unused_plugin \
    || ct_fail validate_does_not_load_an_unused_plugin "rc $ct_rc; stderr: $ct_err"
# asked for by name: it crashes, but the file is named first
# (through an inner shell, so its "Segmentation fault" notice lands in the captured stderr)
ct_run bash -c '"$@"; exit $?' _ timeout 60 env CTRAIN_PLUGIN_PATH="$path" "$CTRAIN" validate \
    "$ok" --set loss.plugins=boom
if [ "$ct_rc" -eq 139 ] && grep -qF "ctrain: $crash/loss_boom.so: crashed while loading (SIGSEGV" "$CT_TMP/err"; then
    ct_pass a_crash_while_loading_names_the_file
else
    ct_fail a_crash_while_loading_names_the_file "rc $ct_rc; stderr: $ct_err"
fi

# a two-step training run with the crashing plugin on the path
data="$CT_TMP/data"
"$CTRAIN" prepare --quiet --text /usr/share/common-licenses/GPL-3 --out "$data" \
    || ct_fail prepare "ctrain prepare failed"
{
    printf '[run]\nname = t\nout_dir = %s/run\nsteps = 2\nlog_every = 1\n' "$CT_TMP"
    printf '[data]\ntrain = %s\nbatch_size = 2\nseq_len = 16\n' "$data"
    printf '[model]\nplugin = gpt\nn_layer = 1\nn_head = 2\nd_model = 16\nvocab_size = 256\n'
    printf 'seq_len = 16\n[optim]\nlr = 1e-3\n'
} > "$CT_TMP/train.ini"
ct_run timeout 120 env CTRAIN_PLUGIN_PATH="$path" "$CTRAIN" train "$CT_TMP/train.ini"
[ "$ct_rc" -eq 0 ] && [ -s "$CT_TMP/run/metrics.jsonl" ] && ! grep -q "boom" "$CT_TMP/err" \
    && ct_pass train_does_not_load_an_unused_plugin \
    || ct_fail train_does_not_load_an_unused_plugin "rc $ct_rc; stderr: $ct_err"

# ---- world-writable folders and files ----------------------------------------------------
ww="$CT_TMP/ww"
mkdir -p "$ww"
ct_fixture "$ww/loss_fw.so" -DFX_NAME=fw || ct_fail build_fw "cc failed"
chmod 0777 "$ww"
chmod 0666 "$ww/loss_fw.so"
for cmd in plugins validate train; do
    case $cmd in
        plugins) args=(plugins) ;;
        validate) args=(validate "$ok" --set loss.plugins=ce,fw) ;;
        train) args=(train "$CT_TMP/train.ini" --set loss.plugins=ce,fw --set "run.out_dir=$CT_TMP/run_ww") ;;
    esac
    ct_run timeout 120 env CTRAIN_PLUGIN_PATH="$ww" "$CTRAIN" "${args[@]}"
    if [ "$ct_rc" -eq 0 ] && grep -qF "warning: plugin folder $ww is world-writable" "$CT_TMP/err" \
       && grep -qF "warning: plugin file $ww/loss_fw.so is world-writable" "$CT_TMP/err"; then
        ct_pass "${cmd}_warns_about_world_writable_plugin_folder_and_file"
    else
        ct_fail "${cmd}_warns_about_world_writable_plugin_folder_and_file" "rc $ct_rc; stderr: $ct_err"
    fi
done
chmod 0755 "$ww"

# ---- shadowing ---------------------------------------------------------------------------
sh="$CT_TMP/shadow"
mkdir -p "$sh"
ct_fixture "$sh/loss_ce.so" -DFX_NAME=ce || ct_fail build_ce "cc failed"
ct_run env CTRAIN_PLUGIN_PATH="$sh" "$CTRAIN" validate "$ok"
[ "$ct_rc" -eq 0 ] && grep -qF "warning: loss plugin 'ce': $BUILD/plugins/loss_ce.so is used; $sh/loss_ce.so, later on the search path, is hidden by it" "$CT_TMP/err" \
    && ct_pass validate_warns_about_a_shadowed_plugin \
    || ct_fail validate_warns_about_a_shadowed_plugin "rc $ct_rc; stderr: $ct_err"
ct_run env CTRAIN_PLUGIN_PATH="$sh" "$CTRAIN" validate "$ok" --set "loss.plugins=$sh/loss_ce.so"
[ "$ct_rc" -eq 0 ] && grep -qF "warning: loss plugin 'ce': $sh/loss_ce.so (named by path) takes the place of $BUILD/plugins/loss_ce.so" "$CT_TMP/err" \
    && ct_pass validate_warns_when_a_path_takes_a_builtins_place \
    || ct_fail validate_warns_when_a_path_takes_a_builtins_place "rc $ct_rc; stderr: $ct_err"

# ---- a bare x.so is not taken from the current folder ------------------------------------
here="$CT_TMP/here"
mkdir -p "$here"
ct_fixture "$here/loss_here.so" -DFX_NAME=here || ct_fail build_here "cc failed"
ct_run bash -c "cd '$here' && '$CTRAIN' validate '$ok' --set loss.plugins=ce,loss_here.so"
if [ "$ct_rc" -ne 0 ] && [ "$ct_rc" -lt 128 ] && grep -qF "plugin file loss_here.so is in none of the" "$CT_TMP/err"; then
    ct_pass bare_so_not_loaded_from_the_current_folder
else
    ct_fail bare_so_not_loaded_from_the_current_folder "rc $ct_rc; stderr: $ct_err"
fi
ct_expect_success dot_slash_so_loaded_from_the_current_folder "./loss_here.so" \
    bash -c "cd '$here' && '$CTRAIN' validate '$ok' --set loss.plugins=ce,./loss_here.so"

# ---- a relative path is relative to the working directory, in an INI as with --set -------
cfg="$CT_TMP/cfgdir"
mkdir -p "$cfg/mine"
ct_fixture "$cfg/mine/loss_rel.so" -DFX_NAME=rel || ct_fail build_rel "cc failed"
sed 's#^plugins = ce$#plugins = ce, mine/loss_rel.so#' "$ok" > "$cfg/run.ini"
ct_expect_success ini_relative_plugin_path_resolves_against_the_working_directory \
    "$cfg/mine/loss_rel.so" bash -c "cd '$cfg' && '$CTRAIN' validate run.ini"
ct_expect_failure ini_relative_plugin_path_elsewhere_names_the_resolved_path \
    "plugin file $CT_TMP/mine/loss_rel.so" bash -c "cd '$CT_TMP' && '$CTRAIN' validate '$cfg/run.ini'"
ct_expect_failure set_relative_plugin_path_names_the_resolved_path \
    "plugin file $CT_TMP/mine/loss_rel.so" \
    bash -c "cd '$CT_TMP' && '$CTRAIN' validate '$cfg/run.ini' --set loss.plugins=ce,mine/loss_rel.so"
ct_expect_success set_relative_plugin_path_from_the_working_directory "mine/loss_rel.so" \
    bash -c "cd '$cfg' && '$CTRAIN' validate run.ini --set loss.plugins=ce,mine/loss_rel.so"

ct_summary
