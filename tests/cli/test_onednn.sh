#!/usr/bin/env bash
# test_onednn.sh — bf16 products through oneDNN ([model] bf16_matmul, plugins/model/gpt/onednn.c):
# each product class against OpenBLAS on the same bf16 values within the f32-accumulation bound
# (tests/cli/onednn_check.c); whole amp and pure_bf16 runs of 50 steps within a stated tolerance
# of the OpenBLAS path's losses; the threads engine's resume and strategy comparisons still bit
# for bit on the oneDNN path; the start-up line naming what runs, the fallback to OpenBLAS when
# oneDNN's max-ISA variable leaves no bf16 instructions (the same bits as the OpenBLAS path), and
# a gpt plugin built without oneDNN. Where oneDNN is not installed the oneDNN-only checks say so
# and pass (the build without it is what such a machine runs).
set -u
source "$(dirname "$0")/lib.sh" # CT_TMP (removed at exit), ct_install_gpt_without
cd "$ROOT"
. tests/cli/train_lib.sh          # ok / fail / finish, tiny_ini, compare_series
work=$CT_TMP
BUILD_DIR=$(dirname "$CTRAIN")
# Under `make asan`: LeakSanitizer's exit-time scan crashes ("Tracer caught signal 11") in every
# process that ran oneDNN's JIT kernels (seen with 2.6.3; the same runs through OpenBLAS exit
# cleanly), so leak detection is off for this suite; AddressSanitizer's checks stay on.
[ "${SANITIZER:-}" = address ] && export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"

if [ -e "$BUILD_DIR/.onednn-on" ]; then have=1; else have=0; fi
# Does this CPU (as oneDNN sees it) have bf16 instructions? /proc/cpuinfo's avx512_bf16 or amx.
if grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo; then cpu_bf16=1; else cpu_bf16=0; fi

# ---- 1. every product class against OpenBLAS within the f32 bound ---------------------------
if [ "$have" = 1 ] && [ "$cpu_bf16" = 1 ]; then
    if cc -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -fopenmp -DGPT_HAVE_ONEDNN -Isdk/include \
        $(pkg-config --cflags openblas) tests/cli/onednn_check.c plugins/model/gpt/onednn.c \
        -o "$work/onednn_check" $(pkg-config --libs openblas) -ldnnl -lm 2> "$work/cc.log"; then
        "$work/onednn_check" > "$work/check.out" 2>&1
        rc=$?
        while read -r verdict name rest; do
            case $verdict in
                ok) ok "${name%:} $rest" ;;
                FAIL) fail "${name%:} $rest" ;;
            esac
        done < "$work/check.out"
        tail -1 "$work/check.out" | grep -q ' 0 failed$' && [ "$rc" = 0 ] \
            && ok "onednn_check exits 0 ($(head -1 "$work/check.out"))" \
            || fail "onednn_check: exit $rc, $(tail -1 "$work/check.out")"
    else
        fail "onednn_check builds: $(head -5 "$work/cc.log")"
    fi
else
    ok "products against OpenBLAS: not run (oneDNN built: $have, CPU bf16 instructions: $cpu_bf16)"
fi

# ---- 2. the start-up line and 50-step runs --------------------------------------------------
"$CTRAIN" prepare --text /usr/share/common-licenses/GPL-3 --out "$work/data" --tokenizer bytes \
    --val-fraction 0.1 > /dev/null 2>&1 || { fail "prepare"; finish; exit 1; }
tiny_ini "$work/base.ini" "$work/unused" "$work/data" 256
sed -i 's/^val = .*/val =/' "$work/base.ini" # no validation passes
# train NAME ARGS...: a run into $work/NAME (its stderr in $work/NAME.log)
train() {
    local name=$1; shift
    "$CTRAIN" train "$work/base.ini" --set run.out_dir="$work/$name" "$@" \
        > "$work/$name.out" 2> "$work/$name.log" || fail "train $name: $(tail -3 "$work/$name.log")"
}
line_of() { grep -o 'cpu bf16: .*' "$work/$1.log" | head -1; }

train ob_amp --set run.steps=50 --set precision.plugin=amp --set model.bf16_matmul=openblas
train dn_amp --set run.steps=50 --set precision.plugin=amp --set model.bf16_matmul=onednn
case "$(line_of ob_amp)" in
    "cpu bf16: OpenBLAS, f32 products of the bf16 values"*"bf16_matmul = openblas"*)
        ok "start-up line of bf16_matmul = openblas: $(line_of ob_amp)" ;;
    *) fail "start-up line of bf16_matmul = openblas: '$(line_of ob_amp)'" ;;
esac
if [ "$have" = 1 ] && [ "$cpu_bf16" = 1 ]; then
    # the ISA named must be one with bf16 instructions, and the kernel oneDNN picked
    if line_of dn_amp | grep -qE '^cpu bf16: oneDNN [0-9]+\.[0-9]+\.[0-9]+, (avx512_core_bf16|avx512_core_amx) \((brg|gemm|jit)[^)]*\): bf16 x bf16 -> f32 products$'; then
        ok "start-up line of bf16_matmul = onednn names the ISA: $(line_of dn_amp)"
    else
        fail "start-up line of bf16_matmul = onednn: '$(line_of dn_amp)'"
    fi
    # pure_bf16 at 2 rank threads (full_shard): its bf16 ring reduction as well
    for p in ob:openblas dn:onednn; do
        train ${p%%:*}_pure --set run.steps=50 --set precision.plugin=pure_bf16 \
            --set model.bf16_matmul=${p#*:} --set comm.plugin=threads --set comm.world_size=2 \
            --set strategy.plugin=full_shard --set data.batch_size=2
    done
    grep -q "refused" "$work/dn_amp.log" "$work/dn_pure.log" && fail "a product was refused: $(grep -h refused "$work/dn_amp.log" "$work/dn_pure.log")" \
        || ok "no product fell back to OpenBLAS on the oneDNN path"
    # Tolerances: the products differ only in the order of f32 sums (~1e-7 relative), but the
    # activations are rounded to bf16 (2^-9), so such a difference flips a rounding now and then
    # and the runs drift apart. Measured on this model (lr 3e-3): the first step's gradient norm
    # (before any update) within 5e-8 (amp) and 7e-7 (pure_bf16, N = 2) relative, the loss over
    # 50 steps within 2.4e-4 and 1.8e-4. Held to 1e-5 and 2e-3; a wrong product (the transposed
    # weight in one input gradient, say) moves the first gradient norm by percents.
    for p in amp pure; do
        compare_series "$work/dn_$p" "$work/ob_$p" loss 2e-3 "$p: 50 steps on the oneDNN path follow the OpenBLAS path"
        g1=$(metric_series "$work/dn_$p" grad_norm | head -1) g0=$(metric_series "$work/ob_$p" grad_norm | head -1)
        if python3 -c "import sys; a, b = float('$g1'), float('$g0'); sys.exit(abs(a - b) > 1e-5 * abs(b))"; then
            ok "$p: first gradient norm on the oneDNN path $g1, OpenBLAS $g0 (within 1e-5 relative)"
        else
            fail "$p: first gradient norm on the oneDNN path $g1, OpenBLAS $g0 (tolerance 1e-5 relative)"
        fi
    done
    # and they are not the same run: the oneDNN path did run
    cmp -s <(metric_series "$work/dn_amp" loss) <(metric_series "$work/ob_amp" loss) \
        && fail "amp: the oneDNN path gave the OpenBLAS path's losses bit for bit: did it run?" \
        || ok "amp: the oneDNN path's losses are its own (not the OpenBLAS bits)"
else
    case "$(line_of dn_amp)" in
        "cpu bf16: OpenBLAS"*) ok "bf16_matmul = onednn without oneDNN bf16 falls back: $(line_of dn_amp)" ;;
        *) fail "bf16_matmul = onednn without oneDNN bf16: '$(line_of dn_amp)'" ;;
    esac
    compare_series "$work/dn_amp" "$work/ob_amp" loss 0 "amp: the fallback is the OpenBLAS path bit for bit"
fi

# ---- 3. bit for bit on the oneDNN path: resume, strategies, mpirun = threads ----------------
train dn_n2 --set run.steps=8 --set precision.plugin=amp --set model.bf16_matmul=onednn \
    --set comm.plugin=threads --set comm.world_size=2 --set strategy.plugin=full_shard \
    --set data.batch_size=2
train dn_n2_resume --set run.steps=8 --set precision.plugin=amp --set model.bf16_matmul=onednn \
    --set comm.plugin=threads --set comm.world_size=2 --set strategy.plugin=full_shard \
    --set data.batch_size=2 --set run.checkpoint_every=4 --stop-after 4
"$CTRAIN" train "$work/base.ini" --set run.out_dir="$work/dn_n2_resume" \
    --set run.steps=8 --set precision.plugin=amp --set model.bf16_matmul=onednn \
    --set comm.plugin=threads --set comm.world_size=2 --set strategy.plugin=full_shard \
    --set data.batch_size=2 --set run.checkpoint_every=4 --resume > "$work/resume.out" 2>&1 \
    || fail "resume: $(tail -3 "$work/resume.out")"
compare_series "$work/dn_n2_resume" "$work/dn_n2" loss 0 "oneDNN path, threads N = 2: 4 steps + resume + 4 = 8 steps bit for bit"
compare_series "$work/dn_n2_resume" "$work/dn_n2" grad_norm 0 "oneDNN path, threads N = 2: resumed gradient norms bit for bit"
# no_shard and full_shard with f32 accumulation reduce the same f32 sums: the same bits
for st in no_shard full_shard; do
    train dn_acc_$st --set run.steps=6 --set precision.plugin=amp --set precision.grad_accum_dtype=f32 \
        --set model.bf16_matmul=onednn --set comm.plugin=threads --set comm.world_size=2 \
        --set strategy.plugin=$st --set data.batch_size=2
done
compare_series "$work/dn_acc_no_shard" "$work/dn_acc_full_shard" loss 0 "oneDNN path: no_shard = full_shard (f32 accumulation) bit for bit"
if command -v mpirun > /dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    timeout 120 mpirun --oversubscribe -np 2 "$CTRAIN" train "$work/base.ini" \
        --set run.out_dir="$work/dn_mpi" --set run.steps=8 --set precision.plugin=amp \
        --set model.bf16_matmul=onednn --set comm.plugin=mpi --set strategy.plugin=full_shard \
        --set data.batch_size=2 > "$work/dn_mpi.log" 2>&1 || fail "mpirun: $(tail -3 "$work/dn_mpi.log")"
    compare_series "$work/dn_mpi" "$work/dn_n2" loss 0 "oneDNN path: mpirun -np 2 = threads N = 2 bit for bit"
fi

# ---- 4. the fallback under oneDNN's max-ISA variables ---------------------------------------
if [ "$have" = 1 ]; then
    for var in ONEDNN_MAX_CPU_ISA DNNL_MAX_CPU_ISA; do
        env "$var=AVX2" "$CTRAIN" train "$work/base.ini" --set run.out_dir="$work/isa_$var" \
            --set run.steps=12 --set precision.plugin=amp --set model.bf16_matmul=onednn \
            > "$work/isa_$var.out" 2> "$work/isa_$var.log" || fail "train $var=AVX2: $(tail -3 "$work/isa_$var.log")"
        case "$(line_of isa_$var)" in
            "cpu bf16: OpenBLAS, f32 products of the bf16 values; oneDNN "*" runs avx2: that ISA has no bf16 instructions")
                ok "$var=AVX2: the start-up line names the ISA and the fallback: $(line_of isa_$var)" ;;
            *) fail "$var=AVX2: start-up line '$(line_of isa_$var)'" ;;
        esac
        rm -rf "$work/ob_amp12"; train ob_amp12 --set run.steps=12 --set precision.plugin=amp --set model.bf16_matmul=openblas
        compare_series "$work/isa_$var" "$work/ob_amp12" loss 0 "$var=AVX2: the fallback is the OpenBLAS path bit for bit"
    done
fi

# ---- 5. a gpt plugin built without oneDNN ---------------------------------------------------
# (ct_install_gpt_without compiles the plugin's sources without GPT_HAVE_ONEDNN or -ldnnl; the
# define it needs is one no source reads)
ct_dir="$work/noonednn"
if ct_install_gpt_without "$ct_dir" GPT_BUILT_BY_TEST_ONEDNN; then
    "$ct_dir/ctrain" train "$work/base.ini" --set run.out_dir="$work/nodnn" \
        --set run.steps=4 --set precision.plugin=amp --set model.bf16_matmul=onednn \
        > "$work/nodnn.out" 2> "$work/nodnn.log" || fail "train without oneDNN: $(tail -3 "$work/nodnn.log")"
    case "$(line_of nodnn)" in
        "cpu bf16: OpenBLAS, f32 products of the bf16 values: this build of model_gpt.so has no oneDNN"*)
            ok "built without oneDNN: trains, and says so: $(line_of nodnn)" ;;
        *) fail "built without oneDNN: start-up line '$(line_of nodnn)'" ;;
    esac
else
    fail "the gpt plugin builds without oneDNN: $(head -5 "$work/noonednn/build.log" 2>/dev/null)"
fi
finish
