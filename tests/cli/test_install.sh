#!/usr/bin/env bash
# test_install.sh — `make install` from an already-built build folder (no rebuild), the
# installed ctrain finding its plugins relative to itself, the out-of-tree example plugin built
# with nothing but `pkg-config ctrain-sdk` (the header's example, line for line), found via
# CTRAIN_PLUGIN_PATH and via the SDK's plugindir, its minimal INI training, the frozen headers
# of the older minors usable, check-abi.sh and the guides installed (the guide naming no
# source-tree file as installed), and a DESTDIR staged install.
set -u
source "$(dirname "$0")/lib.sh"
ct_need_ctrain
cd "$ROOT"
okdata="$CT_TMP/ok.bin"   # validate opens [data] train as train does
ct_shard "$okdata" 4096 256

prefix="$CT_TMP/prefix"
before=$(stat -c %Y "$BUILD/ctrain")
# The no-rebuild claim only holds for an up-to-date build folder (in a shared checkout someone
# may have edited a source meanwhile): check it only then.
companions=$(ls "$BUILD"/plugins/cuda/*_cuda.so 2>/dev/null) # CUDA code, when nvcc built it
make -q --no-print-directory BUILD="$BUILD" "$BUILD/ctrain" "$BUILD/tests/unit_tests" \
    "$BUILD"/plugins/*.so $companions >/dev/null 2>&1
up_to_date=$?
ct_run make --no-print-directory install BUILD="$BUILD" PREFIX="$prefix"
if [ "$ct_rc" -ne 0 ]; then
    ct_fail make_install "exit $ct_rc: $ct_err"
    ct_summary
    exit 1
fi
ct_pass make_install
if [ "$up_to_date" -ne 0 ]; then
    echo "note: $BUILD was not up to date before make install; no-rebuild check skipped"
elif grep -q '^  \(CC\|LD\|CXX\) ' "$CT_TMP/out"; then
    ct_fail install_does_not_rebuild "make install compiled something: $(grep '^  \(CC\|LD\|CXX\)' "$CT_TMP/out" | head -3)"
else
    [ "$(stat -c %Y "$BUILD/ctrain")" = "$before" ] && ct_pass install_does_not_rebuild \
        || ct_fail install_does_not_rebuild "$BUILD/ctrain changed"
fi
for f in bin/ctrain include/ctrain/ctrain.h lib/pkgconfig/ctrain-sdk.pc \
         lib/ctrain/plugins/loss_ce.so; do
    [ -e "$prefix/$f" ] && ct_pass "installed_$f" || ct_fail "installed_$f" "missing $prefix/$f"
done

# the CUDA companions go to plugins/cuda/, beside the plugins that open them, and are no plugins
for c in $companions; do
    f=lib/ctrain/plugins/cuda/$(basename "$c")
    [ -e "$prefix/$f" ] && ct_pass "installed_$f" || ct_fail "installed_$f" "missing $prefix/$f"
done
if [ -n "$companions" ]; then
    ct_run "$prefix/bin/ctrain" plugins
    if [ "$ct_rc" -eq 0 ] && grep -q 'model_gpt.so' "$CT_TMP/out" \
       && ! grep -q 'plugins/cuda/' "$CT_TMP/out"; then
        ct_pass companions_not_listed_as_plugins
    else
        ct_fail companions_not_listed_as_plugins "exit $ct_rc: $(grep 'plugins/cuda/' "$CT_TMP/out" | head -2)"
    fi
fi

# the installed ctrain finds its plugins in ../lib/ctrain/plugins
ct_expect_success installed_finds_plugins "$prefix/lib/ctrain/plugins/loss_ce.so" \
    "$prefix/bin/ctrain" plugins

# the example, built through pkg-config only, in a copy outside the source tree
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
[ "$(pkg-config --variable=plugindir ctrain-sdk)" = "$prefix/lib/ctrain/plugins" ] \
    && ct_pass pc_plugindir || ct_fail pc_plugindir "$(pkg-config --variable=plugindir ctrain-sdk)"
cflags=$(pkg-config --cflags ctrain-sdk)
[ "${cflags% }" = "-I$prefix/include -fPIC -fvisibility=hidden" ] && ct_pass pc_cflags \
    || ct_fail pc_cflags "$cflags"
libs=$(pkg-config --libs ctrain-sdk)
[ "${libs% }" = "-shared -Wl,-z,defs -lm" ] && ct_pass pc_libs || ct_fail pc_libs "$libs"
abi=$(sed -n 's/^#define CT_ABI_MAJOR \([0-9]*\)$/\1/p' sdk/include/ctrain/ctrain.h).$(sed -n \
      's/^#define CT_ABI_MINOR \([0-9]*\)$/\1/p' sdk/include/ctrain/ctrain.h)
[ "$(pkg-config --modversion ctrain-sdk)" = "$abi" ] && ct_pass pc_version_is_the_abi \
    || ct_fail pc_version_is_the_abi "pc says $(pkg-config --modversion ctrain-sdk), headers $abi"
for f in share/doc/ctrain/plugin-guide.md share/doc/ctrain/user-guide.md \
         share/doc/ctrain/architecture.md share/ctrain/examples/loss_mse_logit/Makefile \
         share/ctrain/examples/loss_mse_logit/mse_logit.c \
         share/ctrain/examples/loss_mse_logit/run.ini include/ctrain/companion.h; do
    [ -f "$prefix/$f" ] && ct_pass "installed_$f" || ct_fail "installed_$f" "missing $prefix/$f"
done
# the example as installed, copied somewhere else, builds with nothing but pkg-config
cp -r "$prefix/share/ctrain/examples/loss_mse_logit" "$CT_TMP/ex"
ct_run make --no-print-directory -C "$CT_TMP/ex"
if [ "$ct_rc" -eq 0 ] && [ -f "$CT_TMP/ex/loss_mse_logit.so" ]; then
    ct_pass example_builds
else
    ct_fail example_builds "exit $ct_rc: $ct_err"
fi
ct_run "$prefix/bin/ctrain" check-plugin "$CT_TMP/ex/loss_mse_logit.so"
if [ "$ct_rc" -eq 0 ] && grep -qE '^[1-9][0-9]* passed, 0 failed$' "$CT_TMP/out"; then
    ct_pass example_passes_check_plugin
else
    ct_fail example_passes_check_plugin "exit $ct_rc: $(tail -3 "$CT_TMP/out") $ct_err"
fi
bash scripts/check-abi.sh "$CT_TMP/ex/loss_mse_logit.so" >/dev/null \
    && ct_pass example_exports_only_entry || ct_fail example_exports_only_entry "check-abi failed"
ct_expect_success example_listed_via_path "mse_logit" \
    env CTRAIN_PLUGIN_PATH="$CT_TMP/ex" "$prefix/bin/ctrain" plugins
ct_expect_success example_inspect_shows_key "coef                 float   1e-4" \
    env CTRAIN_PLUGIN_PATH="$CT_TMP/ex" "$prefix/bin/ctrain" inspect mse_logit
ct_expect_success example_in_config "[loss.mse_logit]" env CTRAIN_PLUGIN_PATH="$CT_TMP/ex" \
    "$prefix/bin/ctrain" validate tests/bad-input/ok_minimal.ini --set "data.train=$okdata" \
    --set loss.plugins=ce,mse_logit

# the installed example is the header's example, line for line (below its opening comment)
python3 - "$prefix/include/ctrain/ctrain.h" "$prefix/share/ctrain/examples/loss_mse_logit/mse_logit.c" <<'PY' \
    && ct_pass example_is_the_headers_example || ct_fail example_is_the_headers_example "they differ"
import sys
h = open(sys.argv[1]).read().split("\n")
a = next(i for i, l in enumerate(h) if l.startswith(" *   #include <ctrain/ctrain.h>"))
b = next(i for i, l in enumerate(h) if i > a and l.startswith(" *") and "CT_DEFINE_PLUGIN" in l)
while not h[b].rstrip().endswith(")"): b += 1
code = [l[5:] if l.startswith(" *   ") else l[3:] if l.startswith(" * ") else "" for l in h[a:b + 1]]
ex = open(sys.argv[2]).read().split("\n")
start = next(i for i, l in enumerate(ex) if l.startswith("#include"))
body = [l for l in ex[start:]]
while body and body[-1] == "": body.pop()
if body != code:
    for i, (x, y) in enumerate(zip(body, code)):
        if x != y: print(f"line {i}: example {x!r} header {y!r}"); break
    else: print(f"lengths {len(body)} vs {len(code)}")
    sys.exit(1)
PY

# the minimal INI shipped with the example trains with the installed ctrain and the example
(cd "$CT_TMP/ex" && "$prefix/bin/ctrain" prepare /usr/share/common-licenses/GPL-3 --out data \
    --tokenizer bytes > prepare.log 2>&1 && "$prefix/bin/ctrain" train run.ini --set run.steps=3 \
    > train.log 2>&1)
if [ $? -eq 0 ] && grep -q '"loss/mse_logit"' "$CT_TMP/ex/runs/mse_logit_example/metrics.jsonl"; then
    ct_pass example_run_ini_trains
else
    ct_fail example_run_ini_trains "$(tail -3 "$CT_TMP/ex/train.log" 2>/dev/null)"
fi

# the optimizer example (ABI 1.7), as installed and copied elsewhere: pkg-config only, passes
# check-plugin, exports only the entry, and its run.ini trains with it
cp -r "$prefix/share/ctrain/examples/optimizer_signum" "$CT_TMP/exo"
ct_run make --no-print-directory -C "$CT_TMP/exo"
[ "$ct_rc" -eq 0 ] && [ -f "$CT_TMP/exo/optimizer_signum.so" ] && ct_pass optimizer_example_builds \
    || ct_fail optimizer_example_builds "exit $ct_rc: $ct_err"
ct_run "$prefix/bin/ctrain" check-plugin "$CT_TMP/exo/optimizer_signum.so"
if [ "$ct_rc" -eq 0 ] && grep -qE '^[1-9][0-9]* passed, 0 failed$' "$CT_TMP/out"; then
    ct_pass optimizer_example_passes_check_plugin
else
    ct_fail optimizer_example_passes_check_plugin "exit $ct_rc: $(tail -3 "$CT_TMP/out") $ct_err"
fi
bash scripts/check-abi.sh "$CT_TMP/exo/optimizer_signum.so" >/dev/null \
    && ct_pass optimizer_example_exports_only_entry || ct_fail optimizer_example_exports_only_entry "check-abi failed"
(cd "$CT_TMP/exo" && "$prefix/bin/ctrain" prepare /usr/share/common-licenses/GPL-3 --out data \
    --tokenizer bytes > prepare.log 2>&1 && "$prefix/bin/ctrain" train run.ini --set run.steps=3 \
    > train.log 2>&1)
if [ $? -eq 0 ] && grep -q '"loss"' "$CT_TMP/exo/runs/signum_example/metrics.jsonl" 2>/dev/null; then
    ct_pass optimizer_example_run_ini_trains
else
    ct_fail optimizer_example_run_ini_trains "$(tail -3 "$CT_TMP/exo/train.log" 2>/dev/null)"
fi

# the precision example as installed, copied elsewhere: builds with pkg-config alone, passes
# check-plugin, and its run.ini (two ranks of the threads engine, FULL_SHARD) gives the built-in
# bf16_fp32acc's losses bit for bit (the same arithmetic: an f32 sum in rank order, rounded once)
cp -r "$prefix/share/ctrain/examples/precision_gather_sum" "$CT_TMP/px"
ct_run make --no-print-directory -C "$CT_TMP/px"
[ "$ct_rc" -eq 0 ] && [ -f "$CT_TMP/px/precision_gather_sum.so" ] && ct_pass precision_example_builds \
    || ct_fail precision_example_builds "exit $ct_rc: $ct_err"
ct_run "$prefix/bin/ctrain" check-plugin "$CT_TMP/px/precision_gather_sum.so"
if [ "$ct_rc" -eq 0 ] && grep -qE '^[1-9][0-9]* passed, 0 failed$' "$CT_TMP/out"; then
    ct_pass precision_example_passes_check_plugin
else
    ct_fail precision_example_passes_check_plugin "exit $ct_rc: $(tail -3 "$CT_TMP/out") $ct_err"
fi
(cd "$CT_TMP/px" && "$prefix/bin/ctrain" prepare /usr/share/common-licenses/GPL-3 --out data \
    --tokenizer bytes > prepare.log 2>&1 && "$prefix/bin/ctrain" train run.ini --set run.steps=6 \
    > train.log 2>&1 && "$prefix/bin/ctrain" train run.ini --set run.steps=6 \
    --set precision.plugin=bf16_fp32acc --set run.out_dir=runs/fp32acc > train2.log 2>&1)
if [ $? -eq 0 ] && python3 - "$CT_TMP/px/runs/gather_sum_example/metrics.jsonl" \
    "$CT_TMP/px/runs/fp32acc/metrics.jsonl" <<'PY'
import json, sys
a, b = ([d["loss"] for d in map(json.loads, open(p))] for p in sys.argv[1:3])
sys.exit(0 if a and a == b else print(f"losses differ: {a} vs {b}") or 1)
PY
then
    ct_pass precision_example_equals_bf16_fp32acc_bit_for_bit
else
    ct_fail precision_example_equals_bf16_fp32acc_bit_for_bit "$(tail -3 "$CT_TMP/px/train.log" "$CT_TMP/px/train2.log" 2>/dev/null)"
fi

# the frozen headers of every older minor (1.0 .. the one before the SDK's): a plugin built
# against 1.2's loads and is checked
minor=${abi#*.}
for ((m = 0; m < minor; m++)); do
    v=v1.$m
    [ -f "$(pkg-config --variable=abidir ctrain-sdk)/$v/ctrain/ctrain.h" ] && ct_pass "installed_abi_$v" \
        || ct_fail "installed_abi_$v" "missing under $(pkg-config --variable=abidir ctrain-sdk)"
done
# the installed plugin guide speaks of the installed SDK: its modversion line and its list of
# frozen headers end at the SDK's minor and the one before
guide="$prefix/share/doc/ctrain/plugin-guide.md"
said=$(sed -n 's/^pkg-config --modversion ctrain-sdk *# \([0-9.]*\):.*/\1/p' "$guide")
[ "$said" = "$abi" ] && ct_pass guide_names_the_installed_abi \
    || ct_fail guide_names_the_installed_abi "the guide says 'pkg-config --modversion' gives '$said'; the SDK is $abi"
grep -q "\.\.\. \`v1\.$((minor - 1))\`)" "$guide" && ct_pass guide_lists_the_frozen_headers \
    || ct_fail guide_lists_the_frozen_headers "the guide's list of frozen headers does not end at v1.$((minor - 1))"
FX_INCLUDE="$(pkg-config --variable=abidir ctrain-sdk)/v1.2" ct_fixture "$CT_TMP/loss_fx12.so" -DFX_NAME=fx12 \
    && ct_expect_success "a plugin built against the installed 1.2 header loads" "ABI:      1.2" \
        "$prefix/bin/ctrain" inspect "$CT_TMP/loss_fx12.so" \
    || ct_fail "build against the installed 1.2 header" "cc failed"

# check-abi.sh and the wrong plugins come with the SDK; the guide names no file of the source
# tree as if it were installed
sdk=$(pkg-config --variable=sdkdir ctrain-sdk)
"$sdk/check-abi.sh" "$CT_TMP/ex/loss_mse_logit.so" > /dev/null && ct_pass installed_check_abi \
    || ct_fail installed_check_abi "$sdk/check-abi.sh failed"
[ -f "$(pkg-config --variable=exampledir ctrain-sdk)/check-plugin/strategy_no_divide.c" ] \
    && ct_pass installed_wrong_plugins || ct_fail installed_wrong_plugins "missing"
stray=$(grep -nE '(^|[ `(])(scripts|docs|tests|examples|sdk/include)/' "$prefix/share/doc/ctrain/plugin-guide.md" \
        | grep -v "source tree" | head -3)
[ -z "$stray" ] && ct_pass guide_names_installed_paths || ct_fail guide_names_installed_paths "$stray"

# make install of the example puts it where the installed ctrain looks by itself
ct_run make --no-print-directory -C "$CT_TMP/ex" install
[ "$ct_rc" -eq 0 ] && ct_pass example_install || ct_fail example_install "$ct_err"
ct_expect_success example_found_in_plugindir "$prefix/lib/ctrain/plugins/loss_mse_logit.so" \
    env -u CTRAIN_PLUGIN_PATH "$prefix/bin/ctrain" plugins

# DESTDIR: files land under the stage, the .pc names the final prefix
stage="$CT_TMP/stage"
ct_run make --no-print-directory install BUILD="$BUILD" PREFIX=/opt/ctrain DESTDIR="$stage"
[ "$ct_rc" -eq 0 ] && ct_pass destdir_install || ct_fail destdir_install "$ct_err"
[ -x "$stage/opt/ctrain/bin/ctrain" ] && [ ! -e /opt/ctrain/bin/ctrain ] \
    && ct_pass destdir_layout || ct_fail destdir_layout "no $stage/opt/ctrain/bin/ctrain"
grep -qx 'prefix=/opt/ctrain' "$stage/opt/ctrain/lib/pkgconfig/ctrain-sdk.pc" \
    && ct_pass destdir_pc_prefix || ct_fail destdir_pc_prefix "$(head -5 "$stage/opt/ctrain/lib/pkgconfig/ctrain-sdk.pc")"
ct_expect_success destdir_ctrain_runs "loss_ce.so" "$stage/opt/ctrain/bin/ctrain" plugins

ct_summary
