#!/usr/bin/env bash
# test_kernels.sh — the bit-for-bit claims, checked under each OpenBLAS kernel this CPU can run
# (OPENBLAS_CORETYPE = Haswell, Zen, SkylakeX) and with oneDNN held to AVX2: within one kernel a
# run's losses do not depend on the thread count per rank ([device] threads 1 or 2, in one
# process or in the threads engine), mpirun -np 2 equals the threads engine at N = 2, and a
# resumed run equals an unbroken one. A kernel this CPU cannot run (SkylakeX without AVX-512) is
# skipped, saying so. Also: auto threads under mpirun divides the node's cores among its
# processes, and says so in the start-up line.
set -u
cd "$(dirname "$0")/../.."
. tests/cli/train_lib.sh
work=$(mktemp -d /tmp/ctrain-kernels-XXXXXX)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

"$CTRAIN" prepare --text /usr/share/common-licenses/GPL-3 --out "$work/data" --tokenizer bytes \
    --val-fraction 0.1 > "$work/prepare.log" 2>&1 || { fail "prepare: $(tail -3 "$work/prepare.log")"; finish; exit 1; }
# d_model 64 and 4 x 64 tokens: every product is large enough to be cut into tiles
tiny_ini "$work/base.ini" "$work/unused" "$work/data" 256
sed -i -e 's/^d_model = 32/d_model = 64/' -e 's/^seq_len = 32/seq_len = 64/' -e 's/^steps = 20/steps = 8/' \
    -e 's/^val = .*/val =/' "$work/base.ini"

# run NAME [--set ...]: train into $work/NAME under the current environment
run() {
    local name=$1; shift
    "$CTRAIN" train "$work/base.ini" --set run.out_dir="$work/$name" "$@" > "$work/$name.log" 2>&1 \
        || fail "train $name: $(tail -3 "$work/$name.log")"
}

cpu_has() { grep -qw "$1" /proc/cpuinfo; }

for kernel in Haswell Zen SkylakeX; do
    if [ "$kernel" = SkylakeX ] && ! cpu_has avx512f; then
        echo "skip $kernel: this CPU has no AVX-512 (its kernels need it); the checks run on AVX-512 machines"
        continue
    fi
    export OPENBLAS_CORETYPE=$kernel
    k=$(echo "$kernel" | tr A-Z a-z)
    run ${k}_t1 --set device.threads=1
    case "$(grep -m1 '^mfu:' "$work/${k}_t1.log")" in
        *"kernel $kernel"*) ok "$kernel: the start-up line names the kernel that ran" ;;
        *) fail "$kernel: start-up line '$(grep -m1 '^mfu:' "$work/${k}_t1.log")' does not name kernel $kernel" ;;
    esac
    run ${k}_t2 --set device.threads=2
    compare_series "$work/${k}_t2" "$work/${k}_t1" loss 0 "$kernel: one rank, threads 2 = threads 1 bit for bit"
    compare_series "$work/${k}_t2" "$work/${k}_t1" grad_norm 0 "$kernel: one rank, threads 2 = threads 1 gradient norms bit for bit"
    for p in fp32 bf16_sr; do
        run ${k}_n2_$p --set comm.plugin=threads --set comm.world_size=2 --set data.batch_size=2 \
            --set strategy.plugin=full_shard --set precision.plugin=$p
        run ${k}_n2t2_$p --set comm.plugin=threads --set comm.world_size=2 --set data.batch_size=2 \
            --set strategy.plugin=full_shard --set precision.plugin=$p --set device.threads=2
        compare_series "$work/${k}_n2t2_$p" "$work/${k}_n2_$p" loss 0 "$kernel $p: threads engine N = 2, 2 threads per rank = auto bit for bit"
        if command -v mpirun > /dev/null; then
            timeout 120 mpirun --oversubscribe -np 2 -x OPENBLAS_CORETYPE "$CTRAIN" train "$work/base.ini" \
                --set run.out_dir="$work/${k}_mpi_$p" --set comm.plugin=mpi --set data.batch_size=2 \
                --set strategy.plugin=full_shard --set precision.plugin=$p > "$work/${k}_mpi_$p.log" 2>&1 \
                || fail "mpirun $kernel $p: $(tail -3 "$work/${k}_mpi_$p.log")"
            compare_series "$work/${k}_mpi_$p" "$work/${k}_n2_$p" loss 0 "$kernel $p: mpirun -np 2 = threads engine N = 2 bit for bit"
        fi
    done
    # amp through the oneDNN path held to AVX2 (no bf16 instructions: the OpenBLAS products of
    # the bf16 values), resumed halfway
    export ONEDNN_MAX_CPU_ISA=AVX2
    run ${k}_amp --set precision.plugin=amp --set model.bf16_matmul=onednn
    run ${k}_amp_resume --set precision.plugin=amp --set model.bf16_matmul=onednn \
        --set run.checkpoint_every=4 --stop-after 4
    "$CTRAIN" train "$work/base.ini" --set run.out_dir="$work/${k}_amp_resume" --set precision.plugin=amp \
        --set model.bf16_matmul=onednn --set run.checkpoint_every=4 --set device.threads=1 --resume \
        > "$work/${k}_resume.log" 2>&1 || fail "resume $kernel: $(tail -3 "$work/${k}_resume.log")"
    compare_series "$work/${k}_amp_resume" "$work/${k}_amp" loss 0 "$kernel amp, oneDNN held to AVX2: 4 steps + resume on 1 thread + 4 = 8 steps bit for bit"
    unset ONEDNN_MAX_CPU_ISA
done
unset OPENBLAS_CORETYPE

# auto threads under mpirun: an unbound launch divides the node's cores among its processes
if command -v mpirun > /dev/null; then
    timeout 120 mpirun --oversubscribe --bind-to none -np 2 "$CTRAIN" train "$work/base.ini" \
        --set run.out_dir="$work/mpi_unbound" --set comm.plugin=mpi --set data.batch_size=2 \
        --set run.steps=1 > "$work/mpi_unbound.log" 2>&1 || fail "mpirun unbound: $(tail -3 "$work/mpi_unbound.log")"
    want=$(( $(nproc) / 2 )); [ "$want" -lt 1 ] && want=1
    line=$(grep -m1 '^threads:' "$work/mpi_unbound.log")
    case "$line" in
        "threads: $want thread"*"2 processes on this node, 1 rank in this process"*)
            ok "mpirun -np 2 --bind-to none: auto gives each process $want of $(nproc) cores: $line" ;;
        *) fail "mpirun -np 2 --bind-to none: start-up line '$line' (want $want threads per rank, 2 processes on this node)" ;;
    esac
fi
finish
