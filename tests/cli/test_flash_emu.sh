#!/usr/bin/env bash
# test_flash_emu.sh — the gpt plugin's flash attention kernels (flash_kernels.cuh, the source
# nvcc compiles) on a CPU: tests/cli/flash_emu.cc runs each CUDA thread as a host thread and
# compares forward and backward with a double-precision causal attention (T = 1, 37, 64, 130;
# head dims 16, 24, 64; f32, bf16 and f16). Not for: the GPU itself (tests/gpu/model_vs_cpu.c).
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

if ! c++ -std=c++17 -O2 -pthread -Wall -Wextra -Werror -Wno-unused-function -Isdk/include \
        tests/cli/flash_emu.cc -o "$CT_TMP/flash_emu" 2>"$CT_TMP/build.err"; then
    ct_fail flash_emu_builds "$(head -20 "$CT_TMP/build.err")"
    ct_summary
    exit
fi
ct_pass flash_emu_builds
"$CT_TMP/flash_emu" >"$CT_TMP/emu.out" 2>&1
rc=$?
while read -r verdict name rest; do
    name=${name%:}
    case $verdict in
        ok) ct_pass "$name $rest" ;;
        FAIL) ct_fail "$name" "$rest" ;;
    esac
done <"$CT_TMP/emu.out"
line=$(tail -1 "$CT_TMP/emu.out")
case $line in
    *" passed, 0 failed") [ "$rc" -eq 0 ] && ct_pass "flash_emu_exit_and_summary" ||
                              ct_fail flash_emu_exit_and_summary "exit $rc after '$line'" ;;
    *) ct_fail flash_emu_exit_and_summary "exit $rc, last line '$line'" ;;
esac
ct_summary
