#!/usr/bin/env bash
# test_launchers.sh — rank and world come from the launcher that started ctrain: processes
# started here with SLURM_* / RANK / WORLD_SIZE variables (no real SLURM) train when the set is
# consistent and are refused, exit != 0 and nothing written, when it contradicts itself or
# another launcher, or when several processes were launched for a one-process engine (or, with
# torchrun-style variables alone, for any engine but nccl: mpi needs mpirun); under
# mpirun -np 2 with comm mpi the environment's world matches MPI's (and a contradicting SLURM
# set is refused on the rank that holds it); mpirun over the TCP transport gives the shared-
# memory transport's losses bit for bit. Not for: signals (test_preempt.sh).
set -u
cd "$(dirname "$0")/../.."
. tests/cli/train_lib.sh
work=$(mktemp -d /tmp/ctrain-launch-XXXXXX)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_mpi_yield_when_idle=1
small_run_setup "$work" || { finish; exit 1; }
sed -i 's/^steps = 20/steps = 12/' "$work/t.ini"

# accepts NAME [VAR=value ...] -- [ctrain train arguments]: exit 0 and the metrics were written.
accepts() {
    local name=$1; shift
    local vars=()
    while [ "$1" != "--" ]; do vars+=("$1"); shift; done; shift
    if timeout 60 env "${vars[@]}" "$CTRAIN" train "$work/t.ini" --set run.out_dir="$work/$name" \
            "$@" > "$work/$name.log" 2>&1 && [ -s "$work/$name/metrics.jsonl" ]; then
        ok "$name: ${vars[*]} trains"
    else
        fail "$name: ${vars[*]}: $(tail -3 "$work/$name.log")"
    fi
}

# refuses NAME NEEDLE [VAR=value ...] -- [arguments]: exit != 0, NEEDLE (a fixed string) in the
# output, and the out_dir was not created.
refuses() {
    local name=$1 needle=$2; shift 2
    local vars=()
    while [ "$1" != "--" ]; do vars+=("$1"); shift; done; shift
    timeout 60 env "${vars[@]}" "$CTRAIN" train "$work/t.ini" --set run.out_dir="$work/$name" \
        "$@" > "$work/$name.log" 2>&1
    local rc=$?
    if [ $rc -ne 0 ] && grep -qF -- "$needle" "$work/$name.log" && [ ! -e "$work/$name" ]; then
        ok "$name: ${vars[*]} refused (exit $rc): $(grep -F -- "$needle" "$work/$name.log" | head -1 | cut -c1-160)"
    else
        fail "$name: ${vars[*]}: expected exit != 0, '$needle' and no $work/$name; got exit $rc: $(tail -3 "$work/$name.log")"
    fi
}

accepts slurm_one SLURM_NTASKS=1 SLURM_PROCID=0 SLURM_LOCALID=0 --
accepts torch_one RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 --
accepts agree_one SLURM_NTASKS=1 SLURM_PROCID=0 RANK=0 WORLD_SIZE=1 --
accepts threads_in_one_task SLURM_NTASKS=1 SLURM_PROCID=0 -- --set comm.world_size=2
accepts pick_inner CTRAIN_LAUNCHER=torchrun SLURM_NTASKS=8 SLURM_PROCID=3 RANK=0 WORLD_SIZE=1 --
refuses srun8_local "8 processes were launched" SLURM_NTASKS=8 SLURM_PROCID=0 -- \
    --set comm.plugin=local
grep -qF "SLURM_NTASKS=8" "$work/srun8_local.log" && grep -qF "use comm mpi" "$work/srun8_local.log" \
    && ok "srun8_local: the message names SLURM_NTASKS=8 and says to use comm mpi" \
    || fail "srun8_local: message lacks SLURM_NTASKS=8 or the hint: $(cat "$work/srun8_local.log")"
refuses srun8_threads "plugin = threads runs all its ranks inside one process" \
    SLURM_NTASKS=8 SLURM_PROCID=0 -- --set comm.plugin=threads --set comm.world_size=2
refuses mixed "SLURM_NTASKS=8" SLURM_NTASKS=8 SLURM_PROCID=0 OMPI_COMM_WORLD_SIZE=4 \
    OMPI_COMM_WORLD_RANK=0 --
grep -qF "OMPI_COMM_WORLD_SIZE=4" "$work/mixed.log" \
    && ok "mixed: the message names OMPI_COMM_WORLD_SIZE=4 too" || fail "mixed: $(cat "$work/mixed.log")"
refuses rank_ge_world "RANK=4" RANK=4 WORLD_SIZE=4 --
refuses not_integer "SLURM_NTASKS=8x" SLURM_NTASKS=8x SLURM_PROCID=0 --
refuses incomplete "SLURM_PROCID" SLURM_NTASKS=2 --
refuses torch_world2 "MASTER_ADDR" RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \
    -- --set comm.plugin=mpi
grep -qF "only comm nccl can" "$work/torch_world2.log" && grep -qF "mpirun" "$work/torch_world2.log" \
    && ok "torch_world2: comm mpi is told that only comm nccl bootstraps from MASTER_ADDR, mpi needs mpirun" \
    || fail "torch_world2: message lacks the nccl / mpirun hint: $(cat "$work/torch_world2.log")"
refuses torch_world2_local "2 processes were launched" RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
    MASTER_PORT=29500 -- --set comm.plugin=local
# auto under a (fake) 2-task srun picks mpi; MPI started without a launcher is a world of one,
# which contradicts the 2 tasks: refused on the rank, naming both
timeout 60 env SLURM_NTASKS=2 SLURM_PROCID=1 "$CTRAIN" train "$work/t.ini" \
    --set run.out_dir="$work/auto_srun" > "$work/auto_srun.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -qF "comm mpi reports rank 0 of 1, but the launcher says rank 1 of 2" \
        "$work/auto_srun.log"; then
    ok "auto under SLURM_NTASKS=2 picks mpi and refuses MPI's world of one (exit $rc)"
else
    fail "auto_srun: exit $rc: $(tail -3 "$work/auto_srun.log")"
fi

mpirun2() { timeout 60 mpirun --oversubscribe -np 2 "$@"; }
# mpirun -np 2, comm mpi: the environment's world is MPI's; a consistent SLURM set on every rank
# agrees; a SLURM set that swaps the ranks is a contradiction
mpirun2 "$CTRAIN" train "$work/t.ini" --set comm.plugin=mpi --set run.out_dir="$work/mpi_shm" \
    > "$work/mpi_shm.log" 2>&1 && [ -s "$work/mpi_shm/metrics.jsonl" ] \
    && ok "mpirun -np 2 comm mpi trains" || fail "mpirun -np 2: $(tail -3 "$work/mpi_shm.log")"
grep -q '"world_size": 2' "$work/mpi_shm/metrics.jsonl" 2>/dev/null \
    && ok "mpirun -np 2: metrics say world_size 2" \
    || fail "mpirun -np 2: world_size 2 not in $(head -c 300 "$work/mpi_shm/metrics.jsonl" 2>/dev/null)"
mpirun2 sh -c 'SLURM_NTASKS=2 SLURM_PROCID=$OMPI_COMM_WORLD_RANK exec "$0" "$@"' "$CTRAIN" train \
    "$work/t.ini" --set comm.plugin=mpi --set run.out_dir="$work/mpi_slurm" > "$work/mpi_slurm.log" 2>&1 \
    && ok "mpirun -np 2 with agreeing SLURM variables trains" \
    || fail "mpi_slurm: $(tail -3 "$work/mpi_slurm.log")"
mpirun2 sh -c 'SLURM_NTASKS=2 SLURM_PROCID=$((1 - OMPI_COMM_WORLD_RANK)) exec "$0" "$@"' "$CTRAIN" \
    train "$work/t.ini" --set comm.plugin=mpi --set run.out_dir="$work/mpi_swap" > "$work/mpi_swap.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -qF "launchers' variables contradict each other" "$work/mpi_swap.log"; then
    ok "mpirun -np 2 with swapped SLURM_PROCID refused (exit $rc)"
else
    fail "mpi_swap: exit $rc: $(tail -3 "$work/mpi_swap.log")"
fi

# The TCP transport over loopback (what two hosts would use) against the shared-memory one: the
# reductions are MPI's collective algorithms, chosen by message size and communicator size, not
# by the byte transport, so the same sums are formed in the same order: bit for bit.
mpirun2 --mca btl tcp,self --mca btl_tcp_if_include lo "$CTRAIN" train "$work/t.ini" \
    --set comm.plugin=mpi --set run.out_dir="$work/mpi_tcp" > "$work/mpi_tcp.log" 2>&1 \
    || fail "mpirun --mca btl tcp,self: $(tail -3 "$work/mpi_tcp.log")"
compare_series "$work/mpi_tcp" "$work/mpi_shm" loss 0 "mpirun btl tcp,self equals shared memory bit for bit"
finish
