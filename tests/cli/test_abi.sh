#!/usr/bin/env bash
# test_abi.sh — ABI compatibility of plugins built elsewhere: a plugin compiled against the
# frozen v1.0 header (tests/abi/v1.0) loads in this ctrain; one claiming a newer minor version
# and one claiming major 2 are refused with a message naming the file and both versions.
# Fixtures come from tests/abi/fixture_plugin.c, compiled here with cc into a temporary folder.
set -u
source "$(dirname "$0")/lib.sh"
ct_need_ctrain
cd "$ROOT"
okdata="$CT_TMP/ok.bin"   # validate opens [data] train as train does
ct_shard "$okdata" 4096 256

major=$(sed -n 's/^#define CT_ABI_MAJOR \([0-9]*\).*/\1/p' sdk/include/ctrain/ctrain.h)
minor=$(sed -n 's/^#define CT_ABI_MINOR \([0-9]*\).*/\1/p' sdk/include/ctrain/ctrain.h)
speaks="this ctrain speaks $major.$minor"

old="$CT_TMP/v1.0"; newer="$CT_TMP/newer"; major2="$CT_TMP/major2"
mkdir -p "$old" "$newer" "$major2"
FX_INCLUDE=tests/abi/v1.0 ct_fixture "$old/loss_fx_v10.so" -DFX_NAME=fx_v10 \
    || ct_fail build_v10 "cc failed"
ct_fixture "$newer/loss_fx_newer.so" -DFX_NAME=fx_newer -DFX_MINOR=$((minor + 1)) \
    || ct_fail build_newer "cc failed"
ct_fixture "$major2/loss_fx_major2.so" -DFX_NAME=fx_major2 -DFX_MAJOR=2 -DFX_MINOR=0 \
    || ct_fail build_major2 "cc failed"

# the frozen header still describes ABI 1.0
if grep -q '^#define CT_ABI_MAJOR 1$' tests/abi/v1.0/ctrain/ctrain.h &&
   grep -q '^#define CT_ABI_MINOR 0$' tests/abi/v1.0/ctrain/ctrain.h; then
    ct_pass frozen_header_is_1_0
else
    ct_fail frozen_header_is_1_0 "tests/abi/v1.0/ctrain/ctrain.h is not ABI 1.0"
fi

# a fixture exports exactly the entry symbol (as scripts/check-abi.sh demands of plugins)
syms=$(nm -D --defined-only "$old/loss_fx_v10.so" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | sort -u)
[ "$syms" = "ctrain_plugin_v1" ] && ct_pass fixture_exports_only_entry \
    || ct_fail fixture_exports_only_entry "exports: $syms"

ct_run env CTRAIN_PLUGIN_PATH="$old:$newer:$major2" "$CTRAIN" plugins
if [ "$ct_rc" -eq 0 ] && grep -q "^loss  *fx_v10  *0.0.1" "$CT_TMP/out" \
    && grep -qF "$old/loss_fx_v10.so" "$CT_TMP/out"; then
    ct_pass v10_plugin_listed
else
    ct_fail v10_plugin_listed "rc $ct_rc; stdout: $ct_out"
fi
if grep -qF "plugin $newer/loss_fx_newer.so was built for ctrain ABI $major.$((minor + 1)); $speaks" "$CT_TMP/err"; then
    ct_pass newer_minor_refused_in_listing
else
    ct_fail newer_minor_refused_in_listing "stderr: $ct_err"
fi
if grep -qF "plugin $major2/loss_fx_major2.so was built for ctrain ABI 2.0; $speaks" "$CT_TMP/err"; then
    ct_pass major2_refused_in_listing
else
    ct_fail major2_refused_in_listing "stderr: $ct_err"
fi
if grep -q "fx_newer\|fx_major2" "$CT_TMP/out"; then
    ct_fail refused_not_listed "refused plugins appear in the list: $ct_out"
else
    ct_pass refused_not_listed
fi

# the v1.0 plugin's schema and its use in a configuration
ct_expect_success v10_inspect "count                int     3" \
    env CTRAIN_PLUGIN_PATH="$old" "$CTRAIN" inspect fx_v10
ct_expect_success v10_in_config "coef = 0.25" env CTRAIN_PLUGIN_PATH="$old" \
    "$CTRAIN" validate tests/bad-input/ok_minimal.ini --set "data.train=$okdata" \
    --set loss.plugins=ce,fx_v10 \
    --set loss.fx_v10.coef=0.25

# refused files are errors when asked for
ct_expect_failure newer_minor_by_path "loss_fx_newer.so was built for ctrain ABI $major.$((minor + 1))|$speaks|rebuild the plugin" \
    "$CTRAIN" inspect "$newer/loss_fx_newer.so"
ct_expect_failure major2_by_name "loss_fx_major2.so was built for ctrain ABI 2.0|$speaks" \
    env CTRAIN_PLUGIN_PATH="$major2" "$CTRAIN" validate tests/bad-input/ok_minimal.ini \
    --set loss.plugins=fx_major2

# a plugin compiled with the newer-minor header layout but claiming 1.0 loads (sizes differ
# only at struct ends): param specs 24 bytes wider
ct_fixture "$old/loss_fx_wide.so" -DFX_NAME=fx_wide -DFX_WIDE_PARAMS \
    || ct_fail build_wide "cc failed"
ct_expect_success wide_params "mode                 enum    fast       fast|slow" \
    env CTRAIN_PLUGIN_PATH="$old" "$CTRAIN" inspect loss/fx_wide

# frozen_header_loads MINOR: a loss plugin built against the frozen header of ABI 1.MINOR
# (tests/abi/v1.MINOR) loads and configures in today's host
frozen_header_loads() {
    local m=$1 dir="$CT_TMP/v1$1"
    mkdir -p "$dir"
    FX_INCLUDE=tests/abi/v1.$m ct_fixture "$dir/loss_fx_v1$m.so" -DFX_NAME=fx_v1$m \
        || ct_fail build_v1$m "cc failed"
    grep -q "^#define CT_ABI_MINOR $m\$" tests/abi/v1.$m/ctrain/ctrain.h && ct_pass frozen_header_is_1_$m \
        || ct_fail frozen_header_is_1_$m "tests/abi/v1.$m/ctrain/ctrain.h is not ABI 1.$m"
    ct_expect_success v1${m}_in_config "coef = 0.25" env CTRAIN_PLUGIN_PATH="$dir" \
        "$CTRAIN" validate tests/bad-input/ok_minimal.ini --set "data.train=$okdata" \
        --set loss.plugins=ce,fx_v1$m --set loss.fx_v1$m.coef=0.25
}
# ABI 1.1 (before the validate hook and schema flags), 1.2 (before row ranges), 1.3 (before
# hidden_rows), 1.4 (before the comm's _sr collectives), 1.5 (before CT_REDUCE_AVG) and 1.6
# (before the optimizer kind) keep loading
frozen_header_loads 1
frozen_header_loads 2
frozen_header_loads 3
frozen_header_loads 4
frozen_header_loads 5
frozen_header_loads 6

# a 1.2 plugin's validate hook runs in validate and train, before anything is created; its error
# gets the FILE:LINE of the key it names
hook="$CT_TMP/hook"; mkdir -p "$hook"
ct_fixture "$hook/loss_fxv.so" -DFX_NAME=fxv -DFX_VALIDATE || ct_fail build_hook "cc failed"
printf '[loss.fxv]\nmode = slow\ncount = 7\n' > "$hook/fxv.ini"
sed "s#^train = .*#train = $okdata#; s#^plugins = ce#plugins = ce, fxv#" \
    tests/bad-input/ok_minimal.ini > "$hook/run.ini"
cat "$hook/fxv.ini" >> "$hook/run.ini"
line=$(grep -n '^count = 7' "$hook/run.ini" | cut -d: -f1)
want="$hook/run.ini:$line: loss fx: [loss.fxv] count = 7 is too many with mode = slow ---> set count <= 5"
ct_expect_failure validate_hook_in_validate "$want" env CTRAIN_PLUGIN_PATH="$hook" \
    "$CTRAIN" validate "$hook/run.ini"
ct_expect_failure validate_hook_in_train "$want" env CTRAIN_PLUGIN_PATH="$hook" \
    "$CTRAIN" train "$hook/run.ini" --set "run.out_dir=$hook/out"
[ ! -e "$hook/out/config.ini" ] && ct_pass validate_hook_train_wrote_nothing \
    || ct_fail validate_hook_train_wrote_nothing "$hook/out/config.ini exists"
ct_expect_success validate_hook_accepts "[loss.fxv]" env CTRAIN_PLUGIN_PATH="$hook" \
    "$CTRAIN" validate "$hook/run.ini" --set loss.fxv.count=5

# a vtable one member short of a REQUIRED one is refused naming the file and the member, in
# every command, never with a signal
short="$CT_TMP/short"; mkdir -p "$short"
ct_fixture "$short/loss_fx_short.so" -DFX_NAME=fx_short -DFX_SHORT_VTABLE \
    || ct_fail build_short "cc failed"
want="loss fx_short ($short/loss_fx_short.so): vtable ends (struct_size"
ct_expect_failure short_vtable_inspect "$want|before forward_backward (required)" \
    env CTRAIN_PLUGIN_PATH="$short" "$CTRAIN" inspect loss/fx_short
ct_expect_failure short_vtable_validate "$want|before forward_backward (required)" \
    env CTRAIN_PLUGIN_PATH="$short" "$CTRAIN" validate tests/bad-input/ok_minimal.ini \
    --set loss.plugins=ce,fx_short
ct_run env CTRAIN_PLUGIN_PATH="$short" "$CTRAIN" plugins
if [ "$ct_rc" -eq 0 ] && grep -qF "$want" "$CT_TMP/err" && ! grep -q fx_short "$CT_TMP/out"; then
    ct_pass short_vtable_plugins_warns
else
    ct_fail short_vtable_plugins_warns "rc $ct_rc; stderr: $ct_err"
fi

ct_summary
