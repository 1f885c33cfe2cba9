#!/usr/bin/env bash
# test_bad_input.sh — ctrain refuses bad input with a clear message and no crash: every
# tests/bad-input/*.ini case (its "; expect:" lines must appear in stderr), plus cases made
# here: missing and unreadable files, a .so that is not a plugin, a .so whose library is gone,
# malformed --set, an unknown command. Needs $BUILD/ctrain and the in-tree plugins.
set -u
source "$(dirname "$0")/lib.sh"
ct_need_ctrain
cd "$ROOT"
# validate opens [data] train as train does: the valid cases read a shard made here
ct_shard "$CT_TMP/ok.bin" 4096 256
okdata=(--set "data.train=$CT_TMP/ok.bin")

# the corpus
for ini in tests/bad-input/*.ini; do
    name=$(basename "$ini" .ini)
    if grep -q '^; expect-ok' "$ini"; then
        ct_expect_success "$name" "" "$CTRAIN" validate "$ini" "${okdata[@]}"
        continue
    fi
    needles=$(sed -n 's/^; expect: //p' "$ini" | paste -sd'|')
    if [ -z "$needles" ]; then ct_fail "$name" "no '; expect:' line"; continue; fi
    ct_expect_failure "$name" "$needles" "$CTRAIN" validate "$ini"
done
ok=tests/bad-input/ok_minimal.ini

# files that cannot be read
ct_expect_failure missing_file "cannot read configuration does/not/exist.ini|No such file" \
    "$CTRAIN" validate does/not/exist.ini
mkdir -p "$CT_TMP/a_directory.ini"   # refused by type, as root too
ct_expect_failure unreadable_file "a_directory.ini is a directory, not a regular file" \
    "$CTRAIN" validate "$CT_TMP/a_directory.ini"
ct_expect_failure no_config_given "no configuration file given|usage: ctrain" "$CTRAIN" validate

# malformed --set
for bad in "optim.lr" "optimlr=1" ".lr=1" "optim.=3"; do
    ct_expect_failure "malformed_set_$bad" "--set '$bad'|expected the form --set section.key=value" \
        "$CTRAIN" validate "$ok" --set "$bad"
done
ct_expect_failure set_without_argument "--set needs an argument" "$CTRAIN" validate "$ok" --set
ct_expect_failure set_unknown_key "--set: [optim] unknown key 'lrr' (did you mean 'lr'?)" \
    "$CTRAIN" validate "$ok" --set optim.lrr=1
ct_expect_success set_overrides_file "lr = 5e-4" "$CTRAIN" validate "$ok" "${okdata[@]}" \
    --set optim.lr=5e-4

# a .so that is not a plugin (no entry symbol)
printf 'int not_a_plugin(void) { return 1; }\n' > "$CT_TMP/np.c"
cc -shared -fPIC "$CT_TMP/np.c" -o "$CT_TMP/loss_np.so"
ct_expect_failure so_without_entry \
    "[loss] plugins = $CT_TMP/loss_np.so|is not a ctrain plugin: it has no symbol ctrain_plugin_v1" \
    "$CTRAIN" validate "$ok" --set "loss.plugins=$CT_TMP/loss_np.so"

# a .so that fails to load: linked against a library that is then removed
printf 'int fx_dep_value(void) { return 41; }\n' > "$CT_TMP/dep.c"
cc -shared -fPIC "$CT_TMP/dep.c" -o "$CT_TMP/libfxdep.so"
mkdir -p "$CT_TMP/gone"
cc -std=c11 -shared -fPIC -fvisibility=hidden -Wl,-z,defs -Isdk/include -DFX_MISSING_DEP \
    tests/abi/fixture_plugin.c -o "$CT_TMP/gone/loss_fx.so" -L"$CT_TMP" -Wl,-rpath,"$CT_TMP" -lfxdep
rm -f "$CT_TMP/libfxdep.so"
ct_expect_failure so_missing_library \
    "cannot load $CT_TMP/gone/loss_fx.so|libfxdep.so: cannot open shared object file" \
    "$CTRAIN" validate "$ok" --set "loss.plugins=$CT_TMP/gone/loss_fx.so"
# found by name on CTRAIN_PLUGIN_PATH: listed as a warning, an error when asked for
ct_run env CTRAIN_PLUGIN_PATH="$CT_TMP/gone" "$CTRAIN" plugins
if [ "$ct_rc" -eq 0 ] && grep -qF "warning: cannot load $CT_TMP/gone/loss_fx.so" "$CT_TMP/err"; then
    ct_pass plugins_lists_unloadable_as_warning
else
    ct_fail plugins_lists_unloadable_as_warning "rc $ct_rc, stderr: $ct_err"
fi
ct_expect_failure so_missing_library_by_name "loss plugin 'fx'|libfxdep.so: cannot open shared object file" \
    env CTRAIN_PLUGIN_PATH="$CT_TMP/gone" "$CTRAIN" validate "$ok" --set loss.plugins=fx

# a plugin file of the wrong kind, by path
ct_fixture "$CT_TMP/loss_fx.so" || ct_fail fixture "cc failed"
ct_expect_failure wrong_kind_by_path "[device] type = $CT_TMP/loss_fx.so|is a loss plugin; [device] needs a device plugin" \
    "$CTRAIN" validate "$ok" --set "device.type=$CT_TMP/loss_fx.so"

# commands
ct_expect_failure unknown_command "unknown command 'valdate' (did you mean 'validate'?)" "$CTRAIN" valdate
ct_expect_failure inspect_unknown "no plugin named 'zlos' (did you mean 'zloss'?)" "$CTRAIN" inspect zlos
ct_expect_failure validate_extra_argument "unexpected argument '--bogus'" "$CTRAIN" validate "$ok" "${okdata[@]}" \
    --bogus

ct_summary
