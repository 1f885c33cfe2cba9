#!/usr/bin/env bash
# test_f16_cuda.sh — f16 with [device] type = cuda, as far as a machine without a GPU can check
# it: the precision plugins fp16 and pure_f16 declare cuda (`ctrain plugins` lists cpu,cuda), so
# `ctrain validate` of an INI with [device] type = cuda and either of them passes the wiring's
# device check and stops only where the cuda device opens its GPU (none here; where a GPU is
# present validate passes outright). A precision plugin that is still CPU-only (bf16_sr) is
# refused by that same check, naming itself: the check is live. Not for: the CUDA numerics
# (tests/gpu: model_vs_cpu's f16 cases and train_compare's fp16 run on a GPU; test_flash_emu
# runs the f16 flash kernels on a CPU; test_cuda_build the device suite's f16 casts).
source "$(dirname "$0")/lib.sh"
ct_need_ctrain
cd "$CT_TMP"

if [ ! -e "$BUILD/plugins/device_cuda.so" ] && [ ! -e "$ROOT/$BUILD/plugins/device_cuda.so" ]; then
    ct_pass "f16_cuda_skipped: no device_cuda.so in $BUILD/plugins (built only where nvcc is)"
    ct_summary
    exit
fi
CTRAIN=$(cd "$ROOT" && readlink -f "$CTRAIN")
ct_shard tok.bin 20000 256
cat > cuda.ini <<INI
[run]
name = f16_cuda
out_dir = $CT_TMP/run
steps = 2
[data]
train = $CT_TMP/tok.bin
batch_size = 2
seq_len = 32
[model]
plugin = gpt
n_layer = 1
n_head = 2
d_model = 32
vocab_size = 256
seq_len = 32
[precision]
plugin = fp16
[device]
type = cuda
INI

ct_run "$CTRAIN" plugins
for p in fp16 pure_f16; do
    if grep -qE "^precision +$p +[0-9.]+ +cpu,cuda " "$CT_TMP/out"; then
        ct_pass "plugins_lists_${p}_on_cpu_and_cuda"
    else
        ct_fail "plugins_lists_${p}_on_cpu_and_cuda" "$(grep -E "^precision +$p " "$CT_TMP/out")"
    fi
done

# validate_on_cuda NAME PRECISION: exit 0 (a GPU), or the one refusal of a machine without one,
# from the device's create; never the wiring's "runs only on".
validate_on_cuda() {
    ct_run "$CTRAIN" validate cuda.ini --set precision.plugin="$2"
    if [ "$ct_rc" -eq 0 ]; then
        ct_pass "$1 (validate passed: a GPU is present)"
    elif [ "$ct_rc" -lt 128 ] && grep -q "device cuda: no CUDA-capable GPU found" "$CT_TMP/err" &&
            ! grep -q "runs only on" "$CT_TMP/err"; then
        ct_pass "$1 (past the device check; stopped at the GPU's absence)"
    else
        ct_fail "$1" "exit $ct_rc: $ct_err"
    fi
}
validate_on_cuda validate_cuda_fp16 fp16
validate_on_cuda validate_cuda_pure_f16 pure_f16
ct_expect_failure validate_cuda_refuses_a_cpu_only_precision \
    "[device] type = cuda, but precision plugin 'bf16_sr' runs only on cpu|---> choose another plugin or device" \
    "$CTRAIN" validate cuda.ini --set precision.plugin=bf16_sr
ct_summary
